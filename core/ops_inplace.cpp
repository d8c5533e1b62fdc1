// ops_inplace.cpp — in-place updates: zero_, fill_, copy_, add_, mul_, mul_out.
//
// These write into an existing tensor (and every view of its storage) and are
// not recorded by autograd. Changing a tensor that requires grad while grad
// mode is on would corrupt its gradient, so it is refused: optimizers update
// parameters under NoGradGuard.
#include "ringgrad/core/op_utils.h"

namespace ringgrad {
namespace {

void check_inplace(const Tensor& t, const char* op) {
  RG_CHECK(!(t.requires_grad() && is_grad_enabled()), op,
           "expected a tensor that does not require grad, got ", t.describe(),
           " with requires_grad=true: wrap the update in rg::NoGradGuard");
}

// The operand of an in-place update: same device and dtype, broadcasting to self.
void check_operand(const Tensor& self, const Tensor& other, const char* op) {
  detail::check_same_device(self, other, op);
  detail::check_same_dtype(self, other, op);
  detail::check_broadcasts_to(other, self.shape(), op, "an operand");
}

// Two floating dtypes that differ (bfloat16 += float32): as in PyTorch, the update is
// computed in the promoted dtype and rounded into self once.
bool mixed_floating(const Tensor& self, const Tensor& other) {
  return other.defined() && self.dtype() != other.dtype() && is_floating(self.dtype()) &&
         is_floating(other.dtype());
}

}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  backend(device(), "fill_").fill(ref(*this), value);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  detail::check_broadcasts_to(src, shape(), "copy_", "a source");
  Tensor s = src.device() == device() ? src : src.to(device());  // dtype converts in the copy
  backend(device(), "copy_").copy(ref(s, shape()), ref(*this));
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace(*this, "add_");
  if (mixed_floating(*this, other)) return copy_(alpha == 1.0 ? *this + other : *this + other * alpha);
  check_operand(*this, other, "add_");
  Backend& be = backend(device(), "add_");
  Tensor addend = other;
  if (alpha != 1.0) {  // self += alpha * other, with alpha * other in a temporary
    addend = empty(other.shape(), detail::options_of(other));
    be.binary(BinaryOp::Mul, ref(other), ref(detail::scalar_like(other, alpha), other.shape()),
              ref(addend));
  }
  be.binary(BinaryOp::Add, ref(*this), ref(addend, shape()), ref(*this));
  return *this;
}

Tensor& Tensor::mul_(double factor) {
  check_inplace(*this, "mul_");
  backend(device(), "mul_")
      .binary(BinaryOp::Mul, ref(*this), ref(detail::scalar_like(*this, factor), shape()),
              ref(*this));
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  check_inplace(*this, "mul_");
  if (mixed_floating(*this, other)) return copy_(*this * other);
  check_operand(*this, other, "mul_");
  backend(device(), "mul_").binary(BinaryOp::Mul, ref(*this), ref(other, shape()), ref(*this));
  return *this;
}

Tensor& mul_out(Tensor& out, const Tensor& a, double factor) {
  check_inplace(out, "mul_out");
  check_operand(out, a, "mul_out");
  backend(out.device(), "mul_out")
      .binary(BinaryOp::Mul, ref(a, out.shape()), ref(detail::scalar_like(out, factor), out.shape()),
              ref(out));
  return out;
}

void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                const AdamStep& hyper) {
  const char* op = "adam_step_";
  for (const Tensor* t :
       {&grad, static_cast<const Tensor*>(&exp_avg), static_cast<const Tensor*>(&exp_avg_sq)}) {
    check_operand(param, *t, op);
    RG_CHECK(t->shape() == param.shape(), op, "expected ", shape_str(param.shape()), ", got ",
             shape_str(t->shape()));
  }
  RG_CHECK(param.is_contiguous() && exp_avg.is_contiguous() && exp_avg_sq.is_contiguous(), op,
           "expected contiguous parameter and state tensors, got ", param.describe());
  Tensor g = grad.contiguous();
  backend(param.device(), op).adam_step(ref(param), ref(g), ref(exp_avg), ref(exp_avg_sq), hyper);
}

}  // namespace ringgrad
