// ring_allreduce.h — all-reduce written out over send/recv, for learning.
//
//   rg::parallel::ring_all_reduce(comm, grad);          // same result as comm.all_reduce(grad)
//
// The algorithm behind NCCL's and most MPIs' large all-reduces, in plain code:
// a reduce-scatter ring followed by an all-gather ring, each rank sending only
// to its right-hand neighbour and receiving from its left. ring_allreduce.cpp
// explains it step by step. Production code should call comm.all_reduce: the
// backend's version is the same idea, pipelined and tuned.
#pragma once

#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

// In place: afterwards every rank's t holds the reduction over all ranks' t.
// Any shape and size (the element count need not divide by the world size);
// float32, float64, bfloat16, float16 or int64 (Avg: floating point only); 16-bit
// chunks are added in float32 and rounded once per hop. Every rank must call it.
void ring_all_reduce(Communicator& comm, Tensor& t, Reduce op = Reduce::Sum);

}  // namespace ringgrad::parallel
