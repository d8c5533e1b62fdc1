// test_moe.cpp — nn::MoE (nn/moe.h): the router's decisions worked by hand (top-k, ties,
// capacity, groups), the layer against a token-by-token reference and against the plain MLP
// it replaces, finite-difference gradients of the output and the auxiliary losses (float64),
// and the errors. Expert parallelism's contract is in tests/mpi/test_moe.cpp.
#include <doctest/doctest.h>
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "test_helpers.h"

namespace rg = ringgrad;
namespace nn = ringgrad::nn;
using test::contains;
using test::error_of;
using test::values;

namespace {

using V = std::vector<int64_t>;

// Every parameter of the module plus x: the gradcheck's inputs (perturbed in place, so the
// module sees each change).
std::vector<rg::Tensor> with_parameters(const rg::Tensor& x, const nn::Module& m) {
  std::vector<rg::Tensor> inputs{x};
  for (const rg::Tensor& p : m.parameters()) inputs.push_back(p);
  return inputs;
}

nn::MoE small(nn::MoEOptions o, int64_t dim = 3) {
  rg::manual_seed(11);
  return nn::MoE(dim, o);
}

}  // namespace

TEST_CASE("moe routing: top-k with ties to the lower index, sorted by expert") {
  // 3 tokens × 4 experts. Token 1 ties experts 1 and 3; token 2 ties all four.
  std::vector<double> s = {0.1,  0.5,  0.3,  0.1,  //
                           0.2,  0.3,  0.2,  0.3,  //
                           0.25, 0.25, 0.25, 0.25};
  nn::Routing r = nn::route_tokens(s, 3, 4, 2, 1, 0.0);
  CHECK(r.choice == V{1, 2, 1, 3, 0, 1});
  CHECK(r.rows_per_expert == V{1, 3, 1, 1});
  // Rows by expert, then by assignment number t·k + j.
  CHECK(r.assignment_of_row == V{4, 0, 2, 5, 1, 3});
  CHECK(r.token_of_row == V{2, 0, 1, 2, 0, 1});
  CHECK(r.chosen == V{1, 3, 1, 1});
  CHECK(r.dropped == 0);
}

TEST_CASE("moe routing: capacity places first choices before second ones, per group") {
  // 4 tokens, 2 experts, k = 2, capacity factor 0.5: ceil(0.5·4·2/2) = 2 places each.
  // Every token's first choice is expert 0 (tokens 0-2) or 1 (token 3).
  std::vector<double> s = {0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.4, 0.6};
  CHECK(nn::expert_capacity(0.5, 4, 2, 2) == 2);
  nn::Routing r = nn::route_tokens(s, 4, 2, 2, 1, 0.5);
  // Expert 0: first choices of tokens 0, 1 fit; token 2's is dropped; token 3's second
  // choice comes too late. Expert 1: token 3's first choice, then token 0's second.
  CHECK(r.dropped == 4);
  CHECK(r.rows_per_expert == V{2, 2});
  CHECK(r.assignment_of_row == V{0, 2, 1, 6});
  CHECK(r.token_of_row == V{0, 1, 0, 3});
  CHECK(r.chosen == V{4, 4});
  // Two groups of two: each has ceil(0.5·2·2/2) = 1 place per expert.
  nn::Routing g = nn::route_tokens(s, 4, 2, 2, 2, 0.5);
  CHECK(g.rows_per_expert == V{2, 2});
  CHECK(g.assignment_of_row == V{0, 4, 1, 6});  // group 0: tokens 0, 0; group 1: 2, 3
  CHECK(g.chosen == V{2, 2, 2, 2});
  CHECK(g.dropped == 4);
  // Dropless keeps all eight.
  CHECK(nn::route_tokens(s, 4, 2, 2, 2, 0.0).dropped == 0);
}

TEST_CASE("moe routing: a group in pieces on two ranks drops what the whole group drops") {
  // The test above's 4 tokens as 4 pieces of one, zigzag on two ranks: rank 0 holds tokens
  // 0 and 3, rank 1 tokens 1 and 2. The whole group keeps assignments 0, 2, 1, 6.
  const std::vector<double> s0 = {0.9, 0.1, 0.4, 0.6}, s1 = {0.8, 0.2, 0.7, 0.3};
  V counts0, counts1;  // each rank's counts, then the sum both get
  nn::GroupPieces p0{4, {0, 3}, [&](const V& c) { return counts0 = c; }};
  nn::GroupPieces p1{4, {1, 2}, [&](const V& c) { return counts1 = c; }};
  nn::route_tokens(s0, 2, 2, 2, 1, 0.5, &p0);
  nn::route_tokens(s1, 2, 2, 2, 1, 0.5, &p1);
  REQUIRE(counts0.size() == counts1.size());
  V sum(counts0.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = counts0[i] + counts1[i];
  p0.sum = p1.sum = [&](const V&) { return sum; };
  nn::Routing r0 = nn::route_tokens(s0, 2, 2, 2, 1, 0.5, &p0);
  nn::Routing r1 = nn::route_tokens(s1, 2, 2, 2, 1, 0.5, &p1);
  // Rank 0: token 0's both choices and token 3's first (local assignments 0, 1, 2).
  CHECK(r0.rows_per_expert == V{1, 2});
  CHECK(r0.assignment_of_row == V{0, 1, 2});
  CHECK(r0.dropped == 1);
  // Rank 1: token 1's first choice only; expert 0 is full before token 2 reaches it.
  CHECK(r1.rows_per_expert == V{1, 0});
  CHECK(r1.assignment_of_row == V{0});
  CHECK(r1.dropped == 3);
  // Without a capacity no counts are exchanged; bad pieces are errors that name them.
  bool summed = false;
  p0.sum = [&](const V&) {
    summed = true;
    return sum;
  };
  nn::route_tokens(s0, 2, 2, 2, 1, 0.5, &p0);
  CHECK(summed);
  summed = false;
  CHECK(nn::route_tokens(s0, 2, 2, 2, 1, 0.0, &p0).dropped == 0);
  CHECK_FALSE(summed);
  nn::GroupPieces twice{4, {1, 1}, p0.sum}, outside{4, {0, 4}, p0.sum}, none{4, {0, 3}, {}};
  CHECK_THROWS_WITH(nn::route_tokens(s0, 2, 2, 2, 1, 0.5, &twice),
                    doctest::Contains("expected distinct pieces in [0, 4), got [1, 1]"));
  CHECK_THROWS_WITH(nn::route_tokens(s0, 2, 2, 2, 1, 0.5, &outside),
                    doctest::Contains("expected distinct pieces in [0, 4), got [0, 4]"));
  CHECK_THROWS_WITH(nn::route_tokens(s0, 2, 2, 2, 1, 0.5, &none), doctest::Contains("and no sum"));
}

TEST_CASE("moe: one expert with k = 1 is the plain MLP") {
  rg::manual_seed(3);
  nn::MoE moe(6, {.num_experts = 1, .top_k = 1, .hidden = 10});
  moe.to(rg::kFloat64);
  rg::Tensor x = rg::randn({2, 5, 6}, {.dtype = rg::kFloat64});
  nn::Expert& e = dynamic_cast<nn::Expert&>(moe.experts[0]);
  rg::Tensor mlp = e.proj->forward(rg::gelu(e.fc->forward(x)));
  rg::Tensor y = moe(x);
  CHECK_SHAPE(y, {2, 5, 6});
  CHECK(values(y) == values(mlp));
  CHECK(moe.stats().tokens_per_expert == V{10});
  CHECK(moe.stats().balance == doctest::Approx(1.0));  // one expert: f = P = 1
}

TEST_CASE("moe: the layer equals a token-by-token reference (float64)") {
  for (double capacity : {0.0, 1.0}) {
    for (nn::RouterScore score : {nn::RouterScore::Softmax, nn::RouterScore::Sigmoid}) {
      CAPTURE(capacity);
      nn::MoE moe = small({.num_experts = 4,
                           .top_k = 2,
                           .hidden = 5,
                           .shared_experts = 1,
                           .score = score,
                           .capacity_factor = capacity},
                          3);
      moe.to(rg::kFloat64);
      rg::Tensor x = rg::randn({8, 3}, {.dtype = rg::kFloat64});
      rg::Tensor y = moe(x);
      // The reference: each token by itself, its kept experts' outputs weighted by gates.
      rg::Tensor logits = moe.router(x);
      rg::Tensor s =
          score == nn::RouterScore::Softmax ? rg::softmax(logits, -1) : rg::sigmoid(logits);
      std::vector<double> sv = values(s);
      nn::Routing r = nn::route_tokens(sv, 8, 4, 2, 1, capacity);
      std::vector<bool> kept(16, false);
      for (int64_t a : r.assignment_of_row) kept[size_t(a)] = true;
      for (int64_t t = 0; t < 8; ++t) {
        rg::Tensor xt = x.narrow(0, t, 1);
        rg::Tensor want = (*moe.shared)(xt);
        double norm = 0;
        for (int64_t j = 0; j < 2; ++j) norm += sv[size_t(t * 4 + r.choice[size_t(t * 2 + j)])];
        for (int64_t j = 0; j < 2; ++j) {
          if (!kept[size_t(t * 2 + j)]) continue;
          int64_t e = r.choice[size_t(t * 2 + j)];
          double gate = sv[size_t(t * 4 + e)] / norm;
          want = want + dynamic_cast<nn::Expert&>(moe.experts[size_t(e)])(xt) * gate;
        }
        test::check_close(y.narrow(0, t, 1), want, 1e-12);
      }
      // Switch's balance loss by hand: E·Σ f·P.
      std::vector<double> mean_score(4, 0.0);
      for (int64_t t = 0; t < 8; ++t)
        for (int64_t e = 0; e < 4; ++e) mean_score[size_t(e)] += sv[size_t(t * 4 + e)] / 8;
      double balance = 0;
      for (int64_t e = 0; e < 4; ++e)
        balance += double(r.chosen[size_t(e)]) / 16 * mean_score[size_t(e)];
      CHECK(moe.stats().balance == doctest::Approx(4 * balance).epsilon(1e-12));
      CHECK(moe.aux_loss().item() == doctest::Approx(0.01 * 4 * balance).epsilon(1e-12));
      const auto& st = moe.stats();
      CHECK(std::accumulate(st.tokens_per_expert.begin(), st.tokens_per_expert.end(), int64_t{0}) ==
            16 - st.dropped);
      CHECK(st.dropped == r.dropped);
      if (capacity == 0.0) CHECK(st.dropped == 0);
    }
  }
}

TEST_CASE("moe: finite-difference gradients of the output and the losses (float64)") {
  struct Case {
    const char* name;
    nn::MoEOptions options;
  };
  std::vector<Case> cases = {
      {"softmax top-2 dropless", {.num_experts = 4, .top_k = 2, .hidden = 4, .z_loss_coef = 0.1}},
      {"softmax top-2 capacity 1 + shared",
       {.num_experts = 4,
        .top_k = 2,
        .hidden = 4,
        .shared_experts = 1,
        .capacity_factor = 1.0,
        .aux_loss_coef = 0.5,
        .z_loss_coef = 0.1}},
      {"sigmoid top-1 swiglu",
       {.num_experts = 3,
        .top_k = 1,
        .hidden = 4,
        .mlp = nn::ExpertMLP::SwiGLU,
        .score = nn::RouterScore::Sigmoid,
        .aux_loss_coef = 0.3}},
      {"softmax top-3 not renormalised",
       {.num_experts = 3, .top_k = 3, .hidden = 3, .normalize_top_k = false, .z_loss_coef = 0.2}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    nn::MoE moe = small(c.options, 3);
    moe.to(rg::kFloat64);
    rg::Tensor x = test::leaf({6, 3});
    test::grad_ok(
        c.name,
        [&](const std::vector<rg::Tensor>& in) {
          nn::MoEOutput out = moe.forward_moe(in[0], 2);
          return rg::cat({out.output.flatten(), out.aux_loss.reshape({1})}, 0);
        },
        with_parameters(x, moe));
  }
}

TEST_CASE("moe: an expert no token chose gets a zero gradient, not none") {
  nn::MoE moe = small({.num_experts = 4, .top_k = 1, .hidden = 3}, 3);
  moe.forward_moe(rg::randn({1, 3})).output.sum().backward();  // one token: one expert busy
  int idle = 0;
  for (size_t e = 0; e < 4; ++e) {
    rg::Tensor g = dynamic_cast<nn::Expert&>(moe.experts[e]).fc->weight.grad();
    REQUIRE(g.defined());
    if (rg::amax(rg::abs(g)).item() == 0) ++idle;
  }
  CHECK(idle == 3);
}

TEST_CASE("moe: groups route as separate calls would") {
  nn::MoE moe = small(
      {.num_experts = 4, .top_k = 2, .hidden = 4, .capacity_factor = 0.75, .z_loss_coef = 0.1}, 3);
  moe.to(rg::kFloat64);
  rg::Tensor x = rg::randn({12, 3}, {.dtype = rg::kFloat64});
  nn::MoEOutput whole = moe.forward_moe(x, 3);
  const int64_t dropped = moe.stats().dropped;
  std::vector<rg::Tensor> parts;
  double aux = 0;
  int64_t part_dropped = 0;
  for (int64_t g = 0; g < 3; ++g) {
    nn::MoEOutput part = moe.forward_moe(x.narrow(0, 4 * g, 4));
    parts.push_back(part.output);
    aux += part.aux_loss.item() / 3;
    part_dropped += moe.stats().dropped;
  }
  test::check_close(whole.output, rg::cat(parts, 0), 1e-12);
  CHECK(whole.aux_loss.item() == doctest::Approx(aux).epsilon(1e-12));
  CHECK(dropped == part_dropped);
  CHECK(dropped > 0);  // the case drops something, or it would test nothing
}

TEST_CASE("moe: with_aux_loss sends the loss's gradient through backward, recomputed too") {
  rg::Tensor x = test::leaf({3}), w = test::leaf({2});
  auto body = [](const std::vector<rg::Tensor>& in) {
    return nn::with_aux_loss(in[0] * 2.0, (in[1] * in[1]).sum() * 0.5);
  };
  // As if the 0.5·Σw² had been added to the loss: d/dx = 2, d/dw = w.
  body({x, w}).sum().backward();
  test::check_close(x.grad(), {2, 2, 2}, 0);
  test::check_close(w.grad(), values(w), 0);
  // Inside a recomputed region the first forward runs without autograd; the recomputation
  // makes the node again, and backward is the same.
  rg::Tensor x2 = x.detach().clone().requires_grad_(), w2 = w.detach().clone().requires_grad_();
  nn::checkpoint(body, {x2, w2}).sum().backward();
  test::check_close(x2.grad(), values(x.grad()), 0);
  test::check_close(w2.grad(), values(w.grad()), 0);
  CHECK(contains(error_of([&] { nn::with_aux_loss(x, x); }), "expected a loss of one element"));
}

TEST_CASE("moe: load statistics") {
  nn::MoEStats s;
  s.tokens_per_expert = {6, 2, 0, 0};
  CHECK(s.max_over_mean() == doctest::Approx(3.0));  // 6 against a mean of 2
  s.assignments = 10, s.dropped = 2;
  CHECK(s.dropped_fraction() == doctest::Approx(0.2));
}

TEST_CASE("moe: options and inputs that cannot work are errors that say so") {
  CHECK(contains(error_of([] { nn::MoE(4, {.num_experts = 2, .top_k = 3}); }),
                 "expected 1 <= top_k <= num_experts (2), got top_k = 3"));
  CHECK(contains(error_of([] { nn::MoE(4, {.num_experts = 0}); }),
                 "expected num_experts >= 1, got 0"));
  CHECK(contains(error_of([] { nn::MoE(4, {.capacity_factor = -1}); }),
                 "expected capacity_factor >= 0 (0: dropless), got -1"));
  nn::MoE moe(4, {.num_experts = 2, .top_k = 1});
  CHECK(contains(error_of([&] { moe(rg::zeros({3, 5})); }), "expected input with last dim 4"));
  CHECK(contains(error_of([&] {
                   moe.forward_moe(rg::zeros({3, 4}), 2);
                 }),
                 "expected the 3 tokens to split into 2 equal groups"));
}
