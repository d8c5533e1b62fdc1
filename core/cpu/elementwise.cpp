// elementwise.cpp — CPU fill, copy, unary, binary, where, arange and random kernels.
//
// Each kernel is a row function for for_each_row (loops.h) around the shared
// math in kernel_math.h. Rows whose operands are all unit-stride take a plain
// indexed loop that the compiler vectorises; others step by their strides.
#include <cmath>
#include <cstring>

#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/cpu/loops.h"
#include "ringgrad/core/kernel_math.h"

namespace ringgrad::cpu {

// Apply out[i] = f(in[i]) over strided rows (In and Out may differ in type).
template <typename In, typename Out, typename F>
static void map1(const TensorRef& in, const TensorRef& out, F f) {
  for_each_row<2>({&out, &in}, [&](auto& p, int64_t n, auto& s) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const In* x = reinterpret_cast<const In*>(p[1]);
    if (s[0] == 1 && s[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = f(x[i * s[1]]);
    }
  });
}

// Apply out[i] = f(a[i], b[i]); a scalar-broadcast operand (stride 0) gets its own fast path.
template <typename In, typename Out, typename F>
static void map2(const TensorRef& a, const TensorRef& b, const TensorRef& out, F f) {
  for_each_row<3>({&out, &a, &b}, [&](auto& p, int64_t n, auto& s) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const In* x = reinterpret_cast<const In*>(p[1]);
    const In* y = reinterpret_cast<const In*>(p[2]);
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
      const In yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
      const In xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = f(x[i * s[1]], y[i * s[2]]);
    }
  });
}

void CpuBackend::fill(const TensorRef& out, double value) {
  dispatch_storage(out.dtype, [&]<typename T>() {
    const T v = convert_element<T>(value);
    for_each_row<1>({&out}, [&](auto& p, int64_t n, auto& s) {
      T* o = reinterpret_cast<T*>(p[0]);
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = v;
    });
  });
}

void CpuBackend::copy(const TensorRef& src, const TensorRef& dst) {
  dispatch_storage(src.dtype, [&]<typename S>() {
    dispatch_storage(dst.dtype, [&]<typename D>() {
      map1<S, D>(src, dst, [](S x) { return convert_element<D>(x); });
    });
  });
}

// bfloat16/float16 operands, natively: each element loaded as float, computed with the
// float32 math, rounded once when stored — the same numbers as staging through float32
// (core/reduced_precision.cpp), without the float32 copies of whole tensors.
void CpuBackend::unary(UnaryOp op, const TensorRef& in, const TensorRef& out, double p0,
                       double p1) {
  if (is_reduced_precision(in.dtype)) {
    dispatch_unary(op, [&]<UnaryOp Op>() {
      const float a = static_cast<float>(p0), b = static_cast<float>(p1);
      dispatch_reduced(in.dtype, "unary", [&]<typename S>() {
        map1<S, S>(in, out, [=](S x) RG_ELEMENT_FN { return S(math::apply_unary<Op>(float(x), a, b)); });
      });
    });
    return;
  }
  dispatch_unary(op, [&]<UnaryOp Op>() {
    auto run = [&]<typename T>() {
      const T a = static_cast<T>(p0), b = static_cast<T>(p1);
      map1<T, T>(in, out, [=](T x) RG_ELEMENT_FN { return math::apply_unary<Op>(x, a, b); });
    };
    dispatch_for_op<Op>(in.dtype, "unary", run);
  });
}

void CpuBackend::binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  if (is_reduced_precision(a.dtype)) {
    dispatch_binary(op, [&]<BinaryOp Op>() {
      dispatch_reduced(a.dtype, "binary", [&]<typename S>() {
        using R = decltype(math::apply_binary<Op>(0.0f, 0.0f));  // bool for comparisons
        using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
        map2<S, Out>(a, b, out, [](S x, S y) RG_ELEMENT_FN {
          return static_cast<Out>(math::apply_binary<Op>(float(x), float(y)));
        });
      });
    });
    return;
  }
  dispatch_binary(op, [&]<BinaryOp Op>() {
    auto run = [&]<typename T>() {
      using Out = decltype(math::apply_binary<Op>(T(), T()));
      map2<T, Out>(a, b, out, [](T x, T y) RG_ELEMENT_FN { return math::apply_binary<Op>(x, y); });
    };
    dispatch_for_op<Op>(a.dtype, "binary", run);
  });
}

void CpuBackend::where(const TensorRef& cond, const TensorRef& a, const TensorRef& b,
                       const TensorRef& out) {
  dispatch_storage(out.dtype, [&]<typename T>() {
    for_each_row<4>({&out, &cond, &a, &b}, [&](auto& p, int64_t n, auto& s) {
      T* o = reinterpret_cast<T*>(p[0]);
      const bool* c = reinterpret_cast<const bool*>(p[1]);
      const T* x = reinterpret_cast<const T*>(p[2]);
      const T* y = reinterpret_cast<const T*>(p[3]);
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = c[i * s[1]] ? x[i * s[2]] : y[i * s[3]];
    });
  });
}

void CpuBackend::arange(const TensorRef& out, double start, double step) {
  dispatch_numeric(out.dtype, "arange", [&]<typename T>() {
    T* o = static_cast<T*>(out.data);
    int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(start + step * static_cast<double>(i));
  });
}

void CpuBackend::random(const TensorRef& out, RandomDist dist, uint64_t seed, uint64_t offset,
                        double p0, double p1) {
  int64_t n = out.numel();
  if (dist == RandomDist::Integer) {  // [p0, p1) as int64
    int64_t* o = static_cast<int64_t*>(out.data);
    int64_t low = static_cast<int64_t>(p0);
    uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(p1) - low);
    parallel_for(n, n * 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        o[i] = low + static_cast<int64_t>(math::philox_bits64(seed, offset + i) % range);
    });
    return;
  }
  dispatch_floating(out.dtype, "random", [&]<typename T>() {
    T* o = static_cast<T*>(out.data);
    const T a = static_cast<T>(p0), b = static_cast<T>(p1);
    parallel_for(n, n * 16, [&](int64_t lo, int64_t hi) {
      if (dist == RandomDist::Uniform) {  // [a, b)
        for (int64_t i = lo; i < hi; ++i)
          o[i] = a + (b - a) * math::philox_uniform<T>(seed, offset + i);
      } else {  // mean a, std b
        for (int64_t i = lo; i < hi; ++i) o[i] = a + b * math::philox_normal<T>(seed, offset + i);
      }
    });
  });
}

}  // namespace ringgrad::cpu
