// ops_loss.cpp — the fused softmax cross-entropy op.
//
// One pass over the logits computes each row's log-sum-exp (max first, so any
// logit magnitude is safe) and the loss; backward is one more pass:
// softmax − target distribution, scaled by the incoming gradient.
#include "ringgrad/core/op_utils.h"

namespace ringgrad {

using autograd::Grads;

Tensor cross_entropy_per_sample(const Tensor& logits, const Tensor& target, double label_smoothing,
                                int64_t ignore_index) {
  const char* op = "cross_entropy";
  detail::check_defined(logits, op);
  detail::check_defined(target, op);
  detail::check_floating(logits, op);
  detail::check_dtype(target, kInt64, op, "class indices");
  detail::check_same_device(logits, target, op);
  RG_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0), op,
           "expected logits (N, C) and target (N), got ", shape_str(logits.shape()), " and ",
           shape_str(target.shape()));
  RG_CHECK(label_smoothing >= 0 && label_smoothing <= 1, op,
           "expected 0 <= label_smoothing <= 1, got ", label_smoothing);
  int64_t n = logits.size(0), c = logits.size(1);
  Tensor x = logits.contiguous(), t = target.contiguous();
  Tensor loss = empty({n}, detail::options_of(logits));
  Tensor lse = empty({n}, detail::options_of(logits));
  backend(logits.device(), op)
      .cross_entropy(ref(x), ref(t), ref(loss), ref(lse), n, c, label_smoothing, ignore_index);
  if (autograd::needs_grad({&logits}))
    autograd::record(
        op, loss, {&logits},
        [x = x.detach(), t, lse, n, c, label_smoothing, ignore_index](const Tensor& g) {
          Tensor gc = g.contiguous();
          Tensor dx = empty(x.shape(), detail::options_of(x));
          backend(x.device(), "cross_entropy")
              .cross_entropy_backward(ref(gc), ref(x), ref(t), ref(lse), ref(dx), n, c,
                                      label_smoothing, ignore_index);
          return Grads{dx};
        });
  return loss;
}

}  // namespace ringgrad
