// attention.cpp — CPU row passes of blockwise attention (the math: row_math.h).
//
// The tile's GEMMs (Q·Kᵀ, P·V, …) run through CpuBackend::gemm; what is left per
// tile is one pass over each row of scores, split over threads by rows.
#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/cpu/loops.h"
#include "ringgrad/core/row_math.h"

namespace ringgrad::cpu {
namespace {

// f(n, i) for every row i of every batch·head pair n, split over threads.
template <typename F>
void for_each_tile_row(const AttentionTile& tile, F&& f) {
  int64_t pairs = tile.batch * tile.heads, rows = pairs * tile.rows;
  int64_t work = rows * tile.cols * (tile.dropout_p > 0 ? 40 : 8);  // philox ≈ 40 flops
  parallel_for(rows, work, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) f(r / tile.rows, r % tile.rows);
  });
}

// Element (n, i) of a (pairs, rows) view, and row (n, i) of a 3-D view.
template <typename T>
T* at(const TensorRef& t, int64_t n, int64_t i) {
  return static_cast<T*>(t.data) + n * t.strides[0] + i * t.strides[1];
}

}  // namespace

void CpuBackend::attention_tile_forward(const AttentionTile& tile, const TensorRef& s,
                                        const TensorRef& m, const TensorRef& l,
                                        const TensorRef& o) {
  dispatch_floating(tile.dtype, "attention", [&]<typename T>() {
    for_each_tile_row(tile, [&](int64_t n, int64_t i) {
      auto row = math::attention_row<T>(tile, tile.mask, n, i);
      T* si = static_cast<T*>(s.data) + (n * tile.rows + i) * tile.cols;
      math::attention_row_forward(row, si, *at<T>(m, n, i), *at<T>(l, n, i), at<T>(o, n, i),
                                  o.shape[2], o.strides[2]);
    });
  });
}

void CpuBackend::attention_tile_probs(const AttentionTile& tile, const TensorRef& s,
                                      const TensorRef& lse, const TensorRef& pd) {
  dispatch_floating(tile.dtype, "attention_backward", [&]<typename T>() {
    for_each_tile_row(tile, [&](int64_t n, int64_t i) {
      auto row = math::attention_row<T>(tile, tile.mask, n, i);
      int64_t first = (n * tile.rows + i) * tile.cols;
      T* pdi = pd.data ? static_cast<T*>(pd.data) + first : nullptr;
      math::attention_row_probs(row, static_cast<T*>(s.data) + first, *at<T>(lse, n, i), pdi);
    });
  });
}

void CpuBackend::attention_tile_grad(const AttentionTile& tile, const TensorRef& p,
                                     const TensorRef& dp, const TensorRef& dsum) {
  dispatch_floating(tile.dtype, "attention_backward", [&]<typename T>() {
    for_each_tile_row(tile, [&](int64_t n, int64_t i) {
      auto row = math::attention_row<T>(tile, tile.mask, n, i);
      int64_t first = (n * tile.rows + i) * tile.cols;
      math::attention_row_grad(row, static_cast<const T*>(p.data) + first,
                               static_cast<T*>(dp.data) + first, *at<T>(dsum, n, i));
    });
  });
}

}  // namespace ringgrad::cpu
