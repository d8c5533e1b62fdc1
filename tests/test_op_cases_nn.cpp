// test_op_cases_nn.cpp — the op table's neural-network ops (op_cases.h): softmax
// and log_softmax over any dim, layer_norm, blockwise attention (tiles, causal,
// masks, dropout), the losses (cross_entropy, mse_loss), linear, the fused Adam
// step, and two small composites (an MLP with cross-entropy, attention from plain ops).
#include "op_cases.h"

namespace opcase {

namespace {

namespace nn = rg::nn;

// Small tiles so that every attention case crosses several query and key blocks.
rg::AttentionOptions tiny_tiles(rg::AttentionOptions o = {}) {
  o.block_q = 3;
  o.block_k = 4;
  return o;
}

}  // namespace

std::vector<OpCase> nn_cases() {
  auto x34 = [](Env& e) { return V{e.leaf({3, 4}, -2.0, 2.0)}; };
  auto x232 = [](Env& e) { return V{e.leaf({2, 3, 2}, -2.0, 2.0)}; };
  // Logits (4,5) and class targets: plain, and with ignored rows (-100).
  auto logits_targets = [](Env& e) {
    return V{e.leaf({4, 5}, -2.0, 2.0), e.index({1, 4, 0, 2}), e.index({1, -100, 0, 3})};
  };
  auto linear_in = [](Env& e) { return V{e.leaf({3, 4}), e.leaf({2, 4}), e.leaf({2})}; };
  auto qkv = [](rg::Shape q, rg::Shape k, rg::Shape v) {
    return [q, k, v](Env& e) { return V{e.leaf(q), e.leaf(k), e.leaf(v)}; };
  };
  // The (log-)softmax over a middle dim ([outer, r, inner] = [3, 7, 5], cuDNN's N, C, H),
  // over dim 0 (outer = 1), and in float64 too (cuDNN's double path).
  const std::vector<rg::DType> both{rg::kFloat32, rg::kFloat64};

  return {
      // ---- softmax / log_softmax
      {"softmax",
       [](Env& e) {
         return V{e.leaf({3, 4, 5}, -3.0, 3.0)};
       },
       [](const V& in) { return rg::softmax(in[0], 1); }},
      {"log_softmax",
       [](Env& e) {
         return V{e.leaf({6, 11}, -3.0, 3.0)};
       },
       [](const V& in) { return rg::log_softmax(in[0], -1); }},
      {"softmax_mid",
       [](Env& e) {
         return V{e.leaf({3, 7, 5}, -4.0, 4.0)};
       },
       [](const V& in) { return rg::softmax(in[0], 1); }},
      {"log_softmax_mid",
       [](Env& e) {
         return V{e.leaf({3, 7, 5}, -4.0, 4.0)};
       },
       [](const V& in) { return rg::log_softmax(in[0], 1); }},
      {"softmax_dim0",
       [](Env& e) {
         return V{e.leaf({9, 2, 3}, -4.0, 4.0)};
       },
       [](const V& in) { return rg::softmax(in[0], 0); },
       {.dtypes = both}},
      {"log_softmax_mid4d",
       [](Env& e) {
         return V{e.leaf({2, 5, 6, 3}, -4.0, 4.0)};
       },
       [](const V& in) { return rg::log_softmax(in[0], -2); },
       {.dtypes = both}},
      {"softmax:dim-1", x34, [](const V& in) { return rg::softmax(in[0], 1); }},
      {"softmax:dim-0", x34, [](const V& in) { return rg::softmax(in[0], 0); }},
      {"log_softmax:dim-1", x34, [](const V& in) { return rg::log_softmax(in[0], 1); }},
      {"log_softmax:dim-0", x34, [](const V& in) { return rg::log_softmax(in[0], 0); }},
      {"softmax:middle-dim-member", x232, [](const V& in) { return in[0].softmax(1); }},
      {"log_softmax:middle-dim-member", x232, [](const V& in) { return in[0].log_softmax(-2); }},
      {"softmax:non-contiguous",
       [](Env& e) { return V{e.transposed_leaf(3, 4, -2.0, 2.0)}; },
       [](const V& in) { return rg::softmax(in[0], -1); },
       {.non_contiguous = true}},

      // ---- layer_norm
      {"layer_norm",
       [](Env& e) {
         return V{Env::as_leaf(e.constant({6, 2, 5}).transpose(0, 1)), e.leaf({5}), e.leaf({5})};
       },
       [](const V& in) { return rg::layer_norm(in[0], {5}, in[1], in[2]); },
       {.non_contiguous = true}},
      {"layer_norm_2d_no_affine",
       [](Env& e) {
         return V{e.leaf({3, 4, 5}, -3.0, 5.0)};
       },
       [](const V& in) {
         return rg::layer_norm(in[0], {4, 5});
       }},
      {"layer_norm:affine",
       [](Env& e) {
         return V{e.leaf({3, 5}), e.leaf({5}), e.leaf({5})};
       },
       [](const V& in) { return rg::layer_norm(in[0], {5}, in[1], in[2]); }},
      {"layer_norm:plain",
       [](Env& e) {
         return V{e.leaf({4, 5})};
       },
       [](const V& in) { return rg::layer_norm(in[0], {5}); }},
      {"layer_norm:transposed-2-dims",
       [](Env& e) {
         return V{e.transposed_leaf(3, 5), e.leaf({3, 5}), e.leaf({3, 5})};
       },
       [](const V& in) {
         return rg::layer_norm(in[0].unsqueeze(0), {3, 5}, in[1], in[2]);
       },
       {.non_contiguous = true}},
      {"layer_norm:bias-only",
       [](Env& e) {
         return V{e.leaf({2, 2, 3}), e.leaf({2, 3})};
       },
       [](const V& in) {
         return rg::layer_norm(in[0], {2, 3}, rg::Tensor(), in[1]);
       }},

      // ---- scaled_dot_product_attention over several tiles. The additive masks are
      // constants (attention gives a mask no gradient); dropout draws from a generator
      // made inside the call, so every evaluation (and every device) uses one mask.
      {"attention_causal_tiles", qkv({2, 3, 7, 8}, {2, 3, 9, 8}, {2, 3, 9, 5}),
       [](const V& in) {
         return rg::scaled_dot_product_attention(
             in[0], in[1], in[2], {.causal = true, .block_q = 3, .block_k = 4, .q_offset = 2});
       }},
      {"attention_mask_dropout",
       [](Env& e) {
         return V{Env::as_leaf(e.constant({2, 2, 4, 6}).transpose(2, 3)), e.leaf({2, 2, 5, 4}),
                  e.leaf({2, 2, 5, 4}), e.constant({2, 1, 1, 5}, -2.0, 0.0)};
       },
       [](const V& in) {
         rg::Generator g(3);
         return rg::scaled_dot_product_attention(
             in[0], in[1], in[2],
             {.mask = in[3], .dropout_p = 0.2, .generator = &g, .block_q = 4, .block_k = 2});
       },
       {.non_contiguous = true}},
      {"attention:tiles", qkv({1, 2, 5, 3}, {1, 2, 6, 3}, {1, 2, 6, 2}),
       [](const V& in) {
         return rg::scaled_dot_product_attention(in[0], in[1], in[2], tiny_tiles());
       }},
      {"attention:causal", qkv({2, 1, 7, 3}, {2, 1, 7, 3}, {2, 1, 7, 3}),
       [](const V& in) {
         return rg::scaled_dot_product_attention(in[0], in[1], in[2], tiny_tiles({.causal = true}));
       }},
      {"attention:masked-explicit-scale",
       [](Env& e) {
         // a finite mask per batch entry, broadcast over heads
         return V{e.leaf({2, 2, 5, 3}), e.leaf({2, 2, 6, 3}), e.leaf({2, 2, 6, 4}),
                  e.constant({2, 1, 5, 6})};
       },
       [](const V& in) {
         return rg::scaled_dot_product_attention(in[0], in[1], in[2],
                                                 tiny_tiles({.mask = in[3], .scale = 0.7}));
       }},
      // Nothing to attend: no batch entries (a GPU's plan takes all B·H = 0 pairs per item,
      // and the tile loop must not divide by that), and keys but no queries.
      {"attention:empty-batch", qkv({0, 2, 5, 3}, {0, 2, 6, 3}, {0, 2, 6, 2}),
       [](const V& in) {
         return rg::scaled_dot_product_attention(in[0], in[1], in[2], tiny_tiles({.causal = true}));
       }},
      {"attention:no-queries", qkv({2, 2, 0, 3}, {2, 2, 6, 3}, {2, 2, 6, 2}),
       [](const V& in) {
         return rg::scaled_dot_product_attention(in[0], in[1], in[2], tiny_tiles());
       }},
      {"attention:dropout", qkv({1, 2, 5, 3}, {1, 2, 5, 3}, {1, 2, 5, 3}),
       [](const V& in) {
         rg::Generator g(11);
         return rg::scaled_dot_product_attention(in[0], in[1], in[2],
                                                 tiny_tiles({.dropout_p = 0.25, .generator = &g}));
       }},

      // ---- cross-entropy: the fused per-sample op, then nn::cross_entropy's reductions
      {"cross_entropy",
       [](Env& e) {
         return V{e.leaf({5, 7}, -4.0, 4.0), e.index({0, 6, 3, -100, 2})};
       },
       [](const V& in) { return rg::cross_entropy_per_sample(in[0], in[1], 0.1); }},
      {"cross_entropy:mean", logits_targets,
       [](const V& in) { return nn::cross_entropy(in[0], in[1]); }},
      {"cross_entropy:sum", logits_targets,
       [](const V& in) {
         return nn::cross_entropy(in[0], in[1], {.reduction = nn::Reduction::Sum});
       }},
      {"cross_entropy:none", logits_targets,
       [](const V& in) {
         return nn::cross_entropy(in[0], in[1], {.reduction = nn::Reduction::None});
       }},
      {"cross_entropy:smoothing", logits_targets,
       [](const V& in) { return nn::cross_entropy(in[0], in[1], {.label_smoothing = 0.2}); }},
      {"cross_entropy:ignore", logits_targets,
       [](const V& in) { return nn::cross_entropy(in[0], in[2]); }},
      {"cross_entropy:smoothing+ignore", logits_targets,
       [](const V& in) { return nn::cross_entropy(in[0], in[2], {.label_smoothing = 0.1}); }},

      // ---- mse_loss, linear
      {"mse_loss:mean",
       [](Env& e) {
         return V{e.leaf({2, 3}), e.leaf({2, 3})};
       },
       [](const V& in) { return nn::mse_loss(in[0], in[1]); }},
      {"mse_loss:sum",
       [](Env& e) {
         return V{e.leaf({2, 3}), e.leaf({2, 3})};
       },
       [](const V& in) { return nn::mse_loss(in[0], in[1], nn::Reduction::Sum); }},
      {"linear", linear_in, [](const V& in) { return nn::linear(in[0], in[1], in[2]); }},
      {"linear:no-bias", linear_in, [](const V& in) { return nn::linear(in[0], in[1]); }},
      {"linear:3-D",
       [](Env& e) {
         return V{e.leaf({2, 3, 4}), e.leaf({2, 4}), e.leaf({2})};
       },
       [](const V& in) { return nn::linear(in[0], in[1], in[2]); }},
      {"linear_relu", linear_in, [](const V& in) { return nn::linear_relu(in[0], in[1], in[2]); }},
      {"linear_relu:no-bias", linear_in, [](const V& in) { return nn::linear_relu(in[0], in[1]); }},
      {"linear_relu:3-D",
       [](Env& e) {
         return V{e.leaf({2, 3, 4}), e.leaf({2, 4}), e.leaf({2})};
       },
       [](const V& in) { return nn::linear_relu(in[0], in[1], in[2]); }},

      // ---- the fused Adam/AdamW update: in place, outside autograd, on copies of the
      // inputs; forward only.
      {"adam_step",
       [](Env& e) {
         return V{e.leaf({37}), e.leaf({37})};
       },
       [](const V& in) {
         rg::Tensor p = in[0].detach().clone(), grad = in[1].detach();
         rg::Tensor m = rg::zeros_like(p), v = rg::zeros_like(p);
         for (int64_t step = 1; step <= 3; ++step)
           rg::adam_step_(
               p, grad, m, v,
               {.lr = 0.1, .weight_decay = 0.01, .step = step, .decoupled = step % 2 == 0});
         return rg::cat({p, m, v});
       },
       {.gradcheck = false}},

      // ---- composites: several ops whose backwards must chain
      {"composite:mlp-cross-entropy",
       [](Env& e) {
         return V{e.constant({4, 3}), e.index({0, 2, 1, 2}, {4, 1}),
                  e.leaf({3, 5}),     e.leaf({5}),
                  e.leaf({5, 3}),     e.leaf({3})};
       },
       [](const V& in) {
         rg::Tensor h = rg::gelu(rg::matmul(in[0], in[2]) + in[3]);
         rg::Tensor logits = rg::matmul(h, in[4]) + in[5];
         return -rg::gather(rg::log_softmax(logits, 1), 1, in[1]).mean();
       }},
      {"composite:attention-like",
       [](Env& e) {
         // causal: query i does not see key j > i
         return V{e.leaf({2, 3, 4}), e.leaf({2, 3, 4}), e.leaf({2, 3, 4}),
                  e.mask({0, 1, 1, 0, 0, 1, 0, 0, 0}, {3, 3})};
       },
       [](const V& in) {
         rg::Tensor s = rg::matmul(in[0], in[1].transpose(-1, -2)) * 0.5;
         s = rg::masked_fill(s, in[3], -1e9);
         return rg::matmul(rg::softmax(s, -1), in[2]);
       }},

      // GPU only: more than 2^31 elements, which cuDNN takes in slices along outer
      // (its dims are int); compared through each row's sum, max and min.
      {"large:softmax-2^31",
       [](Env&) { return V{}; },
       [](const V&, const Env& env) {
         const int64_t rows = (int64_t(1) << 21) + 3, r = 1024;  // 2^31 + 3072 elements
         rg::Tensor x = rg::full({rows, r}, 0.5, env.options()) +
                        rg::arange(r, env.options()).reshape({1, r}) * 0.01;
         rg::Tensor y = rg::softmax(x, 1);
         // every row sums to 1, and the last row (in the last slice) has the right values
         return rg::cat({y.sum(1), y.select(0, rows - 1) * double(r)}, 0);
       },
       {.gradcheck = false, .tol = 1e-3, .large = true}},
  };
}

}  // namespace opcase
