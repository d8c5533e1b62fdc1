// layers.cpp — Linear, GELU, Dropout, Sequential, LayerNorm, Embedding, positional encodings.
#include "ringgrad/nn/layers.h"

#include <cmath>
#include <sstream>

#include "ringgrad/autograd/grad_mode.h"
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
  return add(std::to_string(layers_.size()), std::move(layer));
}

Sequential& Sequential::add(std::string name, std::shared_ptr<Module> layer) {
  register_module(std::move(name), layer);
  layers_.push_back(std::move(layer));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& layer : layers_) h = (*layer)(h);  // operator(): traced when tracing is on
  return h;
}

LayerNorm::LayerNorm(int64_t normalized_size, double eps_, bool elementwise_affine, bool has_bias)
    : LayerNorm(Shape{normalized_size}, eps_, elementwise_affine, has_bias) {}

LayerNorm::LayerNorm(Shape shape, double eps_, bool elementwise_affine, bool has_bias)
    : normalized_shape(std::move(shape)), eps(eps_) {
  RG_CHECK(!normalized_shape.empty() && numel_of(normalized_shape) > 0, "LayerNorm",
           "expected a non-empty normalized_shape, got ", shape_str(normalized_shape));
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    if (has_bias) bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape, weight, bias, eps);
}

std::string LayerNorm::describe() const {
  std::ostringstream os;
  os << "LayerNorm(" << shape_str(normalized_shape) << ", eps=" << eps
     << ", elementwise_affine=" << (weight.defined() ? "true" : "false") << ")";
  return os.str();
}

RMSNorm::RMSNorm(int64_t normalized_size, std::optional<double> eps_, bool elementwise_affine)
    : RMSNorm(Shape{normalized_size}, eps_, elementwise_affine) {}

RMSNorm::RMSNorm(Shape shape, std::optional<double> eps_, bool elementwise_affine)
    : normalized_shape(std::move(shape)), eps(eps_) {
  RG_CHECK(!normalized_shape.empty() && numel_of(normalized_shape) > 0, "RMSNorm",
           "expected a non-empty normalized_shape, got ", shape_str(normalized_shape));
  if (elementwise_affine) weight = register_parameter("weight", ones(normalized_shape));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, normalized_shape, weight, eps); }

std::string RMSNorm::describe() const {
  std::ostringstream os;
  os << "RMSNorm(" << shape_str(normalized_shape) << ", eps=";
  if (eps) os << *eps; else os << "None";
  os << ", elementwise_affine=" << (weight.defined() ? "true" : "false") << ")";
  return os.str();
}

SwiGLU::SwiGLU(int64_t dim, int64_t hidden_dim, bool bias)
    : w1(dim, hidden_dim, bias), w2(hidden_dim, dim, bias), w3(dim, hidden_dim, bias) {
  register_module("w1", w1);
  register_module("w2", w2);
  register_module("w3", w3);
}

Tensor SwiGLU::forward(const Tensor& x) { return w2(silu(w1(x)) * w3(x)); }

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad)
    : num_embeddings(num), embedding_dim(dim), padding_idx(pad) {
  RG_CHECK(num > 0 && dim > 0, "Embedding", "expected positive sizes, got num_embeddings=", num,
           " and embedding_dim=", dim);
  if (pad) {
    RG_CHECK(*pad >= -num && *pad < num, "Embedding", "expected padding_idx in [", -num, ", ",
             num, "), got ", *pad);
    if (*pad < 0) padding_idx = *pad + num;
  }
  weight = register_parameter("weight", randn({num, dim}));
  if (padding_idx) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  RG_CHECK(indices.dtype() == kInt64, "Embedding", "expected int64 indices, got ",
           indices.dtype());
  Shape out_shape = indices.shape();
  out_shape.push_back(embedding_dim);
  Tensor rows = index_select(weight, 0, indices.reshape({-1})).view(out_shape);
  if (!padding_idx) return rows;
  // Where the index is padding: the stored row (a checkpoint may hold a non-zero one) with
  // no gradient back to it, as torch.nn.Embedding does.
  Tensor pad = (indices == full({}, double(*padding_idx), {.dtype = kInt64,
                                                         .device = indices.device()}));
  return where(pad.unsqueeze(-1), rows.detach(), rows);
}

std::string Embedding::describe() const {
  std::ostringstream os;
  os << "Embedding(" << num_embeddings << ", " << embedding_dim;
  if (padding_idx) os << ", padding_idx=" << *padding_idx;
  os << ")";
  return os.str();
}

namespace {

// x (T, B, E) or (B, T, E): the positions are dim 0 or 1; table (max_len, E).
Tensor add_positions(const Tensor& x, const Tensor& table, bool batch_first, const char* who) {
  int64_t e = table.size(1), max_len = table.size(0);
  RG_CHECK(x.dim() == 3 && x.size(2) == e, who, "expected input (", batch_first ? "B, T" : "T, B",
           ", ", e, "), got ", shape_str(x.shape()));
  int64_t t = x.size(batch_first ? 1 : 0);
  RG_CHECK(t <= max_len, who, "expected at most max_len=", max_len, " positions, got ", t);
  Tensor pos = table.narrow(0, 0, t);  // (T, E)
  return x + (batch_first ? pos.unsqueeze(0) : pos.unsqueeze(1));
}

}  // namespace

PositionalEncoding::PositionalEncoding(int64_t d_model, PositionalEncodingOptions options)
    : d_model_(d_model), options_(options), dropout_(options.dropout) {
  RG_CHECK(d_model > 0 && options.max_len > 0, "PositionalEncoding",
           "expected positive d_model and max_len, got ", d_model, " and ", options.max_len);
  std::vector<float> table(size_t(options.max_len * d_model));
  for (int64_t pos = 0; pos < options.max_len; ++pos)
    for (int64_t i = 0; i < d_model; i += 2) {
      double angle = double(pos) * std::exp(-std::log(10000.0) * double(i) / double(d_model));
      table[pos * d_model + i] = float(std::sin(angle));
      if (i + 1 < d_model) table[pos * d_model + i + 1] = float(std::cos(angle));
    }
  pe_ = register_buffer("pe", from_vector(table, {options.max_len, d_model}));
  register_module("dropout", dropout_);
}

Tensor PositionalEncoding::forward(const Tensor& x) {
  return dropout_(add_positions(x, pe_, options_.batch_first, "PositionalEncoding"));
}

std::string PositionalEncoding::describe() const {
  std::ostringstream os;
  os << "PositionalEncoding(d_model=" << d_model_ << ", max_len=" << options_.max_len << ")";
  return os.str();
}

LearnedPositionalEncoding::LearnedPositionalEncoding(int64_t d_model,
                                                     PositionalEncodingOptions options)
    : d_model_(d_model), options_(options), dropout_(options.dropout) {
  RG_CHECK(d_model > 0 && options.max_len > 0, "LearnedPositionalEncoding",
           "expected positive d_model and max_len, got ", d_model, " and ", options.max_len);
  weight = register_parameter("weight", normal({options.max_len, d_model}, 0.0, 0.02));
  register_module("dropout", dropout_);
}

Tensor LearnedPositionalEncoding::forward(const Tensor& x) {
  return dropout_(add_positions(x, weight, options_.batch_first, "LearnedPositionalEncoding"));
}

std::string LearnedPositionalEncoding::describe() const {
  std::ostringstream os;
  os << "LearnedPositionalEncoding(d_model=" << d_model_ << ", max_len=" << options_.max_len
     << ")";
  return os.str();
}

}  // namespace ringgrad::nn
