// reduce_plan.h — how a GPU spreads an [outer, r, inner] reduction over blocks of threads.
//
// The kernel (core/cuda/block_reduce.cuh) folds the states of core/reduce_math.h; this
// header is its geometry, in plain C++ (RG_HD), so that tests/test_kernel_math.cpp can
// walk every block and thread on the CPU and check that each element is folded exactly
// once and each output written once.
//
// A block of kBlock threads is `groups` groups, each `lanes_inner` columns (along the
// contiguous inner dim, so reads coalesce) × `lanes_r` rows (along r). A group takes one
// tile: lanes_inner neighbouring outputs of one outer index. Each of its threads folds
// every lanes_r-th element of its column's piece of r; the group then merges its column
// in a tree through shared memory. Short rows get few lanes along r and many groups a
// block — a (10⁶, 4) sum puts 256 rows in a block, one thread each, instead of one row
// in 256 threads of which 252 had nothing to do. When the blocks alone would not fill
// the GPU (a full reduction has one output), r is also cut into `splits` pieces, one
// block each (grid.y), and a second kernel merges each output's pieces.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ringgrad/core/kernel_math.h"

namespace ringgrad::math {

struct ReducePlan {
  int lanes_inner = 1, lanes_r = 256;  // a group's shape: columns × rows (powers of two)
  int groups = 1;                      // groups per block: groups · lanes_inner · lanes_r = block
  int64_t tiles = 0;                   // outer × ceil(inner / lanes_inner): one per group
  int64_t blocks = 0;                  // ceil(tiles / groups): blocks along grid.x if all fit
  int64_t splits = 1;                  // pieces of r, one block each (grid.y)
  int64_t chunk = 0;                   // elements of r per piece
};

inline int64_t pow2_at_most(int64_t n) {  // the largest power of two <= n (n >= 1)
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// `block` threads a block (a power of two), `multiprocessors` on the device.
inline ReducePlan plan_reduce(int64_t outer, int64_t r, int64_t inner, int block,
                              int64_t multiprocessors) {
  ReducePlan p;
  // Columns: a warp's 32 along inner (coalesced reads), fewer when inner is short.
  p.lanes_inner = inner <= 1 ? 1 : int(std::min<int64_t>(32, pow2_at_most(2 * inner - 1)));
  // Rows: about four elements of r a thread at least, at most the block.
  p.lanes_r = int(std::min<int64_t>(block / p.lanes_inner, pow2_at_most(std::max<int64_t>(1, r / 4))));
  p.groups = block / (p.lanes_inner * p.lanes_r);
  p.tiles = outer * ((inner + p.lanes_inner - 1) / p.lanes_inner);
  p.blocks = (p.tiles + p.groups - 1) / p.groups;
  // Enough blocks to fill every multiprocessor a few times over, but no piece of r
  // shorter than eight elements a thread.
  const int64_t target_blocks = 4 * multiprocessors;
  int64_t splits = 1;
  if (p.blocks < target_blocks && p.groups == 1) {
    splits = (target_blocks + p.blocks - 1) / std::max<int64_t>(p.blocks, 1);
    const int64_t at_most = std::max<int64_t>(1, r / (int64_t(p.lanes_r) * 8));
    splits = std::min(std::min(splits, at_most), int64_t(65535));
  }
  p.chunk = std::max<int64_t>(1, (r + splits - 1) / splits);
  p.splits = std::max<int64_t>(1, (r + p.chunk - 1) / p.chunk);
  return p;
}

// Thread `thread` of a block: its group, and its column and row in the group.
struct ReduceLane {
  int group, tx, ty;
};
RG_HD ReduceLane lane_of(const ReducePlan& p, int thread) {
  const int group_size = p.lanes_inner * p.lanes_r;
  const int local = thread % group_size;
  return {thread / group_size, local % p.lanes_inner, local / p.lanes_inner};
}

// The output a lane of `tile` folds, as (o, j): outer index o, inner index j (j >= inner:
// the tile's last columns past the end of inner, which fold nothing).
struct ReduceOutput {
  int64_t o, j;
};
RG_HD ReduceOutput output_of(const ReducePlan& p, int64_t outer, int64_t inner, int64_t tile,
                             int tx) {
  const int64_t j_tiles = p.tiles / outer;
  return {tile / j_tiles, (tile % j_tiles) * p.lanes_inner + tx};
}

}  // namespace ringgrad::math
