// attention.cu — CUDA scheduling and row passes of blockwise attention (math: row_math.h).
//
// The GEMMs of each tile run through cuBLAS (gemm.cu), from ops_attention.cpp, batched
// over every batch·head pair; the work items of the tile loop (query or key blocks) are
// launched one after another on the compute stream. These kernels are the passes over
// rows of scores in between, one thread per query row, calling the same row functions
// as the CPU backend. (A fused attention kernel — tiles kept in shared memory — would
// replace all of this.)
#include <algorithm>

#include "ringgrad/core/cuda/cuda_backend.h"
#include "ringgrad/core/row_math.h"

namespace ringgrad::cuda {
namespace {

// The mask as the row math reads it (.data, .strides[k]), in a kernel-friendly form.
struct MaskView {
  const void* data;
  int64_t strides[4];
};

MaskView mask_view(const TensorRef& m) {
  MaskView v{m.data, {0, 0, 0, 0}};
  for (int k = 0; k < 4 && k < m.ndim; ++k) v.strides[k] = m.strides[k];
  return v;
}

// Element (n, i) of a 2-D view; row (n, i) of a 3-D view.
template <typename T>
__device__ T* at(const StridedView& t, int64_t n, int64_t i) {
  return reinterpret_cast<T*>(t.data) + n * t.strides[0] + i * t.strides[1];
}

template <typename T>
__global__ void tile_forward_kernel(AttentionTile tile, MaskView mask, T* s, StridedView m,
                                    StridedView l, StridedView o) {
  RG_GRID_LOOP(r, tile.batch * tile.heads * tile.rows) {
    int64_t n = r / tile.rows, i = r % tile.rows;
    auto row = math::attention_row<T>(tile, mask, n, i);
    math::attention_row_forward(row, s + r * tile.cols, *at<T>(m, n, i), *at<T>(l, n, i),
                                at<T>(o, n, i), o.shape[2], o.strides[2]);
  }
}

template <typename T>
__global__ void tile_probs_kernel(AttentionTile tile, MaskView mask, T* s, StridedView lse,
                                  T* pd) {
  RG_GRID_LOOP(r, tile.batch * tile.heads * tile.rows) {
    int64_t n = r / tile.rows, i = r % tile.rows;
    auto row = math::attention_row<T>(tile, mask, n, i);
    math::attention_row_probs(row, s + r * tile.cols, *at<T>(lse, n, i),
                              pd ? pd + r * tile.cols : nullptr);
  }
}

template <typename T>
__global__ void tile_grad_kernel(AttentionTile tile, MaskView mask, const T* p, T* dp,
                                 StridedView dsum) {
  RG_GRID_LOOP(r, tile.batch * tile.heads * tile.rows) {
    int64_t n = r / tile.rows, i = r % tile.rows;
    auto row = math::attention_row<T>(tile, mask, n, i);
    math::attention_row_grad(row, p + r * tile.cols, dp + r * tile.cols, *at<T>(dsum, n, i));
  }
}

int64_t tile_rows(const AttentionTile& t) { return t.batch * t.heads * t.rows; }

}  // namespace

// Every pair in each item's batched GEMMs, one item at a time: one scratch buffer,
// which the stream's ordering lets each item reuse after the one before. (At least
// one pair per item: with B·H = 0 there are no items, and nothing to divide by zero.)
Backend::AttentionPlan CudaBackend::attention_plan(int64_t pairs) {
  return {.pairs_per_item = std::max<int64_t>(pairs, 1), .workers = 1};
}

void CudaBackend::attention_run(int64_t items, const AttentionPlan&,
                                const std::function<void(int64_t, int)>& body) {
  for (int64_t item = 0; item < items; ++item) body(item, 0);
}

void CudaBackend::attention_tile_forward(const AttentionTile& tile, const TensorRef& s,
                                         const TensorRef& m, const TensorRef& l,
                                         const TensorRef& o) {
  dispatch_floating(tile.dtype, "attention", [&]<typename T>() {
    tile_forward_kernel<T><<<blocks_for(tile_rows(tile)), kBlock, 0, compute_stream()>>>(
        tile, mask_view(tile.mask), static_cast<T*>(s.data), view(m), view(l), view(o));
    RG_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::attention_tile_probs(const AttentionTile& tile, const TensorRef& s,
                                       const TensorRef& lse, const TensorRef& pd) {
  dispatch_floating(tile.dtype, "attention_backward", [&]<typename T>() {
    tile_probs_kernel<T><<<blocks_for(tile_rows(tile)), kBlock, 0, compute_stream()>>>(
        tile, mask_view(tile.mask), static_cast<T*>(s.data), view(lse),
        static_cast<T*>(pd.data));
    RG_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::attention_tile_grad(const AttentionTile& tile, const TensorRef& p,
                                      const TensorRef& dp, const TensorRef& dsum) {
  dispatch_floating(tile.dtype, "attention_backward", [&]<typename T>() {
    tile_grad_kernel<T><<<blocks_for(tile_rows(tile)), kBlock, 0, compute_stream()>>>(
        tile, mask_view(tile.mask), static_cast<const T*>(p.data), static_cast<T*>(dp.data),
        view(dsum));
    RG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ringgrad::cuda
