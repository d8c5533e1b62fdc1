// init.cpp — parameter initialisation.
#include "ringgrad/nn/init.h"

#include <cmath>

#include "ringgrad/autograd/grad_mode.h"

namespace ringgrad::nn::init {

void uniform_(Tensor& t, double low, double high, Generator* gen) {
  NoGradGuard no_grad;
  t.copy_(uniform(t.shape(), low, high, {.dtype = t.dtype(), .device = t.device()}, gen));
}

void normal_(Tensor& t, double mean, double std, Generator* gen) {
  NoGradGuard no_grad;
  t.copy_(normal(t.shape(), mean, std, {.dtype = t.dtype(), .device = t.device()}, gen));
}

void zeros_(Tensor& t) {
  NoGradGuard no_grad;
  t.zero_();
}

void ones_(Tensor& t) {
  NoGradGuard no_grad;
  t.fill_(1.0);
}

int64_t fan_in(const Tensor& weight) {
  RG_CHECK(weight.dim() >= 2, "fan_in", "expected a weight with at least 2 dims, got shape ",
           shape_str(weight.shape()));
  return weight.numel() / weight.size(0);
}

void kaiming_uniform_(Tensor& t, double a, Generator* gen) {
  double gain = std::sqrt(2.0 / (1.0 + a * a));
  double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in(t)));
  uniform_(t, -bound, bound, gen);
}

void xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  int64_t in = fan_in(t), out = t.numel() / t.size(1);  // out × receptive field
  double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  uniform_(t, -bound, bound, gen);
}

}  // namespace ringgrad::nn::init
