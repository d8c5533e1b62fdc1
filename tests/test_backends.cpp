// test_backends.cpp — every op on every backend, against the CPU (ggml's test-backend-ops idea).
//
// Each case makes its inputs on the CPU (odd shapes, broadcasting, non-contiguous
// views), runs forward and backward there, then moves the same inputs to each
// other backend, runs again, and compares outputs and input gradients. On a
// machine without a GPU the CUDA half is skipped and says so: the ctest entry
// ops_x_backends reports "Skipped" rather than "Passed".
#include <doctest/doctest.h>
#include <ringgrad/ringgrad.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "test_helpers.h"

namespace rg = ringgrad;

namespace {

struct OpCase {
  std::string name;
  std::function<std::vector<rg::Tensor>()> inputs;  // on the CPU; float leaves get gradients
  std::function<rg::Tensor(const std::vector<rg::Tensor>&)> f;
  double tol = 1e-4;
};

rg::Tensor r(const rg::Shape& s, double lo = -1, double hi = 1) { return rg::uniform(s, lo, hi); }
rg::Tensor pos(const rg::Shape& s) { return rg::uniform(s, 0.5, 2.0); }
rg::Tensor idx(const std::vector<int64_t>& v, const rg::Shape& s = {}) {
  return rg::from_vector<int64_t>(v, s);
}

std::vector<OpCase> all_cases() {
  using V = std::vector<rg::Tensor>;
  auto un = [](
                std::string n, std::function<rg::Tensor(const rg::Tensor&)> f,
                std::function<rg::Tensor()> x = [] {
                  return r({3, 5});
                }) {
    return OpCase{n, [x] { return V{x()}; }, [f](const V& in) { return f(in[0]); }};
  };
  auto bin = [](std::string n, std::function<rg::Tensor(const rg::Tensor&, const rg::Tensor&)> f,
                rg::Shape a = {3, 1, 5}, rg::Shape b = {4, 1}, bool positive = false) {
    return OpCase{n,
                  [=] {
                    return V{positive ? pos(a) : r(a), positive ? pos(b) : r(b)};
                  },
                  [f](const V& in) { return f(in[0], in[1]); }};
  };
  return {
      // elementwise binary, broadcasting (3,1,5)·(4,1) -> (3,4,5)
      bin("add", [](auto& a, auto& b) { return a + b; }),
      bin("sub", [](auto& a, auto& b) { return a - b; }),
      bin("mul", [](auto& a, auto& b) { return a * b; }),
      bin(
          "div", [](auto& a, auto& b) { return a / b; }, {3, 1, 5}, {4, 1}, true),
      bin(
          "pow", [](auto& a, auto& b) { return rg::pow(a, b); }, {3, 1, 5}, {4, 1}, true),
      bin("maximum", [](auto& a, auto& b) { return rg::maximum(a, b); }),
      bin("minimum", [](auto& a, auto& b) { return rg::minimum(a, b); }),
      bin("compare",
          [](auto& a, auto& b) {
            return (a < b).to(rg::kFloat32) + (a >= b).to(rg::kFloat32) * 2.0;
          }),
      // unary, including a transposed (non-contiguous) input
      un("neg", [](auto& x) { return -x; }),
      un("exp", [](auto& x) { return rg::exp(x); }),
      un(
          "log", [](auto& x) { return rg::log(x); },
          [] {
            return pos({4, 3});
          }),
      un(
          "sqrt", [](auto& x) { return rg::sqrt(x); },
          [] {
            return pos({4, 3});
          }),
      un(
          "rsqrt", [](auto& x) { return rg::rsqrt(x); },
          [] {
            return pos({4, 3});
          }),
      un("tanh", [](auto& x) { return rg::tanh(x); }),
      un("sigmoid", [](auto& x) { return rg::sigmoid(x); }),
      un("relu", [](auto& x) { return rg::relu(x); }),
      un("gelu", [](auto& x) { return rg::gelu(x); }),
      un("gelu_tanh", [](auto& x) { return rg::gelu(x, rg::GeluApprox::Tanh); }),
      un("abs", [](auto& x) { return rg::abs(x); }),
      un("clamp", [](auto& x) { return rg::clamp(x, -0.5, 0.5); }),
      un("pow_scalar", [](auto& x) { return x.pow(3.0); }),
      un(
          "transposed_exp", [](auto& x) { return rg::exp(x.t()); },
          [] {
            return r({5, 3});
          }),
      un("where", [](auto& x) { return rg::where(x > 0.0, x * 2.0, -x); }),
      un("masked_fill", [](auto& x) { return rg::masked_fill(x, x < 0.0, 0.25); }),
      // reductions and softmax
      un(
          "sum_all", [](auto& x) { return x.sum(); },
          [] {
            return r({7, 9});
          }),
      un(
          "sum_dims",
          [](auto& x) {
            return rg::sum(x, {0, 2}, true);
          },
          [] {
            return r({3, 4, 5});
          }),
      un(
          "mean", [](auto& x) { return x.mean(1); },
          [] {
            return r({3, 4, 5});
          }),
      un(
          "amax", [](auto& x) { return rg::amax(x, {1}); },
          [] {
            return r({3, 7});
          }),
      un(
          "amin", [](auto& x) { return rg::amin(x, {0}); },
          [] {
            return r({3, 7});
          }),
      un(
          "logsumexp", [](auto& x) { return rg::logsumexp(x, {-1}); },
          [] {
            return r({3, 7});
          }),
      un(
          "argmax", [](auto& x) { return rg::argmax(x, 1).to(rg::kFloat32); },
          [] {
            return r({4, 9});
          }),
      un(
          "softmax", [](auto& x) { return rg::softmax(x, 1); },
          [] {
            return r({3, 4, 5}, -3, 3);
          }),
      un(
          "log_softmax", [](auto& x) { return rg::log_softmax(x, -1); },
          [] {
            return r({6, 11}, -3, 3);
          }),
      // (log-)softmax over a middle dim ([outer, r, inner] = [3, 7, 5], cuDNN's N, C, H),
      // over dim 0 (outer = 1), and in float64 (cuDNN's double path)
      un(
          "softmax_mid", [](auto& x) { return rg::softmax(x, 1); },
          [] {
            return r({3, 7, 5}, -4, 4);
          }),
      un(
          "log_softmax_mid", [](auto& x) { return rg::log_softmax(x, 1); },
          [] {
            return r({3, 7, 5}, -4, 4);
          }),
      un(
          "softmax_dim0_f64", [](auto& x) { return rg::softmax(x, 0); },
          [] {
            return r({9, 2, 3}, -4, 4).to(rg::kFloat64);
          }),
      un(
          "log_softmax_mid_f64", [](auto& x) { return rg::log_softmax(x, -2); },
          [] {
            return r({2, 5, 6, 3}, -4, 4).to(rg::kFloat64);
          }),
      // A >64 KiB CPU tensor (the input, 130·131 float32) goes to the device through the
      // pinned staging buffer, and its gradient (as big) comes back: both exact.
      OpCase{"to_device_staged",
             [] {
               return V{r({130, 131})};
             },
             [](const V& in) { return in[0] * 1.0; }, 0.0},
      // matmul: plain, transposed operand, batched with broadcast batch dims
      bin("matmul", [](auto& a, auto& b) { return rg::matmul(a, b); }, {5, 7}, {7, 3}),
      bin("matmul_t", [](auto& a, auto& b) { return rg::matmul(a, b.t()); }, {5, 7}, {3, 7}),
      bin("matmul_batched", [](auto& a, auto& b) { return rg::matmul(a, b); }, {2, 1, 3, 4},
          {5, 4, 2}),
      bin("matmul_vec", [](auto& a, auto& b) { return rg::matmul(a, b); }, {6, 4}, {4}),
      // indexing, joining, losses, views
      un(
          "index_select",
          [](auto& x) {
            return rg::index_select(x, 0, idx({2, 0, 2, 1}));
          },
          [] {
            return r({3, 5});
          }),
      un(
          "gather",
          [](auto& x) {
            return rg::gather(x, 1, idx({0, 2, 1, 1, 0, 2}, {2, 3}));
          },
          [] {
            return r({2, 3});
          }),
      OpCase{"index_add",
             [] {
               return V{r({4, 3}), r({2, 3})};
             },
             [](const V& in) {
               return rg::index_add(in[0], 0, idx({3, 3}), in[1]);
             }},
      OpCase{"scatter_add",
             [] {
               return V{r({2, 4}), r({2, 3})};
             },
             [](const V& in) {
               return rg::scatter_add(in[0], 1, idx({0, 3, 3, 1, 1, 2}, {2, 3}), in[1]);
             }},
      OpCase{"cat_stack",
             [] {
               return V{r({2, 3}), r({4, 3})};
             },
             [](const V& in) {
               return rg::cat({in[0], in[1], in[0]}, 0) + rg::stack({in[0], in[0]}, 1).sum(1).sum();
             }},
      un(
          "split_chunk", [](auto& x) { return rg::split(x, 2, 1)[1] * rg::chunk(x, 3, 1)[0]; },
          [] {
            return r({3, 6});
          }),
      un(
          "views",
          [](auto& x) {
            return x.permute({2, 0, 1})
                .slice(0, 1, 4, 2)
                .reshape({-1})
                .unsqueeze(0)
                .expand({3, -1});
          },
          [] {
            return r({2, 3, 4});
          }),
      OpCase{"cross_entropy",
             [] {
               return V{r({5, 7}, -4, 4)};
             },
             [](const V& in) {
               return rg::cross_entropy_per_sample(in[0], idx({0, 6, 3, -100, 2}), 0.1);
             }},
      un(
          "argmin", [](auto& x) { return rg::argmin(x, 0).to(rg::kFloat32); },
          [] {
            return r({6, 4});
          }),
      OpCase{
          "arange_fill", [] { return V{}; },
          [](const V&) { return rg::arange(-3, 5, 0.5) + rg::full({16}, 2.5) + rg::ones({16}); }},
      OpCase{"adam_step",
             [] {
               return V{r({37}), r({37})};
             },
             [](const V& in) {
               // The fused update works in place, outside autograd: on copies of the inputs.
               rg::Tensor p = in[0].detach().clone(), grad = in[1].detach();
               rg::Tensor m = rg::zeros_like(p), v = rg::zeros_like(p);
               for (int64_t step = 1; step <= 3; ++step)
                 rg::adam_step_(
                     p, grad, m, v,
                     {.lr = 0.1, .weight_decay = 0.01, .step = step, .decoupled = step % 2 == 0});
               return rg::cat({p, m, v});
             }},
      OpCase{"layer_norm",
             [] {
               return V{r({6, 2, 5}).transpose(0, 1), r({5}), r({5})};  // non-contiguous x
             },
             [](const V& in) { return rg::layer_norm(in[0], {5}, in[1], in[2]); }},
      OpCase{"layer_norm_2d_no_affine", [] { return V{r({3, 4, 5}, -3, 5)}; },
             [](const V& in) { return rg::layer_norm(in[0], {4, 5}); }},
      // Attention over several tiles: causal with offsets, an additive padding-style mask,
      // and dropout (the same Philox counters on every backend give the same mask).
      OpCase{"attention_causal_tiles",
             [] {
               return V{r({2, 3, 7, 8}), r({2, 3, 9, 8}), r({2, 3, 9, 5})};
             },
             [](const V& in) {
               return rg::scaled_dot_product_attention(
                   in[0], in[1], in[2], {.causal = true, .block_q = 3, .block_k = 4, .q_offset = 2});
             }},
      OpCase{"attention_mask_dropout",
             [] {
               return V{r({2, 2, 6, 4}).transpose(2, 3).contiguous().transpose(2, 3), r({2, 2, 5, 4}),
                        r({2, 2, 5, 4}), r({2, 1, 1, 5}, -2, 0)};
             },
             [](const V& in) {
               rg::Generator g(3);
               return rg::scaled_dot_product_attention(
                   in[0], in[1], in[2],
                   {.mask = in[3].detach(), .dropout_p = 0.2, .generator = &g, .block_q = 4,
                    .block_k = 2});
             }},
      OpCase{"random_same_numbers", [] { return V{}; },
             [](const V&) {
               rg::Generator g(42);
               return rg::randn({3, 50}, {}, &g) + rg::rand({3, 50}, {}, &g);
             }},
  };
}

// Forward + backward of one case on `device`: the output, then each float input's gradient.
std::vector<rg::Tensor> run_case(const OpCase& c, const std::vector<rg::Tensor>& cpu_inputs,
                                 rg::Device device, uint64_t seed) {
  std::vector<rg::Tensor> inputs;
  for (const rg::Tensor& t : cpu_inputs) {
    rg::Tensor x = t.to(device);
    if (x.is_leaf() && rg::is_floating(x.dtype())) x = x.detach().requires_grad_();
    inputs.push_back(x);
  }
  rg::manual_seed(seed);
  rg::Tensor out = c.f(inputs);
  std::vector<rg::Tensor> results{out.to(rg::kCPU)};
  if (out.requires_grad()) {
    rg::Generator g(seed + 1);
    rg::Tensor upstream = rg::randn(out.shape(), {.dtype = out.dtype()}, &g).to(device);
    out.backward(upstream);
    for (const rg::Tensor& x : inputs)
      if (x.requires_grad())
        results.push_back(x.grad().defined() ? x.grad().to(rg::kCPU) : rg::Tensor());
  }
  return results;
}

}  // namespace

TEST_CASE("backends: every op matches the CPU on every available backend") {
  std::vector<rg::Device> others;
  for (int i = 0; i < rg::cuda::device_count(); ++i) others.push_back(rg::Device::cuda(i));
  int compared = 0;
  bool cpu_ok = true;
  for (const OpCase& c : all_cases()) {
    CAPTURE(c.name);
    rg::manual_seed(1234);
    std::vector<rg::Tensor> inputs = c.inputs();
    std::vector<rg::Tensor> reference = run_case(c, inputs, rg::kCPU, 99);
    // The CPU against itself: the harness's own check that a case is deterministic.
    std::vector<rg::Tensor> again = run_case(c, inputs, rg::kCPU, 99);
    REQUIRE(again.size() == reference.size());
    for (size_t i = 0; i < reference.size(); ++i) {
      if (!reference[i].defined()) continue;
      bool same = rg::allclose(again[i], reference[i], 0, 0);
      CHECK(same);
      cpu_ok = cpu_ok && same;
    }
    for (rg::Device d : others) {
      std::vector<rg::Tensor> got = run_case(c, inputs, d, 99);
      REQUIRE(got.size() == reference.size());
      for (size_t i = 0; i < reference.size(); ++i) {
        CAPTURE(i);  // 0: the output, 1…: input gradients
        if (!reference[i].defined()) continue;
        REQUIRE(got[i].defined());
        CHECK(got[i].shape() == reference[i].shape());
        CHECK_MESSAGE(
            rg::allclose(got[i].to(rg::kFloat64), reference[i].to(rg::kFloat64), c.tol, c.tol),
            c.name << " on " << d.str() << " differs from the CPU");
      }
      ++compared;
    }
  }
  CHECK(all_cases().size() >= 49);
  if (!others.empty()) {
    MESSAGE("compared " << compared << " op cases on " << others.size() << " GPU(s)");
  } else if (cpu_ok) {  // ctest turns this line into "Skipped" (only when the CPU half passed)
    std::string build = rg::cuda::is_built() ? "built with CUDA" : "built without CUDA";
    MESSAGE("SKIPPED: no CUDA device (" << build << "): " << all_cases().size()
                                        << " op cases ran on the CPU only");
  }
}
