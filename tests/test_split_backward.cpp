// test_split_backward.cpp — backward in two parts (autograd/split_backward.h): the inputs'
// gradients first (B), the weights' later (W), together equal to one backward.
#include <doctest/doctest.h>
#include <ringgrad/ringgrad.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "test_helpers.h"

using test::contains;
using test::error_of;

namespace {

rg::Tensor leaf(const rg::Shape& shape, rg::Generator& gen) {
  return rg::randn(shape, {.dtype = rg::kFloat64}, &gen).requires_grad_(true);
}

// Whether two gradients are the same to the bit (both absent counts as the same).
bool same(const rg::Tensor& a, const rg::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.shape() == b.shape() && a.tolist<double>() == b.tolist<double>();
}

// A random graph over leaves: an input x (4, 6) and weights, each op drawn from a mix
// that covers one- and two-input nodes, views, a tensor used many times, linear layers
// (the GEMM that splits; with GELU or ReLU in its epilogue), layer norm and weights used
// more than once. Returns the root.
struct RandomGraph {
  rg::Tensor x;
  std::vector<rg::Tensor> weights;
  rg::Tensor build(uint64_t seed, bool x_on_path = true) {
    rg::Generator gen(seed);
    std::mt19937 pick(static_cast<uint32_t>(seed));
    x = leaf({4, 6}, gen);
    weights.clear();
    for (int i = 0; i < 4; ++i) weights.push_back(leaf({6, 6}, gen));
    weights.push_back(leaf({6}, gen));
    weights.push_back(leaf({6}, gen));
    std::vector<rg::Tensor> pool{x_on_path ? x : rg::tanh(weights[4]).expand({4, 6})};
    auto any = [&] { return pool[pick() % pool.size()]; };
    auto weight = [&] { return weights[pick() % 4]; };
    for (int step = 0; step < 12; ++step) {
      rg::Tensor a = any(), b = any(), y;
      switch (pick() % 10) {
        case 0:
          y = rg::nn::linear(a, weight(), weights[4]);
          break;
        case 1:
          y = rg::tanh(a) * b;
          break;
        case 2:
          y = a + b * weights[5];
          break;
        case 3:
          y = rg::layer_norm(a, {6}, weights[4], weights[5]);
          break;
        case 4:
          y = rg::matmul(a, weight().t());
          break;
        case 5:
          y = rg::cat({a.narrow(1, 0, 3), b.narrow(1, 3, 3)}, 1);
          break;
        case 6:
          y = rg::nn::linear(rg::tanh(a), weight()) + a;
          break;
        case 8:
          y = rg::nn::linear_gelu(a, weight(), weights[5]);
          break;  // dX and dW share GELU's
        case 9:
          y = rg::nn::linear_relu(b, weight(), weights[4]) - a;
          break;  // gradient, computed once
        default:
          y = a * 0.5 - rg::tanh(b);
          break;
      }
      pool.push_back(y);
    }
    rg::Tensor root = pool.back();
    for (size_t i = 1; i + 1 < pool.size(); i += 3) root = root + pool[i] * 0.25;
    return (root * root).sum();
  }
  std::vector<rg::Tensor> grads() const {
    std::vector<rg::Tensor> g{x.grad()};
    for (const rg::Tensor& w : weights) g.push_back(w.grad());
    return g;
  }
};

}  // namespace

TEST_CASE("split_backward: a linear stage's B gives dX only, W the weights'") {
  rg::Generator gen(7);
  rg::Tensor w1 = leaf({5, 4}, gen), b1 = leaf({5}, gen), w2 = leaf({3, 5}, gen);
  rg::Tensor x = leaf({6, 4}, gen), dy = rg::randn({6, 3}, {.dtype = rg::kFloat64}, &gen);
  auto stage = [&](const rg::Tensor& in) {
    return rg::nn::linear(rg::tanh(rg::nn::linear(in, w1, b1)), w2);
  };
  stage(x).backward(dy);
  const std::vector<rg::Tensor> want{x.grad(), w1.grad(), b1.grad(), w2.grad()};
  for (rg::Tensor t : {x, w1, b1, w2}) t.set_grad(rg::Tensor());
  int fired = 0;
  w1.register_post_accumulate_grad_hook([&](rg::Tensor&) { ++fired; });

  rg::autograd::DeferredBackward later = rg::autograd::backward_inputs_first(stage(x), dy, {x});
  CHECK(same(x.grad(), want[0]));
  CHECK_FALSE(w1.grad().defined());  // nothing of W's ran in B
  CHECK_FALSE(b1.grad().defined());
  CHECK_FALSE(w2.grad().defined());
  CHECK(fired == 0);
  CHECK(later.size() == 2);  // the two linears, each with its weights left
  later.run();
  CHECK(later.empty());
  CHECK(fired == 1);  // the hook fires once, when the gradient is final
  CHECK(same(w1.grad(), want[1]));
  CHECK(same(b1.grad(), want[2]));
  CHECK(same(w2.grad(), want[3]));
  CHECK(same(x.grad(), want[0]));  // W adds nothing to the input's gradient
  later.run();                     // a second run does nothing
  CHECK(same(w1.grad(), want[1]));
}

TEST_CASE("split_backward: B then W equals one backward, bit for bit, on random graphs") {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    RandomGraph plain, split;
    plain.build(seed).backward();
    rg::Tensor root = split.build(seed);
    rg::autograd::DeferredBackward later = rg::autograd::backward_inputs_first(root, {}, {split.x});
    CHECK_MESSAGE(same(split.x.grad(), plain.x.grad()), "seed ", seed, ": B's input gradient");
    later.run();
    std::vector<rg::Tensor> a = plain.grads(), b = split.grads();
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK_MESSAGE(same(a[i], b[i]), "seed ", seed, ": leaf ", i);
      checked += a[i].defined();
    }
  }
  CHECK(checked > 200);  // the graphs reach most leaves
}

TEST_CASE("split_backward: with no input below the root, all of it waits for W") {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    RandomGraph plain, split;
    plain.build(seed, /*x_on_path=*/false).backward();
    rg::Tensor root = split.build(seed, /*x_on_path=*/false);
    rg::autograd::DeferredBackward later = rg::autograd::backward_inputs_first(root, {}, {split.x});
    CHECK_FALSE(split.x.grad().defined());
    for (const rg::Tensor& w : split.weights) CHECK_FALSE(w.grad().defined());
    later.run();
    std::vector<rg::Tensor> a = plain.grads(), b = split.grads();
    for (size_t i = 0; i < a.size(); ++i)
      CHECK_MESSAGE(same(a[i], b[i]), "seed ", seed, ": leaf ", i);
  }
}

TEST_CASE("split_backward: a node that cannot split runs whole in B and hands W its share") {
  // nn::checkpoint's node recomputes its function: it runs whole in B, and the gradient it
  // makes for w (an input of the checkpoint, off the path to x) goes on to W.
  rg::Generator gen(3);
  rg::Tensor w = leaf({4, 4}, gen), v = leaf({4, 4}, gen), x = leaf({2, 4}, gen);
  auto f = [&](const rg::Tensor& in) {
    rg::Tensor h = rg::nn::checkpoint(
        [](const std::vector<rg::Tensor>& t) { return rg::tanh(rg::matmul(t[0], t[1])); },
        {in, rg::tanh(w)});
    return rg::matmul(h, v).sum();
  };
  f(x).backward();
  const rg::Tensor want_x = x.grad(), want_w = w.grad(), want_v = v.grad();
  for (rg::Tensor t : {x, w, v}) t.set_grad(rg::Tensor());
  rg::autograd::DeferredBackward later = rg::autograd::backward_inputs_first(f(x), {}, {x});
  CHECK(same(x.grad(), want_x));
  CHECK_FALSE(w.grad().defined());
  CHECK_FALSE(v.grad().defined());
  later.run();
  CHECK(same(w.grad(), want_w));
  CHECK(same(v.grad(), want_v));
}

TEST_CASE("split_backward: callbacks queued in W run at W's end") {
  rg::Generator gen(5);
  rg::Tensor w = leaf({3, 3}, gen), x = leaf({2, 3}, gen);
  std::vector<std::string> order;
  w.register_post_accumulate_grad_hook([&](rg::Tensor&) {
    order.push_back("hook");
    rg::autograd::queue_callback([&] { order.push_back("callback"); });
  });
  rg::autograd::DeferredBackward later =
      rg::autograd::backward_inputs_first(rg::nn::linear(x, w).sum(), {}, {x});
  CHECK(order.empty());
  later.run();
  CHECK(order == std::vector<std::string>{"hook", "callback"});
}

TEST_CASE("split_backward: bad inputs are clear errors") {
  rg::Generator gen(9);
  rg::Tensor w = leaf({3, 3}, gen), x = leaf({2, 3}, gen);
  rg::Tensor h = rg::tanh(x);
  CHECK(contains(
      error_of([&] { rg::autograd::backward_inputs_first(rg::nn::linear(h, w).sum(), {}, {h}); }),
      "expected inputs that are leaves requiring grad"));
  rg::Tensor plain = rg::ones({2, 3});
  CHECK(contains(error_of([&] {
                   rg::autograd::backward_inputs_first(rg::nn::linear(x, w).sum(), {}, {plain});
                 }),
                 "input 0"));
  CHECK(contains(
      error_of([&] { rg::autograd::backward_inputs_first(rg::nn::linear(x, w), {}, {x}); }),
      "expected a scalar output"));
}
