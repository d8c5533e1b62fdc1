// reduce.cpp — CPU reductions and softmax over the middle axis of [outer, r, inner].
//
// The op layer reshapes every reduction to this form (permuting first when the
// reduced dims are not adjacent), so two loop shapes cover everything:
//   inner == 1: each output reduces one contiguous run of r elements;
//   inner  > 1: each output row accumulates r rows of `inner` elements (vectorised over inner).
// Float sums accumulate in double: a mean over a million float32 values stays exact to ~1e-7.
#include <cmath>
#include <limits>
#include <vector>

#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/cpu/loops.h"
#include "ringgrad/core/kernel_math.h"
#include "ringgrad/core/reduce_math.h"

namespace ringgrad::cpu {
namespace {

template <typename T>
using acc_t = std::conditional_t<std::is_floating_point_v<T>, double, T>;

// Sum, max or min of [outer, r, inner] into out[outer, inner] (Out may be wider than T).
template <typename T, typename Out, typename Init, typename Combine>
void reduce_values(const T* in, Out* out, int64_t outer, int64_t r, int64_t inner, Init init,
                   Combine combine) {
  using A = decltype(init());
  if (inner == 1) {
    // A contiguous row: 8 interleaved partial results (one vector of doubles).
    parallel_for(outer, outer * r, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* x = in + o * r;
        out[o] = static_cast<Out>(
            math::fold_interleaved<8>(r, init(), [&](int64_t k) { return A(x[k]); }, combine));
      }
    });
    return;
  }
  // Columns in blocks of 128, so that one matrix summed over its rows (a bias gradient:
  // outer 1) still splits over the threads.
  constexpr int64_t kBlock = 128;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  parallel_for(outer * blocks, outer * r * inner, [&](int64_t b, int64_t e) {
    A acc[kBlock];
    for (int64_t ob = b; ob < e; ++ob) {
      const int64_t o = ob / blocks, j0 = ob % blocks * kBlock;
      const int64_t n = std::min(kBlock, inner - j0);
      std::fill(acc, acc + n, init());
      for (int64_t k = 0; k < r; ++k) {
        const T* x = in + (o * r + k) * inner + j0;
        for (int64_t j = 0; j < n; ++j) acc[j] = combine(acc[j], A(x[j]));
      }
      for (int64_t j = 0; j < n; ++j) out[o * inner + j0 + j] = static_cast<Out>(acc[j]);
    }
  });
}

// Index of the first max (or min) along r; NaN counts as the extreme, like PyTorch.
template <typename T, bool Max>
void reduce_arg(const T* in, int64_t* out, int64_t outer, int64_t r, int64_t inner) {
  parallel_for(outer * inner, outer * r * inner, [&](int64_t b, int64_t e) {
    for (int64_t oj = b; oj < e; ++oj) {
      int64_t o = oj / inner, j = oj % inner;
      const T* x = in + o * r * inner + j;
      int64_t best = 0;
      T bv = x[0];
      for (int64_t k = 1; k < r; ++k) {
        T v = x[k * inner];
        if (bv != bv) break;  // NaN already found
        if (v != v || (Max ? v > bv : v < bv)) {
          bv = v;
          best = k;
        }
      }
      out[oj] = best;
    }
  });
}

// log(sum(exp(x))) along r: max first, so exp never overflows.
template <typename T>
void reduce_logsumexp(const T* in, T* out, int64_t outer, int64_t r, int64_t inner) {
  parallel_for(outer * inner, outer * r * inner, [&](int64_t b, int64_t e) {
    for (int64_t oj = b; oj < e; ++oj) {
      int64_t o = oj / inner, j = oj % inner;
      const T* x = in + o * r * inner + j;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t k = 0; k < r; ++k) m = math::maximum(m, x[k * inner]);
      if (std::isinf(m)) {
        out[oj] = m;
        continue;
      }
      double s = 0;
      for (int64_t k = 0; k < r; ++k) s += std::exp(double(x[k * inner] - m));
      out[oj] = static_cast<T>(m + std::log(s));
    }
  });
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const TensorRef& in, const TensorRef& out, int64_t outer,
                        int64_t r, int64_t inner) {
  if (op == ReduceOp::Sum && in.dtype == DType::Bool) {  // count of true values
    reduce_values(
        static_cast<const bool*>(in.data), static_cast<int64_t*>(out.data), outer, r, inner,
        [] { return int64_t(0); }, [](int64_t a, int64_t b) { return a + b; });
    return;
  }
  dispatch_numeric(in.dtype, "reduce", [&]<typename T>() {
    const T* x = static_cast<const T*>(in.data);
    switch (op) {
      case ReduceOp::Sum:
        reduce_values(
            x, static_cast<T*>(out.data), outer, r, inner, [] { return acc_t<T>(0); },
            [](acc_t<T> a, acc_t<T> b) { return a + b; });
        break;
      case ReduceOp::Max:
        reduce_values(
            x, static_cast<T*>(out.data), outer, r, inner, [] { return math::lowest<T>(); },
            math::maximum<T>);
        break;
      case ReduceOp::Min:
        reduce_values(
            x, static_cast<T*>(out.data), outer, r, inner, [] { return math::highest<T>(); },
            math::minimum<T>);
        break;
      case ReduceOp::ArgMax:
        reduce_arg<T, true>(x, static_cast<int64_t*>(out.data), outer, r, inner);
        break;
      case ReduceOp::ArgMin:
        reduce_arg<T, false>(x, static_cast<int64_t*>(out.data), outer, r, inner);
        break;
      case ReduceOp::LogSumExp:
        if constexpr (std::is_floating_point_v<T>)
          reduce_logsumexp(x, static_cast<T*>(out.data), outer, r, inner);
        else
          fail("logsumexp", "expected a floating dtype, got ", in.dtype);
        break;
    }
  });
}

void CpuBackend::softmax(const TensorRef& in, const TensorRef& out, int64_t outer, int64_t r,
                         int64_t inner, bool log) {
  dispatch_floating(in.dtype, "softmax", [&]<typename T>() {
    const T* x0 = static_cast<const T*>(in.data);
    T* y0 = static_cast<T*>(out.data);
    parallel_for(outer * inner, outer * r * inner * 4, [&](int64_t b, int64_t e) {
      for (int64_t oj = b; oj < e; ++oj) {
        int64_t base = (oj / inner) * r * inner + oj % inner;
        const T* x = x0 + base;
        T* y = y0 + base;
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t k = 0; k < r; ++k) m = math::maximum(m, x[k * inner]);
        if (std::isinf(m) && m < 0) m = 0;  // an all -inf row: exp gives 0s, not NaN from inf-inf
        T s = 0;
        for (int64_t k = 0; k < r; ++k) {
          T ek = std::exp(x[k * inner] - m);
          s += ek;
          if (!log) y[k * inner] = ek;
        }
        if (log) {
          T ls = m + std::log(s);
          for (int64_t k = 0; k < r; ++k) y[k * inner] = x[k * inner] - ls;
        } else {
          T inv = T(1) / s;
          for (int64_t k = 0; k < r; ++k) y[k * inner] *= inv;
        }
      }
    });
  });
}

void CpuBackend::softmax_backward(const TensorRef& g, const TensorRef& y, const TensorRef& out,
                                  int64_t outer, int64_t r, int64_t inner, bool log) {
  dispatch_floating(y.dtype, "softmax_backward", [&]<typename T>() {
    const T* g0 = static_cast<const T*>(g.data);
    const T* y0 = static_cast<const T*>(y.data);
    T* d0 = static_cast<T*>(out.data);
    parallel_for(outer * inner, outer * r * inner * 3, [&](int64_t b, int64_t e) {
      for (int64_t oj = b; oj < e; ++oj) {
        int64_t base = (oj / inner) * r * inner + oj % inner;
        const T *gr = g0 + base, *yr = y0 + base;
        T* dr = d0 + base;
        T s = 0;
        if (log) {  // y = log_softmax: dx = g - softmax · Σg
          for (int64_t k = 0; k < r; ++k) s += gr[k * inner];
          for (int64_t k = 0; k < r; ++k)
            dr[k * inner] = gr[k * inner] - std::exp(yr[k * inner]) * s;
        } else {  // y = softmax: dx = y · (g - Σ g·y)
          for (int64_t k = 0; k < r; ++k) s += gr[k * inner] * yr[k * inner];
          for (int64_t k = 0; k < r; ++k) dr[k * inner] = yr[k * inner] * (gr[k * inner] - s);
        }
      }
    });
  });
}

}  // namespace ringgrad::cpu
