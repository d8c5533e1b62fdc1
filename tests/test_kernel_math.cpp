// test_kernel_math.cpp — the scalar math the kernels share (core/kernel_math.h,
// core/reduce_math.h), checked on the host: the CUDA kernels run the same functions.
#include <ringgrad/core/kernel_math.h>
#include <ringgrad/core/reduce_math.h>
#include <ringgrad/core/reduce_plan.h>

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

TEST_CASE("math::erf_vec: within 5e-7 of erf, odd, and right at the ends") {
  // GELU's erf (kernel_math.h): a rational function, so that the loops vectorise.
  float worst = 0, worst_small = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -6.0f + 12.0f * float(i) / 200000.0f;
    const double want = std::erf(double(x));
    const float got = ringgrad::math::erf_vec(x);
    worst = std::max(worst, float(std::abs(got - want)));
    if (std::abs(x) < 0.5f && x != 0.0f)  // near 0 erf is small: relative error counts
      worst_small = std::max(worst_small, float(std::abs(got - want) / std::abs(want)));
    CHECK(ringgrad::math::erf_vec(-x) == -got);
  }
  CHECK(worst < 5e-7f);        // measured 3.3–4.2e-7, near |x| = 3.94: about 6 ulps of 1
  CHECK(worst_small < 5e-7f);  // a few ulps of the value itself
  CHECK(ringgrad::math::erf_vec(0.0f) == 0.0f);
  CHECK(ringgrad::math::erf_vec(std::numeric_limits<float>::infinity()) == 1.0f);
  CHECK(ringgrad::math::erf_vec(-std::numeric_limits<float>::infinity()) == -1.0f);
  CHECK(std::isnan(ringgrad::math::erf_vec(std::numeric_limits<float>::quiet_NaN())));
  CHECK(ringgrad::math::erf_vec(0.3) == std::erf(0.3));  // double: the library's erf
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

namespace {

namespace m = ringgrad::math;

// Walks every block, loop round and thread of core/cuda/block_reduce.cuh's pass 1 as
// the GPU would run them (with grid.x capped at `max_grid`, as launch_reduce caps it),
// counting how often each input element is folded and each (output, piece) written.
struct Walk {
  m::ReducePlan plan;
  std::vector<int> folded, written;
  bool merge_groups_agree = true;  // the threads merged together fold the same output
};
Walk walk_reduce(int64_t outer, int64_t r, int64_t inner, int64_t max_grid) {
  const int block = 256;
  Walk w;
  w.plan = m::plan_reduce(outer, r, inner, block, /*multiprocessors=*/132);
  const m::ReducePlan& p = w.plan;
  w.folded.assign(size_t(outer * r * inner), 0);
  w.written.assign(size_t(outer * inner * p.splits), 0);
  const int64_t grid_x = std::min(p.blocks, max_grid);
  for (int64_t by = 0; by < p.splits; ++by) {
    const int64_t k0 = by * p.chunk, k1 = std::min(k0 + p.chunk, r);
    for (int64_t bx = 0; bx < grid_x; ++bx)
      for (int64_t first = bx * p.groups; first < p.tiles; first += grid_x * p.groups)
        for (int thread = 0; thread < block; ++thread) {
          const m::ReduceLane lane = m::lane_of(p, thread);
          const int64_t tile = first + lane.group;
          const m::ReduceOutput at = m::output_of(p, outer, inner, tile, lane.tx);
          const bool live = tile < p.tiles && at.j < inner;
          // merge_block_columns merges this thread into its group's thread (tx, 0)
          const m::ReduceLane head = m::lane_of(p, thread - lane.ty * p.lanes_inner);
          const m::ReduceOutput head_at = m::output_of(p, outer, inner, tile, head.tx);
          if (head.ty != 0 || head.group != lane.group || head_at.o != at.o || head_at.j != at.j)
            w.merge_groups_agree = false;
          if (!live) continue;
          for (int64_t k = k0 + lane.ty; k < k1; k += p.lanes_r)
            ++w.folded[size_t((at.o * r + k) * inner + at.j)];
          if (lane.ty == 0) ++w.written[size_t((at.o * inner + at.j) * p.splits + by)];
        }
  }
  return w;
}

}  // namespace

TEST_CASE("math::plan_reduce: every element folded once, every output written once") {
  struct Shape3 {
    int64_t outer, r, inner, max_grid;
  };
  for (Shape3 c : std::vector<Shape3>{{100000, 4, 1, 524280},  // short rows: many a block
                                      {1, 1 << 20, 1, 524280},  // a full sum: pieces of r
                                      {3, 7, 5, 524280},        // inner shorter than a warp
                                      {5, 3, 40, 524280},       // inner past a warp, not a multiple
                                      {2, 12288, 1, 524280},    // long rows: the whole block
                                      {4, 0, 3, 524280},        // nothing to fold
                                      {7, 9, 70, 2},            // more tiles than the grid: strided
                                      {1000, 3, 1, 1}}) {
    CAPTURE(c.outer);
    CAPTURE(c.r);
    CAPTURE(c.inner);
    CAPTURE(c.max_grid);
    Walk w = walk_reduce(c.outer, c.r, c.inner, c.max_grid);
    const m::ReducePlan& p = w.plan;
    CHECK(p.groups * p.lanes_inner * p.lanes_r == 256);
    CHECK(w.merge_groups_agree);
    CHECK(std::all_of(w.folded.begin(), w.folded.end(), [](int n) { return n == 1; }));
    CHECK(std::all_of(w.written.begin(), w.written.end(), [](int n) { return n == 1; }));
  }
  // The shapes the plan is for: short rows fill a block with rows, not idle threads; a
  // full reduction spreads over the GPU.
  m::ReducePlan short_rows = m::plan_reduce(1000000, 4, 1, 256, 132);
  CHECK((short_rows.lanes_r == 1 && short_rows.groups == 256));
  m::ReducePlan full = m::plan_reduce(1, 100000000, 1, 256, 132);
  CHECK((full.lanes_r == 256 && full.splits == 4 * 132));
  m::ReducePlan columns = m::plan_reduce(8192, 12288, 1, 256, 132);
  CHECK((columns.lanes_r == 256 && columns.splits == 1 && columns.blocks == 8192));
}
