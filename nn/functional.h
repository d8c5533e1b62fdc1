// functional.h — the stateless forms of the layers and the losses (torch.nn.functional).
//
//   rg::Tensor loss = rg::nn::cross_entropy(logits, labels);                 // mean over the batch
//   rg::Tensor loss = rg::nn::cross_entropy(logits, labels, {.label_smoothing = 0.1});
#pragma once

#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::nn {

// x (…, in) · weightᵀ (in, out) + bias (out) -> (…, out); bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// While training: zero each element with probability p, scale the rest by 1/(1-p).
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

enum class Reduction { Mean, Sum, None };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;  // Mean averages over the samples not ignored
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
};

// logits (N, C) or (N, …, C)-flattened-to-(N, C); target (N) int64 class indices.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options = {});

// (input - target)², reduced.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace ringgrad::nn
