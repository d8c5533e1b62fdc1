// kernel_math.h — the math of every elementwise kernel, shared by all backends.
//
// Each function is RG_HD (__host__ __device__ under nvcc, plain inline
// otherwise): the CPU loops and the CUDA kernels call the same code, so the
// numbers are tested on every machine even where no GPU can run a kernel.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ringgrad/core/op_kinds.h"

#if defined(__CUDACC__)
#define RG_HD __host__ __device__ __forceinline__
#define RG_HD_ALWAYS __host__ __device__ __forceinline__
#else
#define RG_HD inline
// For the larger bodies (GELU with its erf and exp) that a CPU loop must inline to
// vectorise: GCC left gelu_erf_grad as a call, and GELU's backward ran at ~12 ns an element.
#define RG_HD_ALWAYS inline __attribute__((always_inline))
#endif

// A loop the CPU compiler should vectorise, with a reduction it may reorder
// (`RG_SIMD` or `RG_SIMD_REDUCE(+ : sum)` before a for). Compilers that do not take OpenMP's
// simd pragma (nvcc, or a build without -fopenmp) see nothing.
#if defined(_OPENMP) && !defined(__CUDACC__)
#define RG_PRAGMA(x) _Pragma(#x)
#define RG_SIMD_REDUCE(clause) RG_PRAGMA(omp simd reduction(clause))
#define RG_SIMD RG_PRAGMA(omp simd)
#else
#define RG_SIMD_REDUCE(clause)
#define RG_SIMD
#endif

namespace ringgrad::math {

inline constexpr double kInvSqrt2 = 0.7071067811865476;  // 1/√2: GELU multiplies by it (a divide costs
                                                          // GELU's forward a quarter of its time)
inline constexpr double kInvSqrt2Pi = 0.3989422804014327;   // 1/sqrt(2π)
inline constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/π)
inline constexpr double kGeluCoeff = 0.044715;

// ---- unary ----
template <typename T>
RG_HD T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
template <typename T>
RG_HD T relu(T x) {
  return x > T(0) ? x : T(0);
}
template <typename T>
RG_HD T rsqrt(T x) {
  return T(1) / std::sqrt(x);
}

// Vectorisable exp and erf for float (below, with their error bounds).
template <typename T>
RG_HD_ALWAYS T exp_vec(T x);
template <typename T>
RG_HD_ALWAYS T erf_vec(T x);

// gelu(x) = x·Φ(x) = ½x(1 + erf(x/√2))
template <typename T>
RG_HD_ALWAYS T gelu_erf(T x) {
  return T(0.5) * x * (T(1) + erf_vec(x * T(kInvSqrt2)));
}
// d/dx gelu = Φ(x) + x·φ(x)
template <typename T>
RG_HD_ALWAYS T gelu_erf_grad(T x) {
  T cdf = T(0.5) * (T(1) + erf_vec(x * T(kInvSqrt2)));
  T pdf = T(kInvSqrt2Pi) * exp_vec(T(-0.5) * x * x);
  return cdf + x * pdf;
}
// gelu ≈ ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
template <typename T>
RG_HD_ALWAYS T gelu_tanh(T x) {
  T u = T(kSqrt2OverPi) * (x + T(kGeluCoeff) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}
template <typename T>
RG_HD_ALWAYS T gelu_tanh_grad(T x) {
  T u = T(kSqrt2OverPi) * (x + T(kGeluCoeff) * x * x * x);
  T t = std::tanh(u);
  T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCoeff) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
}
template <typename T>
RG_HD T clamp(T x, T lo, T hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}
template <typename T>
RG_HD T sign(T x) {
  return T((x > T(0)) - (x < T(0)));
}

// exp(x) without a libm call, so that loops over it vectorise: e^x = 2^n · e^r with
// n = round(x·log2 e) and r = x − n·ln 2 (Cody–Waite: ln 2 in two parts), e^r by its
// degree-6 Taylor polynomial (|r| ≤ ln2/2); measured error ≤ 2.6e-7 relative (≈ 2 ulp).
// Below −87.3 (where float underflows) it is exactly 0, as exp(−∞) must be; above
// about 88.4 (where e^x nears the largest float), +∞. float only: double calls std::exp.
// (The fused CPU attention, core/cpu/attention_fused.cpp, keeps its scores in base 2 and
// takes 2^x with a polynomial of its own, exp2_16: one multiply and reduction fewer per score.)
inline constexpr float kExpMin = -87.3f, kExpMax = 88.7f;  // the clamp of x
inline constexpr float kLog2e = 1.44269504f;
inline constexpr float kLn2Hi = 0.693145752f;  // ln 2, high part (exact in float times small n)
inline constexpr float kLn2Lo = 1.42860677e-6f;  // ln 2, low part
RG_HD float exp_taylor6(float r) {  // e^r for |r| ≤ ln2/2
  return 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
}
template <typename T>
RG_HD_ALWAYS T exp_vec(T x) {
  if constexpr (sizeof(T) != 4) {
    return std::exp(x);
  } else {
    float xc = x < kExpMin ? kExpMin : (x > kExpMax ? kExpMax : x);
    float n = std::floor(xc * kLog2e + 0.5f);
    float r = xc - n * kLn2Hi;
    r = r - n * kLn2Lo;
    float p = exp_taylor6(r);
    int32_t bits = (int32_t(n) + 127) << 23;  // 2^n, n in [−126, 128]
#if defined(__CUDA_ARCH__)
    float scale = __int_as_float(bits);
#else
    float scale = std::bit_cast<float>(bits);
#endif
    float e = n > 127.0f ? float(INFINITY) : p * scale;
    return x < kExpMin ? 0.0f : e;
  }
}

// erf(x) without a libm call, so that loops over it vectorise (GELU's forward and backward):
// a rational function x·P(x²)/Q(x²) on x clamped to [−4, 4] (beyond, erf is ±1 in float),
// the minimax fit Eigen and XLA use for float: its error is at most 6.5e-8 in exact
// arithmetic; evaluated in float, up to 4.2e-7 near |x| = 3.94 (where erf is 1 − 2.5e-8),
// 1.5e-7 or less below |x| = 3.5 — PyTorch's vectorised float erf is of the same order.
// NaN stays NaN, ±∞ gives ±1. float only: double calls std::erf.
template <typename T>
RG_HD_ALWAYS T erf_vec(T x) {
  if constexpr (sizeof(T) != 4) {
    return std::erf(x);
  } else {
    const float xc = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x), x2 = xc * xc;
    float p = -2.72614225801306e-10f;  // the odd numerator, from the top
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 - 2.10102402082508e-06f;
    p = p * x2 - 5.69250639462346e-05f;
    p = p * x2 - 7.34990630326855e-04f;
    p = p * x2 - 2.95459980854025e-03f;
    p = p * x2 - 1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;  // the even denominator
    q = q * x2 - 2.13374055278905e-04f;
    q = q * x2 - 1.68282697438203e-03f;
    q = q * x2 - 7.37332916720468e-03f;
    q = q * x2 - 1.42647390514189e-02f;
    return xc * p / q;
  }
}

// ---- binary ----
template <typename T>
RG_HD T maximum(T a, T b) {
  return (a != a || a > b) ? a : b;
}  // NaN wins
template <typename T>
RG_HD T minimum(T a, T b) {
  return (a != a || a < b) ? a : b;
}

// ---- every elementwise op by kind (what the backends' loops instantiate) ----
// p0, p1: Clamp's (min, max), PowScalar's exponent.
template <UnaryOp Op, typename T>
RG_HD_ALWAYS T apply_unary(T x, T p0, T p1) {
  if constexpr (Op == UnaryOp::Neg)
    return T(-x);
  else if constexpr (Op == UnaryOp::Abs)
    return x < T(0) ? T(-x) : x;
  else if constexpr (Op == UnaryOp::Clamp)
    return clamp(x, p0, p1);
  else if constexpr (!std::is_floating_point_v<T>)
    return x;  // not instantiated for ints
  else if constexpr (Op == UnaryOp::Exp)
    return std::exp(x);
  else if constexpr (Op == UnaryOp::Log)
    return std::log(x);
  else if constexpr (Op == UnaryOp::Sqrt)
    return std::sqrt(x);
  else if constexpr (Op == UnaryOp::Rsqrt)
    return rsqrt(x);
  else if constexpr (Op == UnaryOp::Tanh)
    return std::tanh(x);
  else if constexpr (Op == UnaryOp::Sigmoid)
    return sigmoid(x);
  else if constexpr (Op == UnaryOp::Relu)
    return relu(x);
  else if constexpr (Op == UnaryOp::GeluErf)
    return gelu_erf(x);
  else if constexpr (Op == UnaryOp::GeluTanh)
    return gelu_tanh(x);
  else
    return p0 == T(2) ? x * x : std::pow(x, p0);  // PowScalar
}

// Comparisons return bool; everything else T.
template <BinaryOp Op, typename T>
RG_HD_ALWAYS auto apply_binary(T a, T b) {
  if constexpr (Op == BinaryOp::Eq)
    return a == b;
  else if constexpr (Op == BinaryOp::Ne)
    return a != b;
  else if constexpr (Op == BinaryOp::Lt)
    return a < b;
  else if constexpr (Op == BinaryOp::Le)
    return a <= b;
  else if constexpr (Op == BinaryOp::Gt)
    return a > b;
  else if constexpr (Op == BinaryOp::Ge)
    return a >= b;
  else if constexpr (Op == BinaryOp::Add)
    return T(a + b);
  else if constexpr (Op == BinaryOp::Sub)
    return T(a - b);
  else if constexpr (Op == BinaryOp::Mul)
    return T(a * b);
  else if constexpr (Op == BinaryOp::Maximum)
    return maximum(a, b);
  else if constexpr (Op == BinaryOp::Minimum)
    return minimum(a, b);
  else if constexpr (!std::is_floating_point_v<T>)
    return a;  // not instantiated for ints
  else if constexpr (Op == BinaryOp::Div)
    return a / b;
  else if constexpr (Op == BinaryOp::Pow)
    return std::pow(a, b);
  else if constexpr (Op == BinaryOp::ReluBackward)
    return b > T(0) ? a : T(0);
  else if constexpr (Op == BinaryOp::GeluErfBackward)
    return a * gelu_erf_grad(b);
  else if constexpr (Op == BinaryOp::GeluTanhBackward)
    return a * gelu_tanh_grad(b);
  else if constexpr (Op == BinaryOp::SigmoidBackward)
    return a * b * (T(1) - b);
  else if constexpr (Op == BinaryOp::TanhBackward)
    return a * (T(1) - b * b);
  else
    return a * sign(b);  // AbsBackward
}

// ---- reductions ----
// log(exp(a) + exp(b)) without overflow.
template <typename T>
RG_HD T log_add_exp(T a, T b) {
  T m = a > b ? a : b;
  if (m == -INFINITY) return m;
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

// ---- optimizers ----
// One element of Adam (decoupled = false) or AdamW (true), exactly PyTorch's
// torch.optim formulas. step_size = lr / (1 - β1^t), inv_bc2_sqrt = 1/√(1 - β2^t).
template <typename T>
RG_HD void adam_update(T& p, T g, T& m, T& v, T lr, T beta1, T beta2, T eps, T weight_decay,
                       T step_size, T inv_bc2_sqrt, bool decoupled) {
  if (decoupled)
    p -= lr * weight_decay * p;  // AdamW: decay the weight itself
  else
    g += weight_decay * p;  // Adam: L2 penalty folded into the gradient
  m = beta1 * m + (T(1) - beta1) * g;
  v = beta2 * v + (T(1) - beta2) * g * g;
  p -= step_size * m / (std::sqrt(v) * inv_bc2_sqrt + eps);
}

// ---- random numbers: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3") ---- Four 32-bit outputs from a 128-bit counter and a 64-bit key; every counter is
// independent, so element i of a draw can be computed by whichever thread owns it.
struct Philox4 {
  uint32_t v[4];
};
RG_HD Philox4 philox4x32(uint64_t key, uint64_t counter_lo, uint64_t counter_hi = 0) {
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}
// [0, 1) from random bits: 24 bits for float, 53 for double.
RG_HD float uniform_float(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }
RG_HD double uniform_double(uint32_t hi, uint32_t lo) {
  return double(((uint64_t(hi) << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}
// Element i of a draw uses counter (offset + i): uniform takes v[0..1], normal
// takes all four through Box–Muller (radius from one uniform, angle from the other).
template <typename T>
RG_HD T philox_uniform(uint64_t seed, uint64_t counter) {
  Philox4 r = philox4x32(seed, counter);
  if constexpr (sizeof(T) == 4)
    return T(uniform_float(r.v[0]));
  else
    return T(uniform_double(r.v[0], r.v[1]));
}
template <typename T>
RG_HD T philox_normal(uint64_t seed, uint64_t counter) {
  Philox4 r = philox4x32(seed, counter);
  double u1 = 1.0 - uniform_double(r.v[0], r.v[1]);  // (0, 1]: log is finite
  double u2 = uniform_double(r.v[2], r.v[3]);
  return T(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}
RG_HD uint64_t philox_bits64(uint64_t seed, uint64_t counter) {
  Philox4 r = philox4x32(seed, counter);
  return (uint64_t(r.v[0]) << 32) | r.v[1];
}

}  // namespace ringgrad::math
