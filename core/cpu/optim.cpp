// optim.cpp — the CPU's fused optimizer update: one pass over p, g, m, v.
#include <cmath>

#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/cpu/loops.h"
#include "ringgrad/core/kernel_math.h"

namespace ringgrad::cpu {
namespace {

// Elements [lo, hi) of one Adam step. Four distinct buffers: __restrict on the
// parameters (not on lambda captures, which the compiler cannot see through)
// and the compile-time Decoupled let the loop vectorise.
template <typename T, bool Decoupled>
void adam_range(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                int64_t lo, int64_t hi, T lr, T b1, T b2, T eps, T wd, T step_size,
                T inv_bc2_sqrt) {
  for (int64_t i = lo; i < hi; ++i)
    math::adam_update(p[i], g[i], m[i], v[i], lr, b1, b2, eps, wd, step_size, inv_bc2_sqrt,
                      Decoupled);
}

}  // namespace

void CpuBackend::adam_step(const TensorRef& p, const TensorRef& g, const TensorRef& m,
                           const TensorRef& v, const AdamStep& h) {
  dispatch_floating(p.dtype, "adam_step", [&]<typename T>() {
    const double t = static_cast<double>(h.step);
    const T step_size = static_cast<T>(h.lr / (1.0 - std::pow(h.beta1, t)));
    const T inv_bc2_sqrt = static_cast<T>(1.0 / std::sqrt(1.0 - std::pow(h.beta2, t)));
    auto range = h.decoupled ? adam_range<T, true> : adam_range<T, false>;
    int64_t n = p.numel();
    parallel_for(n, n * 8, [&](int64_t lo, int64_t hi) {
      range(static_cast<T*>(p.data), static_cast<const T*>(g.data), static_cast<T*>(m.data),
            static_cast<T*>(v.data), lo, hi, T(h.lr), T(h.beta1), T(h.beta2), T(h.eps),
            T(h.weight_decay), step_size, inv_bc2_sqrt);
    });
  });
}

}  // namespace ringgrad::cpu
