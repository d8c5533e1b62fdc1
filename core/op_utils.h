// op_utils.h — checks and small helpers shared by the op files (internal).
#pragma once

#include "ringgrad/autograd/function.h"
#include "ringgrad/core/backend.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::detail {

inline void check_defined(const Tensor& t, const char* op) {
  RG_CHECK(t.defined(), op, "expected a defined tensor, got an undefined one");
}

inline void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  RG_CHECK(a.device() == b.device(), op, "expected both tensors on one device, got ", a.device(),
           " and ", b.device(), " (move one with .to(device))");
}

inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  RG_CHECK(a.dtype() == b.dtype(), op, "expected matching dtypes, got ", a.dtype(), " and ",
           b.dtype(), " (convert one with .to(dtype))");
}

inline void check_floating(const Tensor& t, const char* op) {
  RG_CHECK(is_floating(t.dtype()), op, "expected a floating tensor (float32, float64, bfloat16 or float16), got ",
           t.dtype());
}

inline void check_dtype(const Tensor& t, DType want, const char* op, const char* what) {
  RG_CHECK(t.dtype() == want, op, "expected ", what, " of dtype ", want, ", got ", t.dtype());
}

// t must broadcast to `shape` (the shape of the tensor it is combined into).
inline void check_broadcasts_to(const Tensor& t, const Shape& shape, const char* op,
                                const char* what) {
  RG_CHECK(broadcast_shapes(t.shape(), shape, op) == shape, op, "expected ", what,
           " that broadcasts to ", shape_str(shape), ", got ", shape_str(t.shape()));
}

// Bytes of a contiguous tensor of this shape and dtype; negative sizes are an error.
inline size_t checked_nbytes(const Shape& shape, DType dtype, const char* op) {
  for (int64_t s : shape)
    RG_CHECK(s >= 0, op, "expected non-negative sizes, got shape ", shape_str(shape));
  return static_cast<size_t>(numel_of(shape)) * element_size(dtype);
}

inline TensorOptions options_of(const Tensor& t) {
  return {.dtype = t.dtype(), .device = t.device()};
}

// A 0-dim tensor holding `value`, with t's dtype and device.
inline Tensor scalar_like(const Tensor& t, double value) { return full({}, value, options_of(t)); }

}  // namespace ringgrad::detail
