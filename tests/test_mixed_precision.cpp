// test_mixed_precision.cpp — rg::autocast (core/autocast.h) and the optimizers' float32
// master weights for 16-bit parameters (optim/optimizer.h).
#include <cmath>
#include <optional>
#include <thread>
#include <vector>

#include "test_helpers.h"

using test::error_of;

namespace {

// Values a bfloat16 holds exactly (so gradients compare bit for bit across dtypes).
rg::Tensor bf16_exact(const rg::Shape& shape, uint64_t seed) {
  rg::Generator g(seed);
  return rg::randn(shape, {}, &g).to(rg::kBFloat16).to(rg::kFloat32);
}

std::vector<double> values(const rg::Tensor& t) { return t.to(rg::kFloat64).tolist<double>(); }

}  // namespace

TEST_CASE("autocast: GEMM-like ops run in the low dtype, float32 ops in float32, the rest as given") {
  rg::Tensor a = rg::randn({4, 8}), b = rg::randn({8, 3});
  rg::Tensor d = rg::randn({4, 8}, {.dtype = rg::kFloat64});
  {
    rg::autocast guard(rg::kCPU, rg::kBFloat16);
    CHECK(rg::autocast_dtype(rg::kCPU) == rg::kBFloat16);
    rg::Tensor y = rg::matmul(a, b);
    CHECK(y.dtype() == rg::kBFloat16);
    // The same as casting by hand: bfloat16 inputs, float32 accumulation, one rounding.
    CHECK(values(y) == values(rg::matmul(a.to(rg::kBFloat16), b.to(rg::kBFloat16))));
    rg::Tensor bias = rg::randn({3});
    rg::Tensor z = rg::addmm(bias, a, b);  // bfloat16 through the staged GEMM, bias after
    CHECK(z.dtype() == rg::kBFloat16);
    CHECK(values(z) == values(rg::addmm(bias.to(rg::kBFloat16), a.to(rg::kBFloat16),
                                        b.to(rg::kBFloat16))));
    CHECK(rg::softmax(y, -1).dtype() == rg::kFloat32);
    CHECK(rg::log_softmax(y, -1).dtype() == rg::kFloat32);
    CHECK(rg::logsumexp(y, {-1}).dtype() == rg::kFloat32);
    CHECK(rg::layer_norm(y, {3}).dtype() == rg::kFloat32);
    CHECK(rg::relu(y).dtype() == rg::kBFloat16);  // neither list: its input's dtype
    CHECK((y + a.narrow(1, 0, 3)).dtype() == rg::kFloat32);  // promotion
    CHECK(rg::matmul(d, b.to(rg::kFloat64)).dtype() == rg::kFloat64);  // float64 never cast
    rg::nn::Linear fc(8, 5);
    CHECK(fc.forward(a).dtype() == rg::kBFloat16);
    {
      rg::autocast off(rg::kCPU, rg::kBFloat16, /*enabled=*/false);
      CHECK(!rg::autocast_dtype(rg::kCPU).has_value());
      CHECK(rg::matmul(a, b).dtype() == rg::kFloat32);
    }
    CHECK(rg::matmul(a, b).dtype() == rg::kBFloat16);
    // Per thread, as torch.autocast.
    rg::DType other_thread = rg::kBool;
    std::thread([&] { other_thread = rg::matmul(a, b).dtype(); }).join();
    CHECK(other_thread == rg::kFloat32);
  }
  CHECK(!rg::autocast_dtype(rg::kCPU).has_value());
  CHECK(rg::matmul(a, b).dtype() == rg::kFloat32);
  {
    rg::autocast guard(rg::kCPU, rg::kFloat16);
    CHECK(rg::matmul(a, b).dtype() == rg::kFloat16);
  }
  CHECK_CONTAINS(error_of([&] { rg::autocast guard(rg::kCPU, rg::kFloat64); }), "[autocast] expected dtype bfloat16 or float16, got float64");
}

TEST_CASE("autocast: float32 parameters get float32 gradients, equal to casting by hand") {
  rg::manual_seed(3);
  rg::nn::Linear fc(8, 5);
  rg::Tensor x = rg::randn({6, 8});
  rg::Tensor target = rg::randint(0, 5, {6});
  rg::Tensor loss;
  {
    rg::autocast guard(rg::kCPU, rg::kBFloat16);
    rg::Tensor logits = fc.forward(x);
    CHECK(logits.dtype() == rg::kBFloat16);
    loss = rg::nn::cross_entropy(logits, target);
    CHECK(loss.dtype() == rg::kFloat32);
  }
  loss.backward();
  std::vector<rg::Tensor> params = fc.parameters();
  std::vector<rg::Tensor> auto_grads;
  for (rg::Tensor& p : params) {
    CHECK(p.grad().dtype() == rg::kFloat32);
    auto_grads.push_back(p.grad());
    p.set_grad(rg::Tensor());
  }
  // By hand: the same casts, written out.
  const rg::DType h = rg::kBFloat16;
  rg::Tensor logits = rg::nn::linear(x.to(h), params[0].to(h), params[1].to(h));
  rg::nn::cross_entropy(logits.to(rg::kFloat32), target).backward();
  for (size_t i = 0; i < params.size(); ++i) CHECK(values(params[i].grad()) == values(auto_grads[i]));
}

TEST_CASE("autocast_weight_cache: a step's micro-batches share one 16-bit copy of each weight") {
  rg::manual_seed(5);
  rg::nn::Linear fc(64, 32);
  std::vector<rg::Tensor> xs;
  for (int i = 0; i < 4; ++i) xs.push_back(rg::randn({3, 64}));
  // Four micro-batches in flight (every forward before any backward, as a pipeline's first
  // stage holds them), then their backwards; returns the gradients and the bytes held at the
  // end of the forwards above what was held before them.
  auto step = [&](bool cached) {
    for (rg::Tensor& p : fc.parameters()) p.set_grad(rg::Tensor());
    const int64_t before = rg::memory_stats().live_bytes;
    std::vector<rg::Tensor> losses;
    int64_t held = 0;
    {
      std::optional<rg::autocast_weight_cache> cache;
      if (cached) cache.emplace();
      {
        rg::autocast guard(rg::kCPU, rg::kBFloat16);
        for (const rg::Tensor& x : xs) {
          rg::Tensor y = fc.forward(x).to(rg::kFloat32);
          losses.push_back((y * y).sum());
        }
      }
      held = rg::memory_stats().live_bytes - before;
      for (rg::Tensor& loss : losses) loss.backward();  // each runs the shared cast's backward
    }
    std::vector<std::vector<double>> grads;
    for (rg::Tensor& p : fc.parameters()) grads.push_back(values(p.grad()));
    return std::make_pair(grads, held);
  };
  const auto [plain, plain_held] = step(false);
  const auto [cached, cached_held] = step(true);
  CHECK(cached == plain);  // the same gradients, to the bit
  // The weight's copy (64 x 32 bfloat16 numbers, 4 KB), which each GEMM keeps for backward,
  // made once, not 4 times; the bias's (no backward keeps it) now kept once, by the cache.
  CHECK(plain_held - cached_held == 3 * (64 * 32 * 2) - 32 * 2);

  {  // A later backward runs the shared cast as soon as its gradient is complete, as a fresh
     // one would, not after everything newer: fc2's weight gradient is in (and DDP's hook on
     // it fires) before the backward reaches fc1 and the input.
    rg::nn::Linear fc1(8, 8), fc2(8, 4);
    bool input_done_first = false;
    rg::Tensor x;
    fc2.weight.register_post_accumulate_grad_hook([&](rg::Tensor&) { input_done_first = x.grad().defined(); });
    rg::autocast_weight_cache cache;
    for (int k = 0; k < 2; ++k) {
      x = rg::randn({3, 8}).requires_grad_();
      rg::Tensor loss;
      {
        rg::autocast guard(rg::kCPU, rg::kBFloat16);
        loss = fc2.forward(fc1.forward(x)).to(rg::kFloat32).sum();
      }
      loss.backward();
      CHECK(!input_done_first);
    }
  }
  {  // one copy while the cache is open, nested or not; a new one after it closes
    rg::autocast guard(rg::kCPU, rg::kBFloat16);
    const rg::Tensor& w = fc.weight;
    rg::Tensor first, again;
    {
      rg::autocast_weight_cache cache;
      first = rg::detail::autocast_cast(w, rg::kBFloat16);
      {
        rg::autocast_weight_cache inner;
        CHECK(rg::detail::autocast_cast(w, rg::kBFloat16).storage().get() == first.storage().get());
      }
      again = rg::detail::autocast_cast(w, rg::kBFloat16);  // the inner cache's end kept it
      CHECK(again.storage().get() == first.storage().get());
      // Not cached: a tensor that is not a leaf, and anything with gradients off.
      rg::Tensor made = w * 2.0;
      CHECK(rg::detail::autocast_cast(made, rg::kBFloat16).storage().get() !=
            rg::detail::autocast_cast(made, rg::kBFloat16).storage().get());
      rg::NoGradGuard off;
      rg::Tensor plain_cast = rg::detail::autocast_cast(w, rg::kBFloat16);
      CHECK(plain_cast.storage().get() != first.storage().get());
      CHECK(!plain_cast.requires_grad());
    }
    rg::autocast_weight_cache cache;
    CHECK(rg::detail::autocast_cast(w, rg::kBFloat16).storage().get() != first.storage().get());
  }
}

TEST_CASE("autocast: a Transformer encoder layer in bfloat16 stays within bfloat16's rounding of float32") {
  rg::manual_seed(5);
  rg::nn::TransformerEncoderLayer layer(32, 4, {.dim_feedforward = 64, .dropout = 0.0, .batch_first = true});
  rg::Tensor x = rg::randn({2, 10, 32});
  rg::Tensor want = layer.forward(x);
  rg::Tensor got;
  {
    rg::autocast guard(rg::kCPU, rg::kBFloat16);
    got = layer.forward(x);
  }
  CHECK(got.dtype() == rg::kFloat32);  // the last op is a layer norm: float32 under autocast
  // A few GEMMs deep, each input rounded to 8 bits: relative error ~ 2^-8 per stage.
  double err = rg::amax(rg::abs(got - want)).item(), scale = rg::amax(rg::abs(want)).item();
  CHECK(err < 0.05 * scale);
  CHECK(err > 0);  // it really ran in bfloat16
  got.sum().backward();
  for (const rg::Tensor& p : layer.parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == rg::kFloat32);
  }
}

TEST_CASE("master weights: a bfloat16 parameter is updated through a float32 copy") {
  for (int adam = 0; adam < 2; ++adam) {
    CAPTURE(adam);
    rg::Tensor p32 = bf16_exact({3, 4}, 1).requires_grad_();
    rg::Tensor p16 = p32.detach().to(rg::kBFloat16).requires_grad_();
    auto make = [&](rg::Tensor p) -> std::unique_ptr<rg::optim::Optimizer> {
      if (adam) return std::make_unique<rg::optim::AdamW>(std::vector<rg::Tensor>{p}, rg::optim::AdamWOptions{.lr = 1e-2});
      return std::make_unique<rg::optim::SGD>(std::vector<rg::Tensor>{p}, rg::optim::SGDOptions{.lr = 1e-2, .momentum = 0.9});
    };
    auto o32 = make(p32), o16 = make(p16);
    for (int step = 0; step < 5; ++step) {
      rg::Tensor g = bf16_exact({3, 4}, 10 + step);
      p32.set_grad(g);
      p16.set_grad(g.to(rg::kBFloat16));
      o32->step();
      o16->step();
      // The master follows the float32 run exactly; the parameter is it rounded.
      CHECK(p16.dtype() == rg::kBFloat16);
      CHECK(values(p16) == values(p32.detach().to(rg::kBFloat16)));
    }
    std::map<std::string, std::string> meta;
    rg::NamedTensors st = o16->state_dict(&meta);
    bool found = false;
    for (auto& [k, t] : st)
      if (k == "state.0.0.master") {
        found = true;
        CHECK(t.dtype() == rg::kFloat32);
        CHECK(values(t) == values(p32));
      } else {
        CHECK(t.dtype() != rg::kBFloat16);  // moments in float32 too
      }
    CHECK(found);
  }
}

TEST_CASE("master weights: updates below a bfloat16 ulp accumulate instead of vanishing") {
  rg::Tensor p = rg::ones({4}, {.dtype = rg::kBFloat16}).requires_grad_();
  rg::optim::SGD opt({p}, {.lr = 1e-3});
  for (int i = 0; i < 10; ++i) {
    p.set_grad(rg::ones({4}, {.dtype = rg::kBFloat16}));
    opt.step();  // 1 − 0.001 rounds back to 1 in bfloat16 (ulp 2^-7 at 1): only the master moves
  }
  // master 0.99 → bfloat16 0.98828125 (253 · 2^-8: below 1 the ulp is 2^-8)
  CHECK(values(p)[0] == 0.98828125);
}

TEST_CASE("master weights: saved and loaded with the state; a resume equals the straight run") {
  auto run = [](int first, int second, bool resume) {
    rg::Tensor p = bf16_exact({5}, 7).to(rg::kBFloat16).requires_grad_();
    auto opt = std::make_unique<rg::optim::Adam>(std::vector<rg::Tensor>{p}, rg::optim::AdamOptions{.lr = 1e-3});
    auto steps = [&](int from, int to) {
      for (int s = from; s < to; ++s) {
        p.set_grad(bf16_exact({5}, 100 + s).to(rg::kBFloat16));
        opt->step();
      }
    };
    steps(0, first);
    if (resume) {
      std::map<std::string, std::string> meta;
      rg::NamedTensors st = opt->state_dict(&meta);
      rg::Tensor q = p.detach().clone().requires_grad_();
      p = q;
      opt = std::make_unique<rg::optim::Adam>(std::vector<rg::Tensor>{p}, rg::optim::AdamOptions{.lr = 1e-3});
      opt->load_state_dict(st, meta);
    }
    steps(first, first + second);
    return values(p);
  };
  CHECK(run(3, 4, true) == run(3, 4, false));

  rg::Tensor p = rg::ones({2}, {.dtype = rg::kBFloat16}).requires_grad_();
  rg::optim::Adam opt({p});
  p.set_grad(rg::ones({2}, {.dtype = rg::kBFloat16}));
  opt.step();
  std::map<std::string, std::string> meta;
  rg::NamedTensors st = opt.state_dict(&meta);
  rg::NamedTensors no_master, bf16_master;
  for (auto& [k, t] : st) {
    if (k != "state.0.0.master") no_master.emplace_back(k, t);
    bf16_master.emplace_back(k, k == "state.0.0.master" ? t.to(rg::kBFloat16) : t);
  }
  CHECK_CONTAINS(error_of([&] { opt.load_state_dict(no_master, meta); }), "expected state.0.0.master beside");
  CHECK_CONTAINS(error_of([&] { opt.load_state_dict(bf16_master, meta); }),
                 "expected state.0.0.master as float32 (the float32 state of a 16-bit parameter), got bfloat16");
}
