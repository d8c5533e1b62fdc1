// loss.cpp — CPU softmax cross-entropy, forward and backward, one row per sample.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/cpu/loops.h"
#include "ringgrad/core/kernel_math.h"

namespace ringgrad::cpu {
namespace {

int64_t checked_target(int64_t t, int64_t c, int64_t ignore_index) {
  if (t != ignore_index && (t < 0 || t >= c))
    fail("cross_entropy", "expected class indices in [0, ", c, ") or ignore_index ", ignore_index,
         ", got ", t);
  return t;
}

}  // namespace

void CpuBackend::cross_entropy(const TensorRef& logits, const TensorRef& target,
                               const TensorRef& loss, const TensorRef& lse, int64_t n, int64_t c,
                               double smoothing, int64_t ignore_index) {
  const int64_t* t = static_cast<const int64_t*>(target.data);
  for (int64_t i = 0; i < n; ++i) checked_target(t[i], c, ignore_index);
  dispatch_floating(logits.dtype, "cross_entropy", [&]<typename T>() {
    const T* x0 = static_cast<const T*>(logits.data);
    T* l = static_cast<T*>(loss.data);
    T* s = static_cast<T*>(lse.data);
    parallel_for(n, n * c * 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T* x = x0 + i * c;
        // (vectorised: exp_vec, and sums the compiler may reorder across lanes)
        T m = -std::numeric_limits<T>::infinity();
        RG_SIMD_REDUCE(max : m)
        for (int64_t j = 0; j < c; ++j) m = std::max(m, x[j]);
        T sum = 0, total = 0;
        RG_SIMD_REDUCE(+ : sum)
        for (int64_t j = 0; j < c; ++j) sum += math::exp_vec(x[j] - m);
        RG_SIMD_REDUCE(+ : total)
        for (int64_t j = 0; j < c; ++j) total += x[j];
        s[i] = m + std::log(sum);
        if (t[i] == ignore_index) {
          l[i] = 0;
          continue;
        }
        T eps = static_cast<T>(smoothing);
        l[i] = s[i] - (T(1) - eps) * x[t[i]] - eps * total / static_cast<T>(c);
      }
    });
  });
}

void CpuBackend::cross_entropy_backward(const TensorRef& grad_loss, const TensorRef& logits,
                                        const TensorRef& target, const TensorRef& lse,
                                        const TensorRef& grad_logits, int64_t n, int64_t c,
                                        double smoothing, int64_t ignore_index) {
  const int64_t* t = static_cast<const int64_t*>(target.data);
  dispatch_floating(logits.dtype, "cross_entropy_backward", [&]<typename T>() {
    const T* x0 = static_cast<const T*>(logits.data);
    const T* g = static_cast<const T*>(grad_loss.data);
    const T* s = static_cast<const T*>(lse.data);
    T* d0 = static_cast<T*>(grad_logits.data);
    const T eps = static_cast<T>(smoothing), uniform = eps / static_cast<T>(c);
    parallel_for(n, n * c * 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T* x = x0 + i * c;
        T* d = d0 + i * c;
        if (t[i] == ignore_index) {
          for (int64_t j = 0; j < c; ++j) d[j] = 0;
          continue;
        }
        const T gi = g[i], si = s[i];
        RG_SIMD
        for (int64_t j = 0; j < c; ++j) d[j] = gi * (math::exp_vec(x[j] - si) - uniform);
        d[t[i]] -= g[i] * (T(1) - eps);
      }
    });
  });
}

}  // namespace ringgrad::cpu
