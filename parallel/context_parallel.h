// context_parallel.h — a region in which the sequence is sharded across ranks and
// every attention runs as ring attention; the model code does not change.
//
//   {
//     auto cp = rg::parallel::context_parallel(world, {&tokens, &targets}, /*seq_dims=*/{1},
//                                              {.causal = true});  // shards in place, zigzag
//     rg::Tensor loss = rg::nn::cross_entropy(model.forward(tokens), targets);
//     loss.backward();                                 // attention ran as ring attention
//   }                                                  // tokens, targets: whole again
//
// While the guard lives:
//  * each buffer (the caller's Tensor handle) holds this rank's shard along its
//    sequence dim: contiguous positions [r·T/N, (r+1)·T/N), or with causal the
//    zigzag chunks r and 2N−1−r of 2N (ring_attention.h explains why). A length that
//    does not divide by N (2N with causal) is an error naming the buffer.
//    seq_dims holds one dim for every buffer, or one per buffer.
//  * nn::attention (every MultiheadAttention and Transformer layer) runs
//    parallel::ring_attention over the communicator (or, by options.method, the
//    all-gather or Ulysses form), causal when the call asks for it. Additive masks are
//    not supported there yet (an error says so), nor dropout outside the ring.
// When it ends, the buffers hold their whole tensors again and the previous
// attention implementation is back. Every rank must enter the region together.
// Only positions are sharded: position-dependent layers outside attention (e.g. a
// positional encoding) must be given global positions by the caller.
#pragma once

#include <vector>

#include "ringgrad/nn/functional.h"
#include "ringgrad/parallel/communicator.h"
#include "ringgrad/parallel/ring_attention.h"
#include "ringgrad/parallel/world.h"

namespace ringgrad::parallel {

// How attention sees the whole sequence inside the region (each equals one process):
//   Ring       K/V shards travel the ring, N steps overlapped with compute (ring_attention.h);
//              memory per rank O(T/N); each rank sends K and V N−1 times in forward,
//              again in backward with N hops of dK/dV: (3N−2)/N of the whole K and V;
//   AllGather  K and V all-gathered once (Llama 3's): each rank attends its own queries to the
//              whole K/V; backward reduce-scatters dK/dV. Simple, O(T) K/V per rank;
//   Ulysses    an all-to-all turns sequence shards into head shards (DeepSpeed's): each rank
//              runs plain attention over the whole sequence for H/N heads, and a second
//              all-to-all turns the output back. Needs heads divisible by N.
enum class ContextParallelMethod { Ring, AllGather, Ulysses };

struct ContextParallelOptions {
  bool causal = false;  // shard zigzag (balances causal attention); contiguous otherwise
  ContextParallelMethod method = ContextParallelMethod::Ring;
  // Auto: zigzag when causal (every rank gets as much causal work), contiguous otherwise.
  // Contiguous with causal is allowed, to measure the imbalance zigzag removes.
  SequenceLayout layout = SequenceLayout::Auto;
};

class ContextParallel {
 public:
  ContextParallel(Communicator& comm, const std::vector<Tensor*>& buffers,
                  const std::vector<int64_t>& seq_dims, ContextParallelOptions options = {});
  ~ContextParallel();  // restores the buffers and the attention implementation
  ContextParallel(const ContextParallel&) = delete;
  ContextParallel& operator=(const ContextParallel&) = delete;

  SequenceLayout layout() const { return layout_; }  // Contiguous or Zigzag
  // This rank's shard of a whole tensor, as the guard cut the buffers.
  Tensor shard_sequence(const Tensor& full, int64_t seq_dim) const;
  // The whole sequence back from every rank's shard (all_gather, then the chunks
  // in sequence order). Every rank must call it; the result has no gradient.
  Tensor gather_sequence(const Tensor& shard, int64_t seq_dim) const;

 private:
  Communicator& comm_;
  SequenceLayout layout_;
  std::vector<Tensor*> buffers_;
  std::vector<Tensor> originals_;  // the whole tensors, handed back at the end
  nn::AttentionImpl previous_;     // the attention implementation before this region
};

ContextParallel context_parallel(Communicator& comm, const std::vector<Tensor*>& buffers,
                                 const std::vector<int64_t>& seq_dims,
                                 ContextParallelOptions options = {});
inline ContextParallel context_parallel(World& world, const std::vector<Tensor*>& buffers,
                                        const std::vector<int64_t>& seq_dims,
                                        ContextParallelOptions options = {}) {
  return context_parallel(world.communicator(), buffers, seq_dims, options);
}

}  // namespace ringgrad::parallel
