// functional.h — the stateless forms of the layers and the losses (torch.nn.functional).
//
//   rg::Tensor loss = rg::nn::cross_entropy(logits, labels);                 // mean over the batch
//   rg::Tensor loss = rg::nn::cross_entropy(logits, labels, {.label_smoothing = 0.1});
#pragma once

#include <functional>

#include "ringgrad/core/attention.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::nn {

// x (…, in) · weightᵀ (in, out) + bias (out) -> (…, out); bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// While training: zero each element with probability p, scale the rest by 1/(1-p).
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

enum class Reduction { Mean, Sum, None };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;  // Mean averages over the samples not ignored
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
};

// logits (N, C) or (N, …, C)-flattened-to-(N, C); target (N) int64 class indices.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options = {});

// (input - target)², reduced.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

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
