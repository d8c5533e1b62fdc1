// block_reduce.cuh — reductions with every thread of a block, and over many blocks (internal).
//
// The reductions are the mergeable states of core/reduce_math.h (sum, max/min,
// arg max/min, log-sum-exp); how their elements are spread over blocks, groups of
// threads and pieces of r is core/reduce_plan.h (plain C++, walked on the CPU by
// tests/test_kernel_math.cpp). Here: the kernels that follow that plan.
#pragma once

#include <algorithm>

#include "ringgrad/core/cuda/common.cuh"
#include "ringgrad/core/reduce_math.h"
#include "ringgrad/core/reduce_plan.h"

namespace ringgrad::cuda {

// Merge the states of threads (tx, ty) over ty, for every tx of each group of
// lanes_inner × lanes_r threads: afterwards the thread (tx, 0) of a group holds its
// column's whole state. blockDim.x a multiple of lanes_inner * lanes_r, lanes_r a power
// of two; every thread of the block must call it.
template <typename S>
__device__ S merge_block_columns(S s, int lanes_inner, int lanes_r) {
  __shared__ __align__(16) unsigned char raw[kBlock * sizeof(S)];
  S* shared = reinterpret_cast<S*>(raw);
  const int group_size = lanes_inner * lanes_r;
  const int first = threadIdx.x / group_size * group_size;  // the group's thread (0, 0)
  const int tx = threadIdx.x % lanes_inner, ty = threadIdx.x % group_size / lanes_inner;
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int stride = lanes_r / 2; stride > 0; stride /= 2) {
    if (ty < stride) shared[threadIdx.x].merge(shared[threadIdx.x + stride * lanes_inner]);
    __syncthreads();
  }
  S whole = shared[first + tx];
  __syncthreads();  // the caller may call again (next output) and overwrite `shared`
  return whole;
}

int64_t multiprocessor_count();  // of the current device (runtime.cu)

// The plan (core/reduce_plan.h) for this device.
inline math::ReducePlan plan_reduce(int64_t outer, int64_t r, int64_t inner) {
  return math::plan_reduce(outer, r, inner, kBlock, multiprocessor_count());
}

// Pass 1: each group of block (x, piece) folds its piece of r for its tile's lanes_inner
// outputs. splits == 1: writes each output's result; else its piece's state into
// partial[output · splits + piece]. Every thread goes round the loop equally often (a
// group past the last tile folds nothing): merge_block_columns synchronises the block.
template <typename S, typename T, typename Out>
__global__ void reduce_pieces_kernel(const T* in, Out* out, S* partial, int64_t outer, int64_t r,
                                     int64_t inner, math::ReducePlan p) {
  const math::ReduceLane lane = math::lane_of(p, threadIdx.x);
  const int64_t k0 = int64_t(blockIdx.y) * p.chunk;
  const int64_t k1 = k0 + p.chunk < r ? k0 + p.chunk : r;
  for (int64_t first = int64_t(blockIdx.x) * p.groups; first < p.tiles;
       first += int64_t(gridDim.x) * p.groups) {
    const int64_t tile = first + lane.group;
    const math::ReduceOutput at = math::output_of(p, outer, inner, tile, lane.tx);
    const bool live = tile < p.tiles && at.j < inner;
    S s;
    if (live)
      for (int64_t k = k0 + lane.ty; k < k1; k += p.lanes_r) s.add(in[(at.o * r + k) * inner + at.j], k);
    s = merge_block_columns(s, p.lanes_inner, p.lanes_r);
    if (lane.ty == 0 && live) {
      const int64_t output = at.o * inner + at.j;
      if (p.splits == 1)
        out[output] = static_cast<Out>(s.result());
      else
        partial[output * p.splits + blockIdx.y] = s;
    }
  }
}

// Pass 2: each output merges its pieces' states.
template <typename S, typename Out>
__global__ void merge_pieces_kernel(const S* partial, Out* out, int64_t outputs, int64_t splits) {
  RG_GRID_LOOP(i, outputs) {
    S s;
    for (int64_t piece = 0; piece < splits; ++piece) s.merge(partial[i * splits + piece]);
    out[i] = static_cast<Out>(s.result());
  }
}

// out[o, j] = S over k of in[o, k, j], on the compute stream.
template <typename S, typename T, typename Out>
void launch_reduce(const T* in, Out* out, int64_t outer, int64_t r, int64_t inner) {
  const int64_t outputs = outer * inner;
  if (outputs == 0) return;
  const math::ReducePlan p = plan_reduce(outer, r, inner);
  const unsigned grid_x = static_cast<unsigned>(std::min<int64_t>(p.blocks, 65535 * 8));
  const dim3 grid(grid_x, static_cast<unsigned>(p.splits));
  S* partial = nullptr;
  const size_t partial_bytes = p.splits > 1 ? size_t(outputs * p.splits) * sizeof(S) : 0;
  // Scratch from the caching allocator: freed right after the launches, which is
  // safe because the next user of the block runs after them on the same stream.
  if (partial_bytes) partial = static_cast<S*>(backend("reduce").allocate(partial_bytes));
  reduce_pieces_kernel<S, T, Out><<<grid, kBlock, 0, compute_stream()>>>(in, out, partial, outer,
                                                                         r, inner, p);
  RG_CUDA_CHECK_LAUNCH();
  if (partial_bytes) {
    merge_pieces_kernel<S, Out><<<blocks_for(outputs), kBlock, 0, compute_stream()>>>(
        partial, out, outputs, p.splits);
    RG_CUDA_CHECK_LAUNCH();
    backend("reduce").deallocate(partial, partial_bytes);
  }
}

}  // namespace ringgrad::cuda
