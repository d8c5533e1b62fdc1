// index.cu — CUDA index_select / index_add / gather / scatter_add.
//
// Indices are checked on the host first (a kernel cannot throw). The adding
// kernels use atomicAdd: two source rows may land on one target row.
#include "ringgrad/core/cuda/cuda_backend.h"

namespace ringgrad::cuda {
namespace {

__device__ inline int64_t wrap(int64_t i, int64_t d) { return i < 0 ? i + d : i; }

template <typename T>
__device__ inline void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>)
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  else
    atomicAdd(p, v);
}

// out[o, i, j] = in[o, index[i], j]
template <typename T>
__global__ void index_select_kernel(const T* in, const int64_t* index, T* out, int64_t outer,
                                    int64_t d, int64_t n, int64_t inner) {
  RG_GRID_LOOP(t, outer * n * inner) {
    int64_t j = t % inner, i = (t / inner) % n, o = t / (inner * n);
    out[t] = in[(o * d + wrap(index[i], d)) * inner + j];
  }
}

// out[o, index[i], j] += src[o, i, j]
template <typename T>
__global__ void index_add_kernel(T* out, const int64_t* index, const T* src, int64_t outer,
                                 int64_t d, int64_t n, int64_t inner) {
  RG_GRID_LOOP(t, outer * n * inner) {
    int64_t j = t % inner, i = (t / inner) % n, o = t / (inner * n);
    atomic_add(&out[(o * d + wrap(index[i], d)) * inner + j], src[t]);
  }
}

// out[o, i, j] = in[o, index[o, i, j], j]
template <typename T>
__global__ void gather_kernel(const T* in, const int64_t* index, T* out, int64_t outer, int64_t d,
                              int64_t n, int64_t inner) {
  RG_GRID_LOOP(t, outer * n * inner) {
    int64_t j = t % inner, o = t / (inner * n);
    out[t] = in[(o * d + wrap(index[t], d)) * inner + j];
  }
}

// out[o, index[o, i, j], j] += src[o, i, j]
template <typename T>
__global__ void scatter_add_kernel(T* out, const int64_t* index, const T* src, int64_t outer,
                                   int64_t d, int64_t n, int64_t inner) {
  RG_GRID_LOOP(t, outer * n * inner) {
    int64_t j = t % inner, o = t / (inner * n);
    atomic_add(&out[(o * d + wrap(index[t], d)) * inner + j], src[t]);
  }
}

// Launch kern<T> for a floating or integer dtype over `count` threads.
template <typename Launch>
void launch_numeric(DType t, const char* op, Launch&& launch) {
  dispatch_numeric(t, op, launch);
  RG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void CudaBackend::index_select(const TensorRef& in, const TensorRef& index, const TensorRef& out,
                               int64_t outer, int64_t d, int64_t n, int64_t inner) {
  check_indices_on_host(index, n, d, "index_select");
  int64_t total = outer * n * inner;
  if (total == 0) return;
  dispatch_all(in.dtype, [&]<typename T>() {
    index_select_kernel<T><<<blocks_for(total), kBlock, 0, compute_stream()>>>(
        static_cast<const T*>(in.data), static_cast<const int64_t*>(index.data),
        static_cast<T*>(out.data), outer, d, n, inner);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void CudaBackend::index_add(const TensorRef& out, const TensorRef& index, const TensorRef& src,
                            int64_t outer, int64_t d, int64_t n, int64_t inner) {
  check_indices_on_host(index, n, d, "index_add");
  int64_t total = outer * n * inner;
  if (total == 0) return;
  launch_numeric(out.dtype, "index_add", [&]<typename T>() {
    index_add_kernel<T><<<blocks_for(total), kBlock, 0, compute_stream()>>>(
        static_cast<T*>(out.data), static_cast<const int64_t*>(index.data),
        static_cast<const T*>(src.data), outer, d, n, inner);
  });
}

void CudaBackend::gather(const TensorRef& in, const TensorRef& index, const TensorRef& out,
                         int64_t outer, int64_t d, int64_t n, int64_t inner) {
  int64_t total = outer * n * inner;
  check_indices_on_host(index, total, d, "gather");
  if (total == 0) return;
  dispatch_all(in.dtype, [&]<typename T>() {
    gather_kernel<T><<<blocks_for(total), kBlock, 0, compute_stream()>>>(
        static_cast<const T*>(in.data), static_cast<const int64_t*>(index.data),
        static_cast<T*>(out.data), outer, d, n, inner);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void CudaBackend::scatter_add(const TensorRef& out, const TensorRef& index, const TensorRef& src,
                              int64_t outer, int64_t d, int64_t n, int64_t inner) {
  int64_t total = outer * n * inner;
  check_indices_on_host(index, total, d, "scatter_add");
  if (total == 0) return;
  launch_numeric(out.dtype, "scatter_add", [&]<typename T>() {
    scatter_add_kernel<T><<<blocks_for(total), kBlock, 0, compute_stream()>>>(
        static_cast<T*>(out.data), static_cast<const int64_t*>(index.data),
        static_cast<const T*>(src.data), outer, d, n, inner);
  });
}

}  // namespace ringgrad::cuda
