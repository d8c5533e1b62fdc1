// loss.cu — cross-entropy on the GPU (core/cpu/loss.cpp on the CPU).
//
// Forward: a block of threads per row of logits computes its log-sum-exp (kept
// for backward) and the loss, with label smoothing and ignore_index. Backward: one
// thread per logit, dx = g·(softmax − target distribution). The forward checks
// each target index on the GPU; a bad one is an error at the host's next
// synchronisation (device_errors.cuh).
#include <algorithm>
#include <cmath>

#include "ringgrad/core/cuda/block_reduce.cuh"
#include "ringgrad/core/cuda/cuda_backend.h"
#include "ringgrad/core/cuda/device_errors.cuh"

namespace ringgrad::cuda {
namespace {

// What a row's loss needs: its log-sum-exp and the sum of its logits (for label
// smoothing), folded together in one pass (core/reduce_math.h's states).
template <typename T>
struct RowState {
  math::LogSumExpState<T> lse;
  math::SumState<double> total;
  __device__ void add(T x, int64_t k) { lse.add(x, k), total.add(x, k); }
  __device__ void merge(const RowState& o) { lse.merge(o.lse), total.merge(o.total); }
};

// A block per row (grid-stride over rows): the threads share the row's classes.
template <typename T>
__global__ void cross_entropy_kernel(const T* logits, const int64_t* target, T* loss, T* lse,
                                     int64_t n, int64_t c, T eps, int64_t ignore_index,
                                     DeviceError* err) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const T* x = logits + i * c;
    RowState<T> s;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s.add(x[j], j);
    s = merge_block_columns(s, 1, blockDim.x);
    if (threadIdx.x == 0) {
      const T row_lse = s.lse.result();
      lse[i] = row_lse;
      const T total = static_cast<T>(s.total.result());
      const int64_t t = target[i];
      // ignore_index, or a bad class index (skipped here, an error at the next sync)
      loss[i] = t == ignore_index || !index_ok(err, IndexOp::CrossEntropy, t, 0, c)
                    ? T(0)
                    : row_lse - (T(1) - eps) * x[t] - eps * total / static_cast<T>(c);
    }
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(const T* g, const T* logits, const int64_t* target,
                                              const T* lse, T* dx, int64_t n, int64_t c, T eps,
                                              int64_t ignore_index) {
  RG_GRID_LOOP(ij, n * c) {
    int64_t i = ij / c, j = ij % c;
    if (target[i] == ignore_index) {
      dx[ij] = 0;
      continue;
    }
    T p = std::exp(logits[ij] - lse[i]);
    T want = (j == target[i] ? T(1) - eps : T(0)) + eps / static_cast<T>(c);
    dx[ij] = g[i] * (p - want);
  }
}

}  // namespace

void CudaBackend::cross_entropy(const TensorRef& logits, const TensorRef& target,
                                const TensorRef& loss, const TensorRef& lse, int64_t n, int64_t c,
                                double smoothing, int64_t ignore_index) {
  DeviceError* err = device_error_slot();  // before the launch: its first call allocates
  if (n == 0) return;
  dispatch_floating(logits.dtype, "cross_entropy", [&]<typename T>() {
    const unsigned rows = static_cast<unsigned>(std::min<int64_t>(n, 65535 * 8));
    cross_entropy_kernel<T><<<rows, kBlock, 0, compute_stream()>>>(
        static_cast<const T*>(logits.data), static_cast<const int64_t*>(target.data),
        static_cast<T*>(loss.data), static_cast<T*>(lse.data), n, c, static_cast<T>(smoothing),
        ignore_index, err);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void CudaBackend::cross_entropy_backward(const TensorRef& grad_loss, const TensorRef& logits,
                                         const TensorRef& target, const TensorRef& lse,
                                         const TensorRef& grad_logits, int64_t n, int64_t c,
                                         double smoothing, int64_t ignore_index) {
  if (n * c == 0) return;
  dispatch_floating(logits.dtype, "cross_entropy_backward", [&]<typename T>() {
    cross_entropy_backward_kernel<T><<<blocks_for(n * c), kBlock, 0, compute_stream()>>>(
        static_cast<const T*>(grad_loss.data), static_cast<const T*>(logits.data),
        static_cast<const int64_t*>(target.data), static_cast<const T*>(lse.data),
        static_cast<T*>(grad_logits.data), n, c, static_cast<T>(smoothing), ignore_index);
  });
  RG_CUDA_CHECK_LAUNCH();
}

}  // namespace ringgrad::cuda
