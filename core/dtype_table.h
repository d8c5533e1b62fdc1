// dtype_table.h — one library's name for each dtype (internal).
//
//   static const DTypeTable<MPI_Datatype> mpi_types(
//       "MPI", {{kFloat32, MPI_FLOAT}, {kFloat64, MPI_DOUBLE}, {kInt64, MPI_INT64_T}, {kBool, MPI_C_BOOL}});
//   MPI_Datatype type = mpi_types(t);   // a dtype with no entry: "[MPI] has no type for dtype …"
//
// Each library ringgrad hands tensors to (MPI, NCCL, cuBLAS, the safetensors
// format) keeps exactly one such table, so a new dtype (core/dtype.h) is one
// entry per library, and a library without that type says so by name.
#pragma once

#include <array>
#include <initializer_list>
#include <optional>
#include <utility>

#include "ringgrad/core/dtype.h"
#include "ringgrad/core/error.h"

namespace ringgrad {

template <typename V>
class DTypeTable {
 public:
  DTypeTable(const char* library, std::initializer_list<std::pair<DType, V>> entries)
      : library_(library) {
    for (const auto& [dtype, value] : entries) values_[static_cast<size_t>(dtype)] = value;
  }

  bool has(DType t) const { return values_[static_cast<size_t>(t)].has_value(); }

  // The library's type for t; throws "[library] has no type for dtype t" if none.
  const V& operator()(DType t) const {
    const std::optional<V>& v = values_[static_cast<size_t>(t)];
    if (!v) fail(library_, "has no type for dtype ", t);
    return *v;
  }

  // The dtype whose entry is `value`, if any (reading a file's type name back).
  std::optional<DType> find(const V& value) const {
    for (size_t i = 0; i < kNumDTypes; ++i)
      if (values_[i] && *values_[i] == value) return kDTypeInfo[i].dtype;
    return std::nullopt;
  }

 private:
  const char* library_;
  std::array<std::optional<V>, kNumDTypes> values_{};
};

}  // namespace ringgrad
