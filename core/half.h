// half.h — bfloat16 and float16 as bit patterns, and their exact conversions to and from
// float32 (issue 18's groundwork: the storage types of the reduced-precision dtypes).
//
//   uint16_t b = float_to_bfloat16_bits(x);   float y = bfloat16_bits_to_float(b);
//   uint16_t h = float_to_half_bits(x);       float z = half_bits_to_float(h);
//
//                  sign  exponent  mantissa   largest finite   smallest normal
//   float32          1      8         23       3.4e38           1.2e-38
//   bfloat16         1      8          7       3.4e38           1.2e-38   (float32's top half)
//   float16          1      5         10       65504            6.1e-5    (subnormals to 6.0e-8)
//
// float32 → 16 bits rounds to nearest, ties to even (as PyTorch and the hardware do); a
// value past the largest finite one becomes ±infinity (float16: from 65520 on); a float16
// too small for its subnormals becomes ±0. ±0, ±infinity and the sign are kept, and a NaN
// stays a NaN: quiet, with its sign and the top bits of its payload. (PyTorch's vectorised
// CPU conversion writes every NaN as the same pattern, 0xFFFF for bfloat16; only NaN-ness
// is compared with it.) 16 bits → float32 is exact: every bfloat16 and float16 value is a
// float32 value.
//
// RG_HD functions: the CPU loops and the CUDA kernels share them (core/kernel_math.h).
//
// BFloat16 and Float16 at the end are the element types of the dtypes kBFloat16 and
// kFloat16 (core/dtype.h): 16 bits of storage and nothing more. They convert to and
// from float explicitly and have no arithmetic of their own, so a kernel cannot
// accumulate in 16 bits by accident: it loads float(x), computes in float32 and
// stores T(result), rounding once.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__F16C__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#endif

#include "ringgrad/core/kernel_math.h"

namespace ringgrad {

RG_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

RG_HD float float_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// ---- bfloat16: the top 16 bits of a float32 ----

RG_HD uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x0040u);  // NaN: quiet
  // Round to nearest even on the 16 bits dropped: add just under half, plus the kept
  // part's lowest bit (so an exact half rounds up only from an odd value). A carry runs
  // into the exponent as it should, up to infinity.
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

RG_HD float bfloat16_bits_to_float(uint16_t b) { return float_from_bits(uint32_t(b) << 16); }

// ---- float16 (IEEE binary16) ----

RG_HD uint16_t float_to_half_bits(float f) {
#if defined(__F16C__) && !defined(__CUDA_ARCH__)
  // x86's F16C instruction does exactly this (round to nearest even, subnormals, NaN
  // quieted with its payload's top bits), several times faster than the bit work below.
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#endif
  const uint32_t x = float_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;  // |f|
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN: quiet
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 (and inf): infinity
  if (a >= 0x38800000u) {  // >= 2^-14: a normal float16
    // Re-bias the exponent (127 → 15: minus 112) and round the mantissa from 23 bits to
    // 10, to nearest even, as for bfloat16 (a carry may raise the exponent: still finite).
    const uint32_t m = a - (112u << 23);
    return uint16_t(sign | ((m + 0xfffu + ((m >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25, half the smallest subnormal: rounds to 0
  // A float16 subnormal: |f| / 2^-24 rounded to an integer, to nearest even. With
  // |f| = mant · 2^(e − 150), that is mant · 2^(e − 126) = mant >> (126 − e).
  const uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14 … 24
  const uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  const uint32_t rounded = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  return uint16_t(sign | rounded);  // 0x400 here is the smallest normal, as it should be
}

RG_HD float half_bits_to_float(uint16_t h) {
#if defined(__F16C__) && !defined(__CUDA_ARCH__)
  return _cvtsh_ss(h);
#endif
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return float_from_bits(sign | 0x7f800000u | (m << 13));  // inf, NaN
  if (e == 0) {  // ±0 or a subnormal: m · 2^-24, exact in float32
    const float v = float(m) * 5.9604644775390625e-8f;  // 2^-24
    return float_from_bits(sign | float_bits(v));
  }
  return float_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

// ---- the storage types ----

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  RG_HD explicit BFloat16(float f) : bits(float_to_bfloat16_bits(f)) {}
  RG_HD explicit operator float() const { return bfloat16_bits_to_float(bits); }
  RG_HD static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  RG_HD explicit Float16(float f) : bits(float_to_half_bits(f)) {}
  RG_HD explicit operator float() const { return half_bits_to_float(bits); }
  RG_HD static Float16 from_bits(uint16_t b) {
    Float16 h;
    h.bits = b;
    return h;
  }
};

template <typename T>
inline constexpr bool is_reduced_float_v =
    std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

// static_cast<To>(x) between any two element types, through float for a 16-bit type
// (a double becomes float first, as in PyTorch; bool from a 16-bit value: x != 0).
template <typename To, typename From>
RG_HD To convert_element(From x) {
  if constexpr (std::is_same_v<To, From>)
    return x;
  else if constexpr (is_reduced_float_v<From>)
    return convert_element<To>(static_cast<float>(x));
  else if constexpr (is_reduced_float_v<To>)
    return To(static_cast<float>(x));
  else
    return static_cast<To>(x);
}

}  // namespace ringgrad
