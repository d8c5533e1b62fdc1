// factory.cpp — new tensors: constant, range, copied from host values, random.
#include "ringgrad/core/factory.h"

#include <cmath>
#include <cstring>
#include <numeric>

#include "ringgrad/core/backend.h"
#include "ringgrad/core/kernel_math.h"
#include "ringgrad/core/op_utils.h"
#include "ringgrad/core/reuse.h"

namespace ringgrad {

namespace {

// A contiguous tensor of `shape` over all of `storage`.
Tensor over_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype,
                    bool requires_grad) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  Tensor t(std::move(impl));
  if (requires_grad) t.requires_grad_();
  return t;
}

}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) {
  DType dtype = options.dtype.value_or(kFloat32);
  size_t nbytes = detail::checked_nbytes(shape, dtype, "empty");
  if (options.device.is_cpu() && nbytes <= detail::kReuseMaxBytes) {  // core/reuse.cpp
    Tensor t = detail::small_cpu_tensor(shape, dtype, nbytes);
    if (options.requires_grad) t.requires_grad_();
    return t;
  }
  return over_storage(std::make_shared<Storage>(nbytes, options.device), shape, dtype,
                      options.requires_grad);
}

Tensor full(const Shape& shape, double value, TensorOptions options) {
  bool wants_grad = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(shape, options);
  backend(options.device, "full").fill(ref(t), value);
  if (wants_grad) t.requires_grad_();
  return t;
}

Tensor from_blob(void* data, const Shape& shape, std::function<void(void*)> release,
                 TensorOptions options) {
  DType dtype = options.dtype.value_or(kFloat32);
  size_t nbytes = detail::checked_nbytes(shape, dtype, "from_blob");
  RG_CHECK(data != nullptr || nbytes == 0, "from_blob", "expected a data pointer, got null for ",
           nbytes, " bytes");
  return over_storage(std::make_shared<Storage>(data, nbytes, options.device, std::move(release)),
                      shape, dtype, options.requires_grad);
}

Tensor from_blob(void* data, const Shape& shape, TensorOptions options) {
  return from_blob(data, shape, nullptr, options);
}

Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }
Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  RG_CHECK(step != 0, "arange", "expected a non-zero step, got 0");
  double span = (end - start) / step;
  int64_t n = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  Tensor t = empty({n}, {.dtype = options.dtype, .device = options.device});
  backend(options.device, "arange").arange(ref(t), start, step);
  if (options.requires_grad) t.requires_grad_();
  return t;
}

Tensor arange(double end, TensorOptions options) { return arange(0, end, 1, options); }

static TensorOptions like(const Tensor& t) { return {.dtype = t.dtype(), .device = t.device()}; }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), like(t)); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), like(t)); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), like(t)); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, like(t)); }

template <typename T>
Tensor from_vector(const std::vector<T>& values, Shape shape, TensorOptions options) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};  // 0-d: use scalar_tensor
  RG_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()), "from_vector", "expected ",
           numel_of(shape), " values for shape ", shape_str(shape), ", got ", values.size());
  // Stage as the source type on the CPU, then convert/move to the requested dtype and device.
  Tensor host = empty(shape, {.dtype = dtype_of<T>::value});
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  Tensor t = host.to(options.dtype.value_or(dtype_of<T>::value)).to(options.device);
  if (options.requires_grad) t.requires_grad_();
  return t;
}
template Tensor from_vector<float>(const std::vector<float>&, Shape, TensorOptions);
template Tensor from_vector<double>(const std::vector<double>&, Shape, TensorOptions);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, Shape, TensorOptions);

// ---- random ----

Generator& default_generator() {
  static Generator gen(0x5eedULL);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

static Tensor random_tensor(const Shape& shape, TensorOptions options, Generator* gen,
                            RandomDist dist, double p0, double p1, const char* op) {
  Generator& g = gen ? *gen : default_generator();
  bool wants_grad = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(shape, options);
  uint64_t offset = g.advance(static_cast<uint64_t>(t.numel()));
  backend(options.device, op).random(ref(t), dist, g.seed(), offset, p0, p1);
  if (wants_grad) t.requires_grad_();
  return t;
}

Tensor uniform(const Shape& shape, double low, double high, TensorOptions options, Generator* gen) {
  RG_CHECK(is_floating(options.dtype.value_or(kFloat32)), "uniform",
           "expected a floating dtype, got ", *options.dtype);
  return random_tensor(shape, options, gen, RandomDist::Uniform, low, high, "uniform");
}

Tensor normal(const Shape& shape, double mean, double std, TensorOptions options, Generator* gen) {
  RG_CHECK(is_floating(options.dtype.value_or(kFloat32)), "normal",
           "expected a floating dtype, got ", *options.dtype);
  RG_CHECK(std >= 0, "normal", "expected std >= 0, got ", std);
  return random_tensor(shape, options, gen, RandomDist::Normal, mean, std, "normal");
}

Tensor rand(const Shape& shape, TensorOptions options, Generator* gen) {
  return uniform(shape, 0.0, 1.0, options, gen);
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* gen) {
  return normal(shape, 0.0, 1.0, options, gen);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen) {
  RG_CHECK(high > low, "randint", "expected low < high, got ", low, " and ", high);
  return random_tensor(shape, {.dtype = kInt64}, gen, RandomDist::Integer, static_cast<double>(low),
                       static_cast<double>(high), "randint");
}

Tensor randperm(int64_t n, Generator* gen) {
  RG_CHECK(n >= 0, "randperm", "expected n >= 0, got ", n);
  Generator& g = gen ? *gen : default_generator();
  Tensor t = arange(0, static_cast<double>(n), 1, {.dtype = kInt64});
  int64_t* p = t.data_ptr<int64_t>();
  uint64_t offset = g.advance(static_cast<uint64_t>(n));
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher–Yates, one counter per swap
    int64_t j = static_cast<int64_t>(math::philox_bits64(g.seed(), offset + i) %
                                     static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return t;
}

}  // namespace ringgrad
