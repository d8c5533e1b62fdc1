// norm.cu — CUDA layer norm, forward and backward (math: row_math.h).
//
// Thin kernels, like the rest of this backend: one thread per row for the
// forward and for dx, one thread per feature (column) for the weight and bias
// gradients, which loops over the rows — neighbouring threads read neighbouring
// columns, so those loads coalesce.
#include "ringgrad/core/cuda/cuda_backend.h"
#include "ringgrad/core/row_math.h"

namespace ringgrad::cuda {
namespace {

template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd,
                                  int64_t n, int64_t d, T eps) {
  RG_GRID_LOOP(i, n) {
    math::layer_norm_row(x + i * d, d, eps, w, b, y + i * d, mean + i, rstd + i);
  }
}

template <typename T>
__global__ void layer_norm_dx_kernel(const T* dy, const T* x, const T* mean, const T* rstd,
                                     const T* w, T* dx, int64_t n, int64_t d) {
  RG_GRID_LOOP(i, n) {
    math::layer_norm_backward_row(dy + i * d, x + i * d, d, mean[i], rstd[i], w, dx + i * d);
  }
}

// dw[j] = Σ_i dy[i,j]·x̂[i,j],  db[j] = Σ_i dy[i,j]
template <typename T>
__global__ void layer_norm_params_kernel(const T* dy, const T* x, const T* mean, const T* rstd,
                                         T* dw, T* db, int64_t n, int64_t d) {
  RG_GRID_LOOP(j, d) {
    T sw = 0, sb = 0;
    for (int64_t i = 0; i < n; ++i) {
      T g = dy[i * d + j];
      sw += g * (x[i * d + j] - mean[i]) * rstd[i];
      sb += g;
    }
    if (dw) dw[j] = sw;
    if (db) db[j] = sb;
  }
}

}  // namespace

void CudaBackend::layer_norm(const TensorRef& x, const TensorRef& weight, const TensorRef& bias,
                             const TensorRef& y, const TensorRef& mean, const TensorRef& rstd,
                             int64_t n, int64_t d, double eps) {
  dispatch_floating(x.dtype, "layer_norm", [&]<typename T>() {
    layer_norm_kernel<T><<<blocks_for(n), kBlock, 0, compute_stream()>>>(
        static_cast<const T*>(x.data), static_cast<const T*>(weight.data),
        static_cast<const T*>(bias.data), static_cast<T*>(y.data), static_cast<T*>(mean.data),
        static_cast<T*>(rstd.data), n, d, T(eps));
    RG_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::layer_norm_backward(const TensorRef& dy, const TensorRef& x,
                                      const TensorRef& mean, const TensorRef& rstd,
                                      const TensorRef& weight, const TensorRef& dx,
                                      const TensorRef& dweight, const TensorRef& dbias, int64_t n,
                                      int64_t d) {
  dispatch_floating(x.dtype, "layer_norm_backward", [&]<typename T>() {
    auto c = [](const TensorRef& r) { return static_cast<const T*>(r.data); };
    layer_norm_dx_kernel<T><<<blocks_for(n), kBlock, 0, compute_stream()>>>(
        c(dy), c(x), c(mean), c(rstd), c(weight), static_cast<T*>(dx.data), n, d);
    RG_CUDA_CHECK_LAUNCH();
    if (dweight.data || dbias.data) {
      layer_norm_params_kernel<T><<<blocks_for(d), kBlock, 0, compute_stream()>>>(
          c(dy), c(x), c(mean), c(rstd), static_cast<T*>(dweight.data),
          static_cast<T*>(dbias.data), n, d);
      RG_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace ringgrad::cuda
