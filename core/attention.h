// attention.h — scaled dot-product attention, computed blockwise.
//
//   // q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv) -> (B, H, Tq, Dv)
//   rg::Tensor out = rg::scaled_dot_product_attention(q, k, v, {.causal = true});
//
// softmax(scale·Q·Kᵀ + mask)·V is computed tile by tile (block_q queries × block_k
// keys), with the online softmax of FlashAttention: each query row keeps a running
// max m, sum l and unnormalised output, rescaled as later key blocks raise the max.
// The whole Tq × Tk matrix never exists; memory is O(B·H·block_q·block_k).
// Alongside the output comes each row's log-sum-exp, lse = log Σ_j exp(scores),
// and the backward pass needs only (q, k, v, out, lse): it recomputes each tile's
// probabilities as exp(score − lse) instead of storing them.
//
// attention_forward / attention_backward are that local kernel on its own, for
// ring attention (parallel/): the forward takes one key block and returns
// (out, lse) for it, merge_attention_ folds such partial results together, and the
// backward takes the *global* out and lse. Positions (q_offset, k_offset) say where
// the blocks lie in the whole sequence, for causal masking and dropout.
// Other layouts are taken as torch takes them: (T, D), (H, T, D), and any number of leading
// batch dims (…, H, T, D), which broadcast among q, k, v and the mask.
#pragma once

#include "ringgrad/core/factory.h"
#include "ringgrad/core/tensor.h"

namespace ringgrad {

struct AttentionOptions {
  // Broadcasts to (B, H, Tq, Tk). Bool as torch's attn_mask: true = the query may attend to
  // the key. Or float, of q's dtype, added to the scores: −∞ hides a key. A constant: it gets
  // no gradient. A query that may attend to no key gets output 0 (as torch 2.x).
  Tensor mask = {};
  bool causal = false;  // hide key j from query i when k_offset + j > q_offset + i
  double scale = 0.0;   // 0: 1/√D
  double dropout_p = 0.0;  // on the attention weights; the caller turns it off in eval
  Generator* generator = nullptr;  // for dropout; default_generator() when null
  int64_t block_q = 128, block_k = 256;  // tile size: queries × keys
  // Grouped-query attention (torch's enable_gqa): k and v may have Hkv heads, Hkv dividing
  // q's H; query head h attends with K/V head h / (H / Hkv).
  bool enable_gqa = false;

  // Where these blocks sit in the whole sequence (ring attention sets these).
  int64_t q_offset = 0, k_offset = 0;
  // Dropout's counters, fixed by scaled_dot_product_attention from the generator;
  // ring attention fixes them once for all its blocks. total_q/total_k: the whole
  // sequence lengths (0: this call's Tq/Tk).
  uint64_t dropout_seed = 0, dropout_offset = 0;
  int64_t total_q = 0, total_k = 0;
};

struct AttentionOutput {
  Tensor out;  // (B, H, Tq, Dv)
  Tensor lse;  // (B, H, Tq): log-sum-exp of each query's scores; −∞ where every key is masked
};
struct AttentionGrads {
  Tensor dq, dk, dv;
};

// Differentiable: the attention output, blockwise forward and backward.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

// K/V heads for grouped-query attention: (B, Hkv, T, D) -> (B, Hkv·groups, T, D), each head
// repeated `groups` times in a row (torch's repeat_interleave on dim 1). Differentiable: the
// gradient sums each group back into its head.
Tensor repeat_kv_heads(const Tensor& kv, int64_t groups);

// The local kernel (no autograd). A row whose keys are all masked gets out = 0, lse = −∞.
AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionOptions& options = {});
// Gradients for q and for this block's k, v, given the global out, lse of q's rows
// and dout = ∂L/∂out.
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const Tensor& dout,
                                  const AttentionOptions& options = {});

// In place: fold a block's (out_j, lse_j) into a running (out, lse), in the stable form
//   out −= sigmoid(lse_j − lse)·(out − out_j),   lse −= logsigmoid(lse − lse_j)
// (= the softmax over the union of both blocks' keys). Rows with lse = −∞ take the block's.
void merge_attention_(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse);

}  // namespace ringgrad
