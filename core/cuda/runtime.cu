// runtime.cu — CUDA devices, the compute stream, cuBLAS, memory and copies.
//
// Memory: a caching allocator. cudaMalloc and cudaFree synchronise the device
// and cost tens of microseconds; training frees and allocates the same sizes
// every step. Freed blocks go on a free list by rounded size and are handed
// out again. All ops run on one stream, so a block freed by one op and reused
// by the next is used in stream order: no event is needed between them.
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ringgrad/core/cuda/cuda_backend.h"
#include "ringgrad/core/cuda/current_device.h"

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

class CachingAllocator {
 public:
  // 512-byte granules below 1 MiB, 2 MiB above: few distinct sizes, little waste.
  static size_t rounded(size_t n) {
    size_t unit = n < (size_t(1) << 20) ? 512 : (size_t(2) << 20);
    return (std::max<size_t>(n, 1) + unit - 1) / unit * unit;
  }
  void* allocate(size_t nbytes) {
    size_t size = rounded(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& list = free_[size];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {  // give the cache back and try once more
      cudaGetLastError();
      release();
      err = cudaMalloc(&p, size);
    }
    RG_CUDA_CHECK(err);
    return p;
  }
  void deallocate(void* p, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[rounded(nbytes)].push_back(p);
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    cudaStreamSynchronize(compute_stream());  // blocks may still be in use by queued kernels
    for (auto& [size, list] : free_)
      for (void* p : list) cudaFree(p);
    free_.clear();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
};

CachingAllocator& allocator() {
  static auto* instance = new CachingAllocator;  // outlives every static Tensor
  return *instance;
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

// Before compute_stream() first runs (see current_device.h): the stream and
// the memory belong to whichever device is current then.
void set_device(int index) { RG_CUDA_CHECK(cudaSetDevice(index)); }

bool tf32_allowed() { return allow_tf32; }
void set_allow_tf32(bool allow) { allow_tf32 = allow; }  // read by gemm.cu

void synchronize() {
  if (device_count() > 0) RG_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
}

void release_cached_memory() {
  if (device_count() > 0) allocator().release();
}

void* CudaBackend::allocate(size_t nbytes) { return allocator().allocate(nbytes); }
void CudaBackend::deallocate(void* ptr, size_t nbytes) { allocator().deallocate(ptr, nbytes); }

// Host copies wait for the stream: the host reads (or may overwrite) the bytes next.
void CudaBackend::copy_to_host(void* host_dst, const void* src, size_t nbytes) {
  RG_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, compute_stream()));
  RG_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
}

void CudaBackend::copy_from_host(void* dst, const void* host_src, size_t nbytes) {
  RG_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, compute_stream()));
  RG_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
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
