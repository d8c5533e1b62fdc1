// test_gradcheck.cpp — every differentiable op and every view, checked against
// central finite differences in float64 (rg::gradcheck) on tiny shapes.
//
// Inputs avoid the points where an op is not differentiable: relu/abs away from
// 0, clamp away from its bounds, maximum/minimum away from ties, log/sqrt/div/pow
// on positive or non-zero values.
#include <cmath>

#include "test_helpers.h"

using test::f64;
using test::grad_ok;
using test::i64;
using test::leaf;
using test::leaf_of;
using V = std::vector<rg::Tensor>;

namespace {

// A float64 leaf with |value| in [margin, margin + 1): away from 0.
rg::Tensor away_from_zero(const rg::Shape& shape, double margin = 0.2) {
  std::vector<double> v = rg::uniform(shape, -1, 1, {.dtype = rg::kFloat64}).tolist<double>();
  for (double& x : v) x = x < 0 ? x - margin : x + margin;
  return leaf_of(v, shape);
}

// A non-contiguous float64 leaf of `shape` (2-D): the transpose of a contiguous tensor.
rg::Tensor transposed_leaf(int64_t rows, int64_t cols) {
  rg::Tensor x = rg::randn({cols, rows}, {.dtype = rg::kFloat64}).t();
  x.requires_grad_();
  return x;
}

// Same shape as `a`, values a ± 0.3 (alternating), as a new leaf: no ties with a.
rg::Tensor shifted_leaf(const rg::Tensor& a) {
  std::vector<double> v = a.tolist<double>();
  for (size_t i = 0; i < v.size(); ++i) v[i] += (i % 2 ? 0.3 : -0.3);
  return leaf_of(v, a.shape());
}

}  // namespace

// ---------------------------------------------------------------- sanity of gradcheck itself

TEST_CASE("gradcheck: passes a correct gradient and catches a wrong one") {
  rg::manual_seed(100);
  rg::Tensor x = leaf({3, 2});
  grad_ok("x*x", [](const V& in) { return in[0] * in[0]; }, {x});
  // x * detach(x) has analytic gradient x but true derivative 2x
  rg::GradcheckResult r = rg::gradcheck([](const V& in) { return in[0] * in[0].detach(); }, {x});
  CHECK_FALSE(r.ok);
  CHECK(r.max_abs_error > 1e-3);
  CHECK_FALSE(r.message.empty());
}

// ---------------------------------------------------------------- binary

TEST_CASE("gradcheck: add sub mul div same shape") {
  rg::manual_seed(101);
  rg::Tensor a = leaf({2, 3}), b = leaf({2, 3}), d = away_from_zero({2, 3});
  grad_ok("add", [](const V& in) { return rg::add(in[0], in[1]); }, {a, b});
  grad_ok("sub", [](const V& in) { return rg::sub(in[0], in[1]); }, {a, b});
  grad_ok("mul", [](const V& in) { return rg::mul(in[0], in[1]); }, {a, b});
  grad_ok("div", [](const V& in) { return rg::div(in[0], in[1]); }, {a, d});
  grad_ok("operators", [](const V& in) { return (in[0] + in[1]) * in[0] - in[1] / in[2]; },
          {a, b, d});
}

TEST_CASE("gradcheck: binary ops with broadcasting") {
  rg::manual_seed(102);
  rg::Tensor col = leaf({3, 1}), row = leaf({1, 4});
  grad_ok("(3,1)+(1,4)", [](const V& in) { return in[0] + in[1]; }, {col, row});
  grad_ok("(3,1)-(1,4)", [](const V& in) { return in[0] - in[1]; }, {col, row});
  grad_ok("(3,1)*(1,4)", [](const V& in) { return in[0] * in[1]; }, {col, row});
  rg::Tensor den = away_from_zero({1, 4});
  grad_ok("(3,1)/(1,4)", [](const V& in) { return in[0] / in[1]; }, {col, den});

  rg::Tensor m = leaf({2, 3}), v = leaf({3});
  grad_ok("(2,3)*(3)", [](const V& in) { return in[0] * in[1]; }, {m, v});
  grad_ok("(3)+(2,3)", [](const V& in) { return in[1] + in[0]; }, {m, v});
  rg::Tensor vd = away_from_zero({3});
  grad_ok("(2,3)/(3)", [](const V& in) { return in[0] / in[1]; }, {m, vd});

  rg::Tensor s = leaf({2, 1, 3}), t = leaf({4, 1});
  grad_ok("(2,1,3)*(4,1)", [](const V& in) { return in[0] * in[1]; }, {s, t});
  rg::Tensor z = rg::scalar_tensor(0.7, {.dtype = rg::kFloat64});
  z.requires_grad_();
  grad_ok("(2,3)*0-dim", [](const V& in) { return in[0] * in[1]; }, {m, z});
}

TEST_CASE("gradcheck: scalar operators") {
  rg::manual_seed(103);
  rg::Tensor x = leaf({2, 3}), p = leaf({2, 3}, 0.5, 2.0);
  grad_ok("x+2", [](const V& in) { return in[0] + 2.0; }, {x});
  grad_ok("2+x", [](const V& in) { return 2.0 + in[0]; }, {x});
  grad_ok("x-2", [](const V& in) { return in[0] - 2.0; }, {x});
  grad_ok("2-x", [](const V& in) { return 2.0 - in[0]; }, {x});
  grad_ok("x*3", [](const V& in) { return in[0] * 3.0; }, {x});
  grad_ok("3*x", [](const V& in) { return 3.0 * in[0]; }, {x});
  grad_ok("x/3", [](const V& in) { return in[0] / 3.0; }, {x});
  grad_ok("3/p", [](const V& in) { return 3.0 / in[0]; }, {p});
  grad_ok("-x", [](const V& in) { return -in[0]; }, {x});
}

TEST_CASE("gradcheck: pow") {
  rg::manual_seed(104);
  rg::Tensor base = leaf({2, 3}, 0.5, 2.0), e = leaf({2, 3}, -1.0, 2.0);
  grad_ok("pow(t, t)", [](const V& in) { return rg::pow(in[0], in[1]); }, {base, e});
  rg::Tensor eb = leaf({3}, -1.0, 2.0);
  grad_ok("pow broadcast exponent", [](const V& in) { return rg::pow(in[0], in[1]); }, {base, eb});
  grad_ok("pow(x, 3)", [](const V& in) { return rg::pow(in[0], 3.0); }, {leaf({2, 3})});
  grad_ok("pow(x, 0.5)", [](const V& in) { return in[0].pow(0.5); }, {base});
  grad_ok("pow(x, -2)", [](const V& in) { return rg::pow(in[0], -2.0); }, {base});
  grad_ok("pow(x, 2) negative base", [](const V& in) { return rg::pow(in[0], 2.0); },
          {leaf({4}, -2.0, -0.5)});
}

TEST_CASE("gradcheck: maximum minimum") {
  rg::manual_seed(105);
  rg::Tensor a = leaf({2, 3});
  rg::Tensor b = shifted_leaf(a);
  grad_ok("maximum", [](const V& in) { return rg::maximum(in[0], in[1]); }, {a, b});
  grad_ok("minimum", [](const V& in) { return rg::minimum(in[0], in[1]); }, {a, b});
  rg::Tensor r = leaf_of({-0.5, 0.25, 2.0}, {3});
  rg::Tensor m = leaf_of({-1, 0, 1, 1, 0.6, -3}, {2, 3});
  grad_ok("maximum broadcast", [](const V& in) { return rg::maximum(in[0], in[1]); }, {m, r});
  grad_ok("minimum broadcast", [](const V& in) { return rg::minimum(in[0], in[1]); }, {m, r});
}

// ---------------------------------------------------------------- unary

TEST_CASE("gradcheck: smooth unary ops") {
  rg::manual_seed(106);
  rg::Tensor x = leaf({2, 3}, -2.0, 2.0);
  rg::Tensor p = leaf({2, 3}, 0.3, 3.0);
  grad_ok("neg", [](const V& in) { return rg::neg(in[0]); }, {x});
  grad_ok("exp", [](const V& in) { return rg::exp(in[0]); }, {x});
  grad_ok("log", [](const V& in) { return rg::log(in[0]); }, {p});
  grad_ok("sqrt", [](const V& in) { return rg::sqrt(in[0]); }, {p});
  grad_ok("rsqrt", [](const V& in) { return rg::rsqrt(in[0]); }, {p});
  grad_ok("tanh", [](const V& in) { return rg::tanh(in[0]); }, {x});
  grad_ok("sigmoid", [](const V& in) { return rg::sigmoid(in[0]); }, {x});
  grad_ok("gelu erf", [](const V& in) { return rg::gelu(in[0]); }, {x});
  grad_ok("gelu tanh", [](const V& in) { return rg::gelu(in[0], rg::GeluApprox::Tanh); }, {x});
  grad_ok("members", [](const V& in) { return in[0].exp() + in[0].tanh() * in[0].sigmoid(); },
          {x});
  grad_ok("log sqrt members", [](const V& in) { return in[0].log() * in[0].sqrt(); }, {p});
}

TEST_CASE("gradcheck: relu abs clamp away from kinks") {
  rg::manual_seed(107);
  rg::Tensor x = away_from_zero({3, 4});
  grad_ok("relu", [](const V& in) { return rg::relu(in[0]); }, {x});
  grad_ok("relu member", [](const V& in) { return in[0].relu(); }, {x});
  grad_ok("abs", [](const V& in) { return rg::abs(in[0]); }, {x});
  grad_ok("abs member", [](const V& in) { return in[0].abs(); }, {x});
  // bounds -0.5 and 0.5; values at least 0.1 from both
  rg::Tensor c = leaf_of({-1.5, -0.9, -0.4, -0.1, 0.2, 0.35, 0.7, 1.2}, {2, 4});
  grad_ok("clamp", [](const V& in) { return rg::clamp(in[0], -0.5, 0.5); }, {c});
  grad_ok("clamp member", [](const V& in) { return in[0].clamp(-0.5, 0.5); }, {c});
  grad_ok("clamp_min", [](const V& in) { return rg::clamp_min(in[0], -0.5); }, {c});
  grad_ok("clamp_max", [](const V& in) { return rg::clamp_max(in[0], 0.5); }, {c});
}

// ---------------------------------------------------------------- selection

TEST_CASE("gradcheck: where and masked_fill") {
  rg::manual_seed(108);
  rg::Tensor cond = f64({1, 0, 1}, {3, 1}) > 0.5;
  rg::Tensor a = leaf({3, 4}), b = leaf({1, 4});
  grad_ok("where", [cond](const V& in) { return rg::where(cond, in[0], in[1]); }, {a, b});
  rg::Tensor full_cond = f64({1, 0, 0, 1, 1, 0}, {2, 3}) > 0.5;
  grad_ok("where same shape",
          [full_cond](const V& in) { return rg::where(full_cond, in[0], in[1]); },
          {leaf({2, 3}), leaf({2, 3})});
  rg::Tensor mask = f64({0, 1, 0, 1}) > 0.5;
  grad_ok("masked_fill", [mask](const V& in) { return rg::masked_fill(in[0], mask, -5); }, {a});
}

// ---------------------------------------------------------------- reductions

TEST_CASE("gradcheck: sum and mean") {
  rg::manual_seed(109);
  rg::Tensor x = leaf({2, 3, 4});
  grad_ok("sum all", [](const V& in) { return rg::sum(in[0]); }, {x});
  grad_ok("sum dim 1", [](const V& in) { return rg::sum(in[0], {1}); }, {x});
  grad_ok("sum dims 0,2 keepdim", [](const V& in) { return rg::sum(in[0], {0, 2}, true); }, {x});
  grad_ok("sum -1 member", [](const V& in) { return in[0].sum(-1); }, {x});
  grad_ok("mean all", [](const V& in) { return rg::mean(in[0]); }, {x});
  grad_ok("mean dim 2 keepdim", [](const V& in) { return rg::mean(in[0], {2}, true); }, {x});
  grad_ok("mean dims 0,1", [](const V& in) { return in[0].mean(rg::Dims{0, 1}); }, {x});
  grad_ok("sum of non-contiguous", [](const V& in) { return in[0].sum(0); },
          {transposed_leaf(3, 4)});
}

TEST_CASE("gradcheck: amax amin") {
  rg::manual_seed(110);
  rg::Tensor x = leaf({2, 3, 4});  // random: no ties
  grad_ok("amax all", [](const V& in) { return rg::amax(in[0]); }, {x});
  grad_ok("amax dim 2", [](const V& in) { return rg::amax(in[0], {2}); }, {x});
  grad_ok("amax dims 0,1 keepdim", [](const V& in) { return rg::amax(in[0], {0, 1}, true); }, {x});
  grad_ok("amin all", [](const V& in) { return rg::amin(in[0]); }, {x});
  grad_ok("amin dim 1", [](const V& in) { return rg::amin(in[0], {1}); }, {x});
  grad_ok("max member", [](const V& in) { return in[0].max(0); }, {x});
  grad_ok("min member keepdim", [](const V& in) { return in[0].min(-1, true); }, {x});
}

TEST_CASE("gradcheck: logsumexp") {
  rg::manual_seed(111);
  rg::Tensor x = leaf({2, 3, 4}, -2, 2);
  grad_ok("logsumexp dim 2", [](const V& in) { return rg::logsumexp(in[0], {2}); }, {x});
  grad_ok("logsumexp dim 0 keepdim", [](const V& in) { return rg::logsumexp(in[0], {0}, true); },
          {x});
  grad_ok("logsumexp all", [](const V& in) { return rg::logsumexp(in[0], {0, 1, 2}); }, {x});
  grad_ok("logsumexp member", [](const V& in) { return in[0].logsumexp(1); }, {x});
}

TEST_CASE("gradcheck: sum_to") {
  rg::manual_seed(112);
  rg::Tensor x = leaf({2, 3, 4});
  grad_ok("sum_to (3,1)", [](const V& in) { return rg::sum_to(in[0], {3, 1}); }, {x});
  grad_ok("sum_to (4)", [](const V& in) { return rg::sum_to(in[0], {4}); }, {x});
  grad_ok("sum_to (2,1,4)", [](const V& in) { return rg::sum_to(in[0], {2, 1, 4}); }, {x});
  grad_ok("sum_to same", [](const V& in) { return rg::sum_to(in[0], {2, 3, 4}); }, {x});
}

// ---------------------------------------------------------------- softmax

TEST_CASE("gradcheck: softmax and log_softmax") {
  rg::manual_seed(113);
  rg::Tensor x = leaf({3, 4}, -2, 2);
  grad_ok("softmax dim 1", [](const V& in) { return rg::softmax(in[0], 1); }, {x});
  grad_ok("softmax dim 0", [](const V& in) { return rg::softmax(in[0], 0); }, {x});
  grad_ok("log_softmax dim 1", [](const V& in) { return rg::log_softmax(in[0], 1); }, {x});
  grad_ok("log_softmax dim 0", [](const V& in) { return rg::log_softmax(in[0], 0); }, {x});
  rg::Tensor y = leaf({2, 3, 2}, -2, 2);
  grad_ok("softmax middle dim", [](const V& in) { return in[0].softmax(1); }, {y});
  grad_ok("log_softmax middle dim", [](const V& in) { return in[0].log_softmax(-2); }, {y});
  grad_ok("softmax non-contiguous", [](const V& in) { return rg::softmax(in[0], -1); },
          {transposed_leaf(3, 4)});
}

// ---------------------------------------------------------------- matmul

TEST_CASE("gradcheck: matmul 1-D and 2-D forms") {
  rg::manual_seed(114);
  rg::Tensor v3 = leaf({3}), w3 = leaf({3}), m = leaf({2, 3}), k = leaf({3, 4}), v2 = leaf({2});
  grad_ok("dot", [](const V& in) { return rg::matmul(in[0], in[1]); }, {v3, w3});
  grad_ok("mat-vec", [](const V& in) { return rg::matmul(in[0], in[1]); }, {m, v3});
  grad_ok("vec-mat", [](const V& in) { return rg::matmul(in[0], in[1]); }, {v2, m});
  grad_ok("mat-mat", [](const V& in) { return rg::matmul(in[0], in[1]); }, {m, k});
  grad_ok("member", [](const V& in) { return in[0].matmul(in[1]); }, {m, k});
}

TEST_CASE("gradcheck: matmul batched") {
  rg::manual_seed(115);
  rg::Tensor a = leaf({2, 3, 4}), b = leaf({2, 4, 2});
  grad_ok("batched", [](const V& in) { return rg::matmul(in[0], in[1]); }, {a, b});
  rg::Tensor b2 = leaf({4, 2});
  grad_ok("batched @ 2-D", [](const V& in) { return rg::matmul(in[0], in[1]); }, {a, b2});
  rg::Tensor a2 = leaf({3, 4});
  grad_ok("2-D @ batched", [](const V& in) { return rg::matmul(in[0], in[1]); }, {a2, b});
  rg::Tensor v4 = leaf({4}), v3 = leaf({3});
  grad_ok("batched @ vec", [](const V& in) { return rg::matmul(in[0], in[1]); }, {a, v4});
  grad_ok("vec @ batched", [](const V& in) { return rg::matmul(in[0], in[1]); }, {v3, a});
}

TEST_CASE("gradcheck: matmul batched broadcast") {
  rg::manual_seed(116);
  rg::Tensor a = leaf({2, 1, 3, 4}), b = leaf({5, 4, 2});
  grad_ok("(2,1,3,4)@(5,4,2)", [](const V& in) { return rg::matmul(in[0], in[1]); }, {a, b});
  rg::Tensor c = leaf({1, 3, 2}), d = leaf({2, 1, 2, 3});
  grad_ok("(1,3,2)@(2,1,2,3)", [](const V& in) { return rg::matmul(in[0], in[1]); }, {c, d});
}

TEST_CASE("gradcheck: matmul with transposed (non-contiguous) operands") {
  rg::manual_seed(117);
  rg::Tensor at = transposed_leaf(3, 4), bt = transposed_leaf(4, 2);
  rg::Tensor b = leaf({4, 2}), a = leaf({3, 4});
  CHECK_FALSE(at.is_contiguous());
  CHECK(at.is_leaf());
  grad_ok("A^T leaf @ B", [](const V& in) { return rg::matmul(in[0], in[1]); }, {at, b});
  grad_ok("A @ B^T leaf", [](const V& in) { return rg::matmul(in[0], in[1]); }, {a, bt});
  grad_ok("A^T @ B^T leaves", [](const V& in) { return rg::matmul(in[0], in[1]); }, {at, bt});
  // transposes taken inside f (a view op in the graph)
  rg::Tensor p = leaf({4, 3}), q = leaf({2, 4});
  grad_ok("p.t() @ q.t()", [](const V& in) { return rg::matmul(in[0].t(), in[1].t()); }, {p, q});
  rg::Tensor x = leaf({2, 4, 3}), y = leaf({2, 2, 4});
  grad_ok("batched transpose(-1,-2)",
          [](const V& in) { return rg::matmul(in[0].transpose(-1, -2), in[1].transpose(1, 2)); },
          {x, y});
}

// ---------------------------------------------------------------- indexing

TEST_CASE("gradcheck: index_select") {
  rg::manual_seed(118);
  rg::Tensor x = leaf({4, 3});
  rg::Tensor idx = i64({3, 0, 3, 1});  // repeated index: gradients add
  grad_ok("index_select dim 0", [idx](const V& in) { return rg::index_select(in[0], 0, idx); },
          {x});
  rg::Tensor idx1 = i64({2, 2, 0});
  grad_ok("index_select dim 1", [idx1](const V& in) { return rg::index_select(in[0], 1, idx1); },
          {x});
  grad_ok("index_select non-contiguous",
          [idx1](const V& in) { return rg::index_select(in[0], 0, idx1); },
          {transposed_leaf(3, 4)});
}

TEST_CASE("gradcheck: gather") {
  rg::manual_seed(119);
  rg::Tensor x = leaf({2, 3});
  rg::Tensor idx = i64({2, 0, 2, 1, 1, 1}, {2, 3});
  grad_ok("gather dim 1", [idx](const V& in) { return rg::gather(in[0], 1, idx); }, {x});
  rg::Tensor idx0 = i64({1, 0, 1, 1, 1, 0}, {2, 3});
  grad_ok("gather dim 0", [idx0](const V& in) { return rg::gather(in[0], 0, idx0); }, {x});
  rg::Tensor pick = i64({0, 2, 2, 1}, {4, 1});
  grad_ok("gather one per row", [pick](const V& in) { return rg::gather(in[0], 1, pick); },
          {leaf({4, 3})});
}

TEST_CASE("gradcheck: index_add (x and src)") {
  rg::manual_seed(120);
  rg::Tensor x = leaf({4, 2}), src = leaf({3, 2});
  rg::Tensor idx = i64({0, 2, 0});
  grad_ok("index_add dim 0", [idx](const V& in) { return rg::index_add(in[0], 0, idx, in[1]); },
          {x, src});
  rg::Tensor y = leaf({2, 3}), src1 = leaf({2, 2});
  rg::Tensor idx1 = i64({2, 2});
  grad_ok("index_add dim 1",
          [idx1](const V& in) { return rg::index_add(in[0], 1, idx1, in[1]); }, {y, src1});
}

TEST_CASE("gradcheck: scatter_add (x and src)") {
  rg::manual_seed(121);
  rg::Tensor x = leaf({2, 3}), src = leaf({2, 4});
  rg::Tensor idx = i64({0, 1, 0, 2, 2, 2, 1, 0}, {2, 4});
  grad_ok("scatter_add dim 1",
          [idx](const V& in) { return rg::scatter_add(in[0], 1, idx, in[1]); }, {x, src});
  rg::Tensor base = leaf({3, 2}), src0 = leaf({2, 2});
  rg::Tensor idx0 = i64({2, 0, 2, 2}, {2, 2});
  grad_ok("scatter_add dim 0",
          [idx0](const V& in) { return rg::scatter_add(in[0], 0, idx0, in[1]); }, {base, src0});
}

// ---------------------------------------------------------------- join / split

TEST_CASE("gradcheck: cat and stack") {
  rg::manual_seed(122);
  rg::Tensor a = leaf({2, 3}), b = leaf({1, 3}), c = leaf({2, 2});
  grad_ok("cat dim 0", [](const V& in) { return rg::cat({in[0], in[1]}, 0); }, {a, b});
  grad_ok("cat dim 1", [](const V& in) { return rg::cat({in[0], in[1], in[0]}, 1); }, {a, c});
  grad_ok("cat non-contiguous", [](const V& in) { return rg::cat({in[0], in[1]}, 0); },
          {transposed_leaf(2, 3), a});
  rg::Tensor d = leaf({2, 3});
  grad_ok("stack dim 0", [](const V& in) { return rg::stack({in[0], in[1]}); }, {a, d});
  grad_ok("stack dim -1", [](const V& in) { return rg::stack({in[0], in[1], in[0]}, -1); },
          {a, d});
}

TEST_CASE("gradcheck: split and chunk") {
  rg::manual_seed(123);
  rg::Tensor x = leaf({5, 2});
  grad_ok("split int",
          [](const V& in) {
            auto p = rg::split(in[0], 2);
            return rg::cat({p[2], p[0] * 2.0, p[1] * 3.0});
          },
          {x});
  grad_ok("split sizes dim 1",
          [](const V& in) {
            auto p = rg::split(in[0], std::vector<int64_t>{1, 1}, 1);
            return p[0] * p[1];
          },
          {x});
  grad_ok("split: only one piece used", [](const V& in) { return rg::split(in[0], 2)[1]; }, {x});
  grad_ok("chunk",
          [](const V& in) {
            auto c = rg::chunk(in[0], 3);
            return rg::cat({c[1], c[2].exp(), c[0]});
          },
          {x});
  grad_ok("chunk dim 1", [](const V& in) { return rg::chunk(in[0], 2, 1)[0]; }, {x});
}

// ---------------------------------------------------------------- views

TEST_CASE("gradcheck: reshape view flatten") {
  rg::manual_seed(124);
  rg::Tensor x = leaf({2, 3, 2});
  grad_ok("reshape", [](const V& in) { return in[0].reshape({3, 4}) * 2.0; }, {x});
  grad_ok("reshape -1", [](const V& in) { return in[0].reshape({-1, 2}); }, {x});
  grad_ok("view", [](const V& in) { return in[0].view({6, 2}); }, {x});
  grad_ok("flatten", [](const V& in) { return in[0].flatten(); }, {x});
  grad_ok("flatten(1)", [](const V& in) { return in[0].flatten(1); }, {x});
  grad_ok("reshape non-contiguous", [](const V& in) { return in[0].reshape({12}); },
          {transposed_leaf(3, 4)});
}

TEST_CASE("gradcheck: transpose t permute") {
  rg::manual_seed(125);
  rg::Tensor x = leaf({2, 3, 4});
  grad_ok("transpose", [](const V& in) { return in[0].transpose(0, 2); }, {x});
  grad_ok("permute", [](const V& in) { return in[0].permute({1, 2, 0}); }, {x});
  grad_ok("t", [](const V& in) { return in[0].t(); }, {leaf({3, 2})});
  grad_ok("permute then op", [](const V& in) { return in[0].permute({2, 0, 1}).exp(); }, {x});
}

TEST_CASE("gradcheck: slice narrow select") {
  rg::manual_seed(126);
  rg::Tensor x = leaf({4, 5});
  grad_ok("slice", [](const V& in) { return in[0].slice(1, 1, 4); }, {x});
  grad_ok("slice with step", [](const V& in) { return in[0].slice(1, 0, 5, 2); }, {x});
  grad_ok("slice step dim 0", [](const V& in) { return in[0].slice(0, 1, 4, 2) * 3.0; }, {x});
  grad_ok("narrow", [](const V& in) { return in[0].narrow(0, 1, 2); }, {x});
  grad_ok("select", [](const V& in) { return in[0].select(1, 3); }, {x});
  grad_ok("operator[]", [](const V& in) { return in[0][2]; }, {x});
  grad_ok("overlapping slices",
          [](const V& in) { return in[0].slice(1, 0, 3) * in[0].slice(1, 2, 5); }, {x});
}

TEST_CASE("gradcheck: unsqueeze squeeze expand") {
  rg::manual_seed(127);
  rg::Tensor x = leaf({3, 1});
  grad_ok("unsqueeze", [](const V& in) { return in[0].unsqueeze(0); }, {x});
  grad_ok("squeeze", [](const V& in) { return in[0].squeeze(1); }, {x});
  grad_ok("expand", [](const V& in) { return in[0].expand({3, 4}); }, {x});
  grad_ok("expand new dim", [](const V& in) { return in[0].expand({2, 3, 4}); }, {x});
  grad_ok("expand then op", [](const V& in) { return in[0].expand({3, 4}) * in[1]; },
          {x, leaf({3, 4})});
}

TEST_CASE("gradcheck: contiguous clone") {
  rg::manual_seed(128);
  rg::Tensor nc = transposed_leaf(3, 4);
  grad_ok("contiguous of non-contiguous", [](const V& in) { return in[0].contiguous(); }, {nc});
  grad_ok("contiguous of contiguous", [](const V& in) { return in[0].contiguous(); },
          {leaf({2, 3})});
  grad_ok("clone", [](const V& in) { return in[0].clone() * in[0]; }, {leaf({2, 3})});
  grad_ok("clone non-contiguous", [](const V& in) { return in[0].clone(); }, {nc});
}

// ---------------------------------------------------------------- non-contiguous leaves, composites

TEST_CASE("gradcheck: non-contiguous leaf through elementwise ops") {
  rg::manual_seed(129);
  rg::Tensor x = rg::randn({4, 3}, {.dtype = rg::kFloat64}).t();
  x.requires_grad_();
  REQUIRE_FALSE(x.is_contiguous());
  rg::Tensor y = leaf({3, 4});
  grad_ok("x^T * y + exp(x^T)", [](const V& in) { return in[0] * in[1] + in[0].exp(); }, {x, y});
  grad_ok("tanh(x^T) broadcast", [](const V& in) { return rg::tanh(in[0]) * in[1].sum(0); },
          {x, y});
  rg::Tensor sliced = rg::randn({3, 8}, {.dtype = rg::kFloat64}).slice(1, 1, 8, 2);  // (3,4)
  sliced.requires_grad_();
  grad_ok("stepped-slice leaf", [](const V& in) { return in[0] * in[0] * in[1]; }, {sliced, y});
}

TEST_CASE("gradcheck: a small MLP with cross-entropy") {
  rg::manual_seed(130);
  rg::Tensor x = rg::randn({4, 3}, {.dtype = rg::kFloat64});
  rg::Tensor target = i64({0, 2, 1, 2}, {4, 1});
  rg::Tensor w1 = leaf({3, 5}), b1 = leaf({5}), w2 = leaf({5, 3}), b2 = leaf({3});
  grad_ok("mlp",
          [x, target](const V& in) {
            rg::Tensor h = rg::gelu(rg::matmul(x, in[0]) + in[1]);
            rg::Tensor logits = rg::matmul(h, in[2]) + in[3];
            rg::Tensor logp = rg::log_softmax(logits, 1);
            return -rg::gather(logp, 1, target).mean();
          },
          {w1, b1, w2, b2});
}

TEST_CASE("gradcheck: attention-like composite") {
  rg::manual_seed(131);
  rg::Tensor q = leaf({2, 3, 4}), k = leaf({2, 3, 4}), v = leaf({2, 3, 4});
  rg::Tensor mask = (rg::arange(3).unsqueeze(1) < rg::arange(3).unsqueeze(0));  // causal (3,3)
  grad_ok("attention",
          [mask](const V& in) {
            rg::Tensor s = rg::matmul(in[0], in[1].transpose(-1, -2)) * 0.5;
            s = rg::masked_fill(s, mask, -1e9);
            return rg::matmul(rg::softmax(s, -1), in[2]);
          },
          {q, k, v});
}
