// ring_attention.h — attention over a sequence sharded across ranks (context parallelism).
//
//   // q, k, v: this rank's shard (B, H, T/N, D) of a (B, H, T, D) sequence
//   rg::Tensor out = rg::parallel::ring_attention(q, k, v, comm, {.causal = true});
//   // out: this rank's shard (B, H, T/N, Dv) of full attention over all T positions
//
// Every rank keeps its queries; the key/value shards travel around the ring
// (send to rank r+1, receive from r−1), each rank folding one foreign block into
// its running (out, lse) per step while the next block is already on the wire.
// Backward sends the K/V blocks round again, with a partial dK/dV riding along that
// every rank adds to; after one last hop it is back with the block's owner.
// ring_attention.cpp explains the schedule step by step.
//
// How the sequence is laid out over the ranks (T = whole length, N = ranks):
//   Contiguous  rank r holds positions [r·T/N, (r+1)·T/N)
//   Zigzag      the sequence is cut into 2N chunks; rank r holds chunks r and
//               2N−1−r, one after the other — the causal triangle then gives every
//               rank the same amount of work.
// Auto (the default) is Zigzag for causal attention and Contiguous otherwise; this
// is what context_parallel (context_parallel.h) shards buffers into.
//
// Differentiable in q, k and v. Every rank must call it (and its backward) in the
// same order, with the same options; comm must outlive the backward pass.
// The contract (tests/mpi/test_ring_attention.cpp): for any N, each rank's output
// and dq/dk/dv equal the matching slices of single-process attention on the whole
// sequence.
#pragma once

#include <vector>

#include "ringgrad/core/attention.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

enum class SequenceLayout { Auto, Contiguous, Zigzag };

struct RingAttentionOptions {
  bool causal = false;                   // query i never sees a later key (global positions)
  double scale = 0.0;                    // 0: 1/√D
  double dropout_p = 0.0;                // on the attention weights; the same mask as one process
  Generator* generator = nullptr;        // for dropout (default_generator() when null); it must
                                         // be in the same state on every rank
  int64_t block_q = 128, block_k = 256;  // the local kernel's tiles
  SequenceLayout layout = SequenceLayout::Auto;  // Auto: Zigzag if causal, else Contiguous
};

// q (B, H, Tq/N, D), k (B, H, Tk/N, D), v (B, H, Tk/N, Dv) -> (B, H, Tq/N, Dv).
// Zigzag needs an even local length (two chunks). Grouped-query attention: k and v may
// have Hkv heads, Hkv dividing H; the ring then carries the Hkv heads (H/Hkv times less
// traffic than repeating them first), each repeated for its query heads only inside the
// local kernel call, and dK/dV summed back over each group before they travel.
// Rotary embeddings are applied by the caller before the ring, at global positions
// (nn::rotary_embedding with this rank's shard of the positions).
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, Communicator& comm,
                      const RingAttentionOptions& options = {});

// The global position where each piece of rank `rank`'s local shard of length
// `local_len` starts: one piece (Contiguous) or two equal halves (Zigzag).
struct ShardPiece {
  int64_t local_start, length, global_start;
};
std::vector<ShardPiece> shard_pieces(SequenceLayout layout, int rank, int size, int64_t local_len);

}  // namespace ringgrad::parallel
