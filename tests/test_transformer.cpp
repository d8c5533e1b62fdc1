// test_transformer.cpp — LayerNorm, Embedding, positional encodings, MultiheadAttention
// and the Transformer stacks: shapes, masks, parameter names, gradchecks, errors, and
// golden values from torch.nn (torch 1.13, float64) for identical weights.
//
// The golden numbers come from a short PyTorch script (kept in the comment of each
// case) that fills every parameter with 0.3·sin(0.7·i + 0.01·Σ bytes(name)) (+1 for
// norm weights) — the same rule fill_like_golden() applies here.
#include <cmath>
#include <limits>
#include <string>

#include "test_helpers.h"

using test::check_close;
using test::error_of;
using test::grad_ok;
using test::leaf;
using test::seq;
using V = std::vector<rg::Tensor>;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void fill_like_golden(rg::nn::Module& m) {
  rg::NoGradGuard no_grad;
  for (auto& [name, p] : m.named_parameters()) {
    int sum = 0;
    for (unsigned char c : name) sum += c;
    std::vector<double> v(size_t(p.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.3 * std::sin(0.7 * double(i) + 0.01 * sum);
    bool norm_weight = name.find("norm") != std::string::npos &&
                       name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    if (norm_weight)
      for (double& x : v) x += 1.0;
    rg::Tensor t = test::f64(v, p.shape());
    p.copy_(t);
  }
}

}  // namespace

TEST_CASE("nn::LayerNorm and Embedding: parameters, values, padding_idx") {
  rg::nn::LayerNorm norm(4);
  CHECK(norm.named_parameters().size() == 2);
  rg::Tensor x = rg::randn({3, 4});
  check_close(norm(x), rg::layer_norm(x, {4}), 1e-6);
  CHECK(norm.describe() == "LayerNorm([4], eps=1e-05, elementwise_affine=true)");

  rg::nn::Embedding emb(10, 3, 0);
  rg::Tensor idx = test::i64({0, 4, 4, 9, 0, 1}, {2, 3});
  rg::Tensor out = emb(idx);
  CHECK_SHAPE(out, {2, 3, 3});
  check_close(out[0][1], emb.weight[4], 0);
  check_close(out[0][0], {0.0, 0.0, 0.0});
  out.sum().backward();
  check_close(emb.weight.grad()[4], {2.0, 2.0, 2.0});
  check_close(emb.weight.grad()[0], {0.0, 0.0, 0.0});  // padding row: no gradient
  CHECK_CONTAINS(error_of([&] { emb(test::i64({10})); }), "index");
  CHECK_CONTAINS(error_of([&] { emb(rg::zeros({2})); }), "expected int64 indices, got float32");
}

TEST_CASE("nn::PositionalEncoding: the sinusoid table, both layouts") {
  rg::nn::PositionalEncoding pe(6, {.dropout = 0.0, .max_len = 50});
  rg::Tensor x = rg::zeros({7, 2, 6});  // (T, B, E)
  rg::Tensor y = pe(x);
  // position 3, feature 2: sin(3 / 10000^(2/6)); feature 3: cos of the same.
  double angle = 3.0 / std::pow(10000.0, 2.0 / 6.0);
  CHECK(y[3][1][2].item() == doctest::Approx(std::sin(angle)).epsilon(1e-6));
  CHECK(y[3][0][3].item() == doctest::Approx(std::cos(angle)).epsilon(1e-6));
  rg::nn::PositionalEncoding pe_bf(6, {.dropout = 0.0, .batch_first = true});
  check_close(pe_bf(x.transpose(0, 1)), y.transpose(0, 1), 1e-7);
  CHECK_CONTAINS(error_of([&] { pe(rg::zeros({60, 1, 6})); }), "expected at most max_len=50");
  rg::nn::LearnedPositionalEncoding learned(6, {.dropout = 0.0, .max_len = 10, .batch_first = true});
  CHECK_SHAPE(learned(rg::zeros({2, 7, 6})), {2, 7, 6});
}

TEST_CASE("nn::MultiheadAttention: shapes, torch's parameter names, masks") {
  rg::nn::MultiheadAttention mha(8, 2, {.batch_first = true});
  std::vector<std::string> names;
  for (auto& [n, p] : mha.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                          "out_proj.bias"});
  rg::Tensor x = rg::randn({3, 5, 8});
  CHECK_SHAPE(mha(x, x, x), {3, 5, 8});
  rg::Tensor mem = rg::randn({3, 7, 8});
  CHECK_SHAPE(mha(x, mem, mem), {3, 5, 8});

  // is_causal == the explicit causal mask (float or bool form).
  rg::Tensor causal = mha(x, x, x, {.is_causal = true});
  check_close(mha(x, x, x, {.attn_mask = rg::nn::generate_square_subsequent_mask(5)}), causal, 1e-5);
  rg::Tensor upper = rg::nn::generate_square_subsequent_mask(5) < 0.0;  // bool, true = hidden
  check_close(mha(x, x, x, {.attn_mask = upper}), causal, 1e-5);

  // A padded key changes nothing for the batch entry where it is padding.
  rg::Tensor pad = rg::zeros({3, 7}, {.dtype = rg::kBool});
  pad[1].narrow(0, 5, 2).fill_(1.0);
  rg::Tensor with_pad = mha(x, mem, mem, {.key_padding_mask = pad});
  rg::Tensor mem_cut = mem[1].narrow(0, 0, 5).unsqueeze(0);
  check_close(with_pad[1], mha(x[1].unsqueeze(0), mem_cut, mem_cut)[0], 1e-5);

  CHECK_CONTAINS(error_of([&] { rg::nn::MultiheadAttention(10, 3); }),
                 "expected embed_dim divisible by num_heads, got embed_dim=10 and num_heads=3");
  CHECK_CONTAINS(error_of([&] { mha(x, mem, mem, {.attn_mask = rg::zeros({5, 5})}); }),
                 "expected attn_mask (Tq, Tk) = [5, 7] or (B·num_heads, Tq, Tk) = [6, 5, 7], got [5, 5]");
  CHECK_CONTAINS(error_of([&] { mha(x, mem, mem, {.key_padding_mask = rg::zeros({3, 5}, {.dtype = rg::kBool})}); }),
                 "expected key_padding_mask (B, Tk) = [3, 7], got [3, 5]");
  CHECK_CONTAINS(error_of([&] { mha(x, rg::randn({3, 7, 6}), mem); }),
                 "expected (B, T, features) inputs with 8 query, 8 key and 8 value features, got "
                 "query [3, 5, 8], key [3, 7, 6], value [3, 7, 8]");
}

TEST_CASE("nn::MultiheadAttention: gradcheck through projections, heads and masks") {
  rg::nn::MultiheadAttention mha(4, 2);  // (T, B, E)
  mha.to(rg::kFloat64);
  rg::Tensor mask = rg::nn::generate_square_subsequent_mask(3, {.dtype = rg::kFloat64});
  grad_ok("mha self, causal mask",
          [&](const V& in) { return mha(in[0], in[0], in[0], {.attn_mask = mask}); },
          {leaf({3, 2, 4})});
  grad_ok("mha cross", [&](const V& in) { return mha(in[0], in[1], in[1]); },
          {leaf({3, 2, 4}), leaf({5, 2, 4})});
  rg::Tensor x = rg::uniform({2, 2, 4}, -1, 1, {.dtype = rg::kFloat64});
  grad_ok("mha weights", [&](const V&) { return mha(x, x, x); },
          {mha.in_proj_weight, mha.out_proj.weight});
}

TEST_CASE("nn::MultiheadAttention: kdim and vdim, as torch") {
  // torch 1.13, float64, the golden fill: m = nn.MultiheadAttention(8, 2, kdim=6, vdim=5);
  //   x[i] = sin(0.37 i) (3, 2, 8); k[i] = cos(0.23 i) (4, 2, 6); v[i] = sin(0.11 i + 1) (4, 2, 5)
  //   out, _ = m(x, k, v, need_weights=False); (out * out).sum().backward()
  rg::nn::MultiheadAttention mha(8, 2, {.kdim = 6, .vdim = 5});
  std::vector<std::string> names;
  for (auto& [n, p] : mha.named_parameters()) names.push_back(n + rg::shape_str(p.shape()));
  CHECK(names == std::vector<std::string>{"q_proj_weight[8, 8]", "k_proj_weight[8, 6]",
                                          "v_proj_weight[8, 5]", "in_proj_bias[24]",
                                          "out_proj.weight[8, 8]", "out_proj.bias[8]"});
  CHECK(mha.describe() ==
        "MultiheadAttention(embed_dim=8, num_heads=2, kdim=6, vdim=5, dropout=0, batch_first=false)");
  mha.to(rg::kFloat64);
  fill_like_golden(mha);
  rg::Tensor x = seq({3, 2, 8}, [](double i) { return std::sin(0.37 * i); }).requires_grad_();
  rg::Tensor k = seq({4, 2, 6}, [](double i) { return std::cos(0.23 * i); }).requires_grad_();
  rg::Tensor v = seq({4, 2, 5}, [](double i) { return std::sin(0.11 * i + 1); }).requires_grad_();
  rg::Tensor out = mha(x, k, v);
  check_close(out[0], {0.2092349887, 0.0929292893, -0.0715234664, -0.2088223489, -0.2535265298,
                       -0.1812223033, -0.0215262821, 0.1538735879, 0.1910603536, 0.0634596173,
                       -0.0990601754, -0.2220657407, -0.2465320664, -0.1571295772, 0.0088502470,
                       0.1768988609},
              1e-9);
  rg::sum(out * out).backward();
  check_close(k.grad()[1], {-0.0040208663, -0.0024068438, 0.0003391551, 0.0029256439,
                            0.0041361568, 0.0034013704, 0.0004448567, -0.0004191496,
                            -0.0010860233, -0.0012421233, -0.0008140333, -0.0000030907},
              1e-9);
  check_close(v.grad()[2], {0.0217060182, 0.0238150610, 0.0147235085, -0.0012927401,
                            -0.0167009929, 0.0026472260, 0.0012831962, -0.0006843408,
                            -0.0023300217, -0.0028798569},
              1e-9);
  check_close(mha.k_proj_weight.grad()[0], {0.0000268458, 0.0055786870, 0.0108367143,
                                            0.0155240021, 0.0193936841, 0.0222419548},
              1e-9);
  CHECK_CONTAINS(error_of([&] { mha(x, x, x); }), "8 query, 6 key and 5 value features");
  CHECK_CONTAINS(error_of([&] { rg::nn::MultiheadAttention(8, 2, {.kdim = -1}); }),
                 "expected kdim and vdim >= 0");
}

TEST_CASE("nn::MultiheadAttention: forward_with_weights is torch's need_weights=True") {
  // torch 1.13, float64, the golden fill (rule at the top of this file):
  //   m = nn.MultiheadAttention(8, 2, batch_first=True); x[i] = sin(0.37 i) (2, 3, 8);
  //   mem[i] = cos(0.23 i) (2, 4, 8); kpm = [[F,F,F,T],[F,F,F,F]];
  //   am = [[F,T,F,F],[F,F,F,F],[T,F,F,F]]
  //   out, w = m(x, mem, mem, key_padding_mask=kpm, attn_mask=am)
  //   _, w2 = m(…, average_attn_weights=False)
  rg::nn::MultiheadAttention mha(8, 2, {.batch_first = true});
  mha.to(rg::kFloat64);
  fill_like_golden(mha);
  rg::Tensor x = seq({2, 3, 8}, [](double i) { return std::sin(0.37 * i); });
  rg::Tensor mem = seq({2, 4, 8}, [](double i) { return std::cos(0.23 * i); });
  rg::Tensor kpm = rg::zeros({2, 4}, {.dtype = rg::kBool});
  kpm[0][3].fill_(1.0);
  rg::Tensor am = rg::zeros({3, 4}, {.dtype = rg::kBool});
  am[0][1].fill_(1.0);
  am[2][0].fill_(1.0);
  rg::nn::AttentionMasks masks{.attn_mask = am, .key_padding_mask = kpm};
  auto [out, w] = mha.forward_with_weights(x, mem, mem, masks);
  check_close(out.narrow(2, 0, 4)[0],  // the first 4 features of batch 0, every query
              {0.4245833498, 0.1911904637, -0.1344557994, -0.4046998636, 0.0518940022,
               -0.0989366213, -0.2117917869, -0.2345310847, -0.1937110554, -0.0959240794,
               0.0384861201, 0.1506703830},
              1e-9);
  CHECK_SHAPE(w, {2, 3, 4});
  check_close(w, {0.6493934669, 0, 0.3506065331, 0, 0.2147968057, 0.4641549132, 0.3210482811, 0,
                  0, 0.4690587007, 0.5309412993, 0, 0.4957138785, 0, 0.1828050322, 0.3214810893,
                  0.1914719245, 0.2073316376, 0.3550152074, 0.2461812305, 0, 0.4350007721,
                  0.1656785864, 0.3993206415},
              1e-9);
  auto [out2, w2] = mha.forward_with_weights(x, mem, mem, masks, /*average_attn_weights=*/false);
  CHECK_SHAPE(w2, {2, 2, 3, 4});
  check_close(w2[1][1][2], {0.0, 0.4402994529, 0.1749050844, 0.3847954627}, 1e-9);
  check_close(rg::mean(w2, {1}), w, 1e-15);
  check_close(out2, out, 0);
  // The same output as the blockwise forward, which never builds the weights.
  check_close(out, mha(x, mem, mem, masks), 1e-12);
  // Weights sum to 1 over the keys; the causal flag hides later keys.
  rg::Tensor y = rg::uniform({2, 5, 8}, -1, 1, {.dtype = rg::kFloat64});
  auto [causal_out, causal_w] = mha.forward_with_weights(y, y, y, {.is_causal = true}, false);
  check_close(rg::sum(causal_w, {-1}), std::vector<double>(2 * 2 * 5, 1.0), 1e-12);
  rg::Tensor later = rg::gt(rg::arange(5.0).view({1, 5}), rg::arange(5.0).view({5, 1}));
  CHECK(rg::sum(rg::where(later, causal_w, rg::zeros({}, {.dtype = rg::kFloat64}))).item() == 0.0);
  check_close(causal_out, mha(y, y, y, {.is_causal = true}), 1e-12);
  // Not where nn::attention is replaced (a context_parallel region shards the sequence).
  rg::nn::AttentionImpl previous = rg::nn::set_attention_impl(
      [](const rg::Tensor& q, const rg::Tensor& k, const rg::Tensor& v,
         const rg::AttentionOptions& o) { return rg::scaled_dot_product_attention(q, k, v, o); });
  CHECK_CONTAINS(error_of([&] { mha.forward_with_weights(y, y, y); }),
                 "expected forward_with_weights where attention is local");
  rg::nn::set_attention_impl(previous);
  CHECK(rg::nn::attention_is_local());
  // Gradients flow through the weights as well as the output.
  grad_ok("mha with weights",
          [&](const V& in) {
            auto [o, weights] = mha.forward_with_weights(in[0], in[1], in[1], {.key_padding_mask = kpm});
            return rg::sum(o) + rg::sum(weights * weights);
          },
          {leaf({2, 3, 8}), leaf({2, 4, 8})});
}

TEST_CASE("nn::Transformer: torch.nn.Transformer's names, and its outputs and gradients") {
  rg::nn::Transformer model({.d_model = 8, .nhead = 2, .num_encoder_layers = 1,
                             .num_decoder_layers = 1, .dim_feedforward = 16, .dropout = 0.0,
                             .batch_first = true});
  model.to(rg::kFloat64);
  auto named = model.named_parameters();
  CHECK(named.size() == 34);  // as torch: encoder layer 12 + norm 2, decoder layer 18 + norm 2
  CHECK(named.front().first == "encoder.layers.0.self_attn.in_proj_weight");
  CHECK(named.back().first == "decoder.norm.bias");
  fill_like_golden(model);

  rg::Tensor src = seq({2, 5, 8}, [](double i) { return std::sin(0.3 * i); }).requires_grad_();
  rg::Tensor tgt = seq({2, 4, 8}, [](double i) { return std::cos(0.2 * i); }).requires_grad_();
  rg::Tensor kpm = rg::zeros({2, 5}, {.dtype = rg::kBool});
  kpm[1][4].fill_(1.0);
  rg::Tensor out = model.forward(
      src, tgt,
      {.tgt_mask = rg::nn::generate_square_subsequent_mask(4, {.dtype = rg::kFloat64}),
       .src_key_padding_mask = kpm, .memory_key_padding_mask = kpm});
  // Golden values: torch.nn.Transformer, same weights and inputs (float64).
  check_close(out[0][0].narrow(0, 0, 4),
              {1.6655006972729594, 0.8425171617380565, -0.3982113300554667, -0.2929139804827144},
              1e-9);
  check_close(out[1][3].narrow(0, 4, 4),
              {-0.08661471400311414, -0.764722354133063, -0.26436138273578397, 1.7817134831893835},
              1e-9);
  CHECK(out.sum().item() == doctest::Approx(3.706611156703371).epsilon(1e-9));

  rg::Tensor w = seq(out.shape(), [](double i) { return std::sin(0.11 * i + 0.5); });
  (out * w).sum().backward();
  auto grad_of = [&](const std::string& name) {
    for (auto& [n, p] : model.named_parameters())
      if (n == name) return p.grad();
    FAIL("no parameter " << name);
    return rg::Tensor();
  };
  check_close(grad_of("encoder.layers.0.self_attn.in_proj_weight").narrow(0, 0, 4).select(1, 0),
              {-0.03222820174500125, -0.03095927736546547, -0.01579371655097818,
               0.006461142061863096},
              1e-8);
  check_close(grad_of("decoder.layers.0.multihead_attn.in_proj_bias").narrow(0, 16, 4),
              {-0.4066976655347586, -0.15164705107895957, 0.17472554104981047, 0.418921981060965},
              1e-8);
  check_close(grad_of("decoder.layers.0.norm3.weight").narrow(0, 0, 4),
              {-0.35205752479260755, -0.19192476876617834, 0.24950850019476878,
               0.10950420520686266},
              1e-8);
  check_close(src.grad()[1][2].narrow(0, 0, 4),
              {0.02106594115928544, 0.09026359069161197, 0.07857786287611462,
               0.020332840501637472},
              1e-8);
  // The padded source position feeds only masked keys: exactly no gradient.
  CHECK(src.grad()[1][4].abs().sum().item() == 0.0);
}

TEST_CASE("nn::TransformerEncoderLayer: pre-norm, GELU, (T, B, E), bool mask — as torch") {
  rg::nn::TransformerEncoderLayer layer(
      8, 2, {.dim_feedforward = 16, .dropout = 0.0, .activation = rg::nn::Activation::GELU,
             .norm_first = true});
  layer.to(rg::kFloat64);
  std::vector<std::string> names;
  for (auto& [n, p] : layer.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{
                     "self_attn.in_proj_weight", "self_attn.in_proj_bias",
                     "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight",
                     "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                     "norm1.bias", "norm2.weight", "norm2.bias"});
  fill_like_golden(layer);
  rg::Tensor x = seq({5, 2, 8}, [](double i) { return std::sin(0.13 * i) + 0.1; }).requires_grad_();
  rg::Tensor am = rg::zeros({5, 5}, {.dtype = rg::kBool});
  am[0][3].fill_(1.0);
  am[2][1].fill_(1.0);
  rg::Tensor y = layer.forward(x, {.attn_mask = am});
  check_close(y[0][0].narrow(0, 0, 4),
              {-5.853368213092493, -2.5089139420030846, 2.3509633598744233, 3.0459848930320303},
              1e-9);
  check_close(y[4][1].narrow(0, 4, 4),
              {0.5824312417839435, -0.8162777290876491, -1.4157338816336384,
               -0.27025983567144335},
              1e-9);
  rg::Tensor wy = seq(y.shape(), [](double i) { return std::cos(0.07 * i); });
  (y * wy).sum().backward();
  check_close(x.grad()[2][1].narrow(0, 0, 4),
              {-0.3307932015742747, -0.6750201369032014, -1.2875487543697972, -1.7870464477031687},
              1e-8);
  check_close(layer.linear1.weight.grad()[3].narrow(0, 0, 4),
              {0.64716507317242, 0.8265877072692379, 0.5817974736328521, -0.035317834922288974},
              1e-8);
}

TEST_CASE("nn::Transformer stacks: gradcheck, dropout only while training, errors") {
  rg::nn::TransformerDecoderLayer dec(4, 2, {.dim_feedforward = 6, .dropout = 0.0, .batch_first = true});
  dec.to(rg::kFloat64);
  grad_ok("decoder layer, causal self-attention",
          [&](const V& in) { return dec.forward(in[0], in[1], {.tgt = {.is_causal = true}}); },
          {leaf({2, 3, 4}), leaf({2, 4, 4})});

  rg::nn::TransformerEncoderLayer enc(4, 2, {.dim_feedforward = 6, .dropout = 0.5});
  rg::nn::TransformerEncoder stack(enc, 2, true);
  CHECK(stack.layers.size() == 2);
  rg::Tensor x = rg::randn({3, 2, 4});
  rg::Tensor a = stack(x), b = stack(x);
  CHECK_FALSE(rg::allclose(a, b));  // dropout differs per call while training
  stack.eval();
  check_close(stack(x), stack(x), 0);

  rg::nn::Transformer t({.d_model = 4, .nhead = 2, .num_encoder_layers = 1,
                         .num_decoder_layers = 1, .dim_feedforward = 8});
  CHECK_CONTAINS(error_of([&] { t.forward(rg::zeros({3, 2, 4}), rg::zeros({3, 5, 4})); }),
                 "expected src and tgt (S, B, E) with one batch size and E = d_model = 4, got src [3, 2, 4] and tgt [3, 5, 4]");
}

TEST_CASE("optim::weight_decay_groups: matrices decay, biases and norms do not") {
  rg::nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16});
  auto groups = rg::optim::weight_decay_groups(layer.named_parameters(), 0.1);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].first.size() == 4);  // in_proj, out_proj, linear1, linear2 weights
  CHECK(groups[1].first.size() == 8);
  CHECK(*groups[0].second.weight_decay == 0.1);
  CHECK(*groups[1].second.weight_decay == 0.0);
}
