// test_ops.cpp — forward values of every op in ops.h, on small inputs checked
// by hand or against naive double-precision loops written here.
#include <algorithm>
#include <cmath>
#include <limits>

#include "test_helpers.h"

using test::check_close;
using test::f32;
using test::f64;
using test::i64;
using test::naive_matmul;
using test::values;

namespace {

double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

template <typename F>
std::vector<double> map(const std::vector<double>& v, F f) {
  std::vector<double> out;
  for (double x : v) out.push_back(f(x));
  return out;
}

}  // namespace

// ---------------------------------------------------------------- binary

TEST_CASE("ops: add sub mul div same shape") {
  rg::Tensor a = f32({1, 2, 3, 4}, {2, 2});
  rg::Tensor b = f32({10, 20, 30, 40}, {2, 2});
  check_close(rg::add(a, b), {11, 22, 33, 44});
  check_close(rg::sub(a, b), {-9, -18, -27, -36});
  check_close(rg::mul(a, b), {10, 40, 90, 160});
  check_close(rg::div(b, a), {10, 10, 10, 10});
  check_close(a + b, {11, 22, 33, 44});
  check_close(a - b, {-9, -18, -27, -36});
  check_close(a * b, {10, 40, 90, 160});
  check_close(a / b, {0.1, 0.1, 0.1, 0.1});
  CHECK((a + b).dtype() == rg::kFloat32);
  CHECK((f64({1}) + f64({2})).dtype() == rg::kFloat64);
}

TEST_CASE("ops: broadcasting (3,1) with (1,4) and (2,3) with (3)") {
  rg::Tensor col = f64({1, 2, 3}, {3, 1});
  rg::Tensor row = f64({10, 20, 30, 40}, {1, 4});
  rg::Tensor s = col + row;
  CHECK_SHAPE(s, {3, 4});
  std::vector<double> want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) want.push_back((i + 1) + 10.0 * (j + 1));
  check_close(s, want, 1e-12);
  CHECK_SHAPE(row + col, {3, 4});
  check_close(col * row, {10, 20, 30, 40, 20, 40, 60, 80, 30, 60, 90, 120});
  check_close(row - col, {9, 19, 29, 39, 8, 18, 28, 38, 7, 17, 27, 37});

  rg::Tensor m = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  rg::Tensor v = f64({1, 10, 100});
  CHECK_SHAPE(m * v, {2, 3});
  check_close(m * v, {1, 20, 300, 4, 50, 600});
  check_close(v * m, {1, 20, 300, 4, 50, 600});
  check_close(m / v, {1, 0.2, 0.03, 4, 0.5, 0.06}, 1e-12);
  check_close(v - m, {0, 8, 97, -3, 5, 94});

  // scalar-shaped and 0-dim operands
  rg::Tensor z = rg::scalar_tensor(2.0, {.dtype = rg::kFloat64});
  CHECK_SHAPE(m + z, {2, 3});
  check_close(m * z, {2, 4, 6, 8, 10, 12});
  CHECK_SHAPE(f64({1, 2}, {2, 1, 1}) + f64({1, 2, 3}, {1, 3, 1}) + f64({1, 2, 3, 4}, {4}),
              {2, 3, 4});

  CHECK(rg::broadcast_shapes({3, 1}, {1, 4}) == rg::Shape{3, 4});
  CHECK(rg::broadcast_shapes({2, 3}, {3}) == rg::Shape{2, 3});
  CHECK(rg::broadcast_shapes({5, 1, 2}, {4, 1}) == rg::Shape{5, 4, 2});
  CHECK(rg::broadcast_shapes({}, {2}) == rg::Shape{2});
}

TEST_CASE("ops: scalar operators") {
  rg::Tensor x = f32({1, 2, 4});
  check_close(x + 1.0, {2, 3, 5});
  check_close(1.0 + x, {2, 3, 5});
  check_close(x - 1.0, {0, 1, 3});
  check_close(1.0 - x, {0, -1, -3});
  check_close(x * 3.0, {3, 6, 12});
  check_close(3.0 * x, {3, 6, 12});
  check_close(x / 2.0, {0.5, 1, 2});
  check_close(2.0 / x, {2, 1, 0.5});
  check_close(-x, {-1, -2, -4});
  CHECK((x * 2.0).dtype() == rg::kFloat32);
  CHECK((f64({1}) * 2.0).dtype() == rg::kFloat64);
}

TEST_CASE("ops: pow") {
  rg::Tensor a = f64({1, 2, 3, 4});
  check_close(rg::pow(a, 2.0), {1, 4, 9, 16}, 1e-12);
  check_close(a.pow(0.5), {1, std::sqrt(2.0), std::sqrt(3.0), 2}, 1e-12);
  check_close(rg::pow(a, -1.0), {1, 0.5, 1.0 / 3, 0.25}, 1e-12);
  check_close(rg::pow(a, f64({3, 2, 1, 0.5})), {1, 4, 3, 2}, 1e-12);
  // broadcast exponent
  check_close(rg::pow(f64({2, 3}, {2, 1}), f64({1, 2, 3}, {1, 3})), {2, 4, 8, 3, 9, 27}, 1e-12);
}

TEST_CASE("ops: maximum minimum") {
  rg::Tensor a = f32({1, 5, -3, 4});
  rg::Tensor b = f32({2, 2, -4, 4});
  check_close(rg::maximum(a, b), {2, 5, -3, 4});
  check_close(rg::minimum(a, b), {1, 2, -4, 4});
  rg::Tensor m = f64({-1, 0, 1, 2, 3, 4}, {2, 3});
  check_close(rg::maximum(m, f64({0.5})), {0.5, 0.5, 1, 2, 3, 4});
  check_close(rg::minimum(m, f64({0, 2, 5})), {-1, 0, 1, 0, 2, 4});
}

TEST_CASE("ops: comparisons give bool tensors") {
  rg::Tensor a = f32({1, 2, 3, 4});
  rg::Tensor b = f32({4, 2, 1, 4});
  struct Case {
    rg::Tensor got;
    std::vector<double> want;
  };
  std::vector<Case> cases = {
      {rg::eq(a, b), {0, 1, 0, 1}}, {rg::ne(a, b), {1, 0, 1, 0}}, {rg::lt(a, b), {1, 0, 0, 0}},
      {rg::le(a, b), {1, 1, 0, 1}}, {rg::gt(a, b), {0, 0, 1, 0}}, {rg::ge(a, b), {0, 1, 1, 1}},
      {a == b, {0, 1, 0, 1}},       {a != b, {1, 0, 1, 0}},       {a < b, {1, 0, 0, 0}},
      {a <= b, {1, 1, 0, 1}},       {a > b, {0, 0, 1, 0}},        {a >= b, {0, 1, 1, 1}},
      {a == 2.0, {0, 1, 0, 0}},     {a != 2.0, {1, 0, 1, 1}},     {a < 2.5, {1, 1, 0, 0}},
      {a <= 2.0, {1, 1, 0, 0}},     {a > 2.0, {0, 0, 1, 1}},      {a >= 3.0, {0, 0, 1, 1}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    CHECK(cases[i].got.dtype() == rg::kBool);
    check_close(cases[i].got, cases[i].want);
  }
  // broadcasting comparison
  rg::Tensor c = f64({1, 2, 3}, {3, 1}) > f64({0, 2}, {1, 2});
  CHECK(c.dtype() == rg::kBool);
  CHECK_SHAPE(c, {3, 2});
  check_close(c, {1, 0, 1, 0, 1, 1});
  // int64 comparisons
  check_close(i64({1, 5}) == i64({1, 4}), {1, 0});
}

// ---------------------------------------------------------------- unary

TEST_CASE("ops: unary math") {
  std::vector<double> xs = {-2.5, -1, -0.25, 0.5, 1, 3};
  rg::Tensor x = f64(xs);
  check_close(rg::neg(x), map(xs, [](double v) { return -v; }), 1e-12);
  check_close(rg::exp(x), map(xs, [](double v) { return std::exp(v); }), 1e-12);
  check_close(x.exp(), map(xs, [](double v) { return std::exp(v); }), 1e-12);
  check_close(rg::tanh(x), map(xs, [](double v) { return std::tanh(v); }), 1e-12);
  check_close(rg::sigmoid(x), map(xs, [](double v) { return 1 / (1 + std::exp(-v)); }), 1e-12);
  check_close(rg::relu(x), map(xs, [](double v) { return v > 0 ? v : 0.0; }), 1e-12);
  check_close(rg::abs(x), map(xs, [](double v) { return std::abs(v); }), 1e-12);
  check_close(rg::gelu(x), map(xs, gelu_erf), 1e-12);
  check_close(rg::gelu(x, rg::GeluApprox::Tanh), map(xs, gelu_tanh), 1e-12);

  std::vector<double> ps = {0.25, 1, 2, 9};
  rg::Tensor p = f64(ps);
  check_close(rg::log(p), map(ps, [](double v) { return std::log(v); }), 1e-12);
  check_close(rg::sqrt(p), {0.5, 1, std::sqrt(2.0), 3}, 1e-12);
  check_close(rg::rsqrt(p), {2, 1, 1 / std::sqrt(2.0), 1.0 / 3}, 1e-12);

  // same in float32 (the Eigen-free loops) on a non-contiguous input
  rg::Tensor xf = f32({-2, 0.5f, 1, 3}, {2, 2}).t();
  check_close(rg::sigmoid(xf), map({-2, 1, 0.5, 3}, [](double v) { return 1 / (1 + std::exp(-v)); }),
              1e-6);
}

TEST_CASE("ops: gelu reference values") {
  CHECK(rg::gelu(f64({1})).item() == doctest::Approx(0.8413447460685429).epsilon(1e-12));
  CHECK(rg::gelu(f64({1}), rg::GeluApprox::Tanh).item() ==
        doctest::Approx(0.8411919906082768).epsilon(1e-12));
  CHECK(rg::gelu(f32({1})).item() == doctest::Approx(0.8413447460685429).epsilon(1e-6));
  CHECK(rg::gelu(f32({1}), rg::GeluApprox::Tanh).item() ==
        doctest::Approx(0.8411919906082768).epsilon(1e-6));
  CHECK(rg::gelu(f64({-1})).item() == doctest::Approx(-0.15865525393145707).epsilon(1e-12));
  CHECK(rg::gelu(f64({0})).item() == 0.0);
}

TEST_CASE("ops: sigmoid and tanh saturate without NaN") {
  rg::Tensor x = f32({-1000, -50, 50, 1000});
  check_close(rg::sigmoid(x), {0, 0, 1, 1}, 1e-6);
  check_close(rg::tanh(x), {-1, -1, 1, 1}, 1e-6);
  check_close(rg::exp(f32({-1000})), std::vector<double>{0});
}

TEST_CASE("ops: clamp clamp_min clamp_max") {
  rg::Tensor x = f64({-3, -1, 0, 0.5, 2, 5});
  check_close(rg::clamp(x, -1.5, 1.0), {-1.5, -1, 0, 0.5, 1, 1});
  check_close(x.clamp(0, 3), {0, 0, 0, 0.5, 2, 3});
  check_close(rg::clamp_min(x, 0.25), {0.25, 0.25, 0.25, 0.5, 2, 5});
  check_close(rg::clamp_max(x, 0.25), {-3, -1, 0, 0.25, 0.25, 0.25});
}

// ---------------------------------------------------------------- selection

TEST_CASE("ops: where and masked_fill") {
  rg::Tensor cond = f32({1, 0, 1}, {3, 1}) > 0.5;  // (3,1) bool
  rg::Tensor a = f32({1, 2, 3, 4}, {1, 4});
  rg::Tensor b = rg::scalar_tensor(-1.0);
  rg::Tensor w = rg::where(cond, a, b);
  CHECK_SHAPE(w, {3, 4});
  check_close(w, {1, 2, 3, 4, -1, -1, -1, -1, 1, 2, 3, 4});

  rg::Tensor c2 = f64({1, 2, 3, 4}) > 2.5;
  check_close(rg::where(c2, f64({10, 20, 30, 40}), f64({-1, -2, -3, -4})), {-1, -2, 30, 40});

  rg::Tensor x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  rg::Tensor mask = f32({0, 1, 0}) > 0.5;  // broadcasts over rows
  rg::Tensor m = rg::masked_fill(x, mask, -100);
  CHECK_SHAPE(m, {2, 3});
  check_close(m, {1, -100, 3, 4, -100, 6});
  rg::Tensor inf = rg::masked_fill(x, x > 4.0, -std::numeric_limits<double>::infinity());
  check_close(inf, {1, 2, 3, 4, -INFINITY, -INFINITY});
  check_close(x, {1, 2, 3, 4, 5, 6});  // not modified
}

// ---------------------------------------------------------------- reductions

namespace {
// x[i][j][k] = values of a (2,3,4) test tensor, as doubles
std::vector<double> cube_values() {
  std::vector<double> v;
  for (int i = 0; i < 24; ++i) v.push_back(std::sin(1.7 * i + 0.3) * 3);  // no ties
  return v;
}
}  // namespace

TEST_CASE("ops: sum and mean over dims, keepdim and all") {
  std::vector<double> v = cube_values();
  rg::Tensor x = f64(v, {2, 3, 4});
  auto at = [&](int i, int j, int k) { return v[(i * 3 + j) * 4 + k]; };

  double total = 0;
  for (double e : v) total += e;
  rg::Tensor all = rg::sum(x);
  CHECK(all.dim() == 0);
  CHECK(all.item() == doctest::Approx(total).epsilon(1e-12));
  CHECK(x.sum().item() == doctest::Approx(total).epsilon(1e-12));
  CHECK(x.mean().item() == doctest::Approx(total / 24).epsilon(1e-12));
  CHECK(rg::sum(x, {}, true).dim() == 3);  // keepdim over all dims: (1,1,1)
  CHECK_SHAPE(rg::sum(x, {}, true), {1, 1, 1});

  std::vector<double> s1;  // over dim 1 -> (2,4)
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) s1.push_back(at(i, 0, k) + at(i, 1, k) + at(i, 2, k));
  CHECK_SHAPE(x.sum(1), {2, 4});
  check_close(x.sum(1), s1, 1e-12);
  CHECK_SHAPE(x.sum(1, true), {2, 1, 4});
  check_close(x.sum(1, true), s1, 1e-12);
  check_close(rg::sum(x, {-2}), s1, 1e-12);
  check_close(x.mean(1), map(s1, [](double e) { return e / 3; }), 1e-12);

  std::vector<double> s02;  // over dims 0 and 2 -> (3)
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) s += at(i, j, k);
    s02.push_back(s);
  }
  CHECK_SHAPE(x.sum(rg::Dims{0, 2}), {3});
  check_close(x.sum(rg::Dims{0, 2}), s02, 1e-12);
  CHECK_SHAPE(rg::sum(x, {0, 2}, true), {1, 3, 1});
  check_close(rg::mean(x, {2, 0}), map(s02, [](double e) { return e / 8; }), 1e-12);
  CHECK_SHAPE(x.mean(rg::Dims{0, 2}, true), {1, 3, 1});

  // reductions of a non-contiguous view
  rg::Tensor t = x.transpose(0, 2);  // (4,3,2)
  std::vector<double> st;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j) st.push_back(at(0, j, k) + at(1, j, k));
  check_close(t.sum(2), st, 1e-12);

  // float32 sum of many elements stays accurate
  CHECK(rg::ones({1000, 100}).sum().item() == 100000.0);
  CHECK(rg::ones({3, 1000}).mean(1).tolist<double>() == std::vector<double>{1, 1, 1});
}

TEST_CASE("ops: amax amin argmax argmin") {
  std::vector<double> v = cube_values();
  rg::Tensor x = f64(v, {2, 3, 4});
  auto at = [&](int i, int j, int k) { return v[(i * 3 + j) * 4 + k]; };

  CHECK(rg::amax(x).item() == *std::max_element(v.begin(), v.end()));
  CHECK(rg::amin(x).item() == *std::min_element(v.begin(), v.end()));
  CHECK(x.max().item() == *std::max_element(v.begin(), v.end()));
  CHECK(x.min().item() == *std::min_element(v.begin(), v.end()));

  std::vector<double> mx, mn;
  std::vector<int64_t> amx, amn;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      int bi = 0, si = 0;
      for (int k = 1; k < 4; ++k) {
        if (at(i, j, k) > at(i, j, bi)) bi = k;
        if (at(i, j, k) < at(i, j, si)) si = k;
      }
      mx.push_back(at(i, j, bi));
      mn.push_back(at(i, j, si));
      amx.push_back(bi);
      amn.push_back(si);
    }
  CHECK_SHAPE(rg::amax(x, {2}), {2, 3});
  check_close(rg::amax(x, {2}), mx, 0);
  check_close(x.max(-1).values, mx, 0);
  check_close(rg::amin(x, {2}), mn, 0);
  check_close(x.min(2).values, mn, 0);
  CHECK_SHAPE(rg::amax(x, {2}, true), {2, 3, 1});
  CHECK_SHAPE(x.max(2, true).values, {2, 3, 1});
  CHECK(x.max(-1).indices.tolist<int64_t>() == amx);
  CHECK(x.min(2).indices.tolist<int64_t>() == amn);

  rg::Tensor am = rg::argmax(x, 2);
  CHECK(am.dtype() == rg::kInt64);
  CHECK_SHAPE(am, {2, 3});
  CHECK(am.tolist<int64_t>() == amx);
  CHECK(x.argmax(-1).tolist<int64_t>() == amx);
  CHECK_SHAPE(rg::argmax(x, 2, true), {2, 3, 1});
  CHECK(rg::argmin(x, 2).tolist<int64_t>() == amn);

  // over dims 0 and 1 together
  std::vector<double> m01;
  for (int k = 0; k < 4; ++k) {
    double m = -1e300;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) m = std::max(m, at(i, j, k));
    m01.push_back(m);
  }
  check_close(rg::amax(x, {0, 1}), m01, 0);

  // argmax over dim 0 of a small hand-made matrix
  rg::Tensor h = f32({1, 9, 3, 7, 2, 8}, {2, 3});
  CHECK(rg::argmax(h, 0).tolist<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(rg::argmin(h, 0).tolist<int64_t>() == std::vector<int64_t>{0, 1, 0});
  CHECK(rg::argmax(h, 1).tolist<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(rg::argmax(h.t(), 1).tolist<int64_t>() == std::vector<int64_t>{1, 0, 1});
}

TEST_CASE("ops: logsumexp") {
  std::vector<double> v = cube_values();
  rg::Tensor x = f64(v, {2, 3, 4});
  std::vector<double> want;
  for (int i = 0; i < 6; ++i) {
    double s = 0;
    for (int k = 0; k < 4; ++k) s += std::exp(v[i * 4 + k]);
    want.push_back(std::log(s));
  }
  CHECK_SHAPE(rg::logsumexp(x, {2}), {2, 3});
  check_close(rg::logsumexp(x, {2}), want, 1e-12);
  check_close(x.logsumexp(-1, true), want, 1e-12);
  CHECK_SHAPE(x.logsumexp(-1, true), {2, 3, 1});

  double all = 0;
  for (double e : v) all += std::exp(e);
  CHECK(rg::logsumexp(x, {0, 1, 2}).item() == doctest::Approx(std::log(all)).epsilon(1e-12));

  // stable for large inputs
  check_close(rg::logsumexp(f32({1000, 1000}, {1, 2}), {1}), {1000 + std::log(2.0)}, 1e-6);
  check_close(rg::logsumexp(f64({-1000, -1000}), {0}), {-1000 + std::log(2.0)}, 1e-12);
}

TEST_CASE("ops: sum_to undoes broadcasting") {
  rg::Tensor x = rg::arange(24, {.dtype = rg::kFloat64}).reshape({2, 3, 4});
  auto at = [](int i, int j, int k) { return (i * 3 + j) * 4.0 + k; };

  rg::Tensor a = rg::sum_to(x, {3, 1});
  CHECK_SHAPE(a, {3, 1});
  std::vector<double> wa;
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) s += at(i, j, k);
    wa.push_back(s);
  }
  check_close(a, wa, 1e-12);

  rg::Tensor b = rg::sum_to(x, {4});
  CHECK_SHAPE(b, {4});
  std::vector<double> wb;
  for (int k = 0; k < 4; ++k) {
    double s = 0;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) s += at(i, j, k);
    wb.push_back(s);
  }
  check_close(b, wb, 1e-12);

  rg::Tensor c = rg::sum_to(x, {2, 1, 4});
  CHECK_SHAPE(c, {2, 1, 4});
  check_close(c, values(x.sum(1, true)), 1e-12);

  rg::Tensor same = rg::sum_to(x, {2, 3, 4});
  CHECK_SHAPE(same, {2, 3, 4});
  check_close(same, values(x), 0);

  CHECK(rg::sum_to(x, rg::Shape()).dim() == 0);
  CHECK(rg::sum_to(x, rg::Shape()).item() == 276);
}

// ---------------------------------------------------------------- softmax

TEST_CASE("ops: softmax and log_softmax") {
  std::vector<double> v = {1, 2, 3, 0.5, -1, 4};
  rg::Tensor x = f64(v, {2, 3});
  std::vector<double> want_row, want_col;
  for (int i = 0; i < 2; ++i) {
    double s = 0;
    for (int j = 0; j < 3; ++j) s += std::exp(v[i * 3 + j]);
    for (int j = 0; j < 3; ++j) want_row.push_back(std::exp(v[i * 3 + j]) / s);
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      want_col.push_back(std::exp(v[i * 3 + j]) / (std::exp(v[j]) + std::exp(v[3 + j])));

  rg::Tensor s = rg::softmax(x, 1);
  CHECK_SHAPE(s, {2, 3});
  check_close(s, want_row, 1e-12);
  check_close(x.softmax(-1), want_row, 1e-12);
  check_close(rg::softmax(x, 0), want_col, 1e-12);
  check_close(s.sum(1), {1, 1}, 1e-12);
  check_close(rg::log_softmax(x, 1), map(want_row, [](double p) { return std::log(p); }), 1e-12);
  check_close(x.log_softmax(0), map(want_col, [](double p) { return std::log(p); }), 1e-12);

  // a non-contiguous input
  check_close(rg::softmax(x.t(), 0), values(rg::softmax(x, 1).t()), 1e-12);

  // a middle dim of a 3-D tensor
  rg::manual_seed(4);
  rg::Tensor y = rg::randn({2, 5, 3}, {.dtype = rg::kFloat64});
  check_close(rg::softmax(y, 1).sum(1), std::vector<double>(6, 1.0), 1e-12);
}

TEST_CASE("ops: softmax is stable for large inputs") {
  rg::Tensor x = f32({1000, 1000, 999, -1000, 0, 1000}, {2, 3});
  rg::Tensor s = rg::softmax(x, 1);
  double e = std::exp(-1.0);
  check_close(s, {1 / (2 + e), 1 / (2 + e), e / (2 + e), 0, 0, 1}, 1e-6);
  for (double p : values(s)) CHECK(std::isfinite(p));
  rg::Tensor ls = rg::log_softmax(f32({1000, 0}), 0);
  check_close(ls, {0, -1000}, 1e-6);
  for (double p : values(rg::log_softmax(x, 1))) CHECK(std::isfinite(p));
}

// ---------------------------------------------------------------- matmul

TEST_CASE("ops: matmul 1-D dot, mat-vec, vec-mat, mat-mat") {
  rg::Tensor a = f64({1, 2, 3});
  rg::Tensor b = f64({4, 5, 6});
  rg::Tensor d = rg::matmul(a, b);
  CHECK(d.dim() == 0);
  CHECK(d.item() == 32);

  rg::Tensor m = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  rg::Tensor mv = rg::matmul(m, b);
  CHECK_SHAPE(mv, {2});
  check_close(mv, {32, 77}, 1e-12);

  rg::Tensor vm = rg::matmul(f64({1, -1}), m);
  CHECK_SHAPE(vm, {3});
  check_close(vm, {-3, -3, -3}, 1e-12);

  rg::Tensor k = f64({1, 0, 2, 1, 0, 3}, {3, 2});
  rg::Tensor mm = m.matmul(k);
  CHECK_SHAPE(mm, {2, 2});
  check_close(mm, {5, 11, 14, 23}, 1e-12);

  // batched matrix times vector, and vector times batched matrix
  rg::Tensor bm = rg::arange(24, {.dtype = rg::kFloat64}).reshape({2, 3, 4});
  rg::Tensor v4 = f64({1, 0, -1, 2});
  rg::Tensor bmv = rg::matmul(bm, v4);
  CHECK_SHAPE(bmv, {2, 3});
  std::vector<double> want;
  for (int i = 0; i < 6; ++i) want.push_back(i * 4 + 0 - (i * 4 + 2) + 2 * (i * 4 + 3));
  check_close(bmv, want, 1e-12);
  rg::Tensor v3 = f64({1, 1, 1});
  rg::Tensor vbm = rg::matmul(v3, bm);
  CHECK_SHAPE(vbm, {2, 4});
  check_close(vbm, values(bm.sum(1)), 1e-12);
}

TEST_CASE("ops: matmul against a naive loop (float32 and float64)") {
  rg::manual_seed(21);
  for (rg::DType dt : {rg::kFloat32, rg::kFloat64}) {
    rg::Tensor a = rg::randn({33, 17}, {.dtype = dt});
    rg::Tensor b = rg::randn({17, 29}, {.dtype = dt});
    rg::Tensor c = rg::matmul(a, b);
    CHECK(c.dtype() == dt);
    CHECK_SHAPE(c, {33, 29});
    check_close(c, naive_matmul(values(a), values(b), 33, 17, 29),
                dt == rg::kFloat32 ? 1e-5 : 1e-12);
  }
}

TEST_CASE("ops: addmm equals input + a·b for every input form, on one and two threads") {
  // A bias vector is added inside the GEMM (to each panel the threads compute: panel edges
  // must each get the bias once); other inputs after. Against a naive loop, with a
  // transposed b as nn::linear passes it, float32 and float64.
  rg::manual_seed(24);
  const int saved_threads = rg::get_num_threads();
  for (int threads : {1, 2})
    for (rg::DType dt : {rg::kFloat32, rg::kFloat64}) {
      CAPTURE(threads);
      rg::set_num_threads(threads);
      const int64_t n = 130, m = 70, p = 300;  // big enough to be split into panels
      rg::Tensor a = rg::randn({n, m}, {.dtype = dt});
      rg::Tensor w = rg::randn({p, m}, {.dtype = dt});  // b = wᵀ, read in place
      std::vector<double> prod = naive_matmul(values(a), values(w.t().contiguous()), n, m, p);
      const double tol = dt == rg::kFloat32 ? 1e-4 : 1e-11;
      for (rg::Shape shape :
           {rg::Shape{p}, rg::Shape{1, p}, rg::Shape{n, 1}, rg::Shape{n, p}, rg::Shape{}}) {
        CAPTURE(rg::shape_str(shape));
        rg::Tensor input = rg::randn(shape, {.dtype = dt});
        rg::Tensor full = input.expand({n, p}).contiguous();
        std::vector<double> want = prod, iv = values(full);
        for (size_t i = 0; i < want.size(); ++i) want[i] += iv[i];
        rg::Tensor got = rg::addmm(input, a, w.t());
        CHECK_SHAPE(got, {n, p});
        check_close(got, want, tol);
      }
    }
  rg::set_num_threads(saved_threads);
  // a scalar input where p = 1 (numel equals p, yet it is no bias vector)
  check_close(rg::addmm(rg::full({}, 2.0), rg::ones({3, 4}), rg::ones({4, 1})), {6, 6, 6}, 1e-6);
  // errors name the op and what to fix
  rg::Tensor a = rg::randn({3, 4}), b = rg::randn({4, 5});
  CHECK_THROWS_WITH(rg::addmm(rg::randn({4}), a, b),
                    doctest::Contains("[addmm] expected input that broadcasts to [3, 5] (a bias (p), or (n, p)), got [4]"));
  CHECK_THROWS_WITH(rg::addmm(rg::randn({5}), a, rg::randn({3, 5})),
                    doctest::Contains("[addmm] expected a (n, m) and b (m, p), got [3, 4] and [3, 5]"));
}

TEST_CASE("ops: matmul batched with broadcast batch dims") {
  rg::manual_seed(22);
  rg::Tensor a = rg::randn({2, 1, 3, 4}, {.dtype = rg::kFloat64});
  rg::Tensor b = rg::randn({5, 4, 2}, {.dtype = rg::kFloat64});
  rg::Tensor c = rg::matmul(a, b);
  CHECK_SHAPE(c, {2, 5, 3, 2});
  std::vector<double> av = values(a), bv = values(b), want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j)
      for (int m = 0; m < 3; ++m)
        for (int n = 0; n < 2; ++n) {
          double s = 0;
          for (int k = 0; k < 4; ++k) s += av[(i * 3 + m) * 4 + k] * bv[(j * 4 + k) * 2 + n];
          want.push_back(s);
        }
  check_close(c, want, 1e-12);

  // plain batch (same batch dims) and a 2-D operand against a batch
  rg::Tensor p = rg::randn({3, 2, 4}, {.dtype = rg::kFloat64});
  rg::Tensor q = rg::randn({3, 4, 5}, {.dtype = rg::kFloat64});
  rg::Tensor pq = rg::matmul(p, q);
  CHECK_SHAPE(pq, {3, 2, 5});
  for (int i = 0; i < 3; ++i) check_close(pq[i], values(rg::matmul(p[i], q[i])), 1e-12);
  rg::Tensor q2 = rg::randn({4, 5}, {.dtype = rg::kFloat64});
  rg::Tensor pq2 = rg::matmul(p, q2);
  CHECK_SHAPE(pq2, {3, 2, 5});
  for (int i = 0; i < 3; ++i) check_close(pq2[i], values(rg::matmul(p[i], q2)), 1e-12);
  rg::Tensor p2 = rg::randn({2, 4}, {.dtype = rg::kFloat64});
  CHECK_SHAPE(rg::matmul(p2, q), {3, 2, 5});
}

TEST_CASE("ops: matmul with transposed operands equals the contiguous copy") {
  rg::manual_seed(23);
  for (rg::DType dt : {rg::kFloat32, rg::kFloat64}) {
    double tol = dt == rg::kFloat32 ? 1e-5 : 1e-12;
    rg::Tensor at = rg::randn({4, 3}, {.dtype = dt}).t();  // (3,4), column-major
    rg::Tensor b = rg::randn({4, 5}, {.dtype = dt});
    rg::Tensor bt = rg::randn({5, 4}, {.dtype = dt}).t();  // (4,5), column-major
    CHECK_FALSE(at.is_contiguous());
    check_close(rg::matmul(at, b), values(rg::matmul(at.contiguous(), b)), tol);
    check_close(rg::matmul(at, bt), values(rg::matmul(at.contiguous(), bt.contiguous())), tol);
    check_close(rg::matmul(at.contiguous(), bt), values(rg::matmul(at.contiguous(), bt.contiguous())),
                tol);
    check_close(rg::matmul(at, b), naive_matmul(values(at), values(b), 3, 4, 5), tol);

    // batched, transposed last two dims
    rg::Tensor x = rg::randn({2, 4, 3}, {.dtype = dt}).transpose(1, 2);  // (2,3,4)
    rg::Tensor y = rg::randn({2, 5, 4}, {.dtype = dt}).transpose(-1, -2);  // (2,4,5)
    check_close(rg::matmul(x, y), values(rg::matmul(x.contiguous(), y.contiguous())), tol);

    // a sliced operand (row stride > cols), and a stepped slice
    rg::Tensor big = rg::randn({6, 8}, {.dtype = dt});
    rg::Tensor s = big.slice(1, 2, 6);        // (6,4), row stride 8
    rg::Tensor s2 = big.slice(1, 0, 8, 2);    // (6,4), col stride 2
    rg::Tensor r = rg::randn({4, 3}, {.dtype = dt});
    check_close(rg::matmul(s, r), values(rg::matmul(s.contiguous(), r)), tol);
    check_close(rg::matmul(s2, r), values(rg::matmul(s2.contiguous(), r)), tol);
    check_close(rg::matmul(r.t(), s.t()), values(rg::matmul(r.t().contiguous(), s.t().contiguous())),
                tol);
    // operands whose matrix dims are broadcast (stride 0) or a single row/column of a view
    rg::Tensor row_b = rg::randn({1, 4}, {.dtype = dt}).expand({3, 4});
    rg::Tensor col_b = rg::randn({4, 1}, {.dtype = dt}).expand({4, 5});
    check_close(rg::matmul(row_b, col_b), values(rg::matmul(row_b.contiguous(), col_b.contiguous())),
                tol);
    rg::Tensor one_row = at.slice(0, 1, 2);  // (1,4) of a column-major matrix
    rg::Tensor one_col = bt.slice(1, 2, 3);  // (4,1)
    check_close(rg::matmul(one_row, one_col), values(rg::matmul(one_row.contiguous(), one_col.contiguous())),
                tol);
    check_close(rg::matmul(one_col, one_row), values(rg::matmul(one_col.contiguous(), one_row.contiguous())),
                tol);
    // an expanded (stride-0) batch operand
    rg::Tensor e = rg::randn({1, 3, 4}, {.dtype = dt}).expand({2, 3, 4});
    check_close(rg::matmul(e, y), values(rg::matmul(e.contiguous(), y.contiguous())), tol);
  }
}

// ---------------------------------------------------------------- indexing

TEST_CASE("ops: index_select") {
  rg::Tensor x = rg::arange(12).reshape({3, 4});
  rg::Tensor r = rg::index_select(x, 0, i64({2, 0, 2}));
  CHECK_SHAPE(r, {3, 4});
  check_close(r, {8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  rg::Tensor c = rg::index_select(x, 1, i64({3, 1}));
  CHECK_SHAPE(c, {3, 2});
  check_close(c, {3, 1, 7, 5, 11, 9});
  check_close(rg::index_select(x, -1, i64({0})), {0, 4, 8});
  // non-contiguous source
  check_close(rg::index_select(x.t(), 0, i64({1, 3})), {1, 5, 9, 3, 7, 11});
  // embedding-like lookup on a 3-D tensor
  rg::Tensor y = rg::arange(24).reshape({2, 3, 4});
  check_close(rg::index_select(y, 1, i64({2})), {8, 9, 10, 11, 20, 21, 22, 23});
}

TEST_CASE("ops: gather") {
  rg::Tensor x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  rg::Tensor g = rg::gather(x, 1, i64({2, 0, 1, 1}, {2, 2}));
  CHECK_SHAPE(g, {2, 2});
  check_close(g, {3, 1, 5, 5});
  rg::Tensor g0 = rg::gather(x, 0, i64({1, 0, 1, 0, 0, 0, 1, 1, 1}, {3, 3}));
  CHECK_SHAPE(g0, {3, 3});
  check_close(g0, {4, 2, 6, 1, 2, 3, 4, 5, 6});
  // the cross-entropy pattern: pick one column per row
  rg::Tensor logits = rg::arange(12).reshape({4, 3});
  check_close(rg::gather(logits, 1, i64({0, 2, 1, 0}, {4, 1})), {0, 5, 7, 9});
}

TEST_CASE("ops: index_add") {
  rg::Tensor x = rg::ones({4, 2}, {.dtype = rg::kFloat64});
  rg::Tensor src = f64({1, 2, 3, 4, 5, 6}, {3, 2});
  rg::Tensor out = rg::index_add(x, 0, i64({0, 2, 0}), src);
  CHECK_SHAPE(out, {4, 2});
  check_close(out, {1 + 1 + 5, 1 + 2 + 6, 1, 1, 1 + 3, 1 + 4, 1, 1}, 1e-12);
  check_close(x, std::vector<double>(8, 1.0));  // input untouched

  rg::Tensor y = rg::zeros({2, 3}, {.dtype = rg::kFloat64});
  rg::Tensor out1 = rg::index_add(y, 1, i64({2, 2}), f64({1, 2, 3, 4}, {2, 2}));
  check_close(out1, {0, 0, 3, 0, 0, 7}, 1e-12);
}

TEST_CASE("ops: scatter_add") {
  rg::Tensor x = rg::zeros({2, 3}, {.dtype = rg::kFloat64});
  rg::Tensor index = i64({0, 1, 0, 2, 2, 2, 1, 0}, {2, 4});
  rg::Tensor src = f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  rg::Tensor out = rg::scatter_add(x, 1, index, src);
  CHECK_SHAPE(out, {2, 3});
  check_close(out, {1 + 3, 2, 4, 8, 7, 5 + 6}, 1e-12);

  rg::Tensor base = rg::ones({3, 2}, {.dtype = rg::kFloat64});
  rg::Tensor out0 = rg::scatter_add(base, 0, i64({2, 0, 2, 2}, {2, 2}), f64({1, 2, 3, 4}, {2, 2}));
  check_close(out0, {1, 1 + 2, 1, 1, 1 + 1 + 3, 1 + 4}, 1e-12);
  check_close(base, std::vector<double>(6, 1.0));
}

// ---------------------------------------------------------------- join / split

TEST_CASE("ops: cat") {
  rg::Tensor a = f32({1, 2, 3, 4}, {2, 2});
  rg::Tensor b = f32({5, 6}, {1, 2});
  rg::Tensor c = f32({7, 8, 9, 10, 11, 12}, {3, 2});
  rg::Tensor r = rg::cat({a, b, c});
  CHECK_SHAPE(r, {6, 2});
  check_close(r, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});

  rg::Tensor d = f32({5, 6, 7, 8, 9, 10}, {2, 3});
  rg::Tensor r1 = rg::cat({a, d}, 1);
  CHECK_SHAPE(r1, {2, 5});
  check_close(r1, {1, 2, 5, 6, 7, 3, 4, 8, 9, 10});
  check_close(rg::cat({a, d}, -1), values(r1));
  // non-contiguous pieces
  check_close(rg::cat({a.t(), a}, 0), {1, 3, 2, 4, 1, 2, 3, 4});
  // one tensor
  check_close(rg::cat({a}), values(a));
}

TEST_CASE("ops: stack") {
  rg::Tensor a = f32({1, 2, 3});
  rg::Tensor b = f32({4, 5, 6});
  rg::Tensor s0 = rg::stack({a, b});
  CHECK_SHAPE(s0, {2, 3});
  check_close(s0, {1, 2, 3, 4, 5, 6});
  rg::Tensor s1 = rg::stack({a, b}, 1);
  CHECK_SHAPE(s1, {3, 2});
  check_close(s1, {1, 4, 2, 5, 3, 6});
  rg::Tensor m = f32({1, 2, 3, 4}, {2, 2});
  rg::Tensor sm = rg::stack({m, m * 10.0, m * 100.0}, -1);
  CHECK_SHAPE(sm, {2, 2, 3});
  check_close(sm, {1, 10, 100, 2, 20, 200, 3, 30, 300, 4, 40, 400});
}

TEST_CASE("ops: split and chunk") {
  rg::Tensor x = rg::arange(10).reshape({5, 2});
  std::vector<rg::Tensor> p = rg::split(x, 2);
  REQUIRE(p.size() == 3);
  CHECK_SHAPE(p[0], {2, 2});
  CHECK_SHAPE(p[2], {1, 2});
  check_close(p[0], {0, 1, 2, 3});
  check_close(p[1], {4, 5, 6, 7});
  check_close(p[2], {8, 9});

  std::vector<rg::Tensor> q = rg::split(x, std::vector<int64_t>{1, 4});
  REQUIRE(q.size() == 2);
  CHECK_SHAPE(q[1], {4, 2});
  check_close(q[0], {0, 1});
  check_close(q[1], {2, 3, 4, 5, 6, 7, 8, 9});

  std::vector<rg::Tensor> cols = rg::split(x, 1, 1);
  REQUIRE(cols.size() == 2);
  CHECK_SHAPE(cols[1], {5, 1});
  check_close(cols[1], {1, 3, 5, 7, 9});

  std::vector<rg::Tensor> c = rg::chunk(x, 3);
  REQUIRE(c.size() == 3);
  CHECK_SHAPE(c[0], {2, 2});
  CHECK_SHAPE(c[1], {2, 2});
  CHECK_SHAPE(c[2], {1, 2});
  check_close(c[2], {8, 9});
  std::vector<rg::Tensor> c6 = rg::chunk(rg::arange(6), 3);
  REQUIRE(c6.size() == 3);
  for (auto& t : c6) CHECK_SHAPE(t, {2});
  check_close(c6[1], {2, 3});
  std::vector<rg::Tensor> ch = rg::chunk(rg::arange(12).reshape({2, 6}), 2, -1);
  REQUIRE(ch.size() == 2);
  check_close(ch[1], {3, 4, 5, 9, 10, 11});
}

TEST_CASE("ops: allclose") {
  rg::Tensor a = f64({1, 2, 3});
  CHECK(rg::allclose(a, f64({1, 2, 3})));
  CHECK(rg::allclose(a, f64({1, 2, 3 + 1e-9})));
  CHECK_FALSE(rg::allclose(a, f64({1, 2, 3.1})));
  CHECK_FALSE(rg::allclose(a, f64({1, 2, 3, 4})));
  CHECK(rg::allclose(a, f64({1.05, 2, 3}), 0.1, 0));
}

// ---------------------------------------------------------------- edge values

TEST_CASE("ops: amax amin of infinite rows") {
  const double inf = std::numeric_limits<double>::infinity();
  // a fully masked attention row is all -inf: its max is -inf, not the lowest finite float
  rg::Tensor x = f32({-(float)inf, -(float)inf, 1, 2}, {2, 2});
  check_close(rg::amax(x, {1}), {-inf, 2});
  check_close(rg::amin(f32({(float)inf, (float)inf}, {1, 2}), {1}), {inf});
  check_close(rg::amax(f64({-inf, -inf})), {-inf});
  check_close(rg::amin(f64({inf})), {inf});
  check_close(rg::logsumexp(f64({-inf, -inf, 0, 0}, {2, 2}), {1}), {-inf, std::log(2.0)}, 1e-12);
  // argmax still answers for an all -inf row
  CHECK(rg::argmax(x, 1).tolist<int64_t>() == std::vector<int64_t>{0, 1});
}

TEST_CASE("ops: reductions of bool and int64 tensors") {
  rg::Tensor mask = f32({1, 0, 1, 1, 0, 0}, {2, 3}) > 0.5;
  rg::Tensor count = mask.sum();
  CHECK(count.dtype() == rg::kInt64);
  CHECK(count.item() == 3);
  CHECK(mask.sum(1).tolist<int64_t>() == std::vector<int64_t>{2, 1});
  rg::Tensor n = i64({3, -1, 7, 2}, {2, 2});
  CHECK(n.sum().dtype() == rg::kInt64);
  CHECK(n.sum(0).tolist<int64_t>() == std::vector<int64_t>{10, 1});
  CHECK(rg::amax(n, {1}).tolist<int64_t>() == std::vector<int64_t>{3, 7});
  CHECK(rg::argmin(n, 1).tolist<int64_t>() == std::vector<int64_t>{1, 1});
}

TEST_CASE("ops: views that need no copy stay views") {
  rg::Tensor x = rg::arange(6).reshape({2, 3});
  rg::Tensor tv = x.t().view({3, 1, 2});  // inserting a size-1 dim works on any layout
  CHECK(tv.storage() == x.storage());
  check_close(tv, {0, 3, 1, 4, 2, 5});
  rg::Tensor y = rg::arange(24).reshape({2, 3, 4}).transpose(0, 1);  // (3,2,4)
  rg::Tensor split_last = y.view({3, 2, 2, 2});                       // splitting the unit-stride dim
  CHECK(split_last.storage() == y.storage());
  check_close(split_last, values(y));
  rg::Tensor e = rg::full({1}, 5).expand({4}).reshape({2, 2});
  check_close(e, {5, 5, 5, 5});
  rg::Tensor ec = f32({1, 2, 3}, {3, 1}).expand({3, 4}).reshape({12});
  check_close(ec, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
}
