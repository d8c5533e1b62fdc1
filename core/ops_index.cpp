// ops_index.cpp — index_select / gather and their adding twins, cat / stack / split / chunk.
//
// The gathering ops and the adding ops are each other's backward:
// index_select ↔ index_add, gather ↔ scatter_add. That pair is what an
// embedding table and a cross-entropy loss are built from.
#include "ringgrad/core/op_utils.h"

namespace ringgrad {

using autograd::Grads;

namespace {

// [outer, d, inner] sizes of x around `dim`.
void split_around(const Shape& s, int64_t dim, int64_t* outer, int64_t* inner) {
  *outer = 1, *inner = 1;
  for (int64_t i = 0; i < dim; ++i) *outer *= s[i];
  for (size_t i = dim + 1; i < s.size(); ++i) *inner *= s[i];
}

void check_index(const Tensor& x, const Tensor& index, const char* op) {
  detail::check_defined(index, op);
  detail::check_dtype(index, kInt64, op, "an index");
  detail::check_same_device(x, index, op);
}

// gather/scatter_add: index has x's rank and, on every dim but `dim`, at most x's size
// (torch's rule). Returns whether it is smaller somewhere.
bool check_gather_index(const Tensor& x, int64_t d, const Tensor& index, const char* op) {
  check_index(x, index, op);
  bool ok = index.dim() == x.dim(), smaller = false;
  for (int64_t i = 0; ok && i < x.dim(); ++i) {
    ok = i == d || index.size(i) <= x.size(i);
    smaller = smaller || (i != d && index.size(i) < x.size(i));
  }
  RG_CHECK(ok, op, "expected an index with the input's rank and at most its size on every dim "
           "but dim ", d, ", got ", shape_str(index.shape()), " for input ", shape_str(x.shape()));
  return smaller;
}

// The part of x that an index smaller than x reaches: x[:i0, :i1, …] on every dim but
// `dim` (a view). The kernels take index and x of one size outside dim; this is that x.
Tensor reached_part(const Tensor& x, int64_t d, const Tensor& index) {
  Tensor part = x;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != d) part = part.narrow(i, 0, index.size(i));
  return part;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* op = "index_select";
  detail::check_defined(x, op);
  check_index(x, index, op);
  RG_CHECK(index.dim() == 1, op, "expected a 1-D index, got shape ", shape_str(index.shape()));
  int64_t d = normalize_dim(dim, x.dim(), op);
  int64_t outer, inner, n = index.numel();
  split_around(x.shape(), d, &outer, &inner);
  Shape shape = x.shape();
  shape[d] = n;
  Tensor xc = x.contiguous(), ic = index.contiguous();
  Tensor out = empty(shape, detail::options_of(x));
  backend(x.device(), op).index_select(ref(xc), ref(ic), ref(out), outer, x.size(d), n, inner);
  if (autograd::needs_grad({&x}))
    autograd::record(op, out, {&x}, [s = x.shape(), d, ic](const Tensor& g) {
      return Grads{index_add(zeros(s, detail::options_of(g)), d, ic, g)};
    });
  return out;
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const char* op = "index_add";
  detail::check_defined(x, op);
  check_index(x, index, op);
  detail::check_same_dtype(x, src, op);
  detail::check_same_device(x, src, op);
  RG_CHECK(index.dim() == 1, op, "expected a 1-D index, got shape ", shape_str(index.shape()));
  int64_t d = normalize_dim(dim, x.dim(), op);
  Shape want = x.shape();
  want[d] = index.numel();
  RG_CHECK(src.shape() == want, op, "expected src of shape ", shape_str(want), ", got ",
           shape_str(src.shape()));
  int64_t outer, inner;
  split_around(x.shape(), d, &outer, &inner);
  Tensor out = x.detach().clone();
  Tensor ic = index.contiguous(), sc = src.contiguous();
  backend(x.device(), op)
      .index_add(ref(out), ref(ic), ref(sc), outer, x.size(d), index.numel(), inner);
  if (autograd::needs_grad({&x, &src}))
    autograd::record(op, out, {&x, &src}, [d, ic](const Tensor& g) {
      return Grads{g, index_select(g, d, ic)};
    });
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* op = "gather";
  detail::check_defined(x, op);
  int64_t d = normalize_dim(dim, x.dim(), op);
  bool smaller = check_gather_index(x, d, index, op);
  Tensor xc = (smaller ? reached_part(x.detach(), d, index) : x).contiguous();
  Tensor ic = index.contiguous();
  int64_t outer, inner;
  split_around(xc.shape(), d, &outer, &inner);
  Tensor out = empty(index.shape(), detail::options_of(x));
  int64_t size = x.dim() ? x.size(d) : 1, n = x.dim() ? index.size(d) : 1;  // 0-d: one element
  backend(x.device(), op).gather(ref(xc), ref(ic), ref(out), outer, size, n, inner);
  if (autograd::needs_grad({&x}))
    autograd::record(op, out, {&x}, [s = x.shape(), d, ic](const Tensor& g) {
      return Grads{scatter_add(zeros(s, detail::options_of(g)), d, ic, g)};
    });
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const char* op = "scatter_add";
  detail::check_defined(x, op);
  detail::check_same_dtype(x, src, op);
  detail::check_same_device(x, src, op);
  int64_t d = normalize_dim(dim, x.dim(), op);
  bool smaller = check_gather_index(x, d, index, op);
  RG_CHECK(src.shape() == index.shape(), op, "expected src shaped like the index ",
           shape_str(index.shape()), ", got ", shape_str(src.shape()));
  Tensor out = x.detach().clone();
  // An index smaller than x adds into the part it reaches: a contiguous copy of that
  // part goes through the kernel and back (when the part is contiguous, in place).
  Tensor part = smaller ? reached_part(out, d, index) : out;
  bool in_place = part.is_contiguous();
  Tensor target = in_place ? part : part.clone();
  Tensor ic = index.contiguous(), sc = src.contiguous();
  int64_t outer, inner;
  split_around(target.shape(), d, &outer, &inner);
  int64_t size = x.dim() ? x.size(d) : 1, n = x.dim() ? index.size(d) : 1;  // 0-d: one element
  Backend& be = backend(x.device(), op);
  be.scatter_add(ref(target), ref(ic), ref(sc), outer, size, n, inner);
  if (!in_place) be.copy(ref(target), ref(part));
  if (autograd::needs_grad({&x, &src}))
    autograd::record(op, out, {&x, &src}, [d, ic](const Tensor& g) {
      return Grads{g, gather(g, d, ic)};
    });
  return out;
}

// ---------------------------------------------------------------- cat / stack / split

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  const char* op = "cat";
  RG_CHECK(!tensors.empty(), op, "expected at least one tensor, got none");
  const Tensor& first = tensors[0];
  int64_t d = normalize_dim(dim, first.dim(), op);
  RG_CHECK(first.dim() > 0, op, "expected tensors with at least 1 dim, got a 0-d tensor");
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_same_device(first, t, op);
    detail::check_same_dtype(first, t, op);
    bool ok = t.dim() == first.dim();
    for (int64_t j = 0; ok && j < t.dim(); ++j) ok = j == d || t.size(j) == first.size(j);
    RG_CHECK(ok, op, "expected shapes that match except along dim ", d, ", got ",
             shape_str(first.shape()), " and ", shape_str(t.shape()), " (tensor ", i, ")");
    shape[d] += t.size(d);
  }
  Tensor out = empty(shape, detail::options_of(first));
  Backend& be = backend(first.device(), op);
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    be.copy(ref(t), ref(out.narrow(d, at, t.size(d))));
    sizes.push_back(t.size(d));
    at += t.size(d);
  }
  // The node takes all inputs; record() accepts a fixed list, so attach directly.
  if (is_grad_enabled()) {
    std::vector<const Tensor*> inputs;
    bool any = false;
    for (const Tensor& t : tensors) inputs.push_back(&t), any = any || t.requires_grad();
    if (any)
      autograd::attach(out, op, inputs, [d, sizes](const Tensor& g, const std::vector<bool>&) {
        Grads grads;
        int64_t start = 0;
        for (int64_t s : sizes) grads.push_back(g.narrow(d, start, s)), start += s;
        return grads;
      });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  RG_CHECK(!tensors.empty(), "stack", "expected at least one tensor, got none");
  int64_t d = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (const Tensor& t : tensors) {
    RG_CHECK(t.shape() == tensors[0].shape(), "stack", "expected tensors of one shape, got ",
             shape_str(tensors[0].shape()), " and ", shape_str(t.shape()));
    expanded.push_back(t.unsqueeze(d));
  }
  return cat(expanded, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  int64_t d = normalize_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    RG_CHECK(s >= 0, "split", "expected non-negative sizes, got ", s);
    total += s;
  }
  RG_CHECK(total == x.size(d), "split", "expected sizes that add up to ", x.size(d), " (dim ", d,
           " of ", shape_str(x.shape()), "), got ", total);
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t s : sizes) parts.push_back(x.narrow(d, start, s)), start += s;
  return parts;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  RG_CHECK(split_size > 0, "split", "expected split_size > 0, got ", split_size);
  int64_t n = x.size(normalize_dim(dim, x.dim(), "split"));
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  RG_CHECK(chunks > 0, "chunk", "expected chunks > 0, got ", chunks);
  int64_t n = x.size(normalize_dim(dim, x.dim(), "chunk"));
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}

}  // namespace ringgrad
