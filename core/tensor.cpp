// tensor.cpp — Tensor metadata, data access, device/dtype conversion and in-place updates.
#include "ringgrad/core/tensor.h"

#include <cstring>

#include "ringgrad/autograd/function.h"
#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/backend.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"

namespace ringgrad {

// ---------------------------------------------------------------- shape helpers

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides;
  contiguous_strides(shape, strides);
  return strides;
}

void contiguous_strides(const Shape& shape, Shape& strides) {
  strides.resize(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
}

int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  RG_CHECK(dim >= lo && dim <= hi, op, "expected dim in [", lo, ", ", hi, "] for a ", ndim,
           "-d tensor, got ", dim);
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

std::string shape_str(const Shape& shape) {
  using detail::operator<<;
  return detail::concat(shape);
}

// ---------------------------------------------------------------- backend dispatch

static TensorRef make_ref(const Tensor& t, const Shape& shape, const Shape& strides) {
  RG_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "tensor", "expected at most ", kMaxDims,
           " dims, got ", shape.size(), " (shape ", shape_str(shape), ")");
  TensorRef r;
  r.data = t.raw_data();
  r.dtype = t.dtype();
  r.ndim = static_cast<int>(shape.size());
  for (int i = 0; i < r.ndim; ++i) {
    r.shape[i] = shape[i];
    r.strides[i] = strides[i];
  }
  return r;
}

TensorRef ref(const Tensor& t) { return make_ref(t, t.shape(), t.strides()); }

TensorRef ref(const Tensor& t, const Shape& as_shape) {
  // Right-align t's dims with as_shape; size-1 or missing dims get stride 0.
  const Shape& s = t.shape();
  size_t lead = as_shape.size() - s.size();
  Shape strides(as_shape.size(), 0);
  for (size_t i = 0; i < s.size(); ++i)
    strides[lead + i] = (s[i] == 1 && as_shape[lead + i] != 1) ? 0 : t.strides()[i];
  return make_ref(t, as_shape, strides);
}

// ---------------------------------------------------------------- metadata

void Tensor::fail_undefined() {
  fail("tensor",
       "expected a defined tensor, got an undefined one "
       "(default-constructed, or a gradient not yet computed)");
}

// The slow paths of size() and stride() (tensor.h), reached only for a dim out of range:
// the error. (normalize_dim lets a reduction name dim 0 or -1 of a 0-d tensor; a scalar
// has no size.)
namespace {
int64_t entry_or_fail(const Shape& s, int64_t dim, const char* op) {
  const int64_t ndim = static_cast<int64_t>(s.size());
  RG_CHECK(ndim > 0, op, "expected a tensor with dims, got a 0-d tensor (dim ", dim, ")");
  return s[static_cast<size_t>(normalize_dim(dim, ndim, op))];
}
}  // namespace
int64_t Tensor::size_or_fail(int64_t dim) const { return entry_or_fail(shape(), dim, "size"); }
int64_t Tensor::stride_or_fail(int64_t dim) const {
  return entry_or_fail(strides(), dim, "stride");
}
int64_t Tensor::numel() const { return numel_of(shape()); }
Device Tensor::device() const { return impl().storage->device(); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape().size(); i-- > 0;) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  RG_CHECK(!impl().storage->released(), "tensor",
           "this tensor's memory has been released: it views a sharded unit's parameters, which "
           "FullyShardedDataParallel gathers only while the unit runs. Call the unit as "
           "module(x) inside the FSDP model's forward (its hooks gather it), or read the "
           "parameters inside fsdp.summon_full_params()");
  return static_cast<char*>(impl().storage->data()) + offset() * element_size(dtype());
}

template <typename T>
T* Tensor::data_ptr() const {
  RG_CHECK(dtype() == dtype_of<T>::value, "data_ptr", "expected dtype ", dtype_of<T>::value,
           ", got ", dtype());
  RG_CHECK(device().is_cpu(), "data_ptr", "expected a cpu tensor, got one on ", device(),
           " (call .to(rg::kCPU) first)");
  return static_cast<T*>(raw_data());
}
template float* Tensor::data_ptr<float>() const;
template double* Tensor::data_ptr<double>() const;
template int64_t* Tensor::data_ptr<int64_t>() const;
template bool* Tensor::data_ptr<bool>() const;

std::string Tensor::describe() const {
  if (!defined()) return "Tensor(undefined)";
  return detail::concat("Tensor", shape_str(shape()), " ", dtype(), " ", device());
}

// ---------------------------------------------------------------- host access

// A contiguous CPU copy of t (t itself when it already is one).
static Tensor host_contiguous(const Tensor& t) { return t.to(kCPU).contiguous(); }

template <typename T>
std::vector<T> Tensor::tolist() const {
  Tensor h = host_contiguous(*this).to(dtype_of<T>::value);
  const T* p = h.data_ptr<T>();
  return std::vector<T>(p, p + h.numel());
}
template std::vector<float> Tensor::tolist<float>() const;
template std::vector<double> Tensor::tolist<double>() const;
template std::vector<int64_t> Tensor::tolist<int64_t>() const;

double Tensor::item() const {
  RG_CHECK(numel() == 1, "item", "expected a tensor with one element, got shape ",
           shape_str(shape()));
  return host_contiguous(*this).to(kFloat64).data_ptr<double>()[0];
}

// ---------------------------------------------------------------- conversions

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), {.dtype = dtype(), .device = device()});
  backend(device(), "clone").copy(ref(*this), ref(out));
  if (autograd::needs_grad({this}))
    autograd::record("clone", out, {this}, [](const Tensor& g) { return autograd::Grads{g}; });
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), {.dtype = target, .device = device()});
  backend(device(), "to").copy(ref(*this), ref(out));
  if (is_floating(target) && is_floating(dtype())) {
    DType source = dtype();
    if (autograd::needs_grad({this}))
      autograd::record("to", out, {this},
                       [source](const Tensor& g) { return autograd::Grads{g.to(source)}; });
  }
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape(), {.dtype = dtype(), .device = target});
  if (src.device().is_cpu()) {
    backend(target, "to").copy_from_host(out.raw_data(), src.raw_data(), src.nbytes());
  } else if (target.is_cpu()) {
    backend(src.device(), "to").copy_to_host(out.raw_data(), src.raw_data(), src.nbytes());
  } else {  // device to device, through the host
    Tensor host = src.to(kCPU);
    backend(target, "to").copy_from_host(out.raw_data(), host.raw_data(), host.nbytes());
  }
  Device source = device();
  if (autograd::needs_grad({this}))
    autograd::record("to", out, {this},
                     [source](const Tensor& g) { return autograd::Grads{g.to(source)}; });
  return out;
}

// ---------------------------------------------------------------- autograd accessors

Tensor& Tensor::requires_grad_(bool on) {
  RG_CHECK(is_leaf(), "requires_grad_", "expected a leaf tensor, got the result of '",
           grad_fn()->name, "' (use .detach().requires_grad_() for a new leaf)");
  RG_CHECK(!on || is_floating(dtype()), "requires_grad_", "expected a floating-point tensor, got ",
           dtype());
  impl().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }

void Tensor::set_grad(const Tensor& g) {
  if (g.defined())
    RG_CHECK(g.shape() == shape(), "set_grad", "expected a gradient of shape ", shape_str(shape()),
             ", got ", shape_str(g.shape()));
  impl().grad = g.impl_ptr();
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::run_backward(*this, gradient, retain_graph);
}

std::string Tensor::grad_fn_name() const { return is_leaf() ? std::string() : grad_fn()->name; }

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = this->impl().storage;
  impl->shape = shape();
  impl->strides = strides();
  impl->offset = offset();
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

void Tensor::set_data(const Tensor& data) {
  RG_CHECK(is_leaf(), "set_data", "expected a leaf tensor, got the result of '", grad_fn()->name,
           "'");
  TensorImpl& self = impl();
  const TensorImpl& src = data.impl();
  self.storage = src.storage;
  self.shape = src.shape;
  self.strides = src.strides;
  self.offset = src.offset;
  self.dtype = src.dtype;
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) {
  RG_CHECK(is_leaf() && requires_grad(), "register_post_accumulate_grad_hook",
           "expected a leaf that requires grad, got ",
           is_leaf() ? "a leaf without requires_grad" : "a non-leaf tensor");
  impl().post_accumulate_grad_hooks.push_back(std::move(hook));
}

// ---------------------------------------------------------------- member forwarders

Tensor Tensor::sum() const { return ringgrad::sum(*this); }
Tensor Tensor::sum(int64_t dim, bool keepdim) const { return ringgrad::sum(*this, {dim}, keepdim); }
Tensor Tensor::sum(const Dims& dims, bool keepdim) const {
  return ringgrad::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const { return ringgrad::mean(*this); }
Tensor Tensor::mean(int64_t dim, bool keepdim) const {
  return ringgrad::mean(*this, {dim}, keepdim);
}
Tensor Tensor::mean(const Dims& dims, bool keepdim) const {
  return ringgrad::mean(*this, dims, keepdim);
}
Tensor Tensor::max() const { return amax(*this); }
ValuesIndices Tensor::max(int64_t dim, bool keepdim) const {
  return ringgrad::max(*this, dim, keepdim);
}
Tensor Tensor::min() const { return amin(*this); }
ValuesIndices Tensor::min(int64_t dim, bool keepdim) const {
  return ringgrad::min(*this, dim, keepdim);
}
Tensor Tensor::argmax(int64_t dim, bool keepdim) const {
  return ringgrad::argmax(*this, dim, keepdim);
}
Tensor Tensor::logsumexp(int64_t dim, bool keepdim) const {
  return ringgrad::logsumexp(*this, {dim}, keepdim);
}
Tensor Tensor::softmax(int64_t dim) const { return ringgrad::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return ringgrad::log_softmax(*this, dim); }
Tensor Tensor::matmul(const Tensor& other) const { return ringgrad::matmul(*this, other); }
Tensor Tensor::exp() const { return ringgrad::exp(*this); }
Tensor Tensor::log() const { return ringgrad::log(*this); }
Tensor Tensor::sqrt() const { return ringgrad::sqrt(*this); }
Tensor Tensor::abs() const { return ringgrad::abs(*this); }
Tensor Tensor::relu() const { return ringgrad::relu(*this); }
Tensor Tensor::sigmoid() const { return ringgrad::sigmoid(*this); }
Tensor Tensor::tanh() const { return ringgrad::tanh(*this); }
Tensor Tensor::pow(double exponent) const { return ringgrad::pow(*this, exponent); }
Tensor Tensor::clamp(double min, double max) const { return ringgrad::clamp(*this, min, max); }

}  // namespace ringgrad
