// attention.cpp — CPU scheduling and row passes of blockwise attention (the math: row_math.h).
//
// The tile loop (core/ops_attention.cpp) runs here as FlashAttention-2 does on a CPU:
// one batch·head pair per work item, items claimed by the threads from a shared counter,
// each item on one thread — its GEMMs single-threaded (CpuBackend::gemm inside a parallel
// region), its score tile private scratch that stays in the L2 cache between the GEMM
// that writes it, the row pass and the GEMM that reads it. No fork/join per tile: one
// per call. The row passes below then see one pair's tile and run on the calling thread
// (a tile given to them outside a parallel region is still split over threads by rows).
#include <atomic>

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

Backend::AttentionPlan CpuBackend::attention_plan(int64_t) {
  return {.pairs_per_item = 1, .workers = in_parallel_region() ? 1 : get_num_threads()};
}

// One chunk per worker, so that chunk c is worker c and owns scratch c; inside, the
// worker takes items from the counter until none is left. A thread that starts late
// (its core busy with another process) finds fewer items, or none: nobody waits for it.
void CpuBackend::attention_run(int64_t items, const AttentionPlan& plan,
                               const std::function<void(int64_t, int)>& body) {
  if (plan.workers <= 1 || items < 2) {
    for (int64_t item = 0; item < items; ++item) body(item, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  parallel_chunks(plan.workers, plan.workers, [&](int64_t worker) {
    for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < items;)
      body(item, int(worker));
  });
}

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
