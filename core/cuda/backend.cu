// backend.cu — the CUDA backend: devices, memory and copies.
//
// This is the start of the CUDA backend: device discovery, device memory and
// host<->device copies are real, so tensors can live on a GPU and move there
// and back. The compute kernels (elementwise, reductions, cuBLAS GEMM, …) come
// with the CUDA-core issue; until then each one throws "[op] not implemented
// on CUDA yet" rather than computing anything wrong.
#include <cuda_runtime.h>

#include "ringgrad/core/backend.h"

namespace ringgrad {
namespace {

#define RG_CUDA_CHECK(call)                                                                      \
  do {                                                                                           \
    cudaError_t err_ = (call);                                                                   \
    if (err_ != cudaSuccess)                                                                     \
      throw Error(detail::concat(#call, " failed: ", cudaGetErrorString(err_), " at ", __FILE__, \
                                 ":", __LINE__));                                                \
  } while (0)

[[noreturn]] void not_yet(const char* op) {
  fail(op, "not implemented on CUDA yet: keep this tensor on the CPU for now");
}

class CudaBackend final : public Backend {
 public:
  void* allocate(size_t nbytes) override {
    void* p = nullptr;
    RG_CUDA_CHECK(cudaMalloc(&p, nbytes == 0 ? 1 : nbytes));
    return p;
  }
  void deallocate(void* ptr, size_t) override { cudaFree(ptr); }  // never throws from a destructor
  void copy_to_host(void* host_dst, const void* src, size_t nbytes) override {
    RG_CUDA_CHECK(cudaMemcpy(host_dst, src, nbytes, cudaMemcpyDeviceToHost));
  }
  void copy_from_host(void* dst, const void* host_src, size_t nbytes) override {
    RG_CUDA_CHECK(cudaMemcpy(dst, host_src, nbytes, cudaMemcpyHostToDevice));
  }

  void fill(const TensorRef&, double) override { not_yet("fill"); }
  void copy(const TensorRef&, const TensorRef&) override { not_yet("copy"); }
  void unary(UnaryOp, const TensorRef&, const TensorRef&, double, double) override {
    not_yet("unary");
  }
  void binary(BinaryOp, const TensorRef&, const TensorRef&, const TensorRef&) override {
    not_yet("binary");
  }
  void where(const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&) override {
    not_yet("where");
  }
  void arange(const TensorRef&, double, double) override { not_yet("arange"); }
  void random(const TensorRef&, RandomDist, uint64_t, uint64_t, double, double) override {
    not_yet("random");
  }
  void reduce(ReduceOp, const TensorRef&, const TensorRef&, int64_t, int64_t, int64_t) override {
    not_yet("reduce");
  }
  void softmax(const TensorRef&, const TensorRef&, int64_t, int64_t, int64_t, bool) override {
    not_yet("softmax");
  }
  void softmax_backward(const TensorRef&, const TensorRef&, const TensorRef&, int64_t, int64_t,
                        int64_t, bool) override {
    not_yet("softmax_backward");
  }
  void gemm(const GemmArgs&) override { not_yet("matmul"); }
  void adam_step(const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&,
                 const AdamStep&) override {
    not_yet("adam_step");
  }
  void cross_entropy(const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&,
                     int64_t, int64_t, double, int64_t) override {
    not_yet("cross_entropy");
  }
  void cross_entropy_backward(const TensorRef&, const TensorRef&, const TensorRef&,
                              const TensorRef&, const TensorRef&, int64_t, int64_t, double,
                              int64_t) override {
    not_yet("cross_entropy_backward");
  }
  void index_select(const TensorRef&, const TensorRef&, const TensorRef&, int64_t, int64_t, int64_t,
                    int64_t) override {
    not_yet("index_select");
  }
  void index_add(const TensorRef&, const TensorRef&, const TensorRef&, int64_t, int64_t, int64_t,
                 int64_t) override {
    not_yet("index_add");
  }
  void gather(const TensorRef&, const TensorRef&, const TensorRef&, int64_t, int64_t, int64_t,
              int64_t) override {
    not_yet("gather");
  }
  void scatter_add(const TensorRef&, const TensorRef&, const TensorRef&, int64_t, int64_t, int64_t,
                   int64_t) override {
    not_yet("scatter_add");
  }
};

}  // namespace

bool cuda::is_built() { return true; }

// Any error (no driver, driver too old, no device) means no usable GPU.
int cuda::device_count() {
  static const int count = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  }();
  return count;
}

Backend& cuda::backend(const char* op) {
  RG_CHECK(device_count() > 0, op, "expected a CUDA device, got none (",
           "this build has CUDA, but the driver reports no usable GPU)");
  static CudaBackend instance;
  return instance;
}

}  // namespace ringgrad
