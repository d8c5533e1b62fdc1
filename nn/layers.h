// layers.h — the basic layers: Linear, ReLU, GELU, Dropout, Sequential.
//
//   rg::nn::Sequential mlp;
//   mlp.add(std::make_shared<rg::nn::Linear>(784, 256));
//   mlp.add(std::make_shared<rg::nn::ReLU>());
//   mlp.add(std::make_shared<rg::nn::Linear>(256, 10));
//   rg::Tensor logits = mlp(x);                        // x (B, 784) -> (B, 10)
#pragma once

#include <memory>
#include <vector>

#include "ringgrad/core/ops.h"
#include "ringgrad/nn/module.h"

namespace ringgrad::nn {

// y = x·Wᵀ + b. x (…, in_features) -> y (…, out_features); weight (out, in), bias (out).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  void reset_parameters();  // PyTorch's default init

  int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined when bias=false
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApprox approximate = GeluApprox::None) : approximate_(approximate) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate_); }
  std::string describe() const override;

 private:
  GeluApprox approximate_;
};

// Zeroes each element with probability p while training and scales the rest by
// 1/(1-p), so eval (identity) sees the same expected activation.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  double p;
};

// Runs its children in order, each one's output the next one's input.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> layers);
  Sequential& add(std::shared_ptr<Module> layer);  // named "0", "1", …
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  Module& operator[](size_t i) { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace ringgrad::nn
