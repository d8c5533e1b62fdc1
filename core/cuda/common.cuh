// common.cuh — what every CUDA source of the backend shares (internal).
//
// Error checks that name the call and file:line, the device's compute stream
// and the cuBLAS and cuDNN handles bound to it, and StridedView: a TensorRef in
// the form a kernel takes by value, with the index arithmetic that turns an
// element number into a strided offset.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <climits>
#include <cstdint>
#include <mutex>
#include <string>

#include "ringgrad/core/backend.h"
#include "ringgrad/core/dispatch.h"
#include "ringgrad/core/kernel_math.h"

namespace ringgrad::cuda {

#define RG_CUDA_CHECK(call)                                                                \
  do {                                                                                     \
    cudaError_t err_ = (call);                                                             \
    if (err_ != cudaSuccess) {                                                             \
      cudaGetLastError(); /* clear it: a later launch check must not report it again */    \
      throw ::ringgrad::Error(::ringgrad::detail::concat(                                  \
          #call, " failed: ", cudaGetErrorString(err_), " at ", __FILE__, ":", __LINE__)); \
    }                                                                                      \
  } while (0)

#define RG_CUBLAS_CHECK(call)                                                                \
  do {                                                                                       \
    cublasStatus_t st_ = (call);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                        \
      throw ::ringgrad::Error(::ringgrad::detail::concat(                                    \
          #call, " failed: ", cublasGetStatusString(st_), " at ", __FILE__, ":", __LINE__)); \
  } while (0)

// cuDNN's status text, plus the detail cuDNN 9 keeps about the last failure
// (which argument it rejected), when it has any.
inline std::string cudnn_error_text(cudnnStatus_t status) {
  std::string text = cudnnGetErrorString(status);
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (detail[0]) text += std::string(" (") + detail + ")";
  return text;
}

#define RG_CUDNN_CHECK(call)                                                                      \
  do {                                                                                            \
    cudnnStatus_t st_ = (call);                                                                   \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                              \
      throw ::ringgrad::Error(                                                                    \
          ::ringgrad::detail::concat(#call, " failed: ", ::ringgrad::cuda::cudnn_error_text(st_), \
                                     " at ", __FILE__, ":", __LINE__));                           \
  } while (0)

// After a kernel launch: a bad configuration shows up here, not later.
#define RG_CUDA_CHECK_LAUNCH() RG_CUDA_CHECK(cudaGetLastError())

// The stream every op of this device runs on (one per device: ops are ordered
// without any synchronisation between them).
cudaStream_t compute_stream();
cublasHandle_t cublas_handle();
// One cuDNN handle per process, made on first use and bound to compute_stream().
// A handle must not be used by two threads at once: callers hold cudnn_mutex().
cudnnHandle_t cudnn_handle();
std::mutex& cudnn_mutex();

// A strided operand as a kernel sees it (passed by value).
struct StridedView {
  char* data;
  int ndim;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];  // in elements
  bool contiguous;  // offset(i) == i: kernels skip the index arithmetic

  // Offset (in elements) of element `linear` of the row-major iteration over shape.
  RG_HD int64_t offset(int64_t linear) const {
    if (contiguous) return linear;
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t i = linear % shape[d];
      linear /= shape[d];
      off += i * strides[d];
    }
    return off;
  }
  template <typename T>
  RG_HD T& at(int64_t linear) const {
    return reinterpret_cast<T*>(data)[offset(linear)];
  }
};

inline StridedView view(const TensorRef& r) {
  StridedView v{};
  v.data = static_cast<char*>(r.data);
  v.ndim = r.ndim;
  for (int i = 0; i < r.ndim; ++i) v.shape[i] = r.shape[i], v.strides[i] = r.strides[i];
  int64_t expected = 1;
  v.contiguous = true;
  for (int i = r.ndim - 1; i >= 0; --i) {
    if (r.shape[i] != 1 && r.strides[i] != expected) v.contiguous = false;
    expected *= r.shape[i];
  }
  return v;
}

// Threads per block and blocks for n elements with a grid-stride loop.
inline constexpr int kBlock = 256;
inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

// Index of this thread in a 1-D grid, and the grid's stride.
#define RG_GRID_LOOP(i, n)                                                  \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

}  // namespace ringgrad::cuda
