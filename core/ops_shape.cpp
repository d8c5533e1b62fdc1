// ops_shape.cpp — views: reshape, transpose, permute, slice, expand, …
//
// A view shares its source's storage and only changes shape, strides and
// offset; no data moves. Each view's backward maps the gradient back to the
// source's shape: the inverse permutation, a reshape, or (for slices) the
// gradient written into a zero tensor at the slice's place.
#include <algorithm>
#include <numeric>

#include "ringgrad/core/op_utils.h"

namespace ringgrad {

using autograd::Grads;

namespace {

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

// Replace one -1 in `shape` by whatever makes it hold as many elements as `source`.
Shape infer_shape(const Shape& source, Shape shape, const char* op) {
  int64_t numel = numel_of(source), known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      RG_CHECK(infer_at < 0, op, "expected at most one -1 in the shape, got ", shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      RG_CHECK(shape[i] >= 0, op, "expected non-negative sizes, got ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer_at >= 0 && known != 0 && numel % known == 0) shape[infer_at] = numel / known;
  RG_CHECK(numel_of(shape) == numel, op, "expected a shape with ", numel,
           " elements to match the input ", shape_str(source), ", got ", shape_str(shape));
  return shape;
}

// Strides that let `shape` view the memory of (old_shape, old_strides), if any exist
// (the algorithm of PyTorch's computeStride: dims regroup only within contiguous chunks).
bool view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& shape,
                  Shape* strides) {
  strides->assign(shape.size(), 0);
  if (numel_of(old_shape) == 0 || old_shape.empty()) {
    *strides = contiguous_strides(shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 ||
        (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        (*strides)[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  Shape shape = infer_shape(this->shape(), requested, "view");
  Shape new_strides;
  RG_CHECK(view_strides(this->shape(), strides(), shape, &new_strides), "view",
           "expected a shape compatible with the input's memory layout, got ", shape_str(shape),
           " for a non-contiguous ", describe(), " (use reshape(), which copies when needed)");
  Tensor out = make_view(*this, shape, new_strides, offset());
  if (autograd::needs_grad({this}))
    autograd::record("view", out, {this},
                     [s = this->shape()](const Tensor& g) { return Grads{g.reshape(s)}; });
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  Shape shape = infer_shape(this->shape(), requested, "reshape");
  Shape new_strides;
  if (view_strides(this->shape(), strides(), shape, &new_strides)) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t s = normalize_dim(start_dim, dim(), "flatten"),
          e = normalize_dim(end_dim, dim(), "flatten");
  RG_CHECK(s <= e, "flatten", "expected start_dim <= end_dim, got ", start_dim, " and ", end_dim);
  Shape shape(this->shape().begin(), this->shape().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= size(d);
  shape.push_back(n);
  shape.insert(shape.end(), this->shape().begin() + e + 1, this->shape().end());
  return reshape(shape);
}

Tensor Tensor::permute(const Dims& dims) const {
  RG_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute", "expected ", dim(), " dims, got ",
           dims.size());
  Shape shape(dim()), st(dim());
  Dims inverse(dim(), -1);
  for (int64_t i = 0; i < dim(); ++i) {
    int64_t d = normalize_dim(dims[i], dim(), "permute");
    RG_CHECK(inverse[d] < 0, "permute", "expected each dim once, got ", dims[i], " twice");
    inverse[d] = i;
    shape[i] = size(d);
    st[i] = stride(d);
  }
  Tensor out = make_view(*this, shape, st, offset());
  if (autograd::needs_grad({this}))
    autograd::record("permute", out, {this},
                     [inverse](const Tensor& g) { return Grads{g.permute(inverse)}; });
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  if (dim() < 2 && dim0 == 0 && dim1 == 0) return *this;
  Dims order(dim());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[normalize_dim(dim0, dim(), "transpose")],
            order[normalize_dim(dim1, dim(), "transpose")]);
  return permute(order);
}

Tensor Tensor::t() const {
  RG_CHECK(dim() <= 2, "t", "expected a tensor with at most 2 dims, got shape ",
           shape_str(shape()));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  int64_t d = normalize_dim(dim_, dim(), "slice");
  RG_CHECK(step > 0, "slice", "expected step > 0, got ", step);
  int64_t n = size(d);
  auto clampi = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clampi(start);
  end = std::max(clampi(end), start);
  Shape shape = this->shape(), st = strides();
  shape[d] = (end - start + step - 1) / step;
  st[d] = stride(d) * step;
  Tensor out = make_view(*this, shape, st, offset() + start * stride(d));
  autograd::record_view_backward("slice", out, *this, [d, start, end, step](const Tensor& z) {
    return z.slice(d, start, end, step);
  });
  return out;
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  int64_t d = normalize_dim(dim_, dim(), "narrow");
  RG_CHECK(start >= 0 && length >= 0 && start + length <= size(d), "narrow",
           "expected 0 <= start and start + length <= ", size(d), " (dim ", d, " of ",
           shape_str(shape()), "), got start ", start, " and length ", length);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  int64_t d = normalize_dim(dim_, dim(), "select");
  RG_CHECK(dim() > 0, "select", "expected a tensor with at least 1 dim, got a 0-d tensor");
  int64_t n = size(d);
  RG_CHECK(index >= -n && index < n, "select", "expected an index in [", -n, ", ", n, ") for dim ",
           d, " of ", shape_str(shape()), ", got ", index);
  if (index < 0) index += n;
  Shape shape = this->shape(), st = strides();
  shape.erase(shape.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(*this, shape, st, offset() + index * stride(d));
  autograd::record_view_backward("select", out, *this,
                                 [d, index](const Tensor& z) { return z.select(d, index); });
  return out;
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  int64_t d = normalize_dim(dim_, dim() + 1, "unsqueeze");
  Shape shape = this->shape(), st = strides();
  int64_t s = d < dim() ? stride(d) * size(d) : 1;
  shape.insert(shape.begin() + d, 1);
  st.insert(st.begin() + d, s);
  Tensor out = make_view(*this, shape, st, offset());
  if (autograd::needs_grad({this}))
    autograd::record("unsqueeze", out, {this},
                     [d](const Tensor& g) { return Grads{g.squeeze(d)}; });
  return out;
}

Tensor Tensor::squeeze(int64_t dim_) const {
  int64_t d = normalize_dim(dim_, dim(), "squeeze");
  if (dim() == 0 || size(d) != 1) return *this;  // like torch: squeezing a non-1 dim is a no-op
  Shape shape = this->shape(), st = strides();
  shape.erase(shape.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(*this, shape, st, offset());
  if (autograd::needs_grad({this}))
    autograd::record("squeeze", out, {this},
                     [d](const Tensor& g) { return Grads{g.unsqueeze(d)}; });
  return out;
}

Tensor Tensor::expand(const Shape& requested) const {
  RG_CHECK(requested.size() >= this->shape().size(), "expand", "expected at least ", dim(),
           " dims, got ", shape_str(requested));
  size_t lead = requested.size() - this->shape().size();
  Shape shape(requested.size()), st(requested.size(), 0);
  for (size_t i = 0; i < requested.size(); ++i) {
    if (i < lead) {
      RG_CHECK(requested[i] >= 0, "expand", "expected sizes for new leading dims, got ",
               shape_str(requested));
      shape[i] = requested[i];
      continue;
    }
    int64_t have = this->shape()[i - lead], want = requested[i] == -1 ? have : requested[i];
    RG_CHECK(have == want || have == 1, "expand", "expected a shape that ",
             shape_str(this->shape()), " broadcasts to, got ", shape_str(requested));
    shape[i] = want;
    st[i] = have == want ? strides()[i - lead] : 0;
  }
  if (shape == this->shape()) return *this;
  Tensor out = make_view(*this, shape, st, offset());
  if (autograd::needs_grad({this}))
    autograd::record("expand", out, {this},
                     [s = this->shape()](const Tensor& g) { return Grads{sum_to(g, s)}; });
  return out;
}

}  // namespace ringgrad
