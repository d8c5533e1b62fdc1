// layers.h — the basic layers: Linear, ReLU, GELU, SiLU, Dropout, Sequential, LayerNorm,
// RMSNorm, the SwiGLU MLP, Embedding and the positional encodings (the attention layers: transformer.h).
//
//   rg::nn::Sequential mlp;
//   mlp.add(std::make_shared<rg::nn::Linear>(784, 256));
//   mlp.add(std::make_shared<rg::nn::ReLU>());
//   mlp.add(std::make_shared<rg::nn::Linear>(256, 10));
//   rg::Tensor logits = mlp(x);                        // x (B, 784) -> (B, 10)
#pragma once

#include <memory>
#include <optional>
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

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
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
  // A name of the caller's (torch's Sequential(OrderedDict)): e.g. a pipeline stage holding
  // blocks 4-7 of a model names them "4"…"7", so its parameters keep the model's names.
  Sequential& add(std::string name, std::shared_ptr<Module> layer);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  Module& operator[](size_t i) { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

// Normalises each sample over its trailing dims (normalized_shape), then scales and
// shifts by learned weight (ones) and bias (zeros) when elementwise_affine.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
            bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  Shape normalized_shape;
  double eps;
  Tensor weight, bias;  // undefined without elementwise_affine (bias also without bias)
};

// torch.nn.RMSNorm: x / sqrt(mean(x², over normalized_shape) + eps) · weight (ones).
// eps unset: the input dtype's machine epsilon, as torch's eps=None.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t normalized_size, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true);
  RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt,
          bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  Shape normalized_shape;
  std::optional<double> eps;
  Tensor weight;  // undefined without elementwise_affine
};

class SiLU : public Module {  // x · sigmoid(x)
 public:
  Tensor forward(const Tensor& x) override { return x * sigmoid(x); }
};

// Llama's gated MLP: w2(silu(w1(x)) · w3(x)), x (…, dim) -> (…, dim); w1, w3 (hidden, dim)
// gate and up, w2 (dim, hidden) down; no biases by default (Llama's).
class SwiGLU : public Module {
 public:
  SwiGLU(int64_t dim, int64_t hidden_dim, bool bias = false);
  Tensor forward(const Tensor& x) override;
  Linear w1, w2, w3;
};

// A lookup table: indices (any shape, int64) -> rows of weight (num_embeddings,
// embedding_dim), initialised N(0, 1) like PyTorch. With padding_idx, that row
// starts at zero, looks up as whatever it holds (a loaded one may be non-zero) and
// gets no gradient.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override;  // (…) -> (…, embedding_dim)
  std::string describe() const override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;
  Tensor weight;
};

struct PositionalEncodingOptions {
  double dropout = 0.1;
  int64_t max_len = 5000;
  bool batch_first = false;  // x is (T, B, E) by default, (B, T, E) when true
};

// x + PE[position], then dropout: the sinusoids of "Attention Is All You Need",
//   PE[pos, 2i] = sin(pos / 10000^(2i/E)),  PE[pos, 2i+1] = cos(pos / 10000^(2i/E)),
// a buffer "pe" (max_len, E), not trained.
class PositionalEncoding : public Module {
 public:
  explicit PositionalEncoding(int64_t d_model, PositionalEncodingOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  int64_t d_model_;
  PositionalEncodingOptions options_;
  Tensor pe_;
  Dropout dropout_;
};

// x + P[position], then dropout, with P (max_len, E) a trained parameter
// ("weight", initialised N(0, 0.02) as in GPT-2).
class LearnedPositionalEncoding : public Module {
 public:
  explicit LearnedPositionalEncoding(int64_t d_model, PositionalEncodingOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  Tensor weight;

 private:
  int64_t d_model_;
  PositionalEncodingOptions options_;
  Dropout dropout_;
};

}  // namespace ringgrad::nn
