// norm.cpp — CPU layer norm, forward and backward, one row per sample.
//
// Rows are independent, so both passes split rows over threads. The weight and
// bias gradients are sums over rows: each thread sums its own rows into a
// private buffer and the buffers are added at the end (no atomics, and the same
// result for the same thread count).
#include <vector>

#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/cpu/loops.h"
#include "ringgrad/core/row_math.h"

namespace ringgrad::cpu {

void CpuBackend::layer_norm(const TensorRef& x, const TensorRef& weight, const TensorRef& bias,
                            const TensorRef& y, const TensorRef& mean, const TensorRef& rstd,
                            int64_t n, int64_t d, double eps) {
  dispatch_floating(x.dtype, "layer_norm", [&]<typename T>() {
    const T* x0 = static_cast<const T*>(x.data);
    const T* w = static_cast<const T*>(weight.data);
    const T* b = static_cast<const T*>(bias.data);
    T* y0 = static_cast<T*>(y.data);
    T* mu = static_cast<T*>(mean.data);
    T* rs = static_cast<T*>(rstd.data);
    parallel_for(n, n * d * 4, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        math::layer_norm_row(x0 + i * d, d, T(eps), w, b, y0 + i * d, mu + i, rs + i);
    });
  });
}

void CpuBackend::layer_norm_backward(const TensorRef& dy, const TensorRef& x,
                                     const TensorRef& mean, const TensorRef& rstd,
                                     const TensorRef& weight, const TensorRef& dx,
                                     const TensorRef& dweight, const TensorRef& dbias, int64_t n,
                                     int64_t d) {
  dispatch_floating(x.dtype, "layer_norm_backward", [&]<typename T>() {
    const T* g0 = static_cast<const T*>(dy.data);
    const T* x0 = static_cast<const T*>(x.data);
    const T* mu = static_cast<const T*>(mean.data);
    const T* rs = static_cast<const T*>(rstd.data);
    const T* w = static_cast<const T*>(weight.data);
    T* dx0 = static_cast<T*>(dx.data);
    T* dw = static_cast<T*>(dweight.data);
    T* db = static_cast<T*>(dbias.data);
    const bool params = dw || db;
    // One partial (dw, db) pair per chunk; chunk c covers rows [n·c/C, n·(c+1)/C).
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(n, 4 * get_num_threads()));
    std::vector<T> partial(params ? size_t(chunks * 2 * d) : 0, T(0));
    auto run_chunk = [&](int64_t c) {
      T* pw = params ? partial.data() + c * 2 * d : nullptr;
      for (int64_t i = n * c / chunks; i < n * (c + 1) / chunks; ++i) {
        const T *gi = g0 + i * d, *xi = x0 + i * d;
        math::layer_norm_backward_row(gi, xi, d, mu[i], rs[i], w, dx0 + i * d);
        if (pw)
          for (int64_t j = 0; j < d; ++j) {
            pw[j] += gi[j] * (xi[j] - mu[i]) * rs[i];
            pw[d + j] += gi[j];
          }
      }
    };
    if (get_num_threads() > 1 && n * d * 8 >= kParallelGrain && !in_parallel_region())
      parallel_chunks(chunks, get_num_threads(), run_chunk);
    else
      for (int64_t c = 0; c < chunks; ++c) run_chunk(c);
    for (int64_t j = 0; j < d && params; ++j) {
      T sw = 0, sb = 0;
      for (int64_t c = 0; c < chunks; ++c) sw += partial[c * 2 * d + j], sb += partial[c * 2 * d + d + j];
      if (dw) dw[j] = sw;
      if (db) db[j] = sb;
    }
  });
}

}  // namespace ringgrad::cpu
