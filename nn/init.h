// init.h — parameter initialisation, PyTorch's defaults.
//
// Linear layers start from Kaiming-uniform weights with a = √5, which works
// out to U(-1/√fan_in, 1/√fan_in), and the same range for the bias: the
// numbers differ from PyTorch's (different generator) but the distribution is
// the same, so training behaves the same.
#pragma once

#include "ringgrad/core/factory.h"

namespace ringgrad::nn::init {

// Fill t (in place, no autograd) from U(low, high).
void uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
void normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
void zeros_(Tensor& t);
void ones_(Tensor& t);
// U(-b, b) with b = gain·√(3 / fan_in), gain = √(2 / (1 + a²)) (torch.nn.init.kaiming_uniform_).
void kaiming_uniform_(Tensor& t, double a = 0.0, Generator* gen = nullptr);
// U(-b, b) with b = gain·√(6 / (fan_in + fan_out)) (torch.nn.init.xavier_uniform_).
void xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// fan_in of a weight (out, in, …): in × receptive field.
int64_t fan_in(const Tensor& weight);

}  // namespace ringgrad::nn::init
