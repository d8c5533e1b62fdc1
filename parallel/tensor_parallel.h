// tensor_parallel.h — Megatron-style tensor parallelism: one layer's weight matrix
// split across the ranks of a "tp" group, each rank computing its slice.
//
//   rg::parallel::DeviceMesh mesh(world.communicator(), {{"tp", 2}});
//   rg::nn::Linear fc1(512, 2048), fc2(2048, 512);               // the plain layers (same seed)
//   rg::parallel::ColumnParallelLinear up(fc1, mesh.group("tp"));    // rank r: rows of W1
//   rg::parallel::RowParallelLinear down(fc2, mesh.group("tp"), {.input_is_parallel = true});
//   rg::Tensor y = down(rg::gelu(up(x)));                        // = fc2(gelu(fc1(x))) on every rank
//
// A Linear computes y = x Wᵀ + b with W of shape (out, in). Two ways to split it:
//  * column parallel: rank r keeps rows [r·out/N, (r+1)·out/N) of W (output features);
//    every rank needs all of x and produces its slice of y. In backward each rank has
//    only its slice's part of dL/dx: the parts are summed (all-reduce).
//  * row parallel: rank r keeps columns [r·in/N, …) of W (input features); it needs only
//    its slice of x — exactly what a column-parallel layer before it produced — and makes
//    a partial y; the partials are summed (all-reduce) into the whole y.
// So an MLP (column, then the activation on slices, then row) needs one all-reduce in
// forward (after the row layer) and one in backward (before the column layer), and
// nothing in between. Those two are autograd functions, conjugate to each other
// (Megatron's f and g):
//   copy_to_tp_region       forward: identity     backward: all-reduce
//   reduce_from_tp_region   forward: all-reduce   backward: identity
// and, for a layer that must see or produce whole tensors, their gather/scatter
// forms along the last dim (gather_output, input_is_parallel = false).
// Attention splits the same way by heads (ParallelSelfAttention): q, k and v column
// parallel — rank r computes heads [r·H/N, …) whole — then the output projection row
// parallel.
// Every tensor-parallel layer is built from the plain layer it replaces (every rank
// holding the same weights, e.g. from one seed or one checkpoint) and keeps its slices;
// tp_full_state_dict / tp_load_full_state_dict move whole checkpoints in and out, so a
// checkpoint moves between a plain model and any tensor-parallel size.
// The communicator must outlive the layers and every graph they record.
#pragma once

#include <string>
#include <vector>

#include "ringgrad/nn/layers.h"
#include "ringgrad/nn/transformer.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

// ---- Megatron's f and g, and their gather/scatter forms (autograd functions)
Tensor copy_to_tp_region(const Tensor& x, Communicator& tp);      // fwd: identity, bwd: all-reduce
Tensor reduce_from_tp_region(const Tensor& x, Communicator& tp);  // fwd: all-reduce, bwd: identity
// Last-dim slices: fwd: every rank's slice concatenated; bwd: this rank's slice of the gradient.
Tensor gather_from_tp_region(const Tensor& x, Communicator& tp);
// fwd: this rank's slice of the last dim (divisible by N); bwd: the slices' gradients gathered.
Tensor scatter_to_tp_region(const Tensor& x, Communicator& tp);

// ---- sequence parallelism: between tensor-parallel blocks, activations sharded along the
// sequence (LayerNorm, dropout and residuals then work on 1/N of the positions); the
// all-reduce around a block becomes an all-gather before it and a reduce-scatter after it
// (the same bytes). seq_dim: 1 for batch-first (B, T, E).
// fwd: this rank's positions; bwd: the positions' gradients gathered (entering the region).
Tensor scatter_to_sequence_region(const Tensor& x, Communicator& tp, int64_t seq_dim = 1);
// fwd: every rank's positions, in order; bwd: reduce-scatter (a tensor-parallel consumer's
// gradients are partial sums). Before a column-parallel layer.
Tensor gather_from_sequence_region(const Tensor& x, Communicator& tp, int64_t seq_dim = 1);
// fwd: the ranks' partial sums added, each rank keeping its positions; bwd: all-gather.
// After a row-parallel layer.
Tensor reduce_scatter_to_sequence_region(const Tensor& x, Communicator& tp, int64_t seq_dim = 1);
// Column-parallel GEMMs of a sequence shard: y = linear(x gathered along seq_dim, W_i, b_i) for
// each weight, the outputs side by side along the last dim (several weights share one
// all-gather: SwiGLU's w1 and w3). What Megatron's sequence parallelism does: only this rank's
// shard x is kept for backward, which gathers it again for the weights' gradients, and the
// input's gradient is reduce-scattered back to the shard; gather_from_sequence_region followed
// by a GEMM would keep the whole gathered input instead (t times the bytes). Under autocast
// the shard is cast first, so the gathers carry 16-bit numbers.
Tensor sequence_parallel_linear(const Tensor& x, const std::vector<Tensor>& weights,
                                const std::vector<Tensor>& biases, Communicator& tp, int64_t seq_dim = 1);
// Parameters every rank holds whole but applies to its own positions only (LayerNorm, a
// row layer's bias under sequence parallelism) get partial gradients: sum them with
// all_reduce_grads(params, tp) (communicator.h).

// A layer whose parameters are slices of a plain layer's: how to cut a whole parameter
// and how to put one together again (a collective).
class TensorParallelModule {
 public:
  virtual ~TensorParallelModule() = default;
  // This rank's slice of the whole parameter `name` (a local name: "weight").
  virtual Tensor shard(const std::string& name, const Tensor& whole) const = 0;
  // The whole parameter from every rank's `local` slice.
  virtual Tensor unshard(const std::string& name, const Tensor& local) const = 0;
};

struct ColumnParallelOptions {
  bool gather_output = false;  // all-gather the output slices: every rank gets the whole y
  // Output features made of blocks of these many rows, each sliced separately, so that each
  // rank keeps the same heads of each (attention's q, k, v rows stacked in one
  // in_proj_weight: E, K·D, K·D). Empty: one block, all the rows.
  std::vector<int64_t> block_rows = {};
  // The input is this rank's sequence shard: all-gather it first (sequence parallelism;
  // sequence_parallel_linear: the shard is what backward keeps).
  bool sequence_parallel = false;
  int64_t seq_dim = 1;
};

class ColumnParallelLinear : public nn::Module, public TensorParallelModule {
 public:
  ColumnParallelLinear(const nn::Linear& whole, Communicator& tp, ColumnParallelOptions options = {});
  // From a weight (out, in) and bias (out, or undefined), as stacked in nn layers.
  ColumnParallelLinear(const Tensor& weight, const Tensor& bias, Communicator& tp,
                       ColumnParallelOptions options = {});
  Tensor forward(const Tensor& x) override;
  Tensor shard(const std::string& name, const Tensor& whole) const override;
  Tensor unshard(const std::string& name, const Tensor& local) const override;
  std::string describe() const override;

  int64_t in_features, out_features;  // of the whole layer
  Tensor weight, bias;                // this rank's: (out/N, in), (out/N)

 private:
  Communicator& tp_;
  ColumnParallelOptions options_;
  std::vector<int64_t> blocks_;  // the whole layer's rows in each block sliced separately
};

struct RowParallelOptions {
  bool input_is_parallel = false;  // x is already this rank's slice (a column layer's output)
  // Reduce-scatter the output along the sequence instead of all-reducing it.
  bool sequence_parallel = false;
  int64_t seq_dim = 1;
};

class RowParallelLinear : public nn::Module, public TensorParallelModule {
 public:
  RowParallelLinear(const nn::Linear& whole, Communicator& tp, RowParallelOptions options = {});
  Tensor forward(const Tensor& x) override;
  Tensor shard(const std::string& name, const Tensor& whole) const override;
  Tensor unshard(const std::string& name, const Tensor& local) const override;
  std::string describe() const override;

  int64_t in_features, out_features;  // of the whole layer
  Tensor weight, bias;                // this rank's (out, in/N); the bias whole (added once, after the sum)

 private:
  Communicator& tp_;
  RowParallelOptions options_;
};

// Self-attention with the heads split across the tp group, from a plain
// nn::MultiheadAttention (batch first, one embed_dim for q, k and v): in_proj column
// parallel (each rank's q, k, v rows of its heads), out_proj row parallel.
// forward(x) = whole.forward(x, x, x, masks) on every rank; masks: is_causal only.
// Llama's options of the plain layer carry over: grouped-query attention (kv_heads, which
// the tp size must divide: rank r keeps K/V heads [r·K/N, …), the ones its query heads
// read) and rotary embeddings (at the positions forward is given, or 0 … T−1).
class ParallelSelfAttention : public nn::Module, public TensorParallelModule {
 public:
  // sequence_parallel: x and the output are this rank's sequence shards (B, T/N, E).
  ParallelSelfAttention(const nn::MultiheadAttention& whole, Communicator& tp, bool causal = false,
                        bool sequence_parallel = false);
  Tensor forward(const Tensor& x) override;
  // positions: the tokens' global positions for rotary embeddings, int64 (T) or (B or 1, T)
  // (AttentionMasks::positions); undefined: 0 … T−1.
  Tensor forward(const Tensor& x, const Tensor& positions);
  using Module::operator();
  Tensor operator()(const Tensor& x, const Tensor& positions) {  // through call(): hooks, traces
    return call(x, [&] { return forward(x, positions); });
  }
  // in_proj_weight, in_proj_bias: in_proj's slices (out_proj is a module of its own).
  Tensor shard(const std::string& name, const Tensor& whole) const override;
  Tensor unshard(const std::string& name, const Tensor& local) const override;

  int64_t embed_dim, num_heads, local_heads, head_dim, kv_heads, local_kv_heads;
  ColumnParallelLinear in_proj;
  RowParallelLinear out_proj;

 private:
  bool causal_, rotary_;
  double rope_theta_;
};

// Llama's MLP, w2(silu(w1 x) · w3 x), split as Megatron splits it: w1 and w3 column parallel
// (rank r keeps the same hidden units of both), w2 row parallel; one all-reduce in forward,
// one in backward (w1 and w3 share their input's f). From a plain nn::SwiGLU; the names are
// its own (w1, w2, w3). sequence_parallel: x and the output are this rank's sequence shards
// (B, T/N, E): x all-gathered once for w1 and w3, w2's partial sums reduce-scattered.
class ParallelSwiGLU : public nn::Module {
 public:
  ParallelSwiGLU(const nn::SwiGLU& whole, Communicator& tp, bool sequence_parallel = false);
  Tensor forward(const Tensor& x) override;

  ColumnParallelLinear w1;
  RowParallelLinear w2;
  ColumnParallelLinear w3;

 private:
  Communicator& tp_;
  bool sequence_parallel_;
};

// An embedding with the vocabulary split across the tp group: rank r keeps rows
// [r·V/N, (r+1)·V/N) of the table; each rank looks up the tokens that fall in its rows
// (zeros for the others) and the results are summed (reduce_from_tp_region).
// sequence_parallel: the sums reduce-scattered instead, each rank keeping its positions of
// the indices' last dim (B, T) -> (B, T/N, E): half the bytes of the all-reduce, and what a
// sequence-parallel block takes.
class VocabParallelEmbedding : public nn::Module, public TensorParallelModule {
 public:
  VocabParallelEmbedding(const nn::Embedding& whole, Communicator& tp, bool sequence_parallel = false);
  Tensor forward(const Tensor& indices) override;  // int64 (…) -> (…, embedding_dim)
  Tensor shard(const std::string& name, const Tensor& whole) const override;
  Tensor unshard(const std::string& name, const Tensor& local) const override;

  int64_t num_embeddings, embedding_dim, vocab_start, vocab_size;  // this rank's rows
  Tensor weight;                                                   // (V/N, embedding_dim)

 private:
  Communicator& tp_;
  bool sequence_parallel_;
};

// Cross-entropy (mean over tokens) of logits whose last dim is split across the tp group
// — rank r holds classes [r·V/N, (r+1)·V/N), as a ColumnParallelLinear LM head without
// gather_output makes them — against global class indices. The whole logits never
// exist on one rank: the max and the sum of exponentials are all-reduced over the
// shards, and each target's logit comes from the rank that holds it. Under autocast in
// float32 (as nn::cross_entropy).
Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& target,
                                    Communicator& tp);

// The whole state dict of a model holding tensor-parallel layers (every rank gets it:
// a collective), with the names and shapes of the plain model it was built from.
NamedTensors tp_full_state_dict(nn::Module& model);
// Loads a whole (plain) state dict: each tensor-parallel layer keeps its slices.
void tp_load_full_state_dict(nn::Module& model, const NamedTensors& state);
// The same for any tensors named and shaped like the model's parameters (an optimizer's
// moments, a gradient): this rank's slices made whole (a collective over the tp group:
// every rank passes the same names in the same order), and whole ones cut to this rank's
// slices. A name the model does not have is passed through as it is.
NamedTensors tp_unshard(nn::Module& model, const NamedTensors& local);
NamedTensors tp_shard(nn::Module& model, const NamedTensors& whole);

}  // namespace ringgrad::parallel
