// transformer.cpp — MultiheadAttention, the encoder/decoder layers and stacks, Transformer.
//
// Written with Tensor ops and nn::attention only (which runs the blockwise kernel,
// or ring attention inside a context_parallel region): nothing here knows the device.
#include "ringgrad/nn/transformer.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/nn/functional.h"
#include "ringgrad/nn/init.h"

namespace ringgrad::nn {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A bool mask (true = hidden) becomes 0/−∞; a float mask is used as it is.
Tensor additive(const Tensor& mask, DType dtype, const char* what) {
  if (mask.dtype() == kBool)
    return where(mask, full({}, -kInf, {.dtype = dtype, .device = mask.device()}),
                 zeros({}, {.dtype = dtype, .device = mask.device()}));
  RG_CHECK(mask.dtype() == dtype, "MultiheadAttention", "expected ", what,
           " of dtype bool or ", dtype, ", got ", mask.dtype());
  return mask;
}

// attn_mask and key_padding_mask as one additive mask broadcastable to (B, H, Tq, Tk).
Tensor combined_mask(const AttentionMasks& m, int64_t b, int64_t h, int64_t tq, int64_t tk,
                     DType dtype) {
  Tensor mask;
  if (m.attn_mask.defined()) {
    const Tensor& a = m.attn_mask;
    bool ok2 = a.dim() == 2 && a.size(0) == tq && a.size(1) == tk;
    bool ok3 = a.dim() == 3 && a.size(0) == b * h && a.size(1) == tq && a.size(2) == tk;
    RG_CHECK(ok2 || ok3, "MultiheadAttention", "expected attn_mask (Tq, Tk) = ",
             shape_str({tq, tk}), " or (B·num_heads, Tq, Tk) = ", shape_str({b * h, tq, tk}),
             ", got ", shape_str(a.shape()));
    mask = additive(a, dtype, "attn_mask").view({ok2 ? 1 : b, ok2 ? 1 : h, tq, tk});
  }
  if (m.key_padding_mask.defined()) {
    const Tensor& k = m.key_padding_mask;
    RG_CHECK(k.dim() == 2 && k.size(0) == b && k.size(1) == tk, "MultiheadAttention",
             "expected key_padding_mask (B, Tk) = ", shape_str({b, tk}), ", got ",
             shape_str(k.shape()));
    Tensor kp = additive(k, dtype, "key_padding_mask").view({b, 1, 1, tk});
    mask = mask.defined() ? mask + kp : kp;
  }
  return mask;
}

}  // namespace

// ---- MultiheadAttention ----

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, MultiheadAttentionOptions options)
    : embed_dim(e),
      num_heads(h),
      head_dim(h > 0 ? e / h : 0),
      kdim(options.kdim > 0 ? options.kdim : e),
      vdim(options.vdim > 0 ? options.vdim : e),
      kv_heads(options.kv_heads > 0 ? options.kv_heads : h),
      out_proj(e > 0 ? e : 1, e > 0 ? e : 1, options.bias),
      options_(options) {
  RG_CHECK(e > 0 && h > 0 && e % h == 0, "MultiheadAttention",
           "expected embed_dim divisible by num_heads, got embed_dim=", e, " and num_heads=", h);
  RG_CHECK(options.kdim >= 0 && options.vdim >= 0, "MultiheadAttention",
           "expected kdim and vdim >= 0 (0: embed_dim), got ", options.kdim, " and ", options.vdim);
  RG_CHECK(options.kv_heads >= 0 && h % kv_heads == 0, "MultiheadAttention",
           "expected kv_heads dividing num_heads=", h, " (0: num_heads), got ", options.kv_heads);
  RG_CHECK(!options.rotary || head_dim % 2 == 0, "MultiheadAttention",
           "expected an even head_dim for rotary embeddings, got ", head_dim);
  const int64_t kve = kv_heads * head_dim;  // rows of the K and of the V projection
  if (kdim == e && vdim == e) {
    in_proj_weight = register_parameter("in_proj_weight", empty({e + 2 * kve, e}));
  } else {  // torch's names and order for separate projections
    q_proj_weight = register_parameter("q_proj_weight", empty({e, e}));
    k_proj_weight = register_parameter("k_proj_weight", empty({kve, kdim}));
    v_proj_weight = register_parameter("v_proj_weight", empty({kve, vdim}));
  }
  if (options.bias) in_proj_bias = register_parameter("in_proj_bias", empty({e + 2 * kve}));
  register_module("out_proj", out_proj);
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  for (Tensor* w : {&in_proj_weight, &q_proj_weight, &k_proj_weight, &v_proj_weight})
    if (w->defined()) init::xavier_uniform_(*w);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj.bias.defined()) init::zeros_(out_proj.bias);
}

// Projections and heads, shared by forward and forward_with_weights.
MultiheadAttention::Heads MultiheadAttention::project(const Tensor& query, const Tensor& key,
                                                      const Tensor& value,
                                                      const AttentionMasks& masks) {
  const char* who = "MultiheadAttention";
  const bool bf = options_.batch_first;
  const bool ok = query.dim() == 3 && key.dim() == 3 && value.dim() == 3 &&
                  query.size(2) == embed_dim && key.size(2) == kdim && value.size(2) == vdim;
  RG_CHECK(ok, who, "expected ", bf ? "(B, T, features)" : "(T, B, features)",
           " inputs with ", embed_dim, " query, ", kdim, " key and ", vdim,
           " value features, got query ", shape_str(query.shape()), ", key ",
           shape_str(key.shape()), ", value ", shape_str(value.shape()));
  // Work in (B, T, E).
  Tensor q = bf ? query : query.transpose(0, 1);
  Tensor k = bf ? key : key.transpose(0, 1);
  Tensor v = bf ? value : value.transpose(0, 1);
  const int64_t b = q.size(0), tq = q.size(1), tk = k.size(1), e = embed_dim, h = num_heads;
  RG_CHECK(k.size(0) == b && v.size(0) == b && v.size(1) == tk, who,
           "expected key and value with the query's batch size and one length, got query ",
           shape_str(query.shape()), ", key ", shape_str(key.shape()), ", value ",
           shape_str(value.shape()));

  // Projections: rows [i·E, (i+n)·E) of the stacked in_proj weight (or the
  // separate q/k/v weights). Self-attention (one tensor for all three) runs one
  // GEMM for q, k and v together.
  // (GQA: the K and V blocks have kve = kv_heads·head_dim rows each.)
  const int64_t kve = kv_heads * head_dim, hkv = kv_heads;
  const int64_t row_start[] = {0, e, e + kve, e + 2 * kve};
  auto project = [&](const Tensor& x, int64_t first, int64_t count) {
    const Tensor* separate[] = {&q_proj_weight, &k_proj_weight, &v_proj_weight};
    const int64_t r0 = row_start[first], rows = row_start[first + count] - r0;
    Tensor w = in_proj_weight.defined() ? in_proj_weight.narrow(0, r0, rows)
                                        : *separate[first];  // count is 1 then
    Tensor bias = in_proj_bias.defined() ? in_proj_bias.narrow(0, r0, rows) : Tensor();
    return linear(x, w, bias);
  };
  Tensor Q, K, V;
  if (!in_proj_weight.defined()) {
    Q = project(q, 0, 1), K = project(k, 1, 1), V = project(v, 2, 1);
  } else if (query.impl_ptr() == key.impl_ptr() && key.impl_ptr() == value.impl_ptr()) {
    Tensor qkv = project(q, 0, 3);
    Q = qkv.narrow(-1, 0, e), K = qkv.narrow(-1, e, kve), V = qkv.narrow(-1, e + kve, kve);
  } else if (key.impl_ptr() == value.impl_ptr()) {
    Q = project(q, 0, 1);
    Tensor kv = project(k, 1, 2);
    K = kv.narrow(-1, 0, kve), V = kv.narrow(-1, kve, kve);
  } else {
    Q = project(q, 0, 1), K = project(k, 1, 1), V = project(v, 2, 1);
  }
  // (B, T, E) -> (B, H, T, D)
  auto heads = [&](const Tensor& x, int64_t t, int64_t nh) {
    return x.reshape({b, t, nh, head_dim}).transpose(1, 2);
  };
  Tensor qh = heads(Q, tq, h), kh = heads(K, tk, hkv);
  if (options_.rotary) {  // RoPE at the tokens' (global) positions
    if (masks.positions.defined()) {
      RG_CHECK(tq == tk, who, "expected one length for query and key with rotary positions "
               "(self-attention), got ", tq, " and ", tk);
      qh = rotary_embedding(qh, masks.positions, options_.rope_theta);
      kh = rotary_embedding(kh, masks.positions, options_.rope_theta);
    } else {
      qh = rotary_embedding(qh, int64_t{0}, options_.rope_theta);
      kh = rotary_embedding(kh, int64_t{0}, options_.rope_theta);
    }
  }
  return {qh, kh, heads(V, tk, hkv), combined_mask(masks, b, h, tq, tk, q.dtype())};
}

// (B, H, Tq, D) -> out_proj, in the caller's layout.
Tensor MultiheadAttention::merge(const Tensor& heads) {
  const int64_t b = heads.size(0), tq = heads.size(2);
  Tensor out = out_proj(heads.transpose(1, 2).reshape({b, tq, embed_dim}));
  return options_.batch_first ? out : out.transpose(0, 1);
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionMasks& masks) {
  Heads x = project(query, key, value, masks);
  AttentionOptions opts;
  opts.mask = x.mask;
  opts.causal = masks.is_causal;
  opts.dropout_p = is_training() ? options_.dropout : 0.0;
  opts.enable_gqa = kv_heads != num_heads;  // the ring then carries the fewer K/V heads
  return merge(attention(x.q, x.k, x.v, opts));  // blockwise: no (Tq, Tk) matrix
}

// torch's need_weights=True path: the weights are materialised, softmax(QKᵀ/√D + mask),
// then dropout (torch returns them after dropout), then weights · V.
std::pair<Tensor, Tensor> MultiheadAttention::forward_with_weights(const Tensor& query,
                                                                   const Tensor& key,
                                                                   const Tensor& value,
                                                                   const AttentionMasks& masks,
                                                                   bool average_attn_weights) {
  RG_CHECK(attention_is_local(), "MultiheadAttention",
           "expected forward_with_weights where attention is local, got a replaced "
           "nn::attention (a context_parallel region?): each rank holds a shard of the "
           "sequence there, so no rank can build the whole weight matrix; call forward()");
  Heads x = project(query, key, value, masks);
  x.k = repeat_kv_heads(x.k, num_heads / kv_heads), x.v = repeat_kv_heads(x.v, num_heads / kv_heads);
  const int64_t tq = x.q.size(2), tk = x.k.size(2);
  Tensor scores = matmul(x.q, x.k.transpose(-2, -1)) * (1.0 / std::sqrt(double(head_dim)));
  if (x.mask.defined()) scores = scores + x.mask;
  if (masks.is_causal) {  // hide key j from query i when j > i
    TensorOptions index{.dtype = kInt64, .device = scores.device()};
    Tensor later = gt(arange(double(tk), index).view({1, tk}), arange(double(tq), index).view({tq, 1}));
    scores = masked_fill(scores, later, -kInf);
  }
  Tensor weights = dropout(softmax(scores, -1), options_.dropout, is_training());
  Tensor out = merge(matmul(weights, x.v));
  return {out, average_attn_weights ? mean(weights, {1}) : weights};
}

std::string MultiheadAttention::describe() const {
  std::ostringstream os;
  os << "MultiheadAttention(embed_dim=" << embed_dim << ", num_heads=" << num_heads;
  if (kdim != embed_dim || vdim != embed_dim) os << ", kdim=" << kdim << ", vdim=" << vdim;
  if (kv_heads != num_heads) os << ", kv_heads=" << kv_heads;
  if (options_.rotary) os << ", rotary=true, rope_theta=" << options_.rope_theta;
  os << ", dropout=" << options_.dropout
     << ", batch_first=" << (options_.batch_first ? "true" : "false") << ")";
  return os.str();
}

// ---- TransformerEncoderLayer ----

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d, int64_t n, TransformerLayerOptions o)
    : d_model(d),
      nhead(n),
      options(o),
      self_attn(d, n, {.dropout = o.dropout, .bias = o.bias, .batch_first = o.batch_first}),
      linear1(d, o.dim_feedforward, o.bias),
      linear2(o.dim_feedforward, d, o.bias),
      dropout(o.dropout),
      dropout1(o.dropout),
      dropout2(o.dropout),
      norm1(d, o.layer_norm_eps, true, o.bias),
      norm2(d, o.layer_norm_eps, true, o.bias) {
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const AttentionMasks& m) {
  return dropout1(self_attn(x, x, x, m));
}

// linear1, then the activation: with ReLU or GELU one op, the activation inside linear1's
// GEMM (through call(), so that traces show linear1; not where linear1 has hooks, which
// must see its own output: FSDP's, a user's).
static Tensor first_linear(Linear& linear1, const Activation& activation, const Tensor& x) {
  if (linear1.has_hooks() || !(activation.is_relu() || activation.is_gelu()))
    return activation(linear1(x));
  return linear1.call(x, [&] {
    return activation.is_relu() ? linear_relu(x, linear1.weight, linear1.bias)
                                : linear_gelu(x, linear1.weight, linear1.bias);
  });
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  return dropout2(linear2(dropout(first_linear(linear1, options.activation, x))));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const AttentionMasks& masks) {
  Tensor x = src;
  if (options.norm_first) {
    x = x + self_attention_block(norm1(x), masks);
    x = x + feed_forward_block(norm2(x));
  } else {
    x = norm1(x + self_attention_block(x, masks));
    x = norm2(x + feed_forward_block(x));
  }
  return x;
}

// ---- TransformerDecoderLayer ----

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d, int64_t n, TransformerLayerOptions o)
    : d_model(d),
      nhead(n),
      options(o),
      self_attn(d, n, {.dropout = o.dropout, .bias = o.bias, .batch_first = o.batch_first}),
      multihead_attn(d, n, {.dropout = o.dropout, .bias = o.bias, .batch_first = o.batch_first}),
      linear1(d, o.dim_feedforward, o.bias),
      linear2(o.dim_feedforward, d, o.bias),
      dropout(o.dropout),
      dropout1(o.dropout),
      dropout2(o.dropout),
      dropout3(o.dropout),
      norm1(d, o.layer_norm_eps, true, o.bias),
      norm2(d, o.layer_norm_eps, true, o.bias),
      norm3(d, o.layer_norm_eps, true, o.bias) {
  register_module("self_attn", self_attn);
  register_module("multihead_attn", multihead_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("norm3", norm3);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
  register_module("dropout3", dropout3);
}

Tensor TransformerDecoderLayer::feed_forward_block(const Tensor& x) {
  return dropout3(linear2(dropout(first_linear(linear1, options.activation, x))));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const DecoderMasks& masks) {
  auto self_block = [&](const Tensor& x) { return dropout1(self_attn(x, x, x, masks.tgt)); };
  auto cross_block = [&](const Tensor& x) {
    return dropout2(multihead_attn(x, memory, memory, masks.memory));
  };
  Tensor x = tgt;
  if (options.norm_first) {
    x = x + self_block(norm1(x));
    x = x + cross_block(norm2(x));
    x = x + feed_forward_block(norm3(x));
  } else {
    x = norm1(x + self_block(x));
    x = norm2(x + cross_block(x));
    x = norm3(x + feed_forward_block(x));
  }
  return x;
}

// ---- the stacks ----

template <typename Layer>
TransformerStack<Layer>::TransformerStack(const Layer& layer, int64_t num_layers, bool final_norm,
                                          const char* who) {
  RG_CHECK(num_layers >= 0, who, "expected num_layers >= 0, got ", num_layers);
  auto list = std::make_shared<Sequential>();  // a container: children "0", "1", …
  for (int64_t i = 0; i < num_layers; ++i) {
    layers.push_back(std::make_shared<Layer>(layer.d_model, layer.nhead, layer.options));
    list->add(layers.back());
  }
  register_module("layers", list);
  if (final_norm) {
    norm = std::make_shared<LayerNorm>(layer.d_model, layer.options.layer_norm_eps, true,
                                       layer.options.bias);
    register_module("norm", norm);
  }
}
template class TransformerStack<TransformerEncoderLayer>;
template class TransformerStack<TransformerDecoderLayer>;

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers,
                                       bool final_norm)
    : TransformerStack(layer, num_layers, final_norm, "TransformerEncoder") {}

Tensor TransformerEncoder::forward(const Tensor& src, const AttentionMasks& masks) {
  Tensor x = src;
  for (auto& layer : layers) x = layer->call(x, [&] { return layer->forward(x, masks); });
  return norm ? (*norm)(x) : x;
}

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& layer, int64_t num_layers,
                                       bool final_norm)
    : TransformerStack(layer, num_layers, final_norm, "TransformerDecoder") {}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory,
                                   const DecoderMasks& masks) {
  Tensor x = tgt;
  for (auto& layer : layers) x = layer->call(x, [&] { return layer->forward(x, memory, masks); });
  return norm ? (*norm)(x) : x;
}

// ---- Transformer ----

Transformer::Transformer(TransformerOptions o) : options(o) {
  TransformerLayerOptions lo{.dim_feedforward = o.dim_feedforward,
                             .dropout = o.dropout,
                             .activation = o.activation,
                             .layer_norm_eps = o.layer_norm_eps,
                             .batch_first = o.batch_first,
                             .norm_first = o.norm_first,
                             .bias = o.bias};
  encoder = std::make_unique<TransformerEncoder>(TransformerEncoderLayer(o.d_model, o.nhead, lo),
                                                 o.num_encoder_layers, true);
  decoder = std::make_unique<TransformerDecoder>(TransformerDecoderLayer(o.d_model, o.nhead, lo),
                                                 o.num_decoder_layers, true);
  register_module("encoder", *encoder);
  register_module("decoder", *decoder);
  for (Tensor& p : parameters())  // torch.nn.Transformer._reset_parameters
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const TransformerMasks& m) {
  const int64_t batch_dim = options.batch_first ? 0 : 1;
  RG_CHECK(src.dim() == 3 && tgt.dim() == 3 && src.size(batch_dim) == tgt.size(batch_dim) &&
               src.size(2) == options.d_model && tgt.size(2) == options.d_model,
           "Transformer", "expected src and tgt ", options.batch_first ? "(B, S, E)" : "(S, B, E)",
           " with one batch size and E = d_model = ", options.d_model, ", got src ",
           shape_str(src.shape()), " and tgt ", shape_str(tgt.shape()));
  Tensor memory = encoder->forward(src, {m.src_mask, m.src_key_padding_mask, m.src_is_causal});
  return decoder->forward(
      tgt, memory,
      {.tgt = {m.tgt_mask, m.tgt_key_padding_mask, m.tgt_is_causal},
       .memory = {m.memory_mask, m.memory_key_padding_mask, m.memory_is_causal}});
}

Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions options) {
  Tensor i = arange(double(sz), {.dtype = kInt64}).view({sz, 1});
  Tensor j = arange(double(sz), {.dtype = kInt64}).view({1, sz});
  TensorOptions o = options;
  if (!o.dtype) o.dtype = kFloat32;
  return masked_fill(zeros({sz, sz}, o), (j > i).to(o.device), -kInf);
}

}  // namespace ringgrad::nn
