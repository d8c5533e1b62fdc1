// autocast.cpp — the per-thread autocast setting and the casts the ops ask for.
#include "ringgrad/core/autocast.h"

#include <array>
#include <map>
#include <utility>

#include "ringgrad/autograd/function.h"
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

// autocast_weight_cache's: how many are open on this thread, and the casts kept, by source
// tensor and dtype (each entry also holds its source, so that no other tensor takes its address).
struct WeightCache {
  int open = 0;
  struct Entry {
    Tensor source, cast;
  };
  std::map<std::pair<const TensorImpl*, DType>, Entry> casts;
};
thread_local WeightCache weight_cache;

// t cast to `dtype` once while the cache is open: the copy's backward node keeps nothing and
// is never released, so each backward that reaches it sends the gradient on to t.
Tensor cached_cast(const Tensor& t, DType dtype) {
  auto [it, made] = weight_cache.casts.try_emplace({&t.impl(), dtype});
  if (made) {
    Tensor cast = t.detach().to(dtype);
    const DType source = t.dtype();
    autograd::record_reusable("to", cast, t, [source](const Tensor& g) { return g.to(source); });
    it->second = {t, cast};
  }
  return it->second.cast;
}

}  // namespace

autocast::autocast(Device device, DType dtype, bool enabled) : type_(device.type) {
  RG_CHECK(is_reduced_precision(dtype), "autocast", "expected dtype bfloat16 or float16, got ",
           dtype);
  previous_ = slot(type_);
  slot(type_) = enabled ? std::optional<DType>(dtype) : std::nullopt;
}

autocast::~autocast() { slot(type_) = previous_; }

autocast_weight_cache::autocast_weight_cache() { ++weight_cache.open; }

autocast_weight_cache::~autocast_weight_cache() {
  if (--weight_cache.open == 0) weight_cache.casts.clear();
}

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

Tensor autocast_cast(const Tensor& t, DType dtype) {
  if (!castable(t) || t.dtype() == dtype) return t;
  if (weight_cache.open > 0 && t.is_leaf() && autograd::needs_grad({&t})) return cached_cast(t, dtype);
  return t.to(dtype);
}

}  // namespace detail
}  // namespace ringgrad
