// dtype.h — element types.
//
// float32 is the default everywhere; float64 exists for gradient checks and
// numerically careful code; int64 holds indices and labels; bool holds masks
// and the results of comparisons. bfloat16 and float16 are the reduced-precision
// storage types of mixed-precision training (core/half.h): every op computes on
// them in float32 and rounds its result once (docs/mixed_precision.md).
//
// Every dtype is one line of RG_DTYPES below; everything else here (the enum,
// names, sizes, dtype_of<T>, dispatch in core/dispatch.h) is generated from it.
// A library that stores or moves tensors maps dtypes to its own types with one
// DTypeTable (core/dtype_table.h): adding a dtype is one line here plus one
// entry in each table where the library has that type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

#include "ringgrad/core/half.h"

namespace ringgrad {

// X(enumerator, C++ type, name, floating)
#define RG_DTYPES(X)                    \
  X(Float32, float, "float32", true)    \
  X(Float64, double, "float64", true)   \
  X(Int64, int64_t, "int64", false)     \
  X(Bool, bool, "bool", false)          \
  X(BFloat16, BFloat16, "bfloat16", true) \
  X(Float16, Float16, "float16", true)

#define RG_DTYPE_ENUMERATOR(e, T, name, floating) e,
enum class DType : uint8_t { RG_DTYPES(RG_DTYPE_ENUMERATOR) };
#undef RG_DTYPE_ENUMERATOR

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat16 = DType::Float16;

// What the framework knows of each dtype, indexed by the enum's value.
struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;  // bytes per element
  bool floating;
};
#define RG_DTYPE_INFO(e, T, name, floating) DTypeInfo{DType::e, name, sizeof(T), floating},
inline constexpr DTypeInfo kDTypeInfo[] = {RG_DTYPES(RG_DTYPE_INFO)};
#undef RG_DTYPE_INFO
inline constexpr size_t kNumDTypes = sizeof(kDTypeInfo) / sizeof(kDTypeInfo[0]);

constexpr const DTypeInfo& dtype_info(DType t) { return kDTypeInfo[static_cast<size_t>(t)]; }
constexpr size_t element_size(DType t) { return dtype_info(t).size; }
constexpr bool is_floating(DType t) { return dtype_info(t).floating; }
constexpr const char* dtype_name(DType t) { return dtype_info(t).name; }
// bfloat16 and float16: stored in 16 bits, computed in float32.
constexpr bool is_reduced_precision(DType t) { return t == kBFloat16 || t == kFloat16; }
// The dtype an op on t computes and accumulates in (float32 for the 16-bit types).
constexpr DType compute_dtype(DType t) { return is_reduced_precision(t) ? kFloat32 : t; }
// PyTorch's result type of two floating dtypes: the wider one; bfloat16 with float16
// gives float32 (neither holds the other).
constexpr DType promote_floating(DType a, DType b) {
  if (a == b) return a;
  if (a == kFloat64 || b == kFloat64) return kFloat64;
  return kFloat32;
}

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// The C++ type behind each dtype, and back: dtype_of<float>::value == kFloat32.
template <typename T>
struct dtype_of;
#define RG_DTYPE_OF(e, T, name, floating) \
  template <>                             \
  struct dtype_of<T> {                    \
    static constexpr DType value = DType::e; \
  };
RG_DTYPES(RG_DTYPE_OF)
#undef RG_DTYPE_OF

}  // namespace ringgrad
