// test_threads.cpp — the thread-count setting, and large inputs that take the
// kernels' multi-threaded paths: one thread and many must agree, and be right.
#include <cmath>
#include <functional>
#include <utility>

#include "test_helpers.h"

using test::check_close;
using test::naive_matmul;
using test::values;

// ---------------------------------------------------------------- threaded paths

namespace {
// Run f with one thread and with several; both results, as doubles.
template <typename F>
std::pair<std::vector<double>, std::vector<double>> one_and_many_threads(F f) {
  int saved = rg::get_num_threads();
  rg::set_num_threads(1);
  std::vector<double> one = values(f());
  rg::set_num_threads(4);
  std::vector<double> many = values(f());
  rg::set_num_threads(saved);
  return {one, many};
}
}  // namespace

TEST_CASE("threads: set_num_threads") {
  int saved = rg::get_num_threads();
  CHECK(saved >= 1);
  rg::set_num_threads(3);
  CHECK(rg::get_num_threads() == 3);
  CHECK_THROWS_AS(rg::set_num_threads(0), rg::Error);
  rg::set_num_threads(saved);
}

TEST_CASE("threads: large inputs give the same results on one thread and on many") {
  rg::manual_seed(77);
  rg::Tensor a = rg::randn({400, 300});
  rg::Tensor b = rg::randn({300});
  rg::Tensor c = rg::randn({400, 1});
  rg::Tensor at = rg::randn({300, 400}).t();  // non-contiguous (400,300)

  struct Case {
    const char* name;
    std::function<rg::Tensor()> f;
    double tol;
  };
  std::vector<Case> cases = {
      {"broadcast add", [&] { return a + b * c; }, 0},
      {"non-contiguous mul", [&] { return a * at; }, 0},
      {"exp", [&] { return rg::exp(at); }, 0},
      {"gelu", [&] { return rg::gelu(a); }, 0},
      {"where", [&] { return rg::where(a > 0.0, a, at); }, 0},
      {"sum dim 0", [&] { return a.sum(0); }, 0},
      {"sum dim 1", [&] { return a.sum(1); }, 0},
      {"sum all", [&] { return a.sum(); }, 1e-12},
      {"amax dim 0", [&] { return rg::amax(a, {0}); }, 0},
      {"argmax dim 1", [&] { return rg::argmax(a, 1); }, 0},
      {"logsumexp dim 0", [&] { return rg::logsumexp(a, {0}); }, 0},
      {"softmax dim 1", [&] { return rg::softmax(a, 1); }, 0},
      {"softmax dim 0", [&] { return rg::softmax(at, 0); }, 0},
      {"log_softmax dim 1", [&] { return rg::log_softmax(a, 1); }, 0},
      // a threaded GEMM splits into panels whose blocking sums in another order
      {"matmul", [&] { return rg::matmul(a, at.t()); }, 1e-4},
      {"batched small matmuls",
       [&] { return rg::matmul(a.reshape({100, 40, 30}), at.reshape({100, 30, 40})); }, 1e-5},
      {"contiguous", [&] { return at.contiguous(); }, 0},
  };
  for (const Case& k : cases) {
    CAPTURE(std::string(k.name));
    auto [one, many] = one_and_many_threads(k.f);
    REQUIRE(one.size() == many.size());
    double worst = 0;
    for (size_t i = 0; i < one.size(); ++i)
      worst = std::max(worst, std::abs(one[i] - many[i]) / (1 + std::abs(one[i])));
    CHECK_MESSAGE(worst <= k.tol, k.name << ": max relative difference " << worst);
  }

  // and the threaded results are right, not just consistent
  std::vector<double> av = values(a), bv = values(b), cv = values(c);
  std::vector<double> sum1(400, 0.0), want_add;
  for (int i = 0; i < 400; ++i)
    for (int j = 0; j < 300; ++j) {
      sum1[i] += av[i * 300 + j];
      want_add.push_back(av[i * 300 + j] + bv[j] * cv[i]);
    }
  check_close(a + b * c, want_add, 1e-6);
  check_close(a.sum(1), sum1, 1e-5);
  // the two reduction loops: along a contiguous row (8 partial results, a tail of 4) and
  // over rows in column blocks (300 columns: blocks of 128, 128 and 44)
  std::vector<double> sum0(300, 0.0), max1(400, -1e300), min0(300, 1e300);
  for (int i = 0; i < 400; ++i)
    for (int j = 0; j < 300; ++j) {
      sum0[j] += av[i * 300 + j];
      max1[i] = std::max(max1[i], av[i * 300 + j]);
      min0[j] = std::min(min0[j], av[i * 300 + j]);
    }
  check_close(a.sum(0), sum0, 1e-5);
  check_close(rg::amax(a, {1}), max1, 0);
  check_close(rg::amin(a, {0}), min0, 0);
  rg::Tensor with_nan = a.clone();
  with_nan.data_ptr<float>()[5 * 300 + 297] = NAN;  // in row 5's tail, column 297's block
  CHECK(std::isnan(rg::amax(with_nan, {1}).data_ptr<float>()[5]));
  CHECK(std::isnan(rg::amin(with_nan, {0}).data_ptr<float>()[297]));
  CHECK(std::isnan(with_nan.sum(1).data_ptr<float>()[5]));
  check_close(rg::matmul(a, at.t()), naive_matmul(av, values(at.t()), 400, 300, 400), 1e-4);
  rg::Tensor idx = rg::randint(0, 300, {500});
  std::vector<int64_t> iv = idx.tolist<int64_t>();
  std::vector<double> want_sel;
  for (int i = 0; i < 400; ++i)
    for (int64_t k : iv) want_sel.push_back(av[i * 300 + k]);
  check_close(rg::index_select(a, 1, idx), want_sel, 0);
  std::vector<double> soft = values(rg::softmax(a, 1).sum(1));
  for (double s : soft) REQUIRE(std::abs(s - 1) < 1e-5);
}

// A contiguous tensor is one row of numel elements, and a few long strided rows are few
// rows: elementwise kernels cut such rows into pieces to share them out (core/cpu/loops.h).
// Every element must be computed once and right, the tail of an odd length included.
TEST_CASE("threads: elementwise ops on a few long rows, cut into pieces") {
  rg::manual_seed(5);
  rg::Tensor flat = rg::randn({100003});                 // one row of 100,003
  rg::Tensor strided = rg::randn({40001, 3}).t();        // 3 rows of 40,001, 3 apart
  rg::Tensor other = rg::randn({3, 40001});
  const int saved = rg::get_num_threads();
  rg::set_num_threads(4);
  std::vector<double> f = values(flat), s = values(strided), o = values(other);
  std::vector<double> want_flat, want_strided, want_where;
  for (double x : f) want_flat.push_back(std::exp(float(x)));
  for (size_t i = 0; i < s.size(); ++i) {
    want_strided.push_back(float(s[i]) * float(o[i]));
    want_where.push_back(s[i] > 0 ? s[i] : o[i]);
  }
  check_close(rg::exp(flat), want_flat, 1e-6);
  check_close(strided * other, want_strided, 0);
  check_close(rg::where(strided > 0.0, strided, other), want_where, 0);
  rg::Tensor filled = rg::empty({100003});
  filled.fill_(2.5);
  check_close(filled, std::vector<double>(100003, 2.5), 0);
  rg::set_num_threads(saved);
}

TEST_CASE("threads: random draws do not depend on the thread count") {
  auto [u1, u4] = one_and_many_threads([] {
    rg::Generator g(5);
    return rg::rand({100000}, {}, &g);
  });
  CHECK(u1 == u4);
  auto [n1, n4] = one_and_many_threads([] {
    rg::Generator g(6);
    return rg::randn({100000}, {.dtype = rg::kFloat64}, &g);
  });
  CHECK(n1 == n4);
}
