// index.cu — CUDA index_select / index_add / gather / scatter_add.
//
// Each kernel checks the indices it reads: one outside [-d, d) is skipped (no
// read or write out of bounds) and reported by the host at its next
// synchronisation (device_errors.cuh) — no stream drain per op. The adding
// kernels use atomicAdd: two source rows may land on one target row.
#include "ringgrad/core/cuda/cuda_backend.h"
#include "ringgrad/core/cuda/device_errors.cuh"

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
                                    int64_t d, int64_t n, int64_t inner, DeviceError* err) {
  RG_GRID_LOOP(t, outer * n * inner) {
    int64_t j = t % inner, i = (t / inner) % n, o = t / (inner * n);
    const int64_t k = index[i];
    out[t] = index_ok(err, IndexOp::IndexSelect, k, -d, d) ? in[(o * d + wrap(k, d)) * inner + j]
                                                           : T(0);
  }
}

// out[o, index[i], j] += src[o, i, j]
template <typename T>
__global__ void index_add_kernel(T* out, const int64_t* index, const T* src, int64_t outer,
                                 int64_t d, int64_t n, int64_t inner, DeviceError* err) {
  RG_GRID_LOOP(t, outer * n * inner) {
    int64_t j = t % inner, i = (t / inner) % n, o = t / (inner * n);
    const int64_t k = index[i];
    if (index_ok(err, IndexOp::IndexAdd, k, -d, d))
      atomic_add(&out[(o * d + wrap(k, d)) * inner + j], src[t]);
  }
}

// out[o, i, j] = in[o, index[o, i, j], j]
template <typename T>
__global__ void gather_kernel(const T* in, const int64_t* index, T* out, int64_t outer, int64_t d,
                              int64_t n, int64_t inner, DeviceError* err) {
  RG_GRID_LOOP(t, outer * n * inner) {
    int64_t j = t % inner, o = t / (inner * n);
    const int64_t k = index[t];
    out[t] = index_ok(err, IndexOp::Gather, k, -d, d) ? in[(o * d + wrap(k, d)) * inner + j] : T(0);
  }
}

// out[o, index[o, i, j], j] += src[o, i, j]
template <typename T>
__global__ void scatter_add_kernel(T* out, const int64_t* index, const T* src, int64_t outer,
                                   int64_t d, int64_t n, int64_t inner, DeviceError* err) {
  RG_GRID_LOOP(t, outer * n * inner) {
    int64_t j = t % inner, o = t / (inner * n);
    const int64_t k = index[t];
    if (index_ok(err, IndexOp::ScatterAdd, k, -d, d))
      atomic_add(&out[(o * d + wrap(k, d)) * inner + j], src[t]);
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
  DeviceError* err = device_error_slot();  // before the launch: its first call allocates
  int64_t total = outer * n * inner;
  if (total == 0) return;
  dispatch_storage(in.dtype, [&]<typename T>() {
    index_select_kernel<T><<<blocks_for(total), kBlock, 0, compute_stream()>>>(
        static_cast<const T*>(in.data), static_cast<const int64_t*>(index.data),
        static_cast<T*>(out.data), outer, d, n, inner, err);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void CudaBackend::index_add(const TensorRef& out, const TensorRef& index, const TensorRef& src,
                            int64_t outer, int64_t d, int64_t n, int64_t inner) {
  DeviceError* err = device_error_slot();  // before the launch: its first call allocates
  int64_t total = outer * n * inner;
  if (total == 0) return;
  launch_numeric(out.dtype, "index_add", [&]<typename T>() {
    index_add_kernel<T><<<blocks_for(total), kBlock, 0, compute_stream()>>>(
        static_cast<T*>(out.data), static_cast<const int64_t*>(index.data),
        static_cast<const T*>(src.data), outer, d, n, inner, err);
  });
}

void CudaBackend::gather(const TensorRef& in, const TensorRef& index, const TensorRef& out,
                         int64_t outer, int64_t d, int64_t n, int64_t inner) {
  DeviceError* err = device_error_slot();  // before the launch: its first call allocates
  int64_t total = outer * n * inner;
  if (total == 0) return;
  dispatch_storage(in.dtype, [&]<typename T>() {
    gather_kernel<T><<<blocks_for(total), kBlock, 0, compute_stream()>>>(
        static_cast<const T*>(in.data), static_cast<const int64_t*>(index.data),
        static_cast<T*>(out.data), outer, d, n, inner, err);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void CudaBackend::scatter_add(const TensorRef& out, const TensorRef& index, const TensorRef& src,
                              int64_t outer, int64_t d, int64_t n, int64_t inner) {
  DeviceError* err = device_error_slot();  // before the launch: its first call allocates
  int64_t total = outer * n * inner;
  if (total == 0) return;
  launch_numeric(out.dtype, "scatter_add", [&]<typename T>() {
    scatter_add_kernel<T><<<blocks_for(total), kBlock, 0, compute_stream()>>>(
        static_cast<T*>(out.data), static_cast<const int64_t*>(index.data),
        static_cast<const T*>(src.data), outer, d, n, inner, err);
  });
}

}  // namespace ringgrad::cuda
