// gemm.cpp — CPU matrix multiply through Eigen, on the tensors' own buffers.
//
// Eigen::Map wraps each operand where it lies: a row-major operand maps as a
// RowMajor matrix with its row stride, a transposed one as a ColMajor matrix with
// its column stride, so .t() costs nothing. Threads: a big product is cut into
// independent panels, one per thread; a batch of products runs one product per
// thread; a small product stays on one thread (splitting it only adds waiting).
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

// Call f(M) with the (rows × cols) operand at p mapped in its own layout.
// Tightly packed operands map without a runtime stride: Eigen's kernels are
// measurably faster then (~8% on a 64×256×10 product).
template <typename T, typename F>
void with_mapped(const T* p, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                 F&& f) {
  if (col_stride == 1 && row_stride == cols)
    f(Eigen::Map<const RowMajor<T>>(p, rows, cols));
  else if (row_stride == 1 && col_stride == rows)
    f(Eigen::Map<const ColMajor<T>>(p, rows, cols));
  else if (col_stride == 1)
    f(Eigen::Map<const RowMajor<T>, 0, Stride>(p, rows, cols, Stride(row_stride)));
  else
    f(Eigen::Map<const ColMajor<T>, 0, Stride>(p, rows, cols, Stride(col_stride)));
}

// C[rows r0:r1, cols c0:c1] of product i of the batch, on the calling thread.
template <typename T>
void gemm_block(const GemmArgs& g, int64_t i, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const T* a = static_cast<const T*>(g.a) + i * g.a_batch_stride + r0 * g.a_row_stride;
  const T* b = static_cast<const T*>(g.b) + i * g.b_batch_stride + c0 * g.b_col_stride;
  const int64_t ldc = g.ldc();
  T* c = static_cast<T*>(g.c) + i * g.c_batch_stride + r0 * ldc + c0;
  const T alpha = static_cast<T>(g.alpha), beta = static_cast<T>(g.beta);
  auto multiply = [&](auto&& C) {
    if (beta == T(0))
      C.setZero();
    else if (beta != T(1))
      C *= beta;
    if (g.k == 0) return;
    with_mapped(a, r1 - r0, g.k, g.a_row_stride, g.a_col_stride, [&](const auto& A) {
      with_mapped(b, g.k, c1 - c0, g.b_row_stride, g.b_col_stride, [&](const auto& B) {
        if (beta == T(0) && alpha == T(1))
          C.noalias() = A * B;  // the common case: no pass over C before the product
        else
          C.noalias() += alpha * A * B;
      });
    });
  };
  if (c0 == 0 && c1 == g.n && ldc == g.n)
    multiply(Eigen::Map<RowMajor<T>>(c, r1 - r0, g.n));
  else
    multiply(Eigen::Map<RowMajor<T>, 0, Stride>(c, r1 - r0, c1 - c0, Stride(ldc)));
}

// Work (multiply-adds) below which one GEMM stays on one thread: a 64×256×10
// product (164k) is ~4 µs; with the pool's workers awake it still gains ~1.3×
// on two threads, below that the hand-off costs more than it saves. Above
// kFinePanelsWork, panels are cut finer than one per thread, so a thread
// slowed by another process simply takes fewer of them. Only two per thread:
// every panel packs the whole shared operand again, and with a long k (1024+)
// four panels per thread cost up to 25% (2048×1024×256 on 2 threads: 272
// GFLOP/s with four, 361 with two, 347 with one).
constexpr int64_t kSerialGemmWork = int64_t(1) << 17;
constexpr int64_t kFinePanelsWork = int64_t(1) << 24;
constexpr int64_t kPanelsPerThread = 2;
constexpr int64_t kMinPanel = 16;  // rows or columns: one SIMD-kernel width

// One product on `threads` threads: split C into independent column (or row)
// panels, one single-threaded Eigen GEMM each, claimed from the pool's shared
// counter. A thread whose core is busy with another process simply takes
// fewer panels (or none), so a second thread never waits out a time slice.
template <typename T>
void gemm_split(const GemmArgs& g, int64_t i, int threads) {
  bool by_cols = g.n >= g.m;
  int64_t extent = by_cols ? g.n : g.m;
  int64_t per_thread = g.m * g.n * g.k >= kFinePanelsWork ? kPanelsPerThread : 1;
  int64_t parts =
      std::min<int64_t>(int64_t(threads) * per_thread, std::max<int64_t>(1, extent / kMinPanel));
  parallel_chunks(parts, threads, [&](int64_t p) {
    // Panel edges on multiples of 16 keep every panel's SIMD kernels full.
    int64_t lo = extent * p / parts / 16 * 16;
    int64_t hi = p + 1 == parts ? extent : extent * (p + 1) / parts / 16 * 16;
    if (by_cols)
      gemm_block<T>(g, i, 0, g.m, lo, hi);
    else
      gemm_block<T>(g, i, lo, hi, 0, g.n);
  });
}

}  // namespace

void CpuBackend::gemm(const GemmArgs& g) {
  dispatch_floating(g.dtype, "matmul", [&]<typename T>() {
    int threads = in_parallel_region() ? 1 : get_num_threads();
    // We decide the threading (thread_pool.h); Eigen runs each block on one
    // thread. The caller's own Eigen setting is put back after.
    int eigen_threads = Eigen::nbThreads();
    Eigen::setNbThreads(1);
    int64_t work = g.m * g.n * g.k;
    if (threads > 1 && g.batch > 1 && g.batch * work >= kParallelGrain &&
        (work < kSerialGemmWork || g.batch >= threads)) {
      // A batch of products: one product per chunk.
      parallel_chunks(g.batch, threads, [&](int64_t i) { gemm_block<T>(g, i, 0, g.m, 0, g.n); });
    } else {
      for (int64_t i = 0; i < g.batch; ++i) {
        if (threads > 1 && work >= kSerialGemmWork)
          gemm_split<T>(g, i, threads);
        else
          gemm_block<T>(g, i, 0, g.m, 0, g.n);
      }
    }
    Eigen::setNbThreads(eigen_threads);
  });
}

}  // namespace ringgrad::cpu
