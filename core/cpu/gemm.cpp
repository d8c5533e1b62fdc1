// gemm.cpp — CPU matrix multiply on the tensors' own buffers: float32 through oneDNN's
// sgemm where the build has it (core/cpu/onednn/), everything else through Eigen.
//
// Both read each operand where it lies: a row-major operand as it is, with its row
// stride; a transposed one as column-major (oneDNN: 'T'), with its column stride; so
// .t() costs nothing. An operand with neither stride 1 (a broadcast) goes to Eigen.
// Threads: a big product is cut into independent panels, one per thread, each a
// single-threaded GEMM; a batch of products runs one product per thread; a small
// product stays on one thread (splitting it only adds waiting).
//
// RINGGRAD_GEMM=onednn|eigen|auto picks the float32 GEMM (auto, the default: oneDNN
// when built with it). oneDNN's kernels are faster on small and skinny products (a
// 64×256×10 layer: about 2× Eigen's) and on par on big ones: bench/bench_gemm.cpp.
#include <Eigen/Core>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <type_traits>

#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/cpu/loops.h"
#include "ringgrad/core/cpu/onednn/onednn.h"
#include "ringgrad/core/kernel_math.h"
#include "ringgrad/core/threads.h"

namespace ringgrad::cpu {
namespace {

// Whether float32 GEMMs go to oneDNN: RINGGRAD_GEMM, read once.
bool use_onednn() {
  static const bool yes = [] {
    const char* env = std::getenv("RINGGRAD_GEMM");
    const std::string_view v = env ? env : "auto";
    if (v == "auto") return onednn::available();
    if (v == "eigen") return false;
    RG_CHECK(v == "onednn", "RINGGRAD_GEMM", "expected onednn, eigen or auto, got \"", v, "\"");
    RG_CHECK(onednn::available(), "RINGGRAD_GEMM",
             "onednn asked for, but this build has no oneDNN (install libdnnl-dev and rebuild, "
             "or set RINGGRAD_GEMM=eigen)");
    return true;
  }();
  return yes;
}

// An operand (rows × cols, strides rs, cs) in dnnl_sgemm's terms: 'N' with leading
// dimension ld (element (i, j) at i·ld + j) or 'T' (at j·ld + i). False when it is
// neither (a broadcast or otherwise strided view).
bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, char& trans, int64_t& ld) {
  if (cs == 1 && (rows == 1 || rs >= std::max<int64_t>(cols, 1))) {
    trans = 'N', ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    return true;
  }
  if (rs == 1 && (cols == 1 || cs >= std::max<int64_t>(rows, 1))) {
    trans = 'T', ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    return true;
  }
  return false;
}

// Rows this many floats apart alias in the caches: a multiple of 2 KiB, 4 KiB or more.
bool aliasing_stride(int64_t ld) { return ld >= 1024 && ld % 512 == 0; }

// c (m × n, row stride ldc) = beta·c + dᵀ, d (n × m, row stride ldd); in 16 × 16 tiles,
// so that both sides are read and written a cache line at a time.
void add_transposed(const float* d, int64_t ldd, int64_t m, int64_t n, float beta, float* c,
                    int64_t ldc) {
  constexpr int64_t kTile = 16;
  for (int64_t i0 = 0; i0 < m; i0 += kTile)
    for (int64_t j0 = 0; j0 < n; j0 += kTile)
      for (int64_t i = i0; i < std::min(m, i0 + kTile); ++i) {
        float* ci = c + i * ldc;
        for (int64_t j = j0; j < std::min(n, j0 + kTile); ++j)
          ci[j] = (beta == 0.0f ? 0.0f : beta * ci[j]) + d[j * ldd + i];
      }
}

// C block (m × n, row stride ldc) = alpha·A·B + beta·C through oneDNN, when the
// operands' layouts allow it; false (nothing done) otherwise.
//
// One layout oneDNN 2.6 handles badly: A read transposed ('T') with its rows 4 KiB or more
// apart in a multiple of 2 KiB — a weight gradient dYᵀ·X whose dY is 1024, 2048, 3072, …
// wide, i.e. most of a Transformer's. Such rows fall into a few cache sets, and the product
// runs at 85–150 GFLOP/s on one thread where it should run at 170+ (and PyTorch's MKL
// does). The same product the other way round, Cᵀ = op(B)ᵀ·op(A)ᵀ, reads A as it lies,
// row after row: computed into a scratch block and added into C transposed, it runs at
// 162–185 (bench_gemm's (1024,2048,256) Aᵀ: 134–149 -> 170–178; (4096,1024,256) Aᵀ: 85 ->
// 162). Only for a long inner dimension (k ≥ 1024): at k = 256 the transpose costs more
// than the aliasing.
bool onednn_block(const GemmArgs& g, const float* a, const float* b, float* c, int64_t m,
                  int64_t n, int64_t ldc) {
  char ta, tb;
  int64_t lda, ldb;
  if (g.k == 0 || !blas_layout(m, g.k, g.a_row_stride, g.a_col_stride, ta, lda) ||
      !blas_layout(g.k, n, g.b_row_stride, g.b_col_stride, tb, ldb))
    return false;
  const auto alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  if (ta == 'T' && aliasing_stride(lda) && !(tb == 'N' && aliasing_stride(ldb)) && g.k >= 1024) {
    // The scratch's rows m + 16 floats apart, so that reading it down a column does not
    // alias in turn.
    const int64_t ldd = m + 16;
    const size_t bytes = size_t(n * ldd) * sizeof(float);
    const auto free_scratch = [bytes](float* p) { backend().deallocate(p, bytes); };
    std::unique_ptr<float, decltype(free_scratch)> d(
        static_cast<float*>(backend().allocate(bytes)), free_scratch);
    onednn::sgemm(tb == 'N' ? 'T' : 'N', 'N', n, m, g.k, alpha, b, ldb, a, lda, 0.0f, d.get(),
                  ldd);
    add_transposed(d.get(), ldd, m, n, beta, c, ldc);
    return true;
  }
  onednn::sgemm(ta, tb, m, n, g.k, alpha, a, lda, b, ldb, beta, c, ldc);
  return true;
}

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

// C block (rows × cols, at c, row stride ldc) = alpha·A·B + beta·C, A's and B's first
// elements at a and b: oneDNN, or Eigen.
template <typename T>
void product_block(const GemmArgs& g, const T* a, const T* b, T* c, int64_t ldc, int64_t rows,
                   int64_t cols) {
  if constexpr (std::is_same_v<T, float>)
    if (use_onednn() && onednn_block(g, a, b, c, rows, cols, ldc)) return;
  const T alpha = static_cast<T>(g.alpha), beta = static_cast<T>(g.beta);
  auto multiply = [&](auto&& C) {
    if (beta == T(0))
      C.setZero();
    else if (beta != T(1))
      C *= beta;
    if (g.k == 0) return;
    with_mapped(a, rows, g.k, g.a_row_stride, g.a_col_stride, [&](const auto& A) {
      with_mapped(b, g.k, cols, g.b_row_stride, g.b_col_stride, [&](const auto& B) {
        if (beta == T(0) && alpha == T(1))
          C.noalias() = A * B;  // the common case: no pass over C before the product
        else
          C.noalias() += alpha * A * B;
      });
    });
  };
  if (cols == g.n && ldc == g.n)
    multiply(Eigen::Map<RowMajor<T>>(c, rows, g.n));
  else
    multiply(Eigen::Map<RowMajor<T>, 0, Stride>(c, rows, cols, Stride(ldc)));
}

// The block's rows += bias[c0, c0 + cols) (GemmArgs::bias), then max(0, ·) (GemmArgs::relu)
// or GELU into gelu_out (GemmArgs::gelu_out), right after the block was computed, while
// (some of) it is still in cache: a pass over C fewer than an op of its own after.
bool has_epilogue(const GemmArgs& g) { return g.bias || g.relu || g.gelu_out; }

template <typename T>
void epilogue(const GemmArgs& g, int64_t i, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
  const int64_t ldc = g.ldc();
  const int64_t at = i * g.c_batch_stride + r0 * ldc + c0;  // the block's first element
  const T* __restrict bias = g.bias ? static_cast<const T*>(g.bias) + c0 : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    T* __restrict cr = static_cast<T*>(g.c) + at + r * ldc;
    if (bias) {
      RG_SIMD
      for (int64_t j = 0; j < cols; ++j) cr[j] += bias[j];
    }
    if (g.relu) {
      RG_SIMD
      for (int64_t j = 0; j < cols; ++j) cr[j] = math::relu(cr[j]);
    }
    if (g.gelu_out) {
      T* __restrict ar = static_cast<T*>(g.gelu_out) + at + r * ldc;
      if (g.gelu_tanh) {
        RG_SIMD
        for (int64_t j = 0; j < cols; ++j) ar[j] = math::gelu_tanh(cr[j]);
      } else {
        RG_SIMD
        for (int64_t j = 0; j < cols; ++j) ar[j] = math::gelu_erf(cr[j]);
      }
    }
  }
}

// C[rows r0:r1, cols c0:c1] of product i of the batch (and its epilogue), on the calling
// thread. (Cutting the block into ~128–512 KB row blocks, so that the epilogue finds its
// rows in the L2 cache, was measured and not kept: at a GPT's 2048 × 512 × 128 the
// epilogue is bound by GELU's arithmetic, not by memory, and the smaller GEMMs lost more:
// linear + GELU 2.14 ms whole, 2.37 ms in 128 KB blocks, one thread, AVX-512 Xeon.)
template <typename T>
void gemm_block(const GemmArgs& g, int64_t i, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (r1 <= r0 || c1 <= c0) return;
  const int64_t ldc = g.ldc();
  const T* a = static_cast<const T*>(g.a) + i * g.a_batch_stride + r0 * g.a_row_stride;
  const T* b = static_cast<const T*>(g.b) + i * g.b_batch_stride + c0 * g.b_col_stride;
  T* c = static_cast<T*>(g.c) + i * g.c_batch_stride + r0 * ldc + c0;
  product_block<T>(g, a, b, c, ldc, r1 - r0, c1 - c0);
  if (has_epilogue(g)) epilogue<T>(g, i, r0, r1 - r0, c0, c1 - c0);
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
  // We decide the threading (thread_pool.h); Eigen runs each block on one thread. Eigen's
  // thread count is one process-wide number: the first GEMM sets it to 1 (once, so the
  // pool's workers, which call GEMMs side by side in attention, find 1 and never write
  // it). A call from outside a parallel region also sets 1 for its duration and puts back
  // after whatever the program had set for its own Eigen code.
  static const bool eigen_single = (Eigen::setNbThreads(1), true);
  (void)eigen_single;
  dispatch_floating(g.dtype, "matmul", [&]<typename T>() {
    const bool top = !in_parallel_region();
    int threads = top ? get_num_threads() : 1;
    const int eigen_threads = top ? Eigen::nbThreads() : 0;
    if (top) Eigen::setNbThreads(1);
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
    if (top) Eigen::setNbThreads(eigen_threads);
  });
}

}  // namespace ringgrad::cpu

std::string ringgrad::cpu_gemm_engine() {
  return cpu::use_onednn() ? "onednn-" + cpu::onednn::version() : "eigen";
}
