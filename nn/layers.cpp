// layers.cpp — Linear, GELU, Dropout, Sequential.
#include "ringgrad/nn/layers.h"

#include <cmath>
#include <sstream>

#include "ringgrad/core/factory.h"
#include "ringgrad/nn/functional.h"
#include "ringgrad/nn/init.h"

namespace ringgrad::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias) : in_features(in), out_features(out) {
  RG_CHECK(in > 0 && out > 0, "Linear", "expected positive sizes, got in_features=", in,
           " and out_features=", out);
  weight = register_parameter("weight", empty({out, in}));
  if (has_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));  // = U(-1/√in, 1/√in)
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) {
  RG_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear", "expected input with last dim ",
           in_features, ", got shape ", shape_str(x.shape()));
  return linear(x, weight, bias);
}

std::string Linear::describe() const {
  std::ostringstream os;
  os << "Linear(in_features=" << in_features << ", out_features=" << out_features
     << ", bias=" << (bias.defined() ? "true" : "false") << ")";
  return os.str();
}

std::string GELU::describe() const {
  return approximate_ == GeluApprox::Tanh ? "GELU(approximate='tanh')" : "GELU()";
}

Dropout::Dropout(double p_) : p(p_) {
  RG_CHECK(p >= 0 && p <= 1, "Dropout", "expected 0 <= p <= 1, got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

std::string Dropout::describe() const {
  std::ostringstream os;
  os << "Dropout(p=" << p << ")";
  return os.str();
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> layers) {
  for (const auto& l : layers) add(l);
}

Sequential& Sequential::add(std::shared_ptr<Module> layer) {
  register_module(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h);
  return h;
}

}  // namespace ringgrad::nn
