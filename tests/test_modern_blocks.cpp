// test_modern_blocks.cpp — the modern decoder blocks (issue 16): RMSNorm, SiLU, the SwiGLU
// MLP, rotary position embeddings, grouped-query attention (scaled_dot_product_attention's
// enable_gqa and MultiheadAttention's kv_heads, with rotary). Golden values from PyTorch
// 2.15 in float64, float64 gradchecks; the ring-attention contract of RoPE and GQA is in
// tests/mpi/test_ring_attention.cpp.
//
// The golden numbers come from this script (torch 2.15.0, float64 default dtype):
//
//   import math, torch, torch.nn as nn, torch.nn.functional as F
//   torch.set_default_dtype(torch.float64)
//   def seq(shape, f):
//       n = math.prod(shape); return torch.tensor([f(i) for i in range(n)]).reshape(shape)
//   # RMSNorm
//   x = seq((2,3,4), lambda i: math.sin(0.37*i)+0.1).requires_grad_()
//   m = nn.RMSNorm(4)                         # eps=None: finfo(float64).eps
//   with torch.no_grad(): m.weight.copy_(seq((4,), lambda i: 1+0.1*i))
//   c = seq((2,3,4), lambda i: math.cos(0.23*i))
//   y = m(x); (y*c).sum().backward()           # y[1], x.grad[0], m.weight.grad
//   x2 = seq((2,3,4), lambda i: 0.01*math.sin(0.37*i)).requires_grad_()
//   m2 = nn.RMSNorm((3,4), eps=1e-5)
//   y2 = m2(x2); (y2*c).sum().backward()       # y2[0], x2.grad[1]
//   # SiLU
//   s = torch.tensor([-3.0, -0.5, 0.0, 0.7, 2.5], requires_grad=True)
//   ys = F.silu(s); ys.sum().backward()
//   # SwiGLU, Llama's FeedForward: w2(silu(w1(x)) * w3(x)), no biases
//   w1 = seq((6,4), lambda i: 0.3*math.sin(0.7*i+0.1)).requires_grad_()
//   w2 = seq((4,6), lambda i: 0.3*math.sin(0.7*i+0.2)).requires_grad_()
//   w3 = seq((6,4), lambda i: 0.3*math.sin(0.7*i+0.3)).requires_grad_()
//   xs = seq((2,3,4), lambda i: math.sin(0.37*i)).requires_grad_()
//   o = F.linear(F.silu(F.linear(xs, w1)) * F.linear(xs, w3), w2)
//   (o*o).sum().backward()                     # o[1], xs.grad[0], w1.grad[0], w2.grad[1]
//   # RoPE: Hugging Face Llama's apply_rotary_pos_emb (rotate_half), in float64
//   def rope(x, pos, theta=10000.0):
//       D = x.shape[-1]
//       inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
//       freqs = pos[..., None].double() * inv_freq
//       emb = torch.cat((freqs, freqs), -1)
//       cos, sin = emb.cos(), emb.sin()
//       if pos.dim() == 2: cos, sin = cos[:, None], sin[:, None]
//       def rotate_half(x):
//           x1, x2 = x[..., :D//2], x[..., D//2:]; return torch.cat((-x2, x1), -1)
//       return x*cos + rotate_half(x)*sin
//   xr = seq((2,2,5,6), lambda i: math.sin(0.37*i)).requires_grad_()
//   pos = torch.tensor([[3,4,5,6,7],[0,2,4,6,8]])
//   cr = seq((2,2,5,6), lambda i: math.cos(0.23*i))
//   yr = rope(xr, pos); (yr*cr).sum().backward()          # yr[1,0], xr.grad[0,1]
//   yr2 = rope(xr.detach(), torch.arange(100, 105), theta=500.0)   # yr2[0,1]
//   # GQA
//   q = seq((1,4,5,3), lambda i: math.sin(0.37*i)).requires_grad_()
//   k = seq((1,2,5,3), lambda i: math.cos(0.23*i)).requires_grad_()
//   v = seq((1,2,5,3), lambda i: math.sin(0.11*i+1)).requires_grad_()
//   og = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
//   (og*og).sum().backward()                   # og[0,3], k.grad[0,1], v.grad[0,0], q.grad[0,2]
//   # scaled_dot_product_attention: bool attn_mask (true = may attend), leading batch dims
//   # broadcasting among q, k, v, a query that may attend to nothing, and (T, D) inputs
//   q = seq((2,1,2,4,3), lambda i: math.sin(0.37*i)).requires_grad_()
//   k = seq((1,3,2,5,3), lambda i: math.cos(0.23*i)).requires_grad_()
//   v = seq((1,3,2,5,2), lambda i: math.sin(0.11*i+1)).requires_grad_()
//   m = torch.ones(4,5, dtype=torch.bool); m[1,:] = False; m[2,3] = False; m[0,0] = False
//   c = seq((2,3,2,4,2), lambda i: math.cos(0.07*i))
//   o = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
//   (o*c).sum().backward()                     # o[1,2,0], q.grad[0,0,1], k.grad[0,1,1], v.grad[0,2,0]
//   F.scaled_dot_product_attention(q[0,0,0], k[0,0,0], v[0,0,0], attn_mask=m)
//   # MultiheadAttention(8, 4, kv_heads=2, rotary) written out (torch.nn has no GQA):
//   E,H,Hkv,D = 8,4,2,2
//   Wi = seq((E+2*Hkv*D, E), lambda i: 0.3*math.sin(0.7*i+0.5)).requires_grad_()
//   bi = seq((E+2*Hkv*D,), lambda i: 0.3*math.sin(0.7*i+0.6))
//   Wo = seq((E,E), lambda i: 0.3*math.sin(0.7*i+0.7)); bo = seq((E,), lambda i: 0.3*math.sin(0.7*i+0.8))
//   xm = seq((2,5,E), lambda i: math.sin(0.37*i)).requires_grad_()
//   pm = torch.tensor([2,3,4,5,6])
//   P = F.linear(xm, Wi, bi)
//   Q = P[..., :E].reshape(2,5,H,D).transpose(1,2)
//   K = P[..., E:E+Hkv*D].reshape(2,5,Hkv,D).transpose(1,2)
//   Vv = P[..., E+Hkv*D:].reshape(2,5,Hkv,D).transpose(1,2)
//   Q, K = rope(Q, pm), rope(K, pm)
//   A = F.scaled_dot_product_attention(Q, K, Vv, is_causal=True, enable_gqa=True)
//   om = F.linear(A.transpose(1,2).reshape(2,5,E), Wo, bo)
//   (om*om).sum().backward()                   # om[1,4], xm.grad[0,2], Wi.grad[9]
#include <cmath>
#include <functional>
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

void fill(rg::Tensor& p, const std::function<double(double)>& f) {
  rg::NoGradGuard no_grad;
  p.copy_(seq(p.shape(), f));
}

}  // namespace

TEST_CASE("nn::RMSNorm: torch.nn.RMSNorm's output and gradients, eps=None and eps=1e-5") {
  rg::nn::RMSNorm m(4);
  CHECK(m.describe() == "RMSNorm([4], eps=None, elementwise_affine=true)");
  m.to(rg::kFloat64);
  fill(m.weight, [](double i) { return 1 + 0.1 * i; });
  rg::Tensor x = seq({2, 3, 4}, [](double i) { return std::sin(0.37 * i) + 0.1; }).requires_grad_();
  rg::Tensor c = seq({2, 3, 4}, [](double i) { return std::cos(0.23 * i); });
  rg::Tensor y = m(x);
  rg::sum(y * c).backward();
  check_close(y[1], {-1.0920517316, -1.2459442525, -1.2034497760, -0.9362787901, -0.5372668282,
                     0.2473100049, 1.1819760362, 2.1324008185, 0.9842500994, 1.1886624941,
                     1.2528463000, 1.1433601016},
              1e-9);
  check_close(x.grad()[0], {1.2864077485, 0.6739729861, 0.0595061778, -0.4879307637, 0.2100952350,
                            0.0570524483, -0.1138549242, -0.3023972588, -1.5042095429,
                            -0.9280803968, -0.4609674069, -0.2039752280},
              1e-9);
  check_close(m.weight.grad(), {2.0495640976, 2.3100907057, 2.6895690355, 3.0443037785}, 1e-9);

  // Two normalized dims, an explicit eps that matters (|x| ~ 0.01), no affine weight.
  rg::nn::RMSNorm m2(rg::Shape{3, 4}, 1e-5);
  CHECK(m2.named_parameters().size() == 1);
  rg::Tensor x2 = seq({2, 3, 4}, [](double i) { return 0.01 * std::sin(0.37 * i); }).requires_grad_();
  m2.to(rg::kFloat64);
  rg::Tensor y2 = m2(x2);
  rg::sum(y2 * c).backward();
  check_close(y2[0], {0.0, 0.4950787208, 0.9231508593, 1.2262788596, 1.3634357691, 1.3160580433,
                      1.0905580353, 0.7174561133, 0.2472498721, -0.2564204794, -0.7253855220,
                      -1.0961730371},
              1e-9);
  check_close(x2.grad()[1], {-55.4887698051, -60.8595421680, -67.7416218759, -75.2863474821,
                             -82.0375919357, -86.1517519316, -85.6962437873, -78.9835265672,
                             -64.8916278854, -43.1229387517, -14.3606185025, 19.7046748350},
              1e-7);
  rg::nn::RMSNorm bare(4, std::nullopt, /*elementwise_affine=*/false);
  CHECK(bare.named_parameters().empty());

  rg::Tensor w = leaf({4}, 0.5, 1.5);
  grad_ok("rms_norm", [&](const V& in) { return rg::nn::rms_norm(in[0], {4}, in[1]); },
          {leaf({2, 3, 4}), w});
  grad_ok("rms_norm eps 1e-5, 2 dims", [&](const V& in) { return rg::nn::rms_norm(in[0], {3, 4}, {}, 1e-5); },
          {leaf({2, 3, 4})});
  CHECK_CONTAINS(error_of([&] { rg::nn::rms_norm(x, {3}); }), "trailing dims are normalized_shape [3]");
  CHECK_CONTAINS(error_of([&] { rg::nn::rms_norm(x, {4}, rg::ones({3}, {.dtype = rg::kFloat64})); }),
                 "expected weight of shape [4], got [3]");
}

TEST_CASE("nn::SiLU and the SwiGLU MLP: torch's values and gradients") {
  rg::Tensor s = test::leaf_of({-3.0, -0.5, 0.0, 0.7, 2.5}, {5});
  rg::Tensor ys = rg::nn::SiLU()(s);
  rg::sum(ys).backward();
  check_close(ys, {-0.1422776195, -0.1887703344, 0.0, 0.4677314405, 2.3103545499}, 1e-9);
  check_close(s.grad(), {-0.0881041060, 0.2600388127, 0.5, 0.8233867835, 1.0994011113}, 1e-9);
  grad_ok("silu", [](const V& in) { return rg::nn::silu(in[0]); }, {leaf({3, 4}, -3, 3)});

  rg::nn::SwiGLU mlp(4, 6);
  std::vector<std::string> names;
  for (auto& [n, p] : mlp.named_parameters()) names.push_back(n + rg::shape_str(p.shape()));
  CHECK(names == std::vector<std::string>{"w1.weight[6, 4]", "w2.weight[4, 6]", "w3.weight[6, 4]"});
  mlp.to(rg::kFloat64);
  fill(mlp.w1.weight, [](double i) { return 0.3 * std::sin(0.7 * i + 0.1); });
  fill(mlp.w2.weight, [](double i) { return 0.3 * std::sin(0.7 * i + 0.2); });
  fill(mlp.w3.weight, [](double i) { return 0.3 * std::sin(0.7 * i + 0.3); });
  rg::Tensor x = seq({2, 3, 4}, [](double i) { return std::sin(0.37 * i); }).requires_grad_();
  rg::Tensor o = mlp(x);
  rg::sum(o * o).backward();
  check_close(o[1], {0.0595885441, -0.0844494601, 0.0232159793, 0.0616856900, 0.0407499549,
                     -0.0102371202, -0.0307122369, 0.0403511332, 0.0698883355, -0.1306154403,
                     0.0581829306, 0.0735658177},
              1e-9);
  check_close(x.grad()[0], {-0.0100662441, 0.0210917728, 0.0423299994, 0.0436597659, -0.0140784324,
                            0.0072640224, 0.0251900940, 0.0312688708, 0.0088408046, -0.0107123670,
                            -0.0252273450, -0.0278775085},
              1e-9);
  check_close(mlp.w1.weight.grad()[0], {0.1097476404, 0.1255433200, 0.1243473003, 0.1063214568}, 1e-9);
  check_close(mlp.w2.weight.grad()[1], {-0.1879617306, -0.1019611042, -0.0619734685, -0.0160503552,
                                        -0.0125928860, -0.0500302463},
              1e-9);
  grad_ok("swiglu", [&](const V& in) { return mlp(in[0]); }, {leaf({2, 4})});
  grad_ok("swiglu weights", [&](const V&) { return mlp(x.detach()); },
          {mlp.w1.weight, mlp.w2.weight, mlp.w3.weight});
}

TEST_CASE("nn::rotary_embedding: Hugging Face Llama's rotate-half RoPE at given positions") {
  rg::Tensor x = seq({2, 2, 5, 6}, [](double i) { return std::sin(0.37 * i); }).requires_grad_();
  rg::Tensor pos = test::i64({3, 4, 5, 6, 7, 0, 2, 4, 6, 8}, {2, 5});  // per batch row
  rg::Tensor c = seq({2, 2, 5, 6}, [](double i) { return std::cos(0.23 * i); });
  rg::Tensor y = rg::nn::rotary_embedding(x, pos);
  rg::sum(y * c).backward();
  check_close(y[1][0], {-0.2073364206, -0.5470628353, -0.8127468617, -0.9684294131, -0.9930395865,
                        -0.8832465105, -0.0796772940, -0.3989711234, 0.0233449189, -0.7556027283,
                        0.6600225524, 0.9075943769, -0.2734417364, 0.9086446262, 0.7816074408,
                        -1.0825132408, 0.3270777372, -0.2072702533, -0.8079784916, -0.5433025177,
                        -0.9616389198, -0.7982460929, -1.0706410653, -0.6612248387, -0.6436514581,
                        -0.2985692511, 0.3759017084, -0.4278484250, 0.8606463952, 1.0050194871},
              1e-9);
  check_close(x.grad()[0][1], {-0.7707398047, 0.6606772250, 0.4728665517, -0.3734302268, -0.0582898550,
                               -0.1978258910, 0.9499971584, -0.7794385290, -0.7831482595, 0.2744589837,
                               -0.8454908906, -0.9932743644, 0.3010928731, -0.9626167243, -0.7698544844,
                               -1.1031854208, -0.1873343001, -0.1762283702, -0.1446111565, 0.4864517531,
                               0.4952858518, 0.6558778493, 0.7155621634, 0.9236797129, 1.3081141922,
                               1.1727337685, 0.9592138586, -0.0047439243, 0.3598410964, 0.5228387899},
              1e-9);
  // An offset (positions 100…104) and another theta.
  rg::Tensor y2 = rg::nn::rotary_embedding(x.detach(), int64_t{100}, 500.0);
  check_close(y2[0][1], {-1.0342798756, -0.8895230810, -0.3632092040, 0.2027655985, -0.0155860250,
                         -0.6702838376, 0.1776068654, 0.7656522090, -0.5444941662, 1.1633487998,
                         0.9209436524, 0.9798595015, 0.8215563448, 0.0790535217, 1.0188229720,
                         0.0841515817, -0.9841451061, -0.4926777853, 0.6806506962, -0.7562097463,
                         -0.6658408597, -0.5682213600, 0.0857344043, -0.3860119127, -0.6043733454,
                         0.5981852480, -0.2363872465, -1.0333228657, 0.9454098050, 0.9395384587},
              1e-9);
  // The offset form is the positions form with arange; a shard rotates by its global positions:
  // rotating positions 2, 3 alone equals rows 2, 3 of rotating 0…4.
  rg::Tensor whole = rg::nn::rotary_embedding(x.detach(), int64_t{0});
  check_close(rg::nn::rotary_embedding(x.detach(), test::i64({0, 1, 2, 3, 4})), whole, 0);
  check_close(rg::nn::rotary_embedding(x.detach().narrow(2, 2, 2).contiguous(), test::i64({2, 3})),
              whole.narrow(2, 2, 2).contiguous(), 0);
  // A rotation: the norm of each (i, i + D/2) pair is kept.
  check_close(rg::sum(whole * whole), rg::sum(x.detach() * x.detach()), 1e-12);
  grad_ok("rotary_embedding", [&](const V& in) { return rg::nn::rotary_embedding(in[0], pos); },
          {leaf({2, 3, 5, 4})});
  grad_ok("rotary_embedding offset", [&](const V& in) { return rg::nn::rotary_embedding(in[0], int64_t{7}); },
          {leaf({1, 2, 3, 8})});
  CHECK_CONTAINS(error_of([&] { rg::nn::rotary_embedding(leaf({1, 1, 5, 3}), int64_t{0}); }),
                 "with an even head dim D");
  CHECK_CONTAINS(error_of([&] { rg::nn::rotary_embedding(x, test::i64({0, 1, 2})); }),
                 "expected positions (T) = (5)");
  CHECK_CONTAINS(error_of([&] { rg::nn::rotary_embedding(x, test::f64({0, 1, 2, 3, 4})); }),
                 "expected int64 positions, got float64");
}

TEST_CASE("scaled_dot_product_attention: enable_gqa, as torch") {
  rg::Tensor q = seq({1, 4, 5, 3}, [](double i) { return std::sin(0.37 * i); }).requires_grad_();
  rg::Tensor k = seq({1, 2, 5, 3}, [](double i) { return std::cos(0.23 * i); }).requires_grad_();
  rg::Tensor v = seq({1, 2, 5, 3}, [](double i) { return std::sin(0.11 * i + 1); }).requires_grad_();
  rg::Tensor o = rg::scaled_dot_product_attention(q, k, v, {.causal = true, .enable_gqa = true});
  rg::sum(o * o).backward();
  check_close(o[0][3], {0.4720305413, 0.3723990394, 0.2682660509, 0.3567005837, 0.2534776558,
                        0.1471907397, 0.0731108701, -0.0331144543, -0.1389394977, -0.3043305952,
                        -0.4030862904, -0.4969695575, -0.3744801176, -0.4644602519, -0.5488260816},
              1e-9);
  check_close(k.grad()[0][1], {-0.2701774626, -0.1832511011, -0.0715225628, -0.1133274469,
                               -0.1158116391, -0.1026212693, -0.0819556377, -0.0566891766,
                               -0.0237501015, 0.3100580249, 0.2723001096, 0.1976876519,
                               0.1554025223, 0.0834518073, 0.0002062817},
              1e-9);
  check_close(v.grad()[0][0], {8.2804998250, 8.6615061335, 8.9378138528, 3.5092779817, 3.6015897212,
                               3.6503661498, 1.9564220049, 1.9431737069, 1.9064367058, 2.2572090965,
                               2.1769668077, 2.0704097707, 1.6336687767, 1.5284272603, 1.4047104146},
              1e-9);
  check_close(q.grad()[0][2], {0.0, 0.0, 0.0, -0.0233360456, -0.0296704910, -0.0344422743,
                               0.0371793713, 0.0405409896, 0.0417674271, 0.1839169996, 0.1799564705,
                               0.1665181362, 0.1682295569, 0.1629109141, 0.1490122080},
              1e-9);
  grad_ok("sdpa gqa", [](const V& in) {
    return rg::scaled_dot_product_attention(in[0], in[1], in[2], {.causal = true, .enable_gqa = true});
  }, {leaf({2, 6, 3, 2}), leaf({2, 2, 3, 2}), leaf({2, 2, 3, 2})});
  CHECK_CONTAINS(error_of([&] {
    rg::scaled_dot_product_attention(q, leaf({1, 3, 5, 3}), leaf({1, 3, 5, 3}), {.enable_gqa = true});
  }), "k and v heads dividing q's heads");
}

TEST_CASE("scaled_dot_product_attention: bool attn_mask and broadcast leading dims, as torch") {
  rg::Tensor q = seq({2, 1, 2, 4, 3}, [](double i) { return std::sin(0.37 * i); }).requires_grad_();
  rg::Tensor k = seq({1, 3, 2, 5, 3}, [](double i) { return std::cos(0.23 * i); }).requires_grad_();
  rg::Tensor v = seq({1, 3, 2, 5, 2}, [](double i) { return std::sin(0.11 * i + 1); }).requires_grad_();
  rg::Tensor m = rg::ones({4, 5}, {.dtype = rg::kBool});
  m[1].fill_(0.0);
  m[2][3].fill_(0.0);
  m[0][0].fill_(0.0);
  rg::Tensor o = rg::scaled_dot_product_attention(q, k, v, {.mask = m});
  CHECK_SHAPE(o, {2, 3, 2, 4, 2});
  rg::Tensor c = seq({2, 3, 2, 4, 2}, [](double i) { return std::cos(0.07 * i); });
  rg::sum(o * c).backward();
  // Query 1 may attend to nothing: output 0 and no gradient, as torch 2.x.
  check_close(o[1][2][0], {-0.3292961176, -0.2273094282, 0.0, 0.0, -0.4074944721, -0.3091628018,
                           -0.3908450714, -0.2932181381},
              1e-9);
  check_close(q.grad()[0][0][1], {-0.0686328950, -0.0311978828, 0.0078802348, 0.0, 0.0, 0.0,
                                  -0.1742219660, -0.1218283378, -0.0630183510, -0.0925662322,
                                  -0.0510999687, -0.0069424124},
              1e-9);
  check_close(k.grad()[0][1][1], {-0.0034773054, -0.0048456269, -0.0055581154, 0.0048881771,
                                  0.0094676013, 0.0127656301, 0.0076746138, 0.0120916027,
                                  0.0148720498, 0.0013901462, 0.0013033882, 0.0010402227,
                                  -0.0104756318, -0.0180169654, -0.0231197872},
              1e-9);
  check_close(v.grad()[0][2][0], {-0.1657139610, -0.1795914917, 0.1008336446, 0.0934027003,
                                  0.2836005745, 0.2825629465, 0.0156763425, 0.0089449405,
                                  0.1069793878, 0.0970276280},
              1e-9);
  rg::Tensor o2 = rg::scaled_dot_product_attention(q.detach()[0][0][0], k.detach()[0][0][0],
                                                   v.detach()[0][0][0], {.mask = m});
  CHECK_SHAPE(o2, {4, 2});
  check_close(o2, {0.9655789196, 0.9709986773, 0.0, 0.0, 0.9092870463, 0.9405949951, 0.9631247354,
                   0.9524026149},
              1e-9);
  // The bool mask is the additive 0/−∞ one, in the blockwise kernel too.
  rg::Tensor add = rg::where(m, rg::zeros({}, {.dtype = rg::kFloat64}),
                             rg::full({}, -INFINITY, {.dtype = rg::kFloat64}));
  check_close(rg::scaled_dot_product_attention(q.detach(), k.detach(), v.detach(),
                                               {.mask = add, .block_q = 2, .block_k = 2}),
              o.detach(), 1e-12);
  grad_ok("sdpa 5-D, broadcast batch, bool mask with a hidden key per row", [](const V& in) {
    rg::Tensor bm = rg::ones({3, 4}, {.dtype = rg::kBool});
    bm[0][2].fill_(0.0);
    bm[2][0].fill_(0.0);
    return rg::scaled_dot_product_attention(in[0], in[1], in[2], {.mask = bm, .causal = true});
  }, {leaf({2, 1, 2, 3, 2}), leaf({1, 2, 2, 4, 2}), leaf({2, 2, 2, 4, 3})});
}

TEST_CASE("nn::MultiheadAttention: kv_heads (GQA) and rotary, against torch written out") {
  rg::nn::MultiheadAttention mha(8, 4, {.batch_first = true, .kv_heads = 2, .rotary = true});
  std::vector<std::string> names;
  for (auto& [n, p] : mha.named_parameters()) names.push_back(n + rg::shape_str(p.shape()));
  CHECK(names == std::vector<std::string>{"in_proj_weight[16, 8]", "in_proj_bias[16]",
                                          "out_proj.weight[8, 8]", "out_proj.bias[8]"});
  CHECK(mha.describe() == "MultiheadAttention(embed_dim=8, num_heads=4, kv_heads=2, rotary=true, "
                          "rope_theta=10000, dropout=0, batch_first=true)");
  mha.to(rg::kFloat64);
  fill(mha.in_proj_weight, [](double i) { return 0.3 * std::sin(0.7 * i + 0.5); });
  fill(mha.in_proj_bias, [](double i) { return 0.3 * std::sin(0.7 * i + 0.6); });
  fill(mha.out_proj.weight, [](double i) { return 0.3 * std::sin(0.7 * i + 0.7); });
  fill(mha.out_proj.bias, [](double i) { return 0.3 * std::sin(0.7 * i + 0.8); });
  rg::Tensor x = seq({2, 5, 8}, [](double i) { return std::sin(0.37 * i); }).requires_grad_();
  rg::Tensor pos = test::i64({2, 3, 4, 5, 6});
  rg::Tensor out = mha(x, x, x, {.is_causal = true, .positions = pos});
  rg::sum(out * out).backward();
  check_close(out[1][4], {0.6045866151, 0.3735862510, -0.0315232141, -0.4276849489, -0.6334118738,
                          -0.5519730522, -0.2168762481, 0.2217393411},
              1e-9);
  check_close(x.grad()[0][2], {-1.1392621827, -0.6536977074, 0.1393110140, 0.8667995887,
                               1.1866187728, 0.9483526065, 0.2640613910, -0.5444220228},
              1e-9);
  check_close(mha.in_proj_weight.grad()[9], {-0.7803663553, -0.5430139412, -0.2321671375,
                                             0.1101023991, 0.4374700925, 0.7056282611,
                                             0.8782829548, 0.9320661708},
              1e-9);
  // forward_with_weights repeats the K/V heads itself: the same output.
  auto [out_w, weights] = mha.forward_with_weights(x, x, x, {.is_causal = true, .positions = pos});
  check_close(out_w, out.detach(), 1e-12);
  CHECK(weights.shape() == rg::Shape({2, 5, 5}));
  grad_ok("mha gqa rotary", [&](const V& in) { return mha(in[0], in[0], in[0], {.is_causal = true, .positions = pos}); },
          {leaf({2, 5, 8})});
  // Separate projections (kdim ≠ embed_dim): K and V have kv_heads·head_dim rows.
  rg::nn::MultiheadAttention sep(8, 4, {.kdim = 6, .vdim = 5, .kv_heads = 1});
  CHECK(sep.k_proj_weight.shape() == rg::Shape({2, 6}));
  CHECK(sep.v_proj_weight.shape() == rg::Shape({2, 5}));
  CHECK(sep.in_proj_bias.shape() == rg::Shape({12}));
  CHECK(sep(rg::randn({3, 2, 8}), rg::randn({4, 2, 6}), rg::randn({4, 2, 5})).shape() == rg::Shape({3, 2, 8}));
  CHECK_CONTAINS(error_of([&] { rg::nn::MultiheadAttention(8, 4, {.kv_heads = 3}); }),
                 "expected kv_heads dividing num_heads=4");
}

TEST_CASE("Transformer layers: a custom activation, any callable (torch's activation=F.silu)") {
  int calls = 0;
  rg::nn::Activation silu_counted{[&calls](const rg::Tensor& x) {
                                    ++calls;
                                    return rg::nn::silu(x);
                                  },
                                  "silu"};
  CHECK(silu_counted.name() == "silu");
  CHECK(rg::nn::Activation::GELU.name() == "gelu");

  rg::nn::TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 12, .dropout = 0.0,
                                             .activation = silu_counted, .batch_first = true});
  enc.to(rg::kFloat64);
  rg::Tensor x = seq({2, 5, 8}, [](double i) { return std::sin(0.37 * i); });
  rg::Tensor y = enc.forward(x);
  CHECK(calls == 1);
  // Post-norm written out with the layer's own pieces and silu in place of relu.
  rg::Tensor h = enc.norm1(x + enc.self_attn(x, x, x));
  check_close(y, enc.norm2(h + enc.linear2(rg::nn::silu(enc.linear1(h)))), 1e-12);

  rg::nn::TransformerDecoderLayer dec(8, 2, {.dim_feedforward = 12, .dropout = 0.0,
                                             .activation = silu_counted, .batch_first = true,
                                             .norm_first = true});
  dec.to(rg::kFloat64);
  rg::Tensor t = seq({2, 3, 8}, [](double i) { return std::cos(0.23 * i); });
  rg::Tensor z = dec.forward(t, x);
  CHECK(calls == 2);
  rg::Tensor a = dec.norm1(t);
  rg::Tensor u = t + dec.self_attn(a, a, a);
  u = u + dec.multihead_attn(dec.norm2(u), x, x);
  check_close(z, u + dec.linear2(rg::nn::silu(dec.linear1(dec.norm3(u)))), 1e-12);

  // The stacks copy the layer's activation into every layer.
  rg::nn::TransformerEncoder stack(enc, 3);
  stack.to(rg::kFloat64);
  stack.forward(x);
  CHECK(calls == 5);
}
