// transformer.h — MultiheadAttention and the Transformer stacks of torch.nn.
//
//   rg::nn::Transformer model({.d_model = 512, .nhead = 8});     // torch.nn.Transformer(512, 8)
//   rg::Tensor out = model.forward(src, tgt, {.tgt_is_causal = true});
//
// Same argument names, defaults and parameter names as torch.nn (so a state_dict
// moves between the two through safetensors): inputs are (T, B, E) unless
// batch_first; post-norm unless norm_first; attn_mask may be bool (true = may NOT
// attend) or float (added to the scores), shaped (Tq, Tk) or (B·H, Tq, Tk);
// key_padding_mask (B, Tk) is bool (true = padding, ignored) or float.
// forward() never materialises the attention weights (attention runs blockwise, as
// torch's need_weights=False); forward_with_weights() is need_weights=True. With
// kdim/vdim ≠ embed_dim the projections are three matrices, named as torch names them
// (q_proj_weight, k_proj_weight, v_proj_weight) instead of one in_proj_weight.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ringgrad/nn/layers.h"

namespace ringgrad::nn {

// The feed-forward's activation, as torch's activation= takes "relu", "gelu" or any
// callable:
//   {.activation = rg::nn::Activation::GELU}
//   {.activation = [](const rg::Tensor& x) { return rg::nn::silu(x); }}
class Activation {
 public:
  static const Activation ReLU, GELU;  // relu (the default), exact gelu

  template <typename F>
    requires(!std::same_as<std::remove_cvref_t<F>, Activation> &&
             std::is_invocable_r_v<Tensor, const F&, const Tensor&>)
  Activation(F fn, std::string name = "custom") : fn_(std::move(fn)), name_(std::move(name)) {}

  Tensor operator()(const Tensor& x) const { return fn_(x); }
  const std::string& name() const { return name_; }
  // Activation::ReLU or ::GELU itself (not another callable of that name): the feed-forward
  // then runs linear1 and the activation as one op, nn::linear_relu or nn::linear_gelu.
  bool is_relu() const { return kind_ == Kind::relu; }
  bool is_gelu() const { return kind_ == Kind::gelu; }

 private:
  enum class Kind { custom, relu, gelu };
  struct ReluTag {};
  struct GeluTag {};
  explicit Activation(ReluTag)
      : fn_([](const Tensor& x) { return relu(x); }), name_("relu"), kind_(Kind::relu) {}
  explicit Activation(GeluTag)
      : fn_([](const Tensor& x) { return gelu(x); }), name_("gelu"), kind_(Kind::gelu) {}

  std::function<Tensor(const Tensor&)> fn_;
  std::string name_;
  Kind kind_ = Kind::custom;
};

inline const Activation Activation::ReLU{Activation::ReluTag{}};
inline const Activation Activation::GELU{Activation::GeluTag{}};

struct MultiheadAttentionOptions {
  double dropout = 0.0;  // on the attention weights, while training
  bool bias = true;
  bool batch_first = false;
  int64_t kdim = 0, vdim = 0;  // features of key / value inputs; 0: embed_dim
  // Grouped-query attention (Llama's, not in torch.nn): kv_heads K/V heads (dividing
  // num_heads; 0: num_heads), each shared by num_heads / kv_heads query heads. The K and V
  // projections then have kv_heads·head_dim rows: in_proj_weight is (E + 2·kv_heads·D, E).
  int64_t kv_heads = 0;
  // Rotary position embeddings (nn::rotary_embedding) on q and k after the projections,
  // at AttentionMasks::positions (default 0, 1, …, T−1).
  bool rotary = false;
  double rope_theta = 10000.0;
};

struct AttentionMasks {
  Tensor attn_mask = {};         // (Tq, Tk) or (B·H, Tq, Tk); bool or float
  Tensor key_padding_mask = {};  // (B, Tk); bool or float
  bool is_causal = false;        // hide later keys (no mask tensor is built)
  // With rotary: the tokens' global positions, int64 (T) or (B or 1, T), for queries and keys
  // alike (self-attention) — under context parallelism this rank's shard of them.
  Tensor positions = {};
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  // query (Tq, B, E), key/value (Tk, B, E) (batch first: (B, T, E)) -> (Tq, B, E).
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const AttentionMasks& masks = {});
  Tensor operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                    const AttentionMasks& masks = {}) {
    return forward(query, key, value, masks);
  }
  // torch's need_weights=True: also the attention weights (after dropout, as
  // torch returns them), (B, Tq, Tk) averaged over heads, or (B, H, Tq, Tk):
  //   auto [out, weights] = mha.forward_with_weights(x, x, x);
  // The (Tq, Tk) matrices are materialised: O(T²) memory, where forward() is O(T).
  std::pair<Tensor, Tensor> forward_with_weights(const Tensor& query, const Tensor& key,
                                                 const Tensor& value,
                                                 const AttentionMasks& masks = {},
                                                 bool average_attn_weights = true);
  std::string describe() const override;
  void reset_parameters();  // torch's: xavier_uniform_ in_proj, zero biases
  const MultiheadAttentionOptions& options() const { return options_; }

  int64_t embed_dim, num_heads, head_dim, kdim, vdim, kv_heads;
  Tensor in_proj_weight, in_proj_bias;  // (3E, E), (3E): q, k, v projections stacked
                                        // (GQA: E + 2·kv_heads·head_dim rows)
  // Only when kdim or vdim ≠ embed_dim (then in_proj_weight is undefined):
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // (E, E), (E', kdim), (E', vdim), E' = kv_heads·D
  Linear out_proj;

 private:
  // Module's one-input forward(x), out of reach: mha.forward(x) stays a compile error, as it
  // was while the overloads above hid it, and compilers that warn about the hiding (clang's
  // -Woverloaded-virtual) see that it is meant. (So in the classes below.)
  using Module::forward;

  struct Heads {
    Tensor q, k, v;  // (B, H, T, D); k, v (B, kv_heads, T, D)
    Tensor mask;     // additive, broadcastable to (B, H, Tq, Tk); undefined if none
  };
  Heads project(const Tensor& query, const Tensor& key, const Tensor& value,
                const AttentionMasks& masks);
  Tensor merge(const Tensor& heads);  // (B, H, Tq, D) -> out_proj, in the caller's layout

  MultiheadAttentionOptions options_;
};

struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  Activation activation = Activation::ReLU;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;  // pre-norm: x + f(norm(x)); post-norm (default): norm(x + f(x))
  bool bias = true;
};

// Self-attention then feed-forward, each with a residual connection and LayerNorm.
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  Tensor forward(const Tensor& src) override { return forward(src, AttentionMasks{}); }
  Tensor forward(const Tensor& src, const AttentionMasks& src_masks);

  int64_t d_model, nhead;
  TransformerLayerOptions options;
  MultiheadAttention self_attn;
  Linear linear1, linear2;
  Dropout dropout, dropout1, dropout2;
  LayerNorm norm1, norm2;

 private:
  Tensor self_attention_block(const Tensor& x, const AttentionMasks& masks);
  Tensor feed_forward_block(const Tensor& x);
};

struct DecoderMasks {
  AttentionMasks tgt = {};     // self-attention over the target (tgt_mask, tgt_key_padding_mask, …)
  AttentionMasks memory = {};  // cross-attention to the encoder output (memory_mask, …)
};

// Self-attention, cross-attention to the encoder's output (memory), feed-forward.
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  Tensor forward(const Tensor& tgt, const Tensor& memory, const DecoderMasks& masks = {});

  int64_t d_model, nhead;
  TransformerLayerOptions options;
  MultiheadAttention self_attn, multihead_attn;
  Linear linear1, linear2;
  Dropout dropout, dropout1, dropout2, dropout3;
  LayerNorm norm1, norm2, norm3;

 private:
  using Module::forward;  // (as in MultiheadAttention)
  Tensor feed_forward_block(const Tensor& x);
};

// num_layers layers configured like `layer` (each with its own fresh weights), named
// "layers.0", "layers.1", …, then an optional final LayerNorm ("norm"): what
// torch.nn.TransformerEncoder(layer, num_layers, norm) and its decoder twin hold.
template <typename Layer>
class TransformerStack : public Module {
 public:
  std::vector<std::shared_ptr<Layer>> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm

 protected:
  TransformerStack(const Layer& layer, int64_t num_layers, bool final_norm, const char* who);
};

class TransformerEncoder : public TransformerStack<TransformerEncoderLayer> {
 public:
  TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers,
                     bool final_norm = false);
  Tensor forward(const Tensor& src) override { return forward(src, AttentionMasks{}); }
  Tensor forward(const Tensor& src, const AttentionMasks& masks);
};

class TransformerDecoder : public TransformerStack<TransformerDecoderLayer> {
 public:
  TransformerDecoder(const TransformerDecoderLayer& layer, int64_t num_layers,
                     bool final_norm = false);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const DecoderMasks& masks = {});

 private:
  using Module::forward;  // (as in MultiheadAttention)
};

struct TransformerOptions {
  int64_t d_model = 512, nhead = 8;
  int64_t num_encoder_layers = 6, num_decoder_layers = 6;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  Activation activation = Activation::ReLU;
  double layer_norm_eps = 1e-5;
  bool batch_first = false, norm_first = false, bias = true;
};

struct TransformerMasks {
  Tensor src_mask = {}, tgt_mask = {}, memory_mask = {};
  Tensor src_key_padding_mask = {}, tgt_key_padding_mask = {}, memory_key_padding_mask = {};
  bool src_is_causal = false, tgt_is_causal = false, memory_is_causal = false;
};

// The encoder–decoder of "Attention Is All You Need" (torch.nn.Transformer): both
// stacks end with a LayerNorm; every weight matrix starts xavier-uniform.
class Transformer : public Module {
 public:
  explicit Transformer(TransformerOptions options = {});
  // src (S, B, E), tgt (T, B, E) (batch first: (B, ·, E)) -> (T, B, E).
  Tensor forward(const Tensor& src, const Tensor& tgt, const TransformerMasks& masks = {});
  TransformerOptions options;
  std::unique_ptr<TransformerEncoder> encoder;
  std::unique_ptr<TransformerDecoder> decoder;

 private:
  using Module::forward;  // (as in MultiheadAttention)
};

// (sz, sz) float mask: 0 on and below the diagonal, −∞ above (a query never sees later keys).
Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions options = {});

}  // namespace ringgrad::nn
