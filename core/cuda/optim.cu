// optim.cu — the fused Adam/AdamW step on the GPU (core/cpu/optim.cpp on the CPU).
//
// One thread per element runs math::adam_update (core/kernel_math.h), the same
// update the CPU loop runs, with the bias corrections computed once on the host.
#include <cmath>

#include "ringgrad/core/cuda/cuda_backend.h"

namespace ringgrad::cuda {
namespace {

template <typename T, bool Decoupled>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, int64_t n, T lr, T b1, T b2, T eps, T wd,
                            T step_size, T inv_bc2_sqrt) {
  RG_GRID_LOOP(i, n)
  math::adam_update(p[i], g[i], m[i], v[i], lr, b1, b2, eps, wd, step_size, inv_bc2_sqrt,
                    Decoupled);
}

}  // namespace

void CudaBackend::adam_step(const TensorRef& p, const TensorRef& g, const TensorRef& m,
                            const TensorRef& v, const AdamStep& h) {
  int64_t n = p.numel();
  if (n == 0) return;
  dispatch_floating(p.dtype, "adam_step", [&]<typename T>() {
    const double t = static_cast<double>(h.step);
    const T step_size = static_cast<T>(h.lr / (1.0 - std::pow(h.beta1, t)));
    const T inv_bc2_sqrt = static_cast<T>(1.0 / std::sqrt(1.0 - std::pow(h.beta2, t)));
    auto kernel = h.decoupled ? adam_kernel<T, true> : adam_kernel<T, false>;
    kernel<<<blocks_for(n), kBlock, 0, compute_stream()>>>(
        static_cast<T*>(p.data), static_cast<const T*>(g.data), static_cast<T*>(m.data),
        static_cast<T*>(v.data), n, T(h.lr), T(h.beta1), T(h.beta2), T(h.eps), T(h.weight_decay),
        step_size, inv_bc2_sqrt);
  });
  RG_CUDA_CHECK_LAUNCH();
}

}  // namespace ringgrad::cuda
