// ops_elementwise.cpp — broadcasting binary ops, unary math, where/masked_fill.
//
// Each op: check, compute through the backend, then record its backward right
// below. Gradients of broadcast inputs are summed back to the input's shape
// (sum_to), which is all broadcasting asks of autograd.
#include <cmath>

#include "ringgrad/core/op_utils.h"

namespace ringgrad {

using autograd::Grads;
using detail::scalar_like;

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    RG_CHECK(da == db || da == 1 || db == 1, op, "expected broadcastable shapes, got ",
             shape_str(a), " and ", shape_str(b), " (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---------------------------------------------------------------- binary

namespace {

// Check a pair of operands and compute op(a, b) into a new tensor of `out_dtype`.
Tensor binary_forward(BinaryOp op, const char* name, const Tensor& a, const Tensor& b,
                      DType out_dtype) {
  detail::check_defined(a, name);
  detail::check_defined(b, name);
  detail::check_same_device(a, b, name);
  detail::check_same_dtype(a, b, name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(shape, {.dtype = out_dtype, .device = a.device()});
  backend(a.device(), name).binary(op, ref(a, shape), ref(b, shape), ref(out));
  return out;
}

// PyTorch's type promotion between floating dtypes (bfloat16 · float32 → float32): both
// operands go to the wider one through .to(), which is differentiable, so each gradient
// comes back in its own input's dtype. Other mixes stay an error (check_same_dtype).
static bool promotes(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.dtype() != b.dtype() && is_floating(a.dtype()) &&
         is_floating(b.dtype());
}
static Tensor promoted(const Tensor& x, const Tensor& other) {
  return x.to(promote_floating(x.dtype(), other.dtype()));
}

Tensor arith(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  RG_CHECK(a.dtype() != kBool, name, "expected a numeric tensor, got bool (convert with .to())");
  return binary_forward(op, name, a, b, a.dtype());
}

// The backward of a binary op applied to a fused kernel: grad_in = op(g, saved).
Tensor fused_backward(BinaryOp op, const Tensor& g, const Tensor& saved) {
  Tensor out = empty(saved.shape(), detail::options_of(saved));
  backend(g.device(), "backward").binary(op, ref(g, saved.shape()), ref(saved), ref(out));
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return add(promoted(a, b), promoted(b, a));
  Tensor out = arith(BinaryOp::Add, "add", a, b);
  if (autograd::needs_grad({&a, &b}))
    autograd::record("add", out, {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
      return Grads{sum_to(g, sa), sum_to(g, sb)};
    });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return sub(promoted(a, b), promoted(b, a));
  Tensor out = arith(BinaryOp::Sub, "sub", a, b);
  if (autograd::needs_grad({&a, &b}))
    autograd::record("sub", out, {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
      return Grads{sum_to(g, sa), sum_to(neg(g), sb)};
    });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return mul(promoted(a, b), promoted(b, a));
  Tensor out = arith(BinaryOp::Mul, "mul", a, b);
  if (autograd::needs_grad({&a, &b}))
    autograd::record(
        "mul", out, {&a, &b},
        [a = a.detach(), b = b.detach()](const Tensor& g, const std::vector<bool>& need) {
          return Grads{need[0] ? sum_to(mul(g, b), a.shape()) : Tensor(),
                       need[1] ? sum_to(mul(g, a), b.shape()) : Tensor()};
        });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return div(promoted(a, b), promoted(b, a));
  RG_CHECK(is_floating(a.dtype()), "div", "expected floating tensors, got ", a.dtype());
  Tensor out = arith(BinaryOp::Div, "div", a, b);
  if (autograd::needs_grad({&a, &b}))
    autograd::record("div", out, {&a, &b},
                     [a = a.detach(), b = b.detach(), o = out.detach()](
                         const Tensor& g, const std::vector<bool>& need) {
                       return Grads{need[0] ? sum_to(div(g, b), a.shape()) : Tensor(),
                                    need[1] ? sum_to(neg(div(mul(g, o), b)), b.shape()) : Tensor()};
                     });
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return pow(promoted(a, b), promoted(b, a));
  RG_CHECK(is_floating(a.dtype()), "pow", "expected floating tensors, got ", a.dtype());
  Tensor out = arith(BinaryOp::Pow, "pow", a, b);
  if (autograd::needs_grad({&a, &b}))
    autograd::record(
        "pow", out, {&a, &b},
        [a = a.detach(), b = b.detach(), o = out.detach()](const Tensor& g,
                                                           const std::vector<bool>& need) {
          // d/da a^b = b·a^(b-1);  d/db a^b = a^b·log(a)
          Tensor da, db, zero = scalar_like(g, 0);
          // where b == 0, a^b is the constant 1: gradient 0, also at a == 0 where
          // b·a^(b-1) would be 0·inf (PyTorch's pow_backward_self)
          if (need[0])
            da = sum_to(where(eq(b, scalar_like(b, 0)), zero,
                              mul(g, mul(b, pow(a, sub(b, scalar_like(b, 1)))))),
                        a.shape());
          // where a == 0 and b >= 0, a^b·log(a) is 0·(-inf) (or 1·(-inf) at b = 0): PyTorch
          // answers 0 there (pow_backward_exponent); for b < 0 it is inf·(-inf) = -inf.
          if (need[1]) {
            Tensor v = mul(g, mul(o, log(a)));
            db = sum_to(where(eq(a, scalar_like(a, 0)), where(ge(b, scalar_like(b, 0)), zero, v), v),
                        b.shape());
          }
          return Grads{da, db};
        });
  return out;
}

// max/min: the gradient goes to the larger (smaller) input; ties split it evenly, like PyTorch.
static Tensor extremum(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return extremum(op, name, promoted(a, b), promoted(b, a));
  Tensor out = arith(op, name, a, b);
  bool is_max = op == BinaryOp::Maximum;
  if (autograd::needs_grad({&a, &b}))
    autograd::record(
        name, out, {&a, &b}, [a = a.detach(), b = b.detach(), is_max](const Tensor& g) {
          Tensor wins = (is_max ? gt(a, b) : lt(a, b)).to(g.dtype());
          Tensor ties = eq(a, b).to(g.dtype());
          Tensor share_a = add(wins, mul(ties, scalar_like(g, 0.5)));
          Tensor share_b = sub(scalar_like(g, 1.0), share_a);
          return Grads{sum_to(mul(g, share_a), a.shape()), sum_to(mul(g, share_b), b.shape())};
        });
  return out;
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::Maximum, "maximum", a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::Minimum, "minimum", a, b);
}

Tensor eq(const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return eq(promoted(a, b), promoted(b, a));
  return binary_forward(BinaryOp::Eq, "eq", a, b, kBool);
}
Tensor ne(const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return ne(promoted(a, b), promoted(b, a));
  return binary_forward(BinaryOp::Ne, "ne", a, b, kBool);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return lt(promoted(a, b), promoted(b, a));
  return binary_forward(BinaryOp::Lt, "lt", a, b, kBool);
}
Tensor le(const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return le(promoted(a, b), promoted(b, a));
  return binary_forward(BinaryOp::Le, "le", a, b, kBool);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return gt(promoted(a, b), promoted(b, a));
  return binary_forward(BinaryOp::Gt, "gt", a, b, kBool);
}
Tensor ge(const Tensor& a, const Tensor& b) {
  if (promotes(a, b)) return ge(promoted(a, b), promoted(b, a));
  return binary_forward(BinaryOp::Ge, "ge", a, b, kBool);
}

// ---------------------------------------------------------------- unary

namespace {

Tensor unary_forward(UnaryOp op, const char* name, const Tensor& x, double p0 = 0, double p1 = 0) {
  detail::check_defined(x, name);
  if (op != UnaryOp::Neg && op != UnaryOp::Abs && op != UnaryOp::Clamp)
    detail::check_floating(x, name);
  RG_CHECK(x.dtype() != kBool, name, "expected a numeric tensor, got bool");
  Tensor out = empty(x.shape(), detail::options_of(x));
  backend(x.device(), name).unary(op, ref(x), ref(out), p0, p1);
  return out;
}

}  // namespace

Tensor neg(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Neg, "neg", x);
  if (autograd::needs_grad({&x}))
    autograd::record("neg", out, {&x}, [](const Tensor& g) { return Grads{neg(g)}; });
  return out;
}

Tensor exp(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Exp, "exp", x);
  if (autograd::needs_grad({&x}))
    autograd::record("exp", out, {&x},
                     [y = out.detach()](const Tensor& g) { return Grads{mul(g, y)}; });
  return out;
}

Tensor log(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Log, "log", x);
  if (autograd::needs_grad({&x}))
    autograd::record("log", out, {&x},
                     [x = x.detach()](const Tensor& g) { return Grads{div(g, x)}; });
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Sqrt, "sqrt", x);
  if (autograd::needs_grad({&x}))
    autograd::record("sqrt", out, {&x}, [y = out.detach()](const Tensor& g) {
      return Grads{div(mul(g, scalar_like(g, 0.5)), y)};  // ½/√x
    });
  return out;
}

Tensor rsqrt(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Rsqrt, "rsqrt", x);
  if (autograd::needs_grad({&x}))
    autograd::record("rsqrt", out, {&x}, [y = out.detach()](const Tensor& g) {
      return Grads{mul(g, mul(pow(y, 3.0), scalar_like(g, -0.5)))};  // -½·x^(-3/2)
    });
  return out;
}

Tensor tanh(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Tanh, "tanh", x);
  if (autograd::needs_grad({&x}))
    autograd::record("tanh", out, {&x}, [y = out.detach()](const Tensor& g) {
      return Grads{fused_backward(BinaryOp::TanhBackward, g, y)};
    });
  return out;
}

Tensor sigmoid(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Sigmoid, "sigmoid", x);
  if (autograd::needs_grad({&x}))
    autograd::record("sigmoid", out, {&x}, [y = out.detach()](const Tensor& g) {
      return Grads{fused_backward(BinaryOp::SigmoidBackward, g, y)};
    });
  return out;
}

Tensor relu(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Relu, "relu", x);
  // relu(x) > 0 exactly where x > 0, so the output serves as the mask.
  if (autograd::needs_grad({&x}))
    autograd::record("relu", out, {&x}, [y = out.detach()](const Tensor& g) {
      return Grads{relu_backward(g, y)};
    });
  return out;
}

Tensor relu_backward(const Tensor& grad, const Tensor& out) {
  const char* op = "relu_backward";
  detail::check_defined(grad, op);
  detail::check_defined(out, op);
  detail::check_same_device(grad, out, op);
  detail::check_same_dtype(grad, out, op);
  RG_CHECK(grad.shape() == out.shape(), op, "expected grad and out of one shape, got ",
           shape_str(grad.shape()), " and ", shape_str(out.shape()));
  return fused_backward(BinaryOp::ReluBackward, grad, out);
}

Tensor gelu(const Tensor& x, GeluApprox approximate) {
  bool tanh_form = approximate == GeluApprox::Tanh;
  Tensor out = unary_forward(tanh_form ? UnaryOp::GeluTanh : UnaryOp::GeluErf, "gelu", x);
  if (autograd::needs_grad({&x}))
    autograd::record("gelu", out, {&x}, [x = x.detach(), approximate](const Tensor& g) {
      return Grads{gelu_backward(g, x, approximate)};
    });
  return out;
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, GeluApprox approximate) {
  const char* op = "gelu_backward";
  detail::check_defined(grad, op);
  detail::check_defined(x, op);
  detail::check_same_device(grad, x, op);
  detail::check_same_dtype(grad, x, op);
  RG_CHECK(grad.shape() == x.shape(), op, "expected grad and x of one shape, got ",
           shape_str(grad.shape()), " and ", shape_str(x.shape()));
  return fused_backward(
      approximate == GeluApprox::Tanh ? BinaryOp::GeluTanhBackward : BinaryOp::GeluErfBackward,
      grad, x);
}

Tensor abs(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Abs, "abs", x);
  if (autograd::needs_grad({&x}))
    autograd::record("abs", out, {&x}, [x = x.detach()](const Tensor& g) {
      return Grads{fused_backward(BinaryOp::AbsBackward, g, x)};
    });
  return out;
}

// The gradient passes strictly inside the bounds, PyTorch 2.x's rule: 0 at a bound
// (so clamp_min(x, 0) and relu agree at 0), 0 for NaN. clamp_min tests only its
// lower bound and clamp_max only its upper one, so clamp_min(inf, m) passes it.
static Tensor clamp_impl(const Tensor& x, double min, double max, bool has_min, bool has_max,
                         const char* name) {
  RG_CHECK(!(min > max), name, "expected min <= max, got ", min, " and ", max);
  Tensor out = unary_forward(UnaryOp::Clamp, name, x, min, max);
  if (autograd::needs_grad({&x}))
    autograd::record(name, out, {&x}, [x = x.detach(), min, max, has_min, has_max](const Tensor& g) {
      Tensor zero = scalar_like(g, 0), dx = g;
      if (has_max) dx = where(lt(x, scalar_like(x, max)), dx, zero);
      if (has_min) dx = where(gt(x, scalar_like(x, min)), dx, zero);
      return Grads{dx};
    });
  return out;
}

Tensor clamp(const Tensor& x, double min, double max) {
  return clamp_impl(x, min, max, true, true, "clamp");
}
Tensor clamp_min(const Tensor& x, double min) {
  return clamp_impl(x, min, INFINITY, true, false, "clamp_min");
}
Tensor clamp_max(const Tensor& x, double max) {
  return clamp_impl(x, -INFINITY, max, false, true, "clamp_max");
}

Tensor pow(const Tensor& x, double exponent) {
  Tensor out = unary_forward(UnaryOp::PowScalar, "pow", x, exponent);
  if (autograd::needs_grad({&x}))
    autograd::record("pow", out, {&x}, [x = x.detach(), exponent](const Tensor& g) {
      // x^0 is the constant 1: gradient 0 everywhere, also at x = 0 (PyTorch's pow_backward)
      if (exponent == 0.0) return Grads{zeros(x.shape(), detail::options_of(g))};
      Tensor d = exponent == 2.0 ? mul(x, scalar_like(x, 2.0))
                                 : mul(pow(x, exponent - 1.0), scalar_like(x, exponent));
      return Grads{mul(g, d)};
    });
  return out;
}

// ---------------------------------------------------------------- selection

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const char* op = "where";
  if (promotes(a, b)) return where(cond, promoted(a, b), promoted(b, a));
  detail::check_dtype(cond, kBool, op, "a condition");
  detail::check_same_device(cond, a, op);
  detail::check_same_device(a, b, op);
  detail::check_same_dtype(a, b, op);
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), op), b.shape(), op);
  Tensor out = empty(shape, detail::options_of(a));
  backend(a.device(), op).where(ref(cond, shape), ref(a, shape), ref(b, shape), ref(out));
  if (autograd::needs_grad({&a, &b}))
    autograd::record(
        "where", out, {&a, &b},
        [c = cond, sa = a.shape(), sb = b.shape()](const Tensor& g, const std::vector<bool>& need) {
          Tensor zero = scalar_like(g, 0);
          return Grads{need[0] ? sum_to(where(c, g, zero), sa) : Tensor(),
                       need[1] ? sum_to(where(c, zero, g), sb) : Tensor()};
        });
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  detail::check_dtype(mask, kBool, "masked_fill", "a mask");
  detail::check_broadcasts_to(mask, x.shape(), "masked_fill", "a mask");
  return where(mask, scalar_like(x, value), x);
}

// ---------------------------------------------------------------- operators

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(a, b)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(a, b)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_like(a, b)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_like(a, b)); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_like(b, a), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(b, a), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_like(b, a), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(b, a), b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return eq(a, scalar_like(a, b)); }
Tensor operator!=(const Tensor& a, double b) { return ne(a, scalar_like(a, b)); }
Tensor operator<(const Tensor& a, double b) { return lt(a, scalar_like(a, b)); }
Tensor operator<=(const Tensor& a, double b) { return le(a, scalar_like(a, b)); }
Tensor operator>(const Tensor& a, double b) { return gt(a, scalar_like(a, b)); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, scalar_like(a, b)); }

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  std::vector<double> x = a.tolist<double>(), y = b.tolist<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) return false;
    if (std::abs(x[i] - y[i]) > atol + rtol * std::abs(y[i])) return false;
  }
  return true;
}

}  // namespace ringgrad
