// tensor.h — the Tensor: a shared handle to a strided view of a Storage.
//
// A Tensor is cheap to copy (it is a reference, like a torch.Tensor in Python):
// `Tensor b = a;` makes b name the same data. Shape, strides and offset
// describe which elements of the storage it sees; views (transpose, slice, …)
// share storage with their source. Tensors that require grad also carry
// their autograd state: the node that made them (grad_fn) or, for leaves,
// their accumulated gradient.
//
// Free functions (rg::matmul, rg::relu, …) are declared in ops.h; the common
// ones are also members here, so both `rg::sum(x, 1)` and `x.sum(1)` work.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringgrad/core/device.h"
#include "ringgrad/core/dtype.h"
#include "ringgrad/core/error.h"
#include "ringgrad/core/storage.h"

namespace ringgrad {

using Shape = std::vector<int64_t>;
using Dims = std::vector<int64_t>;

namespace autograd {
struct Node;
}

class Tensor;
struct ValuesIndices;  // x.max(dim) / x.min(dim): values and their int64 indices

// How a new tensor is made: rg::zeros({2, 3}, {.dtype = rg::kFloat64, .requires_grad = true}).
// An unset dtype means the factory's default: float32, or the source's type (from_vector).
struct TensorOptions {
  std::optional<DType> dtype = std::nullopt;
  Device device = kCPU;
  bool requires_grad = false;
};

// The state behind a Tensor handle. Users never touch it directly.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;

  // autograd
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;         // set on results of recorded ops
  std::shared_ptr<TensorImpl> grad;                // leaves: accumulated gradient
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: node that accumulates into grad
  std::vector<std::function<void(Tensor&)>> post_accumulate_grad_hooks;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }

  // ---- metadata ----
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  // Negative dims count from the end. Inline (every op asks them many times); a dim out of
  // range, or any dim of a 0-d tensor, is a clear error from the out-of-line path.
  int64_t size(int64_t dim) const {
    const int64_t* e = entry(impl().shape, dim);
    return e ? *e : size_or_fail(dim);
  }
  int64_t stride(int64_t dim) const {
    const int64_t* e = entry(impl().strides, dim);
    return e ? *e : stride_or_fail(dim);
  }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t numel() const;
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const;
  bool is_contiguous() const;
  size_t nbytes() const { return numel() * element_size(dtype()); }

  // Pointer to the first element (offset applied). CPU tensors only; T must match dtype().
  template <typename T>
  T* data_ptr() const;
  void* raw_data() const;  // any device; first element
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }

  // The single value of a one-element tensor (copied to the host if needed).
  double item() const;
  template <typename T>
  T item() const {
    return static_cast<T>(item());
  }
  // All elements, in row-major order, converted to T (copied to the host if needed).
  template <typename T>
  std::vector<T> tolist() const;

  // ---- autograd ----
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& requires_grad_(bool on = true);  // only on leaves
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  // The name of the op that made this tensor ("mul", "matmul"), or "" for a leaf:
  // what printing shows as grad_fn=, without needing autograd's Node type.
  std::string grad_fn_name() const;
  Tensor grad() const;             // undefined until a backward reaches this leaf
  void set_grad(const Tensor& g);  // replace (or clear, with an undefined tensor) the gradient
  // Backpropagate from this tensor. A non-scalar needs `gradient` (same shape).
  // Without retain_graph the graph's saved tensors are freed as backward passes.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same data, no autograd history
  // Make this tensor (and every handle sharing it) view `data`'s storage, shape
  // and dtype, keeping its own autograd identity: how a module moves its
  // parameters to another device in place, like `p.data = p.data.to(device)`.
  void set_data(const Tensor& data);
  // Leaves only: hook(leaf) runs once per backward, right after this leaf's
  // gradient for that backward has been fully accumulated into .grad().
  void register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook);

  // ---- views (share storage) and copies ----
  Tensor view(const Shape& shape) const;     // needs compatible strides; -1 infers one dim
  Tensor reshape(const Shape& shape) const;  // view when possible, copy otherwise
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const Dims& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end,
               int64_t step = 1) const;  // python x[s:e:step]
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;  // drops `dim`: x[index] for dim 0
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;  // broadcast view (stride 0); -1 keeps a dim
  Tensor contiguous() const;                // self if already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;

  // ---- math (forwarders to the free functions in ops.h) ----
  Tensor sum() const;
  Tensor sum(int64_t dim, bool keepdim = false) const;
  Tensor sum(const Dims& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(int64_t dim, bool keepdim = false) const;
  Tensor mean(const Dims& dims, bool keepdim = false) const;
  Tensor max() const;  // amax over all dims
  // torch's x.max(dim): {values, indices}; the gradient goes to the index (ops.h)
  ValuesIndices max(int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  ValuesIndices min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor logsumexp(int64_t dim, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor matmul(const Tensor& other) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor pow(double exponent) const;
  Tensor clamp(double min, double max) const;

  // ---- in-place (no autograd: refused on tensors that need grad while grad mode is on) ----
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // src broadcasts to self's shape; dtype converts
  Tensor& add_(const Tensor& other, double alpha = 1.0);  // self += alpha * other
  Tensor& sub_(const Tensor& other) { return add_(other, -1.0); }
  Tensor& mul_(double factor);
  Tensor& mul_(const Tensor& other);
  Tensor& operator+=(const Tensor& other) { return add_(other); }
  Tensor& operator-=(const Tensor& other) { return add_(other, -1.0); }
  Tensor& operator*=(double factor) { return mul_(factor); }

  // Shape/dtype/device summary, e.g. "Tensor[2, 3] float32 cpu".
  std::string describe() const;

  TensorImpl& impl() const {
    if (impl_ == nullptr) [[unlikely]]
      fail_undefined();
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  // Entry dim of a shape or strides (negative from the end); null when out of range.
  static const int64_t* entry(const Shape& s, int64_t dim) {
    const int64_t n = static_cast<int64_t>(s.size()), d = dim < 0 ? dim + n : dim;
    if (d < 0 || d >= n) [[unlikely]]
      return nullptr;
    return s.data() + d;
  }
  [[noreturn]] static void fail_undefined();
  int64_t size_or_fail(int64_t dim) const;
  int64_t stride_or_fail(int64_t dim) const;

  std::shared_ptr<TensorImpl> impl_;
};

// What torch.max(x, dim) / torch.min(x, dim) return: `auto [values, indices] = x.max(1);`
struct ValuesIndices {
  Tensor values;   // the extremes, differentiable
  Tensor indices;  // int64 positions along dim
};

// Prints shape, dtype, device and values (abridged past a few rows/columns).
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Shape helpers used by ops and by error messages.
int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
void contiguous_strides(const Shape& shape, Shape& strides);  // into strides, in its capacity
int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op);  // -1 -> ndim-1; checks range
std::string shape_str(const Shape& shape);                         // "[2, 3]"

}  // namespace ringgrad
