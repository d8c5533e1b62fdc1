// functional.cpp — linear, dropout and the losses, written with Tensor ops only.
#include "ringgrad/nn/functional.h"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "ringgrad/autograd/function.h"
#include "ringgrad/core/autocast.h"

namespace ringgrad::nn {

namespace {

enum class Act { none, relu, gelu };

// One op with its own backward rather than matmul + transpose + add: the
// weight gradient comes out of one GEMM already in weight's (out, in) layout,
// instead of as a transposed view that would have to be copied. With relu or gelu, the
// activation is applied inside the GEMM (addmm_relu, addmm_gelu) and differentiated from
// its output (relu) or its input (gelu, which the GEMM keeps).
Tensor linear_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, Act act,
                   GeluApprox approximate = GeluApprox::None) {
  const char* op = act == Act::relu ? "linear_relu" : act == Act::gelu ? "linear_gelu" : "linear";
  if (auto dt = detail::autocast_lower({&x, &weight, &bias}))  // under rg::autocast
    return linear_impl(detail::autocast_cast(x, *dt), detail::autocast_cast(weight, *dt),
                       detail::autocast_cast(bias, *dt), act, approximate);
  RG_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), op,
           "expected x (…, in) and weight (out, in), got ", shape_str(x.shape()), " and ",
           shape_str(weight.shape()));
  Tensor y, gelu_input;  // gelu_input: what GELU's backward needs
  {
    NoGradGuard no_grad;
    // (…, in) as one (rows, in) matrix when that is a view: one big GEMM instead of
    // a batch of small ones (a (16, 128, 256) input is one 2048-row product).
    Tensor x2 = x.dim() > 2 && x.is_contiguous() ? x.view({-1, x.size(-1)}) : x;
    // weightᵀ is read in place, not copied; the bias (and the activation) inside the GEMM
    // where they can be
    if (bias.defined() && x2.dim() == 2 && bias.dtype() == x2.dtype() &&
        bias.device() == x2.device()) {
      if (act == Act::gelu) {
        AddmmActivation r = addmm_gelu_forward(bias, x2, weight.t(), approximate);
        y = r.out, gelu_input = r.gelu_input;
      } else {
        y = act == Act::relu ? addmm_relu(bias, x2, weight.t()) : addmm(bias, x2, weight.t());
      }
    } else {
      y = matmul(x2, weight.t());
      if (bias.defined()) y.add_(bias);
      if (act == Act::relu) y = ringgrad::relu(y);
      if (act == Act::gelu) gelu_input = y, y = ringgrad::gelu(y, approximate);
    }
    if (x2.dim() != x.dim()) {
      Shape shape = x.shape();
      shape.back() = weight.size(0);
      y = y.view(shape);
      if (gelu_input.defined()) gelu_input = gelu_input.view(shape);
    }
  }
  if (autograd::needs_grad({&x, &weight, &bias}))
    autograd::record(
        op, y, {&x, &weight, &bias},
        [x = x.detach(), w = weight.detach(), y_saved = act == Act::relu ? y.detach() : Tensor(),
         gelu_input, approximate, trains = weight.requires_grad() || (bias.defined() && bias.requires_grad()),
         act_grad = Tensor()](const Tensor& g_out, const std::vector<bool>& need) mutable {
          // A split backward (autograd/split_backward.h) asks for dx first (the weights
          // train, yet need says no), dW and db later: the activation's gradient is
          // computed once and kept between the two calls.
          Tensor g = std::move(act_grad);
          if (!g.defined())
            g = y_saved.defined()       ? relu_backward(g_out, y_saved)
                : gelu_input.defined() ? gelu_backward(g_out, gelu_input, approximate)
                                       : g_out;
          if (trains && need[0] && !need[1] && !need[2] && (y_saved.defined() || gelu_input.defined()))
            act_grad = g;
          int64_t out = w.size(0), in = w.size(1);
          Tensor g2 = g.reshape({-1, out}), x2 = x.reshape({-1, in});
          Tensor dx = need[0] ? matmul(g2, w).view(x.shape()) : Tensor();
          return autograd::Grads{dx,                                       // (…, in)
                                 need[1] ? matmul(g2.t(), x2) : Tensor(),  // (out, in)
                                 need[2] ? g2.sum(0) : Tensor()};          // (out)
        });
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_impl(x, weight, bias, Act::none);
}

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_impl(x, weight, bias, Act::relu);
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   GeluApprox approximate) {
  return linear_impl(x, weight, bias, Act::gelu, approximate);
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

// Composed from Tensor ops where the fused op (core/ops_loss.cpp: (N, C) logits, int64
// targets, no weight) does not cover the form, so every backend runs every form.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options) {
  const char* op = "cross_entropy";
  if (detail::autocast_widen({&logits}))  // under rg::autocast: in float32
    return cross_entropy(logits.to(kFloat32), target, options);
  RG_CHECK(logits.defined() && target.defined(), op, "expected defined logits and target, got ",
           logits.defined() ? "a defined" : "an undefined", " logits and ",
           target.defined() ? "a defined" : "an undefined", " target");
  RG_CHECK(logits.dim() >= 1, op, "expected logits (C), (N, C) or (N, C, d1, …), got ",
           shape_str(logits.shape()));
  RG_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1, op,
           "expected 0 <= label_smoothing <= 1, got ", options.label_smoothing);
  const bool soft = is_floating(target.dtype());  // probabilities, else class indices
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1;
  const int64_t c = logits.size(class_dim);
  Shape out_shape = logits.shape();  // the per-sample losses: logits' shape without C
  out_shape.erase(out_shape.begin() + class_dim);
  if (soft)
    RG_CHECK(target.shape() == logits.shape() && target.dtype() == logits.dtype(), op,
             "expected probability targets of the logits' shape ", shape_str(logits.shape()),
             " and dtype ", dtype_name(logits.dtype()), ", got ", shape_str(target.shape()), " ",
             dtype_name(target.dtype()));
  else if (logits.dim() != 2)  // (N, C) is checked by the fused op, with its own message
    RG_CHECK(target.shape() == out_shape, op, "expected class-index targets of shape ",
             shape_str(out_shape), " for logits ", shape_str(logits.shape()), ", got ",
             shape_str(target.shape()));
  const Tensor& w = options.weight;
  if (w.defined())
    RG_CHECK(w.dim() == 1 && w.size(0) == c && w.dtype() == logits.dtype() &&
                 w.device() == logits.device(),
             op, "expected weight (", c, ") of the logits' dtype ", dtype_name(logits.dtype()),
             " on ", logits.device(), ", got ", shape_str(w.shape()), " ", dtype_name(w.dtype()),
             " on ", w.device());

  // To (M, C) rows with (M) int64 or (M, C) probability targets.
  Tensor x = logits, t = target;
  if (logits.dim() == 1) {
    x = logits.unsqueeze(0);
    t = soft ? target.unsqueeze(0) : target.reshape({1});
  } else if (logits.dim() > 2) {
    Dims perm{0};  // the class dim last: (N, d1, …, C)
    for (int64_t d = 2; d < logits.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    x = logits.permute(perm).reshape({-1, c});
    t = soft ? target.permute(perm).reshape({-1, c}) : target.reshape({-1});
  }
  const double eps = options.label_smoothing;
  Tensor loss, count;  // count: Mean's divisor, undefined for the plain mean
  if (soft) {
    Tensor q = eps > 0 ? t * (1.0 - eps) + eps / double(c) : t;
    Tensor prod = log_softmax(x, 1) * q;
    if (w.defined()) prod = prod * w;
    loss = -prod.sum(1);  // Mean: over the samples, whatever the weights (as torch)
  } else if (!w.defined()) {
    loss = cross_entropy_per_sample(x, t, eps, options.ignore_index);
    if (options.reduction == Reduction::Mean)  // over the samples that count, like PyTorch
      count = (t != full({}, double(options.ignore_index), {.dtype = kInt64, .device = t.device()}))
                  .sum()
                  .to(logits.dtype());
  } else {
    // checks the indices; 0 (and no gradient) where ignored
    Tensor nll = cross_entropy_per_sample(x, t, 0.0, options.ignore_index);
    Tensor ignored =
        t == full({}, double(options.ignore_index), {.dtype = kInt64, .device = t.device()});
    Tensor onehot = (t.unsqueeze(1) == arange(double(c), {.dtype = kInt64, .device = t.device()}))
                        .to(logits.dtype());                       // (M, C)
    Tensor wy = masked_fill((onehot * w).sum(1), ignored, 0.0);  // w[y_i], 0 where ignored
    loss = wy * nll;
    if (eps > 0) {
      Tensor smooth = masked_fill(-(log_softmax(x, 1) * w).sum(1), ignored, 0.0);
      loss = loss * (1.0 - eps) + smooth * (eps / double(c));
    }
    if (options.reduction == Reduction::Mean) count = wy.sum();  // torch's mean over weights
  }
  if (options.reduction == Reduction::None) return loss.reshape(out_shape);
  return reduce(loss, options.reduction, count);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (detail::autocast_widen({&input, &target}))  // under rg::autocast: in float32
    return mse_loss(detail::autocast_cast(input, kFloat32), detail::autocast_cast(target, kFloat32),
                    reduction);
  RG_CHECK(input.shape() == target.shape(), "mse_loss",
           "expected input and target of one shape, got ", shape_str(input.shape()), " and ",
           shape_str(target.shape()));
  Tensor d = input - target;
  return reduce(d * d, reduction, Tensor());
}

Tensor silu(const Tensor& x) { return x * sigmoid(x); }

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  const int64_t n = static_cast<int64_t>(normalized_shape.size());
  bool ok = n > 0 && x.dim() >= n;
  for (int64_t i = 0; ok && i < n; ++i) ok = x.size(x.dim() - n + i) == normalized_shape[size_t(i)];
  RG_CHECK(ok, "rms_norm", "expected an input whose trailing dims are normalized_shape ",
           shape_str(normalized_shape), ", got ", shape_str(x.shape()));
  RG_CHECK(!weight.defined() || weight.shape() == normalized_shape, "rms_norm",
           "expected weight of shape ", shape_str(normalized_shape), ", got ",
           shape_str(weight.shape()));
  const double e = eps ? *eps
                       : (x.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                : double(std::numeric_limits<float>::epsilon()));
  Dims dims;
  for (int64_t i = 0; i < n; ++i) dims.push_back(x.dim() - n + i);
  Tensor y = x * rsqrt(mean(x * x, dims, /*keepdim=*/true) + e);
  return weight.defined() ? y * weight : y;
}

namespace {
// cos and sin of the angles p·θ_i, (…, T, D) with the halves repeated, in x's dtype and device.
std::pair<Tensor, Tensor> rotary_tables(const Tensor& x, const Tensor& positions, double theta) {
  const int64_t d = x.size(-1), half = d / 2;
  Tensor pos = positions.to(kCPU).to(kInt64).contiguous();
  const int64_t* p = pos.data_ptr<int64_t>();
  const int64_t count = pos.numel();
  std::vector<double> c(static_cast<size_t>(count * d)), s(c.size());
  for (int64_t t = 0; t < count; ++t)
    for (int64_t i = 0; i < half; ++i) {
      // θ_i = theta^(−2i/D), as Hugging Face's inv_freq = 1 / theta^(arange(0, D, 2) / D)
      const double angle = double(p[t]) / std::pow(theta, double(2 * i) / double(d));
      c[size_t(t * d + i)] = c[size_t(t * d + i + half)] = std::cos(angle);
      s[size_t(t * d + i)] = s[size_t(t * d + i + half)] = std::sin(angle);
    }
  Shape shape = positions.dim() == 1 ? Shape{positions.size(0), d}
                                     : Shape{positions.size(0), 1, positions.size(1), d};
  return {from_vector(c, shape).to(x.dtype()).to(x.device()),
          from_vector(s, shape).to(x.dtype()).to(x.device())};
}
}  // namespace

Tensor rotary_embedding(const Tensor& x, const Tensor& positions, double theta) {
  const char* who = "rotary_embedding";
  RG_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, who,
           "expected x (B, H, T, D) with an even head dim D, got ", shape_str(x.shape()));
  RG_CHECK(positions.defined() && positions.dtype() == kInt64, who,
           "expected int64 positions, got ",
           positions.defined() ? dtype_name(positions.dtype()) : "an undefined tensor");
  const bool ok1 = positions.dim() == 1 && positions.size(0) == x.size(2);
  const bool ok2 = positions.dim() == 2 && positions.size(1) == x.size(2) &&
                   (positions.size(0) == 1 || positions.size(0) == x.size(0));
  RG_CHECK(ok1 || ok2, who, "expected positions (T) = (", x.size(2), ") or (B or 1, T) = (",
           x.size(0), " or 1, ", x.size(2), "), got ", shape_str(positions.shape()));
  RG_CHECK(theta > 0, who, "expected theta > 0, got ", theta);
  auto [cos_t, sin_t] = rotary_tables(x, positions, theta);
  const int64_t half = x.size(3) / 2;
  Tensor rotated = cat({neg(x.narrow(3, half, half)), x.narrow(3, 0, half)}, 3);  // rotate_half
  return x * cos_t + rotated * sin_t;
}

Tensor rotary_embedding(const Tensor& x, int64_t offset, double theta) {
  RG_CHECK(x.dim() == 4, "rotary_embedding", "expected x (B, H, T, D), got ", shape_str(x.shape()));
  return rotary_embedding(x, arange(double(offset), double(offset + x.size(2)), 1.0, {.dtype = kInt64}),
                          theta);
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
