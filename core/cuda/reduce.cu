// reduce.cu — CUDA reductions and softmax over [outer, r, inner] blocks (cross-entropy: loss.cu).
//
// Reductions: the states of core/reduce_math.h, a block of threads per output
// (or per piece of a long row, pieces then merged): block_reduce.cuh. A full
// reduction of 10^8 floats uses every multiprocessor, not one thread.
//
// Softmax and log-softmax, forward and backward, go to cuDNN (legacy API,
// cudnnSoftmaxForward / cudnnSoftmaxBackward in libcudnn_ops). Our [outer, r, inner]
// block is a packed NCHW tensor with N = outer, C = r, H = inner, W = 1: element
// (n, c, h) lies at (n·r + c)·inner + h in both. CUDNN_SOFTMAX_MODE_CHANNEL
// normalises over C for each (n, h, w), i.e. over r for each (outer, inner).
// cuDNN's dims are int and a tensor holds at most 2^31 − 1 elements: a bigger
// block goes in slices along outer, and a single [r, inner] slice too big for
// one descriptor falls back to the thread-per-row kernels below.
#include <cfloat>
#include <climits>

#include "ringgrad/core/cuda/block_reduce.cuh"
#include "ringgrad/core/cuda/cuda_backend.h"

namespace ringgrad::cuda {
namespace {

template <typename T>
__global__ void softmax_kernel(const T* in, T* out, int64_t outer, int64_t r, int64_t inner,
                               bool log_form) {
  RG_GRID_LOOP(oj, outer * inner) {
    int64_t base = (oj / inner) * r * inner + oj % inner;
    const T* x = in + base;
    T* y = out + base;
    T m = -INFINITY;
    for (int64_t k = 0; k < r; ++k) m = math::maximum(m, x[k * inner]);
    if (std::isinf(m) && m < 0) m = 0;  // an all -inf row: zeros, not NaN
    T s = 0;
    for (int64_t k = 0; k < r; ++k) s += std::exp(x[k * inner] - m);
    T ls = m + std::log(s);
    for (int64_t k = 0; k < r; ++k)
      y[k * inner] = log_form ? x[k * inner] - ls : std::exp(x[k * inner] - ls);
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* g, const T* y, T* dx, int64_t outer, int64_t r,
                                        int64_t inner, bool log_form) {
  RG_GRID_LOOP(oj, outer * inner) {
    int64_t base = (oj / inner) * r * inner + oj % inner;
    T s = 0;
    for (int64_t k = 0; k < r; ++k)
      s += log_form ? g[base + k * inner] : g[base + k * inner] * y[base + k * inner];
    for (int64_t k = 0; k < r; ++k) {
      int64_t i = base + k * inner;
      dx[i] = log_form ? g[i] - std::exp(y[i]) * s : y[i] * (g[i] - s);
    }
  }
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const TensorRef& in, const TensorRef& out, int64_t outer,
                         int64_t r, int64_t inner) {
  using namespace math;
  if (op == ReduceOp::Sum && in.dtype == DType::Bool) {  // the count of true values
    launch_reduce<SumState<int64_t>>(static_cast<const bool*>(in.data),
                                     static_cast<int64_t*>(out.data), outer, r, inner);
    return;
  }
  dispatch_numeric(in.dtype, "reduce", [&]<typename T>() {
    const T* x = static_cast<const T*>(in.data);
    T* y = static_cast<T*>(out.data);
    int64_t* index = static_cast<int64_t*>(out.data);
    // Float sums accumulate in double, as on the CPU.
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    switch (op) {
      case ReduceOp::Sum:
        return launch_reduce<SumState<Acc>>(x, y, outer, r, inner);
      case ReduceOp::Max:
        return launch_reduce<ExtremeState<T, true>>(x, y, outer, r, inner);
      case ReduceOp::Min:
        return launch_reduce<ExtremeState<T, false>>(x, y, outer, r, inner);
      case ReduceOp::ArgMax:
        return launch_reduce<ArgState<T, true>>(x, index, outer, r, inner);
      case ReduceOp::ArgMin:
        return launch_reduce<ArgState<T, false>>(x, index, outer, r, inner);
      case ReduceOp::LogSumExp:
        if constexpr (std::is_floating_point_v<T>)
          return launch_reduce<LogSumExpState<T>>(x, y, outer, r, inner);
        else
          fail("logsumexp", "expected a floating dtype, got ", in.dtype);
    }
  });
}

// ---------------------------------------------------------------- softmax through cuDNN

namespace {

// An owned cuDNN tensor descriptor, destroyed at scope exit.
class TensorDesc {
 public:
  TensorDesc() { RG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(desc_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

// `rows` rows of a contiguous [outer, r, inner] block of T, as packed NCHW:
// N = rows, C = r, H = inner, W = 1 (strides r·inner, inner, 1, 1).
template <typename T>
void describe_block(const TensorDesc& desc, int64_t rows, int64_t r, int64_t inner) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  const cudnnDataType_t type = std::is_same_v<T, float> ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
  RG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc.get(), CUDNN_TENSOR_NCHW, type, int(rows), int(r),
                                            int(inner), 1));
}

// How many rows of outer one descriptor may hold (≥ 1), or 0 when even one
// [r, inner] slice exceeds cuDNN's 2^31 − 1 elements: then the kernels run.
int64_t cudnn_rows_per_call(int64_t r, int64_t inner) {
  if (r > INT_MAX || inner > INT_MAX || r * inner > INT_MAX) return 0;
  return INT_MAX / (r * inner);
}

// Calls f(first_row, rows) for slices of [0, outer) that fit one descriptor.
template <typename F>
void for_cudnn_slices(int64_t outer, int64_t per_call, F&& f) {
  for (int64_t first = 0; first < outer; first += per_call)
    f(first, std::min(per_call, outer - first));
}

// Runs call(desc, offset, &one, &zero) for each slice of [0, outer) rows that one
// cuDNN descriptor can take, desc describing the slice (in, out and gradients
// share its layout) and offset its first element; under cuDNN's lock. alpha = 1,
// beta = 0 (cuDNN takes them as double for double data, else float).
template <typename T, typename F>
void for_cudnn_softmax_slices(int64_t outer, int64_t r, int64_t inner, int64_t per_call, F&& call) {
  const T one = 1, zero = 0;
  std::lock_guard<std::mutex> lock(cudnn_mutex());
  for_cudnn_slices(outer, per_call, [&](int64_t first, int64_t rows) {
    TensorDesc desc;
    describe_block<T>(desc, rows, r, inner);
    call(desc.get(), first * r * inner, &one, &zero);
  });
}

cudnnSoftmaxAlgorithm_t softmax_algorithm(bool log) {
  return log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
}

}  // namespace

void CudaBackend::softmax(const TensorRef& in, const TensorRef& out, int64_t outer, int64_t r,
                          int64_t inner, bool log) {
  if (outer * r * inner == 0) return;
  dispatch_floating(in.dtype, "softmax", [&]<typename T>() {
    const int64_t per_call = cudnn_rows_per_call(r, inner);
    if (per_call == 0) {  // a single row too big for cuDNN's int dims: one thread per row
      softmax_kernel<T><<<blocks_for(outer * inner), kBlock, 0, compute_stream()>>>(
          static_cast<const T*>(in.data), static_cast<T*>(out.data), outer, r, inner, log);
      RG_CUDA_CHECK_LAUNCH();
      return;
    }
    // y = 1·softmax(x) + 0·y
    for_cudnn_softmax_slices<T>(outer, r, inner, per_call, [&](auto desc, int64_t offset,
                                                               const T* one, const T* zero) {
      RG_CUDNN_CHECK(cudnnSoftmaxForward(cudnn_handle(), softmax_algorithm(log),
                                         CUDNN_SOFTMAX_MODE_CHANNEL, one, desc,
                                         static_cast<const T*>(in.data) + offset, zero, desc,
                                         static_cast<T*>(out.data) + offset));
    });
  });
}

// Given y = softmax(x) (or log_softmax(x)) and g = dL/dy, cuDNN computes
//   softmax:      dx = y·(g − Σ_r g·y)
//   log_softmax:  dx = g − exp(y)·Σ_r g
// the same formulas as the CPU and the fallback kernel.
void CudaBackend::softmax_backward(const TensorRef& g, const TensorRef& y, const TensorRef& out,
                                   int64_t outer, int64_t r, int64_t inner, bool log) {
  if (outer * r * inner == 0) return;
  dispatch_floating(y.dtype, "softmax_backward", [&]<typename T>() {
    const int64_t per_call = cudnn_rows_per_call(r, inner);
    if (per_call == 0) {
      softmax_backward_kernel<T><<<blocks_for(outer * inner), kBlock, 0, compute_stream()>>>(
          static_cast<const T*>(g.data), static_cast<const T*>(y.data), static_cast<T*>(out.data),
          outer, r, inner, log);
      RG_CUDA_CHECK_LAUNCH();
      return;
    }
    for_cudnn_softmax_slices<T>(outer, r, inner, per_call, [&](auto desc, int64_t offset,
                                                               const T* one, const T* zero) {
      RG_CUDNN_CHECK(cudnnSoftmaxBackward(cudnn_handle(), softmax_algorithm(log),
                                          CUDNN_SOFTMAX_MODE_CHANNEL, one, desc,
                                          static_cast<const T*>(y.data) + offset, desc,
                                          static_cast<const T*>(g.data) + offset, zero, desc,
                                          static_cast<T*>(out.data) + offset));
    });
  });
}

}  // namespace ringgrad::cuda
