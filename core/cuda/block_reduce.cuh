// block_reduce.cuh — reductions with every thread of a block, and over many blocks (internal).
//
// The reductions are the mergeable states of core/reduce_math.h (sum, max/min,
// arg max/min, log-sum-exp). A block is laid out as `lanes_inner` columns (along
// the contiguous inner dim, so reads coalesce) × `lanes_r` rows (along the reduced
// dim r): each thread folds every lanes_r-th element of its column into a state,
// then the block merges its column's states in a tree through shared memory.
// When the outputs alone would not fill the GPU (a full reduction has one), the r
// axis is also cut into `splits` pieces, one block each, and a second small
// kernel merges each output's pieces (plan_reduce decides).
#pragma once

#include <algorithm>

#include "ringgrad/core/cuda/common.cuh"
#include "ringgrad/core/reduce_math.h"

namespace ringgrad::cuda {

// Merge the states of threads (tx, ty) over ty, for every tx: afterwards the
// thread (tx, 0) holds its column's whole state. blockDim.x == lanes_inner *
// lanes_r, lanes_r a power of two; every thread of the block must call it.
template <typename S>
__device__ S merge_block_columns(S s, int lanes_inner, int lanes_r) {
  __shared__ __align__(16) unsigned char raw[kBlock * sizeof(S)];
  S* shared = reinterpret_cast<S*>(raw);
  const int tx = threadIdx.x % lanes_inner, ty = threadIdx.x / lanes_inner;
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int stride = lanes_r / 2; stride > 0; stride /= 2) {
    if (ty < stride) shared[threadIdx.x].merge(shared[(ty + stride) * lanes_inner + tx]);
    __syncthreads();
  }
  S whole = shared[tx];
  __syncthreads();  // the caller may call again (next output) and overwrite `shared`
  return whole;
}

// How a [outer, r, inner] reduction is spread over blocks.
struct ReducePlan {
  int lanes_inner = 1, lanes_r = kBlock;  // block shape: columns × rows
  int64_t tiles = 0;                      // outer × ceil(inner / lanes_inner): one per block
  int64_t splits = 1;                     // pieces of r, one block each (grid.y)
  int64_t chunk = 0;                      // elements of r per piece
};

int64_t multiprocessor_count();  // of the current device (runtime.cu)

// A block per (tile, piece of r); enough blocks to fill every multiprocessor a few
// times over, but no piece shorter than a few elements per thread.
inline ReducePlan plan_reduce(int64_t outer, int64_t r, int64_t inner) {
  ReducePlan p;
  p.lanes_inner = inner == 1 ? 1 : 32;
  p.lanes_r = kBlock / p.lanes_inner;
  p.tiles = outer * ((inner + p.lanes_inner - 1) / p.lanes_inner);
  const int64_t target_blocks = 4 * multiprocessor_count();
  int64_t splits = 1;
  if (p.tiles < target_blocks) {
    splits = (target_blocks + p.tiles - 1) / p.tiles;
    const int64_t at_most = std::max<int64_t>(1, r / (int64_t(p.lanes_r) * 8));
    splits = std::min(std::min(splits, at_most), int64_t(65535));
  }
  p.chunk = std::max<int64_t>(1, (r + splits - 1) / splits);
  p.splits = std::max<int64_t>(1, (r + p.chunk - 1) / p.chunk);
  return p;
}

// Pass 1: block (tile, piece) folds its piece of r for lanes_inner outputs.
// splits == 1: writes each output's result; else its piece's state into
// partial[output · splits + piece].
template <typename S, typename T, typename Out>
__global__ void reduce_pieces_kernel(const T* in, Out* out, S* partial, int64_t outer, int64_t r,
                                     int64_t inner, ReducePlan p) {
  const int tx = threadIdx.x % p.lanes_inner, ty = threadIdx.x / p.lanes_inner;
  const int64_t j_tiles = p.tiles / outer;
  const int64_t k0 = int64_t(blockIdx.y) * p.chunk;
  const int64_t k1 = k0 + p.chunk < r ? k0 + p.chunk : r;
  for (int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const int64_t o = tile / j_tiles, j = (tile % j_tiles) * p.lanes_inner + tx;
    S s;
    if (j < inner)
      for (int64_t k = k0 + ty; k < k1; k += p.lanes_r) s.add(in[(o * r + k) * inner + j], k);
    s = merge_block_columns(s, p.lanes_inner, p.lanes_r);
    if (ty == 0 && j < inner) {
      const int64_t output = o * inner + j;
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
  const ReducePlan p = plan_reduce(outer, r, inner);
  const unsigned grid_x = static_cast<unsigned>(std::min<int64_t>(p.tiles, 65535 * 8));
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
