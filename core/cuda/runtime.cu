// runtime.cu — CUDA devices, the compute stream, and the cuBLAS and cuDNN handles.
//
// Every op runs on one compute stream (made on first use, on the device current
// then); memory and copies are in allocator.cu.
#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "ringgrad/core/cuda/cuda_backend.h"
#include "ringgrad/core/cuda/device_errors.cuh"

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

// The host's view of the device error slot (null until a kernel needed it).
std::atomic<DeviceError*>& host_error_slot() {
  static std::atomic<DeviceError*> slot{nullptr};
  return slot;
}

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
  if (device_count() == 0) return;
  RG_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
  raise_device_error();
}

DeviceError* device_error_slot() {
  static DeviceError* slot = [] {
    void* host = nullptr;
    RG_CUDA_CHECK(cudaHostAlloc(&host, sizeof(DeviceError), cudaHostAllocMapped));
    std::memset(host, 0, sizeof(DeviceError));
    void* device = nullptr;
    RG_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
    host_error_slot().store(static_cast<DeviceError*>(host));
    return static_cast<DeviceError*>(device);
  }();
  return slot;
}

void raise_device_error() {
  DeviceError* e = host_error_slot().load();
  if (!e) return;  // no kernel that checks indices has run yet
  volatile DeviceError* v = e;
  if (v->state != 2) return;  // nothing recorded (or, from a kernel still running, not yet)
  // Called after a synchronisation: the kernel that set the flag has finished.
  static const char* const names[] = {"?",      "index_select", "index_add",
                                      "gather", "scatter_add",  "cross_entropy"};
  const int op = v->op >= 1 && v->op <= 5 ? v->op : 0;
  const long long value = v->value, lo = v->lo, hi = v->hi;
  v->state = 0;  // reported once
  const char* where = " (found on the GPU by an earlier kernel; reported at the next synchronisation)";
  if (op == static_cast<int>(IndexOp::CrossEntropy))  // the CPU backend's wording
    fail(names[op], "expected class indices in [", lo, ", ", hi, "), got ", value, where);
  fail(names[op], "expected indices in [", lo, ", ", hi, ") for a dim of size ", hi, ", got ", value,
       where);
}

}  // namespace cuda

Backend& cuda::backend(const char* op) {
  RG_CHECK(device_count() > 0, op, "expected a CUDA device, got none (",
           "this build has CUDA, but the driver reports no usable GPU)");
  static CudaBackend instance;
  return instance;
}

}  // namespace ringgrad
