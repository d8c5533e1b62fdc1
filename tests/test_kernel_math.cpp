// test_kernel_math.cpp — the scalar math the kernels share (core/kernel_math.h,
// core/reduce_math.h), checked on the host: the CUDA kernels run the same functions.
#include <ringgrad/core/kernel_math.h>
#include <ringgrad/core/reduce_math.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "test_helpers.h"

TEST_CASE("math::exp_vec: within about 2 ulp of exp, exact at the ends") {
  // The vectorisable exp the attention row passes use (kernel_math.h), checked here
  // because the CUDA kernels run the same function.
  float worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    float x = -87.0f + 175.0f * float(i) / 200000.0f;
    float want = std::exp(x), got = ringgrad::math::exp_vec(x);
    worst = std::max(worst, std::abs(got - want) / want);
  }
  CHECK(worst < 3e-7f);  // measured 2.53e-7: about 2 ulp
  CHECK(ringgrad::math::exp_vec(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(ringgrad::math::exp_vec(-100.0f) == 0.0f);
  CHECK(ringgrad::math::exp_vec(0.0f) == 1.0f);
  CHECK(std::isinf(ringgrad::math::exp_vec(100.0f)));
  CHECK(ringgrad::math::exp_vec(1.0) == std::exp(1.0));  // double: the library's exp
}

namespace {

// The state of the whole row, as a GPU builds it: cut into `pieces` runs, each
// added element by element, then the partial states merged in a shuffled order
// (a tree's order is not the row's).
template <typename S, typename T>
S reduce_in_pieces(const std::vector<T>& row, int pieces, std::mt19937& rng) {
  std::vector<S> parts(static_cast<size_t>(pieces));
  for (size_t k = 0; k < row.size(); ++k)
    parts[k * static_cast<size_t>(pieces) / row.size()].add(row[k], static_cast<int64_t>(k));
  std::shuffle(parts.begin(), parts.end(), rng);
  while (parts.size() > 1) {  // pairwise, like a tree
    std::vector<S> next;
    for (size_t i = 0; i + 1 < parts.size(); i += 2) {
      S a = parts[i];
      a.merge(parts[i + 1]);
      next.push_back(a);
    }
    if (parts.size() % 2) next.push_back(parts.back());
    parts = next;
  }
  return parts[0];
}

template <typename S, typename T>
S reduce_in_order(const std::vector<T>& row) {
  S s;
  for (size_t k = 0; k < row.size(); ++k) s.add(row[k], static_cast<int64_t>(k));
  return s;
}

}  // namespace

TEST_CASE("math::reduce states: merging pieces in any order equals the left-to-right scan") {
  namespace m = ringgrad::math;
  std::mt19937 rng(7);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  std::vector<std::vector<float>> rows = {
      {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5},  // a tie for the max? no; for the min: 1 at 1 and 3
      {2, 7, 7, 1, 7, 0, 0},              // ties for max and min
      {-inf, -inf, -inf},                 // all -inf
      {1, -inf, 3, -inf},
      {1, inf, 3, inf},                   // +inf twice: the first
      {1, nan, 3, nan, 9},                // NaN twice: the first wins
      {5},
  };
  std::uniform_real_distribution<float> u(-50, 50);
  std::vector<float> big(10007);
  for (float& x : big) x = std::round(u(rng));  // many ties
  rows.push_back(big);

  for (const auto& row : rows) {
    for (int pieces : {1, 2, 3, 7, 64}) {
      if (pieces > static_cast<int>(row.size())) continue;
      CAPTURE(row.size());
      CAPTURE(pieces);
      auto same = [](float a, float b) { return (a != a && b != b) || a == b; };
      CHECK(same(reduce_in_pieces<m::ExtremeState<float, true>>(row, pieces, rng).result(),
                 reduce_in_order<m::ExtremeState<float, true>>(row).result()));
      CHECK(same(reduce_in_pieces<m::ExtremeState<float, false>>(row, pieces, rng).result(),
                 reduce_in_order<m::ExtremeState<float, false>>(row).result()));
      CHECK(reduce_in_pieces<m::ArgState<float, true>>(row, pieces, rng).result() ==
            reduce_in_order<m::ArgState<float, true>>(row).result());
      CHECK(reduce_in_pieces<m::ArgState<float, false>>(row, pieces, rng).result() ==
            reduce_in_order<m::ArgState<float, false>>(row).result());
      float lse_pieces = reduce_in_pieces<m::LogSumExpState<float>>(row, pieces, rng).result();
      float lse_order = reduce_in_order<m::LogSumExpState<float>>(row).result();
      if (std::isfinite(lse_order))
        CHECK(lse_pieces == doctest::Approx(lse_order).epsilon(1e-6));
      else
        CHECK(same(lse_pieces, lse_order));
    }
  }
}

TEST_CASE("math::reduce states: the scan agrees with the CPU's own reductions") {
  namespace m = ringgrad::math;
  // argmax / argmin: first position of the extreme, first NaN wins (PyTorch)
  std::vector<float> ties = {2, 7, 7, 1, 7, 0, 0};
  CHECK(reduce_in_order<m::ArgState<float, true>>(ties).result() == 1);
  CHECK(reduce_in_order<m::ArgState<float, false>>(ties).result() == 5);
  std::vector<float> nans = {1, std::nanf(""), 3, std::nanf("")};
  CHECK(reduce_in_order<m::ArgState<float, true>>(nans).result() == 1);
  CHECK(reduce_in_order<m::ArgState<float, false>>(nans).result() == 1);
  // the same rows through the tensor ops (the CPU backend's own kernels)
  for (const auto& row : {ties, std::vector<float>{-3, 0.5f, 2, 2, -1}}) {
    rg::Tensor t = rg::from_vector<float>(row, {static_cast<int64_t>(row.size())});
    CHECK(rg::argmax(t, 0).item<int64_t>() == reduce_in_order<m::ArgState<float, true>>(row).result());
    CHECK(rg::argmin(t, 0).item<int64_t>() == reduce_in_order<m::ArgState<float, false>>(row).result());
    CHECK(t.logsumexp(0).item<float>() ==
          doctest::Approx(reduce_in_order<m::LogSumExpState<float>>(row).result()).epsilon(1e-6));
    double sum = 0;
    for (float x : row) sum += x;
    CHECK(reduce_in_order<m::SumState<double>>(std::vector<double>(row.begin(), row.end()))
              .result() == doctest::Approx(sum));
  }
  // logsumexp of an all -inf row is -inf; of a row with +inf, +inf
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(reduce_in_order<m::LogSumExpState<float>>(std::vector<float>{-inf, -inf}).result() == -inf);
  CHECK(reduce_in_order<m::LogSumExpState<float>>(std::vector<float>{1, inf, 2}).result() == inf);
}
