// test_autograd.cpp — the backward engine: gradients, accumulation, retain_graph,
// detach and no-grad, post-accumulate hooks, and that graphs give memory back.
#include <cmath>

#include <ringgrad/autograd/function.h>

#include "test_helpers.h"

using test::check_close;
using test::error_of;
using test::f32;
using test::f64;
using test::values;

TEST_CASE("autograd: scalar backward") {
  rg::Tensor x = test::leaf_of({1, -2, 3}, {3});
  rg::Tensor y = (x * x).sum();  // dy/dx = 2x
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn() != nullptr);
  CHECK_FALSE(x.grad().defined());
  y.backward();
  REQUIRE(x.grad().defined());
  CHECK_SHAPE(x.grad(), {3});
  CHECK(x.grad().dtype() == rg::kFloat64);
  check_close(x.grad(), {2, -4, 6}, 1e-12);
}

TEST_CASE("autograd: chain of ops through a matmul") {
  rg::Tensor w = test::leaf_of({1, 2, 3, 4}, {2, 2});
  rg::Tensor x = f64({1, -1}, {2, 1});
  rg::Tensor loss = rg::matmul(w, x).sum() * 3.0;  // d/dw = 3 * ones(2,1) @ x^T
  loss.backward();
  check_close(w.grad(), {3, -3, 3, -3}, 1e-12);
  CHECK_FALSE(x.grad().defined());  // x does not require grad
}

TEST_CASE("autograd: explicit gradient for a non-scalar output") {
  rg::Tensor x = test::leaf_of({1, 2, 3, 4}, {2, 2});
  rg::Tensor y = x * 2.0 + 1.0;
  y.backward(f64({1, 0.5, -1, 2}, {2, 2}));
  check_close(x.grad(), {2, 1, -2, 4}, 1e-12);
}

TEST_CASE("autograd: backward of a non-scalar without a gradient is an error") {
  rg::Tensor x = test::leaf_of({1, 2, 3}, {3});
  rg::Tensor y = x * 2.0;
  std::string msg = error_of([&] { y.backward(); });
  CHECK_CONTAINS(msg, "backward");
  // a gradient of the wrong shape is refused too
  std::string msg2 = error_of([&] { y.backward(f64({1, 2})); });
  CHECK_CONTAINS(msg2, "backward");
}

TEST_CASE("autograd: gradients accumulate across backward calls") {
  rg::Tensor x = test::leaf_of({1, 2}, {2});
  (x * 3.0).sum().backward();
  check_close(x.grad(), {3, 3}, 1e-12);
  (x * x).sum().backward();
  check_close(x.grad(), {3 + 2, 3 + 4}, 1e-12);
  x.set_grad(rg::Tensor());
  CHECK_FALSE(x.grad().defined());
  (x * 5.0).sum().backward();
  check_close(x.grad(), {5, 5}, 1e-12);
  x.set_grad(f64({1, 1}));
  (x * 5.0).sum().backward();
  check_close(x.grad(), {6, 6}, 1e-12);
}

TEST_CASE("autograd: retain_graph allows a second backward") {
  rg::Tensor x = test::leaf_of({1, 2}, {2});
  rg::Tensor y = (x.exp() * x).sum();  // dy/dx = e^x (1 + x)
  y.backward(rg::Tensor(), /*retain_graph=*/true);
  std::vector<double> once = {std::exp(1.0) * 2, std::exp(2.0) * 3};
  check_close(x.grad(), once, 1e-12);
  y.backward();  // the graph is still there
  check_close(x.grad(), {2 * once[0], 2 * once[1]}, 1e-12);
  // ...but now it has been freed
  std::string msg = error_of([&] { y.backward(); });
  CHECK_CONTAINS(msg, "retain_graph");
}

TEST_CASE("autograd: a second backward without retain_graph throws") {
  rg::Tensor x = test::leaf_of({0.5, 1.5}, {2});
  rg::Tensor y = (x * x).sum();
  y.backward();
  std::string msg = error_of([&] { y.backward(); });
  CHECK_CONTAINS(msg, "retain_graph");
  check_close(x.grad(), {1, 3}, 1e-12);  // the failed call added nothing
}

TEST_CASE("autograd: shared subgraph gets the sum of its gradients") {
  rg::Tensor x = test::leaf_of({1, 2}, {2});
  rg::Tensor h = x * x;           // used twice below
  rg::Tensor y = (h * 3.0 + h.exp()).sum();  // dy/dx = (3 + e^{x^2}) 2x
  y.backward();
  check_close(x.grad(), {(3 + std::exp(1.0)) * 2, (3 + std::exp(4.0)) * 4}, 1e-12);
}

TEST_CASE("autograd: detach") {
  rg::Tensor x = test::leaf_of({1, 2}, {2});
  rg::Tensor y = x * 2.0;
  rg::Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.grad_fn() == nullptr);
  CHECK(d.storage() == y.storage());  // same data
  check_close(d, {2, 4}, 0);
  // a detached branch passes no gradient
  rg::Tensor z = (y * d).sum();  // dz/dx = 2 * d (d is a constant)
  z.backward();
  check_close(x.grad(), {4, 8}, 1e-12);
}

TEST_CASE("autograd: NoGradGuard records nothing") {
  rg::Tensor x = test::leaf_of({1, 2}, {2});
  CHECK(rg::is_grad_enabled());
  {
    rg::NoGradGuard guard;
    CHECK_FALSE(rg::is_grad_enabled());
    rg::Tensor y = x * 2.0 + x.exp();
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK(rg::matmul(x, x).grad_fn() == nullptr);
    CHECK(x.unsqueeze(1).t().grad_fn() == nullptr);
    CHECK_FALSE(x.unsqueeze(0).requires_grad());
    {
      rg::NoGradGuard nested;
      CHECK_FALSE(rg::is_grad_enabled());
    }
    CHECK_FALSE(rg::is_grad_enabled());  // restored to the outer state, not to true
  }
  CHECK(rg::is_grad_enabled());
  rg::Tensor y = x * 2.0;
  CHECK(y.requires_grad());
  CHECK(y.grad_fn() != nullptr);

  rg::set_grad_enabled(false);
  CHECK((x * 2.0).grad_fn() == nullptr);
  rg::set_grad_enabled(true);
}

TEST_CASE("autograd: requires_grad_ only on leaves") {
  rg::Tensor x = test::leaf_of({1, 2}, {2});
  rg::Tensor y = x * 2.0;
  CHECK_THROWS_AS(y.requires_grad_(), rg::Error);
  CHECK_THROWS_AS(y.requires_grad_(false), rg::Error);

  rg::Tensor a = f64({1, 2});
  CHECK_FALSE(a.requires_grad());
  rg::Tensor& same = a.requires_grad_();
  CHECK(&same == &a);
  CHECK(a.requires_grad());
  a.requires_grad_(false);
  CHECK_FALSE(a.requires_grad());

  // an op on tensors that need no grad gives a leaf, which may then require grad
  rg::Tensor b = f64({1, 2}) * 2.0;
  CHECK(b.is_leaf());
  b.requires_grad_();
  (b * b).sum().backward();
  check_close(b.grad(), {4, 8}, 1e-12);
}

TEST_CASE("autograd: gradients flow through views") {
  rg::Tensor x = test::leaf_of({1, 2, 3, 4, 5, 6}, {2, 3});
  rg::Tensor y = x.t().slice(0, 0, 3, 2).sum() + x.select(1, 1).sum() * 10.0 +
                 x.reshape({3, 2})[2].sum() * 100.0;
  y.backward();
  // t().slice(0,0,3,2): columns 0 and 2; select(1,1): column 1; reshape row 2: flat 4,5
  check_close(x.grad(), {1, 10, 1, 1, 110, 101}, 1e-12);
}

TEST_CASE("autograd: a non-contiguous leaf gets a gradient of its own shape") {
  rg::Tensor x = rg::arange(12, {.dtype = rg::kFloat64}).reshape({4, 3}).t();  // (3,4)
  x.requires_grad_();
  rg::Tensor w = rg::arange(12, {.dtype = rg::kFloat64}).reshape({3, 4});
  (x * w).sum().backward();
  CHECK_SHAPE(x.grad(), {3, 4});
  check_close(x.grad(), values(w), 0);
}

TEST_CASE("autograd: post-accumulate-grad hook fires once, after the gradient is complete") {
  rg::Tensor x = test::leaf_of({1, 2, 3}, {3});
  rg::Tensor w = test::leaf_of({0.5, -1, 2}, {3});
  int x_calls = 0, w_calls = 0;
  std::vector<double> x_seen, w_seen;
  x.register_post_accumulate_grad_hook([&](rg::Tensor& leaf) {
    ++x_calls;
    REQUIRE(leaf.grad().defined());
    x_seen = leaf.grad().tolist<double>();
  });
  w.register_post_accumulate_grad_hook([&](rg::Tensor& leaf) {
    ++w_calls;
    w_seen = leaf.grad().tolist<double>();
  });

  // x reaches the loss by three paths of different depth, w by one
  rg::Tensor loss = (x * w).sum() + (x * x).exp().sum() * 0.001 + x.sum() * 7.0;
  loss.backward();
  std::vector<double> xv = {1, 2, 3}, wv = {0.5, -1, 2}, want;
  for (int i = 0; i < 3; ++i) want.push_back(wv[i] + 0.001 * std::exp(xv[i] * xv[i]) * 2 * xv[i] + 7);
  CHECK(x_calls == 1);
  CHECK(w_calls == 1);
  REQUIRE(x_seen.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(x_seen[i] == doctest::Approx(want[i]).epsilon(1e-12));
  CHECK(w_seen == xv);
  check_close(x.grad(), want, 1e-12);

  // a second backward: the hook fires once more and sees the accumulated gradient
  rg::Tensor loss2 = (x * 2.0).sum() + x.sum();
  loss2.backward();
  CHECK(x_calls == 2);
  CHECK(w_calls == 1);  // w was not in this graph
  for (int i = 0; i < 3; ++i) CHECK(x_seen[i] == doctest::Approx(want[i] + 3).epsilon(1e-12));
}

TEST_CASE("autograd: hook on a leaf used twice by the same op") {
  rg::Tensor x = test::leaf_of({1, -2}, {2});
  int calls = 0;
  std::vector<double> seen;
  x.register_post_accumulate_grad_hook([&](rg::Tensor& leaf) {
    ++calls;
    seen = leaf.grad().tolist<double>();
  });
  (x * x).sum().backward();
  CHECK(calls == 1);
  CHECK(seen == std::vector<double>{2, -4});
  // the hook may read (and modify) the gradient: DDP averages in place there
  x.register_post_accumulate_grad_hook([](rg::Tensor& leaf) {
    rg::NoGradGuard no_grad;
    rg::Tensor g = leaf.grad();
    g.mul_(0.5);
  });
  x.set_grad(rg::Tensor());
  (x * x).sum().backward();
  CHECK(calls == 2);
  check_close(x.grad(), {1, -2}, 1e-12);
}

namespace {
struct TinyNet {
  rg::Tensor w1 = rg::randn({8, 16}, {.requires_grad = true});
  rg::Tensor w2 = rg::randn({16, 4}, {.requires_grad = true});
  rg::Tensor x = rg::randn({32, 8});

  void step() {
    rg::Tensor h = rg::relu(rg::matmul(x, w1));
    rg::Tensor out = rg::matmul(h, w2);
    rg::Tensor loss = (out * out).mean();
    loss.backward();
    {
      rg::NoGradGuard no_grad;
      w1.sub_(w1.grad() * 1e-3);
      w2.sub_(w2.grad() * 1e-3);
    }
    w1.set_grad(rg::Tensor());
    w2.set_grad(rg::Tensor());
  }
};
}  // namespace

TEST_CASE("autograd: a training loop does not leak memory") {
  rg::manual_seed(0);
  int64_t base = rg::memory_stats().live_bytes;
  TinyNet net;
  int64_t after_10 = 0;
  for (int i = 1; i <= 1000; ++i) {
    net.step();
    if (i == 10) after_10 = rg::memory_stats().live_bytes;
  }
  int64_t after_1000 = rg::memory_stats().live_bytes;
  CHECK(after_10 > 0);
  CHECK(after_1000 == after_10);
  // the weights and the input are all that is left: 8*16 + 16*4 + 32*8 floats
  CHECK(after_1000 - base == (8 * 16 + 16 * 4 + 32 * 8) * 4);
  for (double v : values(net.w1)) REQUIRE(std::isfinite(v));
}

TEST_CASE("autograd: backward without retain_graph frees the saved tensors") {
  rg::manual_seed(1);
  rg::Tensor a = rg::randn({256}, {.requires_grad = true});
  rg::Tensor loss;
  {
    rg::Tensor c = rg::randn({256, 256});                    // 256 KiB, saved by mul
    rg::Tensor big = a.unsqueeze(0).expand({256, 256}) * c;  // saved by tanh if it keeps its input
    rg::Tensor e = rg::tanh(big);                            // output saved by tanh
    loss = (e * e).mean();                                   // e saved by mul
  }
  int64_t before = rg::memory_stats().live_bytes;
  loss.backward();
  int64_t after = rg::memory_stats().live_bytes;
  // freed: c and e (256 KiB each) at least; added: a.grad (1 KiB)
  CHECK_MESSAGE(after < before - 400 * 1024,
                "live bytes before backward " << before << ", after " << after);
  REQUIRE(a.grad().defined());
  CHECK_SHAPE(a.grad(), {256});
}

TEST_CASE("autograd: retain_graph keeps the saved tensors alive") {
  rg::manual_seed(2);
  rg::Tensor a = rg::randn({256}, {.requires_grad = true});
  rg::Tensor loss;
  {
    rg::Tensor c = rg::randn({256, 256});
    loss = (rg::tanh(a.unsqueeze(0).expand({256, 256}) * c)).mean();
  }
  loss.backward(rg::Tensor(), true);
  int64_t kept = rg::memory_stats().live_bytes;
  loss.backward(rg::Tensor(), true);
  CHECK(rg::memory_stats().live_bytes == kept);  // gradient accumulated in place or replaced
  loss.backward();
  CHECK(rg::memory_stats().live_bytes < kept - 200 * 1024);
}

TEST_CASE("autograd: gradients cross dtype conversions") {
  rg::Tensor x = rg::from_vector<float>({1, 2}, {2}, {.requires_grad = true});
  rg::Tensor y = (x.to(rg::kFloat64) * 3.0).sum();
  CHECK(y.dtype() == rg::kFloat64);
  y.backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == rg::kFloat32);
  check_close(x.grad(), {3, 3});
}

TEST_CASE("autograd: backward from a leaf and through unused outputs") {
  rg::Tensor x = test::leaf_of({1, 2}, {2});
  x.backward(f64({0.5, 0.25}));
  check_close(x.grad(), {0.5, 0.25}, 0);

  // a leaf that reaches the loss only through a branch that is cut by detach gets no gradient
  rg::Tensor w = test::leaf_of({3}, {1});
  rg::Tensor loss = (x * w.detach()).sum();
  x.set_grad(rg::Tensor());
  loss.backward();
  CHECK_FALSE(w.grad().defined());
  check_close(x.grad(), {3, 3}, 0);

  // the gradient handed to backward() is not aliased by the leaf's .grad
  rg::Tensor z = test::leaf_of({1, 1}, {2});
  rg::Tensor g = f64({1, 2});
  (z * 1.0).backward(g);
  {
    rg::NoGradGuard no_grad;
    z.grad().mul_(10.0);
  }
  check_close(g, {1, 2}, 0);
}

TEST_CASE("autograd: hooks only on leaves that require grad") {
  rg::Tensor x = test::leaf_of({1, 2}, {2});
  rg::Tensor y = x * 2.0;
  std::string msg = test::error_of([&] { y.register_post_accumulate_grad_hook([](rg::Tensor&) {}); });
  CHECK_CONTAINS(msg, "register_post_accumulate_grad_hook");
  test::error_of([] { rg::ones({2}).register_post_accumulate_grad_hook([](rg::Tensor&) {}); });
}

TEST_CASE("autograd: gradient conventions at kinks and ties (as PyTorch)") {
  rg::Tensor x = test::leaf_of({-1, 0, 2}, {3});
  rg::relu(x).sum().backward();
  check_close(x.grad(), {0, 0, 1}, 0);  // relu'(0) = 0

  x.set_grad(rg::Tensor());
  rg::abs(x).sum().backward();
  check_close(x.grad(), {-1, 0, 1}, 0);  // abs'(0) = 0

  x.set_grad(rg::Tensor());
  rg::clamp(x, 0, 2).sum().backward();
  check_close(x.grad(), {0, 0, 0}, 0);  // at a bound: 0 (PyTorch 2.x; test_torch_parity.cpp)

  rg::Tensor m = test::leaf_of({1, 3, 3}, {3});
  rg::amax(m).backward();
  check_close(m.grad(), {0, 0.5, 0.5}, 0);  // ties share evenly

  rg::Tensor a = test::leaf_of({1, 2}, {2}), b = test::leaf_of({1, 5}, {2});
  rg::maximum(a, b).sum().backward();
  check_close(a.grad(), {0.5, 0}, 0);
  check_close(b.grad(), {0.5, 1}, 0);
}

TEST_CASE("autograd: pow with a zero base has a finite exponent gradient") {
  // d/db a^b = a^b log a; at a = 0 (b > 0) the product is 0·(-inf): PyTorch defines it as 0
  rg::Tensor a = f64({0, 2});
  rg::Tensor b = test::leaf_of({2, 3}, {2});
  rg::pow(a, b).sum().backward();
  check_close(b.grad(), {0, 8 * std::log(2.0)}, 1e-12);
}

TEST_CASE("autograd: a very deep graph is freed without recursing") {
  // Each node of a 300k-op chain used to free the next one recursively and
  // overflow the stack; the Node destructor now unrolls the chain in a loop.
  rg::Tensor x = rg::ones({1}, {.requires_grad = true});
  rg::Tensor y = x;
  for (int i = 0; i < 300000; ++i) y = y * 1.0;
  CHECK(y.grad_fn() != nullptr);
  y = rg::Tensor();  // drops the whole chain
  CHECK(x.grad_fn() == nullptr);
}

TEST_CASE("autograd: from_vector keeps its element type when options are given") {
  rg::Tensor x = rg::from_vector<double>({1.0, 2.0}, {2}, {.requires_grad = true});
  CHECK(x.dtype() == rg::kFloat64);
  CHECK(x.requires_grad());
}

// An op whose backward is wrong: the engine names it, the input and both shapes
// (or dtypes, or devices) instead of letting a later add() fail far away.
TEST_CASE("autograd: a gradient of the wrong shape, dtype or device is named") {
  rg::Tensor x = test::leaf_of({1, 2, 3, 4}, {4});
  rg::Tensor w = test::leaf_of({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4});
  auto wrong_op = [](const char* name, const rg::Tensor& a, const rg::Tensor& b,
                     std::function<rg::Tensor(const rg::Tensor&)> bad_grad_b) {
    rg::Tensor out = a.detach() * b.detach();
    rg::autograd::record(name, out, {&a, &b}, [a = a.detach(), b = b.detach(), bad_grad_b](
                                                  const rg::Tensor& g) {
      return rg::autograd::Grads{g * b, bad_grad_b(g * a)};
    });
    return out;
  };
  // input 1 has shape [4]; this backward returns the unreduced [3, 4]
  rg::Tensor y = wrong_op("mul", w, x, [](const rg::Tensor& g) { return g; });
  CHECK_CONTAINS(error_of([&] { y.sum().backward(); }),
                 "[backward] 'mul' returned a gradient of shape [3, 4] for input 1 of shape [4]");
  rg::Tensor y2 = wrong_op("bad_dtype", w, x,
                           [](const rg::Tensor& g) { return g.sum(0).to(rg::kFloat32); });
  CHECK_CONTAINS(error_of([&] { y2.sum().backward(); }),
                 "'bad_dtype' returned a gradient of dtype float32 for input 1 of dtype float64");
  // the same op with a correct backward passes the check
  rg::Tensor y3 = wrong_op("good", w, x, [](const rg::Tensor& g) { return g.sum(0); });
  y3.sum().backward();
  check_close(x.grad(), {15, 18, 21, 24}, 1e-12);
}

// Slices of one tensor (Q, K and V of a fused projection; here overlapping too): the
// first slice's backward makes the input's gradient, the others add into their places.
TEST_CASE("autograd: slices and selects of one tensor sum their gradients") {
  rg::Tensor x = test::leaf_of({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 6});
  rg::Tensor h = x * 2.0;  // not a leaf: the sum forms in the engine's buffer for h
  rg::Tensor a = h.narrow(1, 0, 2), b = h.narrow(1, 2, 2), c = h.narrow(1, 1, 3);
  rg::Tensor d = h.select(0, 1), e = h.slice(1, 0, 6, 4);  // row 1; columns 0 and 4
  rg::Tensor loss = (a * 1.0).sum() + (b * 10.0).sum() + (c * 100.0).sum() +
                    (d * 1000.0).sum() + (e * 10000.0).sum();
  loss.backward();
  // d loss / d h per column (both rows), then row 1 gets 1000 more; times 2 for h = 2x.
  const double col[6] = {1 + 10000, 1 + 100, 10 + 100, 10 + 100, 10000, 0};
  std::vector<double> expected;
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 6; ++j) expected.push_back(2 * (col[j] + (r == 1 ? 1000 : 0)));
  check_close(x.grad(), expected, 1e-12);
}

// The engine's contract with Node::add_into: it is asked only where the partial sum is
// the engine's alone and contiguous; otherwise the node's apply() runs and the sum is
// formed out of place (an expanded gradient shares one element among many).
TEST_CASE("autograd: add_into is asked only for a sum the engine owns alone") {
  struct Identity : rg::autograd::Node {
    Identity() : Node("identity") {}
    int applied = 0, added = 0;
    rg::autograd::Grads apply(rg::Tensor g) override { return ++applied, rg::autograd::Grads{g}; }
    bool add_into(const rg::Tensor& g, rg::Tensor& sum) override {
      ++added;
      sum.add_(g);
      return true;
    }
    void release() override {}
  };
  auto identity = [](const rg::Tensor& in, std::shared_ptr<Identity> node) {
    rg::Tensor out = in.detach() * 1.0;
    node->next.push_back(rg::autograd::gradient_edge(in));
    out.impl().grad_fn = node;
    out.impl().requires_grad = true;
    return out;
  };
  rg::Tensor x = test::leaf_of({1, 2, 3}, {3});
  rg::Tensor w = rg::from_vector<double>({5, 6, 7}, {3});
  SUBCASE("a contiguous sum: added into") {
    rg::Tensor h = x * 2.0;
    auto first = std::make_shared<Identity>(), second = std::make_shared<Identity>();
    rg::Tensor a = identity(h, first), b = identity(h, second);  // b's node runs first
    ((a * w).sum() + (b * 3.0).sum()).backward();
    CHECK(second->applied == 1);
    CHECK(first->added == 1);
    CHECK(first->applied == 0);
    check_close(x.grad(), {2 * (5 + 3), 2 * (6 + 3), 2 * (7 + 3)}, 1e-12);
  }
  SUBCASE("an expanded sum: applied and added out of place") {
    rg::Tensor h = x * 2.0;
    auto first = std::make_shared<Identity>(), second = std::make_shared<Identity>();
    rg::Tensor a = identity(h, first), b = identity(h, second);
    // b's gradient: one 3 (a tensor of its own, made by the mul) expanded over 3 elements
    ((a * w).sum() + b.sum() * 3.0).backward();
    CHECK(second->applied == 1);
    CHECK(first->added == 0);
    CHECK(first->applied == 1);
    check_close(x.grad(), {2 * 8, 2 * 9, 2 * 10}, 1e-12);
  }
  SUBCASE("one gradient for two inputs: not summed into itself") {
    rg::Tensor h = x * 2.0;
    ((h + h) * w).sum().backward();  // add's backward hands one tensor to both inputs
    check_close(x.grad(), {2 * 2 * 5, 2 * 2 * 6, 2 * 2 * 7}, 1e-12);
  }
}
