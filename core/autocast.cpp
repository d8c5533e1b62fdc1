// autocast.cpp — the per-thread autocast setting and the casts the ops ask for.
#include "ringgrad/core/autocast.h"

#include <array>

#include "ringgrad/core/error.h"
#include "ringgrad/core/tensor.h"

namespace ringgrad {
namespace {

// One slot per device type (CPU, CUDA).
thread_local std::array<std::optional<DType>, 2> current_dtype{};

std::optional<DType>& slot(DeviceType type) {
  return current_dtype[type == DeviceType::CPU ? 0 : 1];
}

bool castable(const Tensor& t) {
  return t.defined() && (t.dtype() == kFloat32 || is_reduced_precision(t.dtype()));
}

}  // namespace

autocast::autocast(Device device, DType dtype, bool enabled) : type_(device.type) {
  RG_CHECK(is_reduced_precision(dtype), "autocast", "expected dtype bfloat16 or float16, got ",
           dtype);
  previous_ = slot(type_);
  slot(type_) = enabled ? std::optional<DType>(dtype) : std::nullopt;
}

autocast::~autocast() { slot(type_) = previous_; }

std::optional<DType> autocast_dtype(Device device) { return slot(device.type); }

namespace detail {

std::optional<DType> autocast_lower(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!castable(*t)) continue;
    std::optional<DType> dt = slot(t->device().type);
    if (dt && t->dtype() != *dt) return dt;
  }
  return std::nullopt;
}

bool autocast_widen(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && is_reduced_precision(t->dtype()) && slot(t->device().type)) return true;
  return false;
}

Tensor autocast_cast(const Tensor& t, DType dtype) { return castable(t) ? t.to(dtype) : t; }

}  // namespace detail
}  // namespace ringgrad
