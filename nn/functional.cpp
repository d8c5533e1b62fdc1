// functional.cpp — linear, dropout and the losses, written with Tensor ops only.
#include "ringgrad/nn/functional.h"

#include <utility>

#include "ringgrad/autograd/function.h"

namespace ringgrad::nn {

// One op with its own backward rather than matmul + transpose + add: the
// weight gradient comes out of one GEMM already in weight's (out, in) layout,
// instead of as a transposed view that would have to be copied.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  RG_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "linear",
           "expected x (…, in) and weight (out, in), got ", shape_str(x.shape()), " and ",
           shape_str(weight.shape()));
  Tensor y;
  {
    NoGradGuard no_grad;
    // (…, in) as one (rows, in) matrix when that is a view: one big GEMM instead of
    // a batch of small ones (a (16, 128, 256) input is one 2048-row product).
    Tensor x2 = x.dim() > 2 && x.is_contiguous() ? x.view({-1, x.size(-1)}) : x;
    y = matmul(x2, weight.t());  // weightᵀ is read in place, not copied
    if (bias.defined()) y.add_(bias);
    if (x2.dim() != x.dim()) {
      Shape shape = x.shape();
      shape.back() = weight.size(0);
      y = y.view(shape);
    }
  }
  if (autograd::needs_grad({&x, &weight, &bias}))
    autograd::record(
        "linear", y, {&x, &weight, &bias},
        [x = x.detach(), w = weight.detach()](const Tensor& g, const std::vector<bool>& need) {
          int64_t out = w.size(0), in = w.size(1);
          Tensor g2 = g.reshape({-1, out}), x2 = x.reshape({-1, in});
          Tensor dx = need[0] ? matmul(g2, w).view(x.shape()) : Tensor();
          return autograd::Grads{dx,                                       // (…, in)
                                 need[1] ? matmul(g2.t(), x2) : Tensor(),  // (out, in)
                                 need[2] ? g2.sum(0) : Tensor()};          // (out)
        });
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  RG_CHECK(p >= 0 && p <= 1, "dropout", "expected 0 <= p <= 1, got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  Tensor keep = rand(x.shape(), {.dtype = x.dtype(), .device = x.device()}, gen) >= p;
  return x * (keep.to(x.dtype()) * (1.0 / (1.0 - p)));
}

static Tensor reduce(const Tensor& per_sample, Reduction reduction, const Tensor& count) {
  switch (reduction) {
    case Reduction::None:
      return per_sample;
    case Reduction::Sum:
      return per_sample.sum();
    case Reduction::Mean:
      return count.defined() ? per_sample.sum() / count : per_sample.mean();
  }
  return per_sample;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options) {
  Tensor loss =
      cross_entropy_per_sample(logits, target, options.label_smoothing, options.ignore_index);
  Tensor count;  // the mean is over samples that count, like PyTorch
  if (options.reduction == Reduction::Mean) {
    Tensor kept = (target != full({}, static_cast<double>(options.ignore_index),
                                  {.dtype = kInt64, .device = target.device()}));
    count = kept.sum().to(logits.dtype());
  }
  return reduce(loss, options.reduction, count);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  RG_CHECK(input.shape() == target.shape(), "mse_loss",
           "expected input and target of one shape, got ", shape_str(input.shape()), " and ",
           shape_str(target.shape()));
  Tensor d = input - target;
  return reduce(d * d, reduction, Tensor());
}

namespace {
AttentionImpl& attention_impl() {
  static AttentionImpl impl;  // empty: the local blockwise kernel
  return impl;
}
}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionOptions& options) {
  const AttentionImpl& impl = attention_impl();
  return impl ? impl(q, k, v, options) : scaled_dot_product_attention(q, k, v, options);
}

AttentionImpl set_attention_impl(AttentionImpl impl) {
  return std::exchange(attention_impl(), std::move(impl));
}

bool attention_is_local() { return !attention_impl(); }

}  // namespace ringgrad::nn
