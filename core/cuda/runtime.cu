// runtime.cu — CUDA devices, the compute stream, and the cuBLAS and cuDNN handles.
//
// Every op runs on one compute stream (made on first use, on the device current
// then); memory and copies are in allocator.cu.
#include <mutex>
#include <vector>

#include "ringgrad/core/cuda/cuda_backend.h"

namespace ringgrad {

bool cuda::is_built() { return true; }

// Any error (no driver, driver too old, no device) means no usable GPU.
int cuda::device_count() {
  static const int count = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  }();
  return count;
}

namespace cuda {
namespace {

bool allow_tf32 = false;

}  // namespace

cudaStream_t compute_stream() {
  static cudaStream_t stream = [] {
    cudaStream_t s;
    RG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

cublasHandle_t cublas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h;
    RG_CUBLAS_CHECK(cublasCreate(&h));
    RG_CUBLAS_CHECK(cublasSetStream(h, compute_stream()));
    return h;
  }();
  return handle;
}

// Made on first use (cudnnCreate loads cuDNN's kernels: a fraction of a second),
// so programs that never call a cuDNN op never pay for it.
cudnnHandle_t cudnn_handle() {
  static cudnnHandle_t handle = [] {
    cudnnHandle_t h;
    RG_CUDNN_CHECK(cudnnCreate(&h));
    RG_CUDNN_CHECK(cudnnSetStream(h, compute_stream()));
    return h;
  }();
  return handle;
}

std::mutex& cudnn_mutex() {
  static std::mutex m;
  return m;
}

// Before compute_stream() first runs (see cuda::set_device in core/device.h): the stream and
// the memory belong to whichever device is current then.
void set_device(int index) { RG_CUDA_CHECK(cudaSetDevice(index)); }

// Asked once: the reductions size their grids by it (block_reduce.cuh).
int64_t multiprocessor_count() {
  static const int64_t count = [] {
    int device = 0, n = 0;
    RG_CUDA_CHECK(cudaGetDevice(&device));
    RG_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return static_cast<int64_t>(n > 0 ? n : 1);
  }();
  return count;
}

bool tf32_allowed() { return allow_tf32; }
void set_allow_tf32(bool allow) { allow_tf32 = allow; }  // read by gemm.cu

void synchronize() {
  if (device_count() > 0) RG_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
}

void check_indices_on_host(const TensorRef& index, int64_t count, int64_t limit, const char* op,
                           bool allow_negative, int64_t ignore_value) {
  std::vector<int64_t> host(static_cast<size_t>(count));
  if (count > 0) CudaBackend().copy_to_host(host.data(), index.data, host.size() * sizeof(int64_t));
  for (int64_t v : host) {
    if (v == ignore_value) continue;
    int64_t lo = allow_negative ? -limit : 0;
    if (v < lo || v >= limit) fail(op, "expected indices in [", lo, ", ", limit, "), got ", v);
  }
}

}  // namespace cuda

Backend& cuda::backend(const char* op) {
  RG_CHECK(device_count() > 0, op, "expected a CUDA device, got none (",
           "this build has CUDA, but the driver reports no usable GPU)");
  static CudaBackend instance;
  return instance;
}

}  // namespace ringgrad
