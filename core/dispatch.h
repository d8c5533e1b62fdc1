// dispatch.h — from a run-time dtype (and op kind) to compile-time C++ types (internal).
//
//   dispatch_floating(t, "exp", [&]<typename T>() { kernel<T>(…); });
//
// Shared by every backend's host code: the CPU loops and the CUDA launches
// accept exactly the same dtypes for each op, with the same error.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ringgrad/core/dtype.h"
#include "ringgrad/core/error.h"
#include "ringgrad/core/op_kinds.h"

namespace ringgrad {

// f.template operator()<T>() for T = the C++ type of dtype t, every dtype: for the kernels
// that only move elements (fill, copy, where, index_select, gather), which take the
// 16-bit types as they are.
template <typename F>
void dispatch_storage(DType t, F&& f) {
#define RG_DISPATCH_CASE(e, T, name, floating) \
  case DType::e:                               \
    f.template operator()<T>();                \
    return;
  switch (t) { RG_DTYPES(RG_DISPATCH_CASE) }
#undef RG_DISPATCH_CASE
}

// A 16-bit dtype where a kernel computes: core/reduced_precision.cpp stages such operands
// through float32 before a backend's compute kernels see them, so this is ringgrad's bug.
[[noreturn]] inline void reduced_precision_reached_kernel(const char* op, DType t) {
  fail(op, "internal error: a ", t, " operand reached a float32 kernel without staging");
}

// f.template operator()<S>() for S = BFloat16 or Float16: the storage type of a 16-bit
// dtype, for the kernels that convert as they load and store (elementwise loops, the
// 16-bit reductions of the communicators). Another dtype is ringgrad's bug.
template <typename F>
void dispatch_reduced(DType t, const char* op, F&& f) {
  if (t == DType::BFloat16)
    f.template operator()<BFloat16>();
  else if (t == DType::Float16)
    f.template operator()<Float16>();
  else
    fail(op, "internal error: expected bfloat16 or float16, got ", t);
}

// The same for the dtypes kernels compute in: float32, float64, int64, bool.
template <typename F>
void dispatch_all(DType t, F&& f) {
  if (is_reduced_precision(t)) reduced_precision_reached_kernel("dispatch", t);
  dispatch_storage(t, [&]<typename T>() {
    if constexpr (!is_reduced_float_v<T>) f.template operator()<T>();
  });
}

// The same for float32/float64 only; other dtypes throw "[op] expected a floating dtype…".
template <typename F>
void dispatch_floating(DType t, const char* op, F&& f) {
  RG_CHECK(is_floating(t), op, "expected a floating dtype (float32, float64, bfloat16 or float16), got ", t);
  if (is_reduced_precision(t)) reduced_precision_reached_kernel(op, t);
  dispatch_all(t, [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T>) f.template operator()<T>();
  });
}

// The same for float32/float64/int64; bool throws.
template <typename F>
void dispatch_numeric(DType t, const char* op, F&& f) {
  RG_CHECK(t != DType::Bool, op, "expected a numeric dtype, got ", t);
  if (is_reduced_precision(t)) reduced_precision_reached_kernel(op, t);
  dispatch_all(t, [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) f.template operator()<T>();
  });
}

// The dtypes an elementwise op accepts: comparisons any, the integer-capable ops
// (works_on_integers) any but bool, the rest floating only.
template <auto Op, typename F>
void dispatch_for_op(DType t, const char* op, F&& f) {
  if constexpr (std::is_same_v<decltype(Op), BinaryOp>) {
    if constexpr (is_comparison(Op)) return dispatch_all(t, f);
  }
  if constexpr (works_on_integers(Op))
    dispatch_numeric(t, op, f);
  else
    dispatch_floating(t, op, f);
}

}  // namespace ringgrad
