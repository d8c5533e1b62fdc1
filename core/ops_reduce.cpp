// ops_reduce.cpp — reductions over dims, and softmax / log_softmax.
//
// The backend reduces the middle axis of a contiguous [outer, r, inner] block.
// plan_reduction() turns "reduce dims D of x" into that form: when D is a run of
// adjacent dims no data moves; otherwise the kept dims are permuted to the front.
#include <algorithm>
#include <cmath>

#include "ringgrad/core/autocast.h"
#include "ringgrad/core/op_utils.h"

namespace ringgrad {

using autograd::Grads;
using detail::scalar_like;

namespace {

struct Reduction {
  Tensor input;  // contiguous, laid out as [outer, r, inner]
  int64_t outer = 1, r = 1, inner = 1;
  Shape keep_shape;  // result with reduced dims kept as 1
  Shape out_shape;   // result as returned (keepdim or not)
};

std::vector<bool> reduced_mask(const Tensor& x, const Dims& dims, const char* op) {
  int64_t nd = x.dim();
  std::vector<bool> mask(nd, dims.empty());
  for (int64_t d : dims) {
    int64_t n = normalize_dim(d, nd, op);
    if (nd == 0) continue;
    RG_CHECK(!mask[n], op, "expected each dim once, got dim ", d, " twice");
    mask[n] = true;
  }
  return mask;
}

Reduction plan_reduction(const Tensor& x, const Dims& dims, bool keepdim, const char* op) {
  detail::check_defined(x, op);
  std::vector<bool> mask = reduced_mask(x, dims, op);
  Reduction p;
  int64_t nd = x.dim();
  int64_t first = nd, last = -1;
  for (int64_t d = 0; d < nd; ++d) {
    p.keep_shape.push_back(mask[d] ? 1 : x.size(d));
    if (!mask[d]) p.out_shape.push_back(x.size(d));
    if (mask[d]) first = std::min(first, d), last = std::max(last, d);
  }
  if (keepdim) p.out_shape = p.keep_shape;
  bool adjacent = true;
  for (int64_t d = first; d <= last; ++d) adjacent = adjacent && mask[d];
  if (last < 0) {  // nothing to reduce (0-d input)
    p.input = x.contiguous();
    return p;
  }
  if (adjacent) {
    p.input = x.contiguous();
    for (int64_t d = 0; d < first; ++d) p.outer *= x.size(d);
    for (int64_t d = first; d <= last; ++d) p.r *= x.size(d);
    for (int64_t d = last + 1; d < nd; ++d) p.inner *= x.size(d);
    return p;
  }
  Dims order;
  for (int64_t d = 0; d < nd; ++d)
    if (!mask[d]) order.push_back(d), p.outer *= x.size(d);
  for (int64_t d = 0; d < nd; ++d)
    if (mask[d]) order.push_back(d), p.r *= x.size(d);
  p.input = x.detach().permute(order).contiguous();
  return p;
}

// Run the backend reduction of `p` into a new tensor of `dtype`.
Tensor run_reduction(ReduceOp op, const Reduction& p, DType dtype, const char* name) {
  Tensor out = empty(p.out_shape, {.dtype = dtype, .device = p.input.device()});
  RG_CHECK(p.r > 0 || op == ReduceOp::Sum, name, "expected a non-empty dim to reduce, got shape ",
           shape_str(p.input.shape()));
  backend(out.device(), name).reduce(op, ref(p.input), ref(out), p.outer, p.r, p.inner);
  return out;
}

// Broadcast a reduced gradient (out_shape) back over the input's shape.
Tensor expand_back(const Tensor& g, const Shape& keep_shape, const Shape& in_shape) {
  return g.reshape(keep_shape).expand(in_shape);
}

}  // namespace

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) {
  Reduction p = plan_reduction(x, dims, keepdim, "sum");
  DType dt = is_floating(x.dtype()) ? x.dtype() : kInt64;
  Tensor out = run_reduction(ReduceOp::Sum, p, dt, "sum");
  if (autograd::needs_grad({&x}))
    autograd::record("sum", out, {&x}, [k = p.keep_shape, s = x.shape()](const Tensor& g) {
      return Grads{expand_back(g, k, s)};
    });
  return out;
}

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  detail::check_floating(x, "mean");
  Reduction p = plan_reduction(x, dims, keepdim, "mean");
  Tensor out = run_reduction(ReduceOp::Sum, p, x.dtype(), "mean");
  double count = static_cast<double>(p.r);
  {
    NoGradGuard no_grad;
    out.mul_(1.0 / count);
  }
  if (autograd::needs_grad({&x}))
    autograd::record("mean", out, {&x}, [k = p.keep_shape, s = x.shape(), count](const Tensor& g) {
      return Grads{expand_back(g * (1.0 / count), k, s)};
    });
  return out;
}

// amax/amin: the gradient flows to the elements equal to the result, split evenly among ties.
static Tensor extreme(ReduceOp op, const char* name, const Tensor& x, const Dims& dims,
                      bool keepdim) {
  RG_CHECK(x.dtype() != kBool, name, "expected a numeric tensor, got bool");
  Reduction p = plan_reduction(x, dims, keepdim, name);
  Tensor out = run_reduction(op, p, x.dtype(), name);
  if (autograd::needs_grad({&x}))
    autograd::record(
        name, out, {&x},
        [x = x.detach(), y = out.detach(), k = p.keep_shape, dims](const Tensor& g) {
          Tensor hit = eq(x, y.reshape(k)).to(g.dtype());
          Tensor count = sum(hit, dims, true);
          return Grads{mul(hit, div(g.reshape(k), count))};
        });
  return out;
}

Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) {
  return extreme(ReduceOp::Max, "amax", x, dims, keepdim);
}
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) {
  return extreme(ReduceOp::Min, "amin", x, dims, keepdim);
}

Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim) {
  if (detail::autocast_widen({&x})) return logsumexp(x.to(kFloat32), dims, keepdim);
  detail::check_floating(x, "logsumexp");
  Reduction p = plan_reduction(x, dims, keepdim, "logsumexp");
  Tensor out = run_reduction(ReduceOp::LogSumExp, p, x.dtype(), "logsumexp");
  if (autograd::needs_grad({&x}))
    autograd::record(
        "logsumexp", out, {&x},
        [x = x.detach(), y = out.detach(), k = p.keep_shape](const Tensor& g) {
          return Grads{mul(g.reshape(k), exp(sub(x, y.reshape(k))))};  // softmax weights
        });
  return out;
}

static Tensor arg_extreme(ReduceOp op, const char* name, const Tensor& x, int64_t dim,
                          bool keepdim) {
  RG_CHECK(x.dtype() != kBool, name, "expected a numeric tensor, got bool");
  Reduction p = plan_reduction(x, {dim}, keepdim, name);
  return run_reduction(op, p, kInt64, name);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extreme(ReduceOp::ArgMax, "argmax", x, dim, keepdim);
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extreme(ReduceOp::ArgMin, "argmin", x, dim, keepdim);
}

// torch.max(x, dim) / torch.min(x, dim): the index first (argmax's rule: first on ties,
// first NaN), then the values gathered at it, so values and indices always agree and
// gather's backward (a scatter into zeros) sends the whole gradient to that index.
static ValuesIndices value_extreme(ReduceOp arg_op, const char* name, const Tensor& x,
                                   int64_t dim, bool keepdim) {
  Tensor index = arg_extreme(arg_op, name, x, dim, /*keepdim=*/true);
  int64_t d = normalize_dim(dim, x.dim(), name);
  Tensor values = gather(x, d, index);
  if (!keepdim && x.dim() > 0) values = values.squeeze(d), index = index.squeeze(d);
  return {values, index};
}

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return value_extreme(ReduceOp::ArgMax, "max", x, dim, keepdim);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return value_extreme(ReduceOp::ArgMin, "min", x, dim, keepdim);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  RG_CHECK(broadcast_shapes(shape, x.shape(), "sum_to") == x.shape(), "sum_to",
           "expected a shape that broadcasts to ", shape_str(x.shape()), ", got ",
           shape_str(shape));
  size_t lead = x.shape().size() - shape.size();
  Dims dims;
  for (size_t i = 0; i < x.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1))
      dims.push_back(static_cast<int64_t>(i));
  Tensor s = dims.empty() ? x : sum(x, dims, true);
  return s.reshape(shape);
}

// ---------------------------------------------------------------- softmax

static Tensor softmax_impl(const Tensor& x, int64_t dim, bool log, const char* name) {
  if (detail::autocast_widen({&x}))  // under rg::autocast: in float32
    return softmax_impl(x.to(kFloat32), dim, log, name);
  detail::check_defined(x, name);
  detail::check_floating(x, name);
  int64_t d = normalize_dim(dim, x.dim(), name);
  Tensor in = x.contiguous();
  int64_t outer = 1, r = x.dim() ? x.size(d) : 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (int64_t i = d + 1; i < x.dim(); ++i) inner *= x.size(i);
  Tensor out = empty(x.shape(), detail::options_of(x));
  backend(x.device(), name).softmax(ref(in), ref(out), outer, r, inner, log);
  if (autograd::needs_grad({&x}))
    autograd::record(name, out, {&x},
                     [y = out.detach(), outer, r, inner, log, name](const Tensor& g) {
                       Tensor gc = g.contiguous();
                       Tensor dx = empty(y.shape(), detail::options_of(y));
                       backend(y.device(), name)
                           .softmax_backward(ref(gc), ref(y), ref(dx), outer, r, inner, log);
                       return Grads{dx};
                     });
  return out;
}

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false, "softmax"); }
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(x, dim, true, "log_softmax");
}

}  // namespace ringgrad
