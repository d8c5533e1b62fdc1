// functional.h — the stateless forms of the layers and the losses (torch.nn.functional).
//
//   rg::Tensor loss = rg::nn::cross_entropy(logits, labels);                 // mean over the batch
//   rg::Tensor loss = rg::nn::cross_entropy(logits, labels, {.label_smoothing = 0.1});
//   rg::Tensor loss = rg::nn::cross_entropy(logits, labels, {.weight = class_weights});
//   rg::Tensor loss = rg::nn::cross_entropy(logits, probabilities);          // soft targets
#pragma once

#include <functional>
#include <optional>

#include "ringgrad/core/attention.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::nn {

// x (…, in) · weightᵀ (in, out) + bias (out) -> (…, out); bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// relu(linear(x, weight, bias)) as one op: with a bias, in float32 or float64 on the CPU,
// max(0, ·) is applied to each block of the GEMM's output while it is in cache
// (addmm_relu), not in a pass of its own over the output (elsewhere a relu pass after).
// The feed-forward of TransformerEncoderLayer / DecoderLayer with ReLU.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(linear(x, weight, bias)) as one op, the same way (addmm_gelu): the bias and GELU
// applied to each block of the GEMM's output while it is in cache. The MLP of a GPT block.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   GeluApprox approximate = GeluApprox::None);

// While training: zero each element with probability p, scale the rest by 1/(1-p).
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

enum class Reduction { Mean, Sum, None };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;  // Mean: see cross_entropy below
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;  // class-index targets only
  Tensor weight = Tensor();     // (C) class weights, logits' dtype; undefined: all 1
};

// torch.nn.functional.cross_entropy. The class dim is dim 1, as in torch:
//   logits (N, C)            target (N) int64 class indices, or (N, C) probabilities
//   logits (N, C, d1, …)     target (N, d1, …) int64, or (N, C, d1, …) probabilities
//   logits (C) (unbatched)   target () int64, or (C) probabilities
// A (N, T, C) sequence of logits is passed as logits.reshape({-1, C}) with targets.reshape({-1}).
// Class-index targets: loss_i = (1−ε)·w[y_i]·(−log p_i[y_i]) + ε/C·Σ_c w[c]·(−log p_i[c])
// (ε = label_smoothing, w = weight or all 1), 0 where y_i == ignore_index; Mean divides the
// sum by Σ w[y_i] over the targets not ignored (their count without weight), as torch does.
// Probability targets (floating, the logits' shape): q = (1−ε)·target + ε/C,
// loss_i = −Σ_c w[c]·q_c·log p_i[c]; ignore_index does not apply; Mean divides by the number
// of samples (N·d1·…), not by the weights, as torch does.
// Reduction::None returns one loss per sample: the logits' shape without the class dim.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options = {});

// (input - target)², reduced.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// x · sigmoid(x) (torch.nn.functional.silu, "swish").
Tensor silu(const Tensor& x);

// torch.nn.functional.rms_norm: x / sqrt(mean(x², over the trailing normalized_shape) + eps),
// times weight (normalized_shape) when defined. eps unset: the dtype's machine epsilon
// (torch.finfo(x.dtype).eps), as torch does.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

// Rotary position embeddings (RoPE, Llama's / Hugging Face's rotate-half convention):
//   x·cos(p·θ) + rotate_half(x)·sin(p·θ),  rotate_half([x1, x2]) = [−x2, x1],
// with θ_i = theta^(−2i/D) for i < D/2, repeated for the two halves of the head dim D (even).
// x (B, H, T, D); positions int64, the tokens' *global* positions: (T) or (B or 1, T) — under
// context parallelism the rank's shard of arange(T) (zigzag chunks included), so every
// shard rotates as it would in one process. Differentiable in x (the angles are constants).
Tensor rotary_embedding(const Tensor& x, const Tensor& positions, double theta = 10000.0);
// The same with positions offset, offset+1, …, offset+T−1.
Tensor rotary_embedding(const Tensor& x, int64_t offset = 0, double theta = 10000.0);

// Attention as every nn layer calls it: q (B, H, Tq, D), k/v (B, H, Tk, ·) -> (B, H, Tq, Dv).
// By default the local blockwise scaled_dot_product_attention (core/attention.h);
// parallel::context_parallel installs ring attention for its scope, so model code
// does not change when the sequence is sharded across ranks.
using AttentionImpl = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const AttentionOptions& options)>;
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionOptions& options = {});
// Installs `impl` (an empty function restores the default); returns the previous one.
AttentionImpl set_attention_impl(AttentionImpl impl);
// Whether nn::attention is the local kernel (false inside a context_parallel region).
bool attention_is_local();

}  // namespace ringgrad::nn
