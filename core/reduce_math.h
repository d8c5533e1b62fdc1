// reduce_math.h — reductions as mergeable states, for backends that reduce in parallel.
//
// A parallel reduction cuts a row into pieces, reduces each piece on its own
// (a thread, a warp, a block) and then merges the partial results in a tree.
// That works when each reduction is a *state* with three operations:
//
//     S s;              the empty state (the identity)
//     s.add(x, k)       fold in element x, at position k of the row
//     s.merge(other)    fold in another piece's state, in any order
//     s.result()        the answer
//
// and merging gives the same answer as adding every element in order. For max,
// min and the arg-reductions that holds exactly (ties go to the lower position,
// as a left-to-right scan gives them); for sums and log-sum-exp it holds up to
// rounding, and floating sums accumulate in double as on the CPU. RG_HD: the
// CUDA kernels (core/cuda/reduce.cu, loss.cu) use these, and
// tests/test_kernel_math.cpp checks on the CPU that merging pieces in any order
// equals the sequential scan.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ringgrad/core/kernel_math.h"

namespace ringgrad::math {

// f(0) ⊕ f(1) ⊕ … ⊕ f(n − 1) in kParts interleaved partial results, combined pairwise at
// the end: kParts chains side by side (one vector register on the CPU) where one running
// result makes every step wait for the last (a 256-wide float sum: ~1000 cycles, this way
// ~70). Exact for max and min; a sum's rounding error grows more slowly than in one chain.
template <int kParts, typename A, typename F, typename Combine>
RG_HD A fold_interleaved(int64_t n, A init, F f, Combine combine) {
  A part[kParts];
  for (int p = 0; p < kParts; ++p) part[p] = init;
  int64_t j = 0;
  for (; j + kParts <= n; j += kParts)
    for (int p = 0; p < kParts; ++p) part[p] = combine(part[p], f(j + p));
  for (int p = 0; j + p < n; ++p) part[p] = combine(part[p], f(j + p));
  for (int width = kParts / 2; width > 0; width /= 2)
    for (int p = 0; p < width; ++p) part[p] = combine(part[p], part[p + width]);
  return part[0];
}

// Sum in A (double for floats, int64 for integers and for counting bools).
template <typename A>
struct SumState {
  A sum = A(0);
  RG_HD void add(A x, int64_t) { sum += x; }
  RG_HD void merge(const SumState& o) { sum += o.sum; }
  RG_HD A result() const { return sum; }
};

// The identities of max and min: ∓inf for floats (an all -inf row stays -inf), the
// int64 extremes for integers. The CPU's reductions start from them too.
// (Macros, not std::numeric_limits: its constexpr functions are host-only under nvcc.)
template <typename T>
RG_HD T lowest() {
  static_assert(std::is_floating_point_v<T> || std::is_same_v<T, int64_t>);
  if constexpr (std::is_floating_point_v<T>)
    return T(-INFINITY);
  else
    return T(INT64_MIN);
}
template <typename T>
RG_HD T highest() {
  static_assert(std::is_floating_point_v<T> || std::is_same_v<T, int64_t>);
  if constexpr (std::is_floating_point_v<T>)
    return T(INFINITY);
  else
    return T(INT64_MAX);
}

// Max or min; NaN wins (math::maximum / minimum), an empty state is the identity above.
template <typename T, bool Max>
struct ExtremeState {
  T value = Max ? lowest<T>() : highest<T>();
  RG_HD void add(T x, int64_t) { value = Max ? maximum(value, x) : minimum(value, x); }
  RG_HD void merge(const ExtremeState& o) { add(o.value, 0); }
  RG_HD T result() const { return value; }
};

// The position of the first max (or min) along the row; the first NaN, if any,
// counts as the extreme (PyTorch's argmax). Empty: index −1.
template <typename T, bool Max>
struct ArgState {
  T value = T(0);
  int64_t index = -1;
  RG_HD void add(T x, int64_t k) { take(x, k); }
  RG_HD void merge(const ArgState& o) {
    if (o.index >= 0) take(o.value, o.index);
  }
  RG_HD int64_t result() const { return index < 0 ? 0 : index; }

 private:
  // Whether (x, k) should replace the current best, whatever order they come in.
  RG_HD void take(T x, int64_t k) {
    if (index < 0 || better(x, k)) value = x, index = k;
  }
  RG_HD bool better(T x, int64_t k) const {
    const bool x_nan = x != x, v_nan = value != value;
    if (x_nan || v_nan) return x_nan && (!v_nan || k < index);  // the first NaN wins
    if (x == value) return k < index;                            // ties: the first position
    return Max ? x > value : x < value;
  }
};

// log Σ exp(x) in one pass: the running maximum m and Σ exp(x − m), rescaled
// when m grows (the online softmax's normaliser). −inf elements add nothing;
// a row whose maximum is ±inf gives that infinity, as the two-pass CPU kernel.
template <typename T>
struct LogSumExpState {
  T m = T(-INFINITY);
  double s = 0;  // Σ exp(x − m), in double as on the CPU
  RG_HD void add(T x, int64_t) { merge_parts(x, 1.0); }
  RG_HD void merge(const LogSumExpState& o) { merge_parts(o.m, o.s); }
  RG_HD T result() const {
    if (std::isinf(m)) return m;
    return static_cast<T>(m + std::log(s));
  }

 private:
  // Fold in a piece with maximum om and sum os (relative to om).
  RG_HD void merge_parts(T om, double os) {
    if (om != om || m != m) {  // NaN: poisons the result, as exp(NaN) does on the CPU
      m = om != om ? om : m;
      s = double(NAN);
      return;
    }
    if (om == T(-INFINITY)) return;  // an empty piece, or exp(−inf) = 0
    if (std::isinf(om) && om > 0) {  // +inf dominates: the result is +inf
      m = om;
      s = 1;
      return;
    }
    if (std::isinf(m) && m > 0) return;
    if (om > m) {
      s = s * std::exp(double(m) - double(om)) + os;
      m = om;
    } else {
      s += os * std::exp(double(om) - double(m));
    }
  }
};

}  // namespace ringgrad::math
