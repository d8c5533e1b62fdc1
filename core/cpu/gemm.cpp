// gemm.cpp — CPU matrix multiply through Eigen, on the tensors' own buffers.
//
// Eigen::Map wraps each operand where it lies: a row-major operand maps as a
// RowMajor matrix with its row stride, a transposed one as a ColMajor matrix with
// its column stride, so .t() costs nothing. Eigen runs one GEMM on the
// configured number of OpenMP threads; many small GEMMs of a batch run in
// parallel instead, one per thread.
#include <Eigen/Core>

#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/cpu/loops.h"

namespace ringgrad::cpu {
namespace {

template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ColMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using Stride = Eigen::OuterStride<>;

// Call f(A) with a's (rows × cols) buffer mapped in its own layout.
template <typename T, typename F>
void with_mapped(const T* p, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                 F&& f) {
  if (col_stride == 1)
    f(Eigen::Map<const RowMajor<T>, 0, Stride>(p, rows, cols, Stride(row_stride)));
  else
    f(Eigen::Map<const ColMajor<T>, 0, Stride>(p, rows, cols, Stride(col_stride)));
}

template <typename T>
void gemm_one(const GemmArgs& g, int64_t i) {
  const T* a = static_cast<const T*>(g.a) + i * g.a_batch_stride;
  const T* b = static_cast<const T*>(g.b) + i * g.b_batch_stride;
  Eigen::Map<RowMajor<T>> c(static_cast<T*>(g.c) + i * g.c_batch_stride, g.m, g.n);
  if (g.k == 0) {
    c.setZero();
    return;
  }
  with_mapped(a, g.m, g.k, g.a_row_stride, g.a_col_stride, [&](const auto& A) {
    with_mapped(b, g.k, g.n, g.b_row_stride, g.b_col_stride,
                [&](const auto& B) { c.noalias() = A * B; });
  });
}

}  // namespace

void CpuBackend::gemm(const GemmArgs& g) {
  dispatch_floating(g.dtype, "matmul", [&]<typename T>() {
    int threads = get_num_threads();
    Eigen::setNbThreads(threads);
    int64_t flops = g.m * g.n * g.k;
    // A batch of small products: one product per thread beats splitting each one.
    if (g.batch > 1 && threads > 1 && flops < 128 * 128 * 128 &&
        g.batch * flops >= kParallelGrain) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t i = 0; i < g.batch; ++i) gemm_one<T>(g, i);
      return;
    }
    for (int64_t i = 0; i < g.batch; ++i) gemm_one<T>(g, i);
  });
}

}  // namespace ringgrad::cpu
