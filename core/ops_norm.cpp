// ops_norm.cpp — layer norm as one fused op.
//
// Forward writes y and, per sample, the mean and 1/√(var + eps) that backward
// reuses; backward is one more pass per sample for dx plus column sums for the
// weight and bias gradients (backend.h: layer_norm, layer_norm_backward).
#include "ringgrad/core/autocast.h"
#include "ringgrad/core/op_utils.h"

namespace ringgrad {

using autograd::Grads;

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  if (detail::autocast_widen({&x, &weight, &bias}))  // under rg::autocast: in float32
    return layer_norm(detail::autocast_cast(x, kFloat32), normalized_shape,
                      detail::autocast_cast(weight, kFloat32), detail::autocast_cast(bias, kFloat32),
                      eps);
  detail::check_defined(x, op);
  detail::check_floating(x, op);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  RG_CHECK(k >= 1 && x.dim() >= k &&
               Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
           op, "expected input whose trailing dims are normalized_shape ",
           shape_str(normalized_shape), ", got input ", shape_str(x.shape()));
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    RG_CHECK(p->shape() == normalized_shape, op, "expected ", p == &weight ? "weight" : "bias",
             " of shape ", shape_str(normalized_shape), ", got ", shape_str(p->shape()));
    detail::check_same_device(x, *p, op);
    detail::check_same_dtype(x, *p, op);
  }
  const int64_t d = numel_of(normalized_shape), n = d ? x.numel() / d : 0;
  Tensor xc = x.contiguous();
  Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = empty(x.shape(), detail::options_of(x));
  // Statistics in float32 for 16-bit x (its compute dtype), as PyTorch keeps them.
  const TensorOptions stats{.dtype = compute_dtype(x.dtype()), .device = x.device()};
  Tensor mean = empty({n}, stats), rstd = empty({n}, stats);
  auto ref_or_none = [](const Tensor& t) { return t.defined() ? ref(t) : TensorRef{}; };
  if (n > 0)
    backend(x.device(), op)
        .layer_norm(ref(xc), ref_or_none(w), ref_or_none(b), ref(y), ref(mean), ref(rstd), n, d,
                    eps);
  if (autograd::needs_grad({&x, &weight, &bias}))
    autograd::record(
        op, y, {&x, &weight, &bias},
        [xc = xc.detach(), w = w.defined() ? w.detach() : Tensor(), mean, rstd, n, d,
         has_bias = bias.defined(), normalized_shape, ref_or_none](const Tensor& g, const std::vector<bool>& need) {
          Tensor gc = g.contiguous();
          Tensor dx = empty(xc.shape(), detail::options_of(xc));
          Tensor dw = need[1] ? empty(w.shape(), detail::options_of(xc)) : Tensor();
          Tensor db = need[2] && has_bias ? empty(normalized_shape, detail::options_of(xc)) : Tensor();
          if (n > 0) {
            backend(xc.device(), "layer_norm")
                .layer_norm_backward(ref(gc), ref(xc), ref(mean), ref(rstd), ref_or_none(w),
                                     ref(dx), ref_or_none(dw), ref_or_none(db), n, d);
          } else {
            if (dw.defined()) dw.zero_();
            if (db.defined()) db.zero_();
          }
          return Grads{dx, dw, db};
        });
  return y;
}

}  // namespace ringgrad
