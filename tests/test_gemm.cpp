// test_gemm.cpp — the CPU GEMM under rg::matmul, on whichever engine this process uses
// (oneDNN's sgemm for float32 where built, else Eigen; ctest runs these cases again with
// RINGGRAD_GEMM=eigen as `gemm_eigen`). Every operand layout the engine maps ('N', 'T',
// a row stride wider than the row, a broadcast that must fall back to Eigen), sizes that
// split into panels over threads, and degenerate sizes of 1 — float32 against the same
// product in float64.
#include <cmath>
#include <string>

#include "test_helpers.h"

namespace {

// a (m × k) and b (k × n) in the layout named: "N" row-major, "T" a transposed
// column-major view, "S" a slice with row stride wider than its rows.
rg::Tensor operand(int64_t rows, int64_t cols, char layout) {
  if (layout == 'T') return rg::randn({cols, rows}).t();
  if (layout == 'S') return rg::randn({rows, cols + 3}).narrow(1, 2, cols);
  return rg::randn({rows, cols});
}

}  // namespace

TEST_CASE("gemm: float32 matmul equals float64 on every layout and size, 1 and 2 threads") {
  rg::manual_seed(5);
  const int threads = rg::get_num_threads();
  const std::string engine = rg::cpu_gemm_engine();
  CAPTURE(engine);
  struct Size {
    int64_t m, k, n;
  };
  // Small, skinny, degenerate, and big enough for the panel split (work >= 2^17, and
  // >= 2^24 for the finer split).
  for (Size s : {Size{5, 7, 3}, Size{64, 256, 10}, Size{1, 33, 17}, Size{17, 1, 9},
                 Size{9, 13, 1}, Size{1, 1, 1}, Size{130, 70, 150}, Size{300, 260, 270}}) {
    for (char la : {'N', 'T', 'S'})
      for (char lb : {'N', 'T', 'S'})
        for (int t : {1, 2}) {
          const std::string what = std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
                                   std::to_string(s.n) + " " + la + lb + " threads " +
                                   std::to_string(t);
          CAPTURE(what);
          rg::set_num_threads(t);
          rg::Tensor a = operand(s.m, s.k, la), b = operand(s.k, s.n, lb);
          rg::Tensor want = rg::matmul(a.to(rg::kFloat64), b.to(rg::kFloat64));
          rg::Tensor got = rg::matmul(a, b);
          CHECK(got.dtype() == rg::kFloat32);
          CHECK(rg::allclose(got.to(rg::kFloat64), want, 1e-4, 1e-4));
        }
  }
  // A broadcast operand (stride 0 along a matrix dim) has no BLAS layout: Eigen takes it.
  rg::Tensor row = rg::randn({1, 40}).expand({50, 40}), b = rg::randn({40, 30});
  CHECK(rg::allclose(rg::matmul(row, b).to(rg::kFloat64),
                     rg::matmul(row.to(rg::kFloat64), b.to(rg::kFloat64)), 1e-4, 1e-4));
  // Batched, with a broadcast batch dim, as attention and the Transformer layers use it.
  rg::Tensor q = rg::randn({3, 4, 20, 16}), k = rg::randn({1, 4, 24, 16}).transpose(-2, -1);
  CHECK(rg::allclose(rg::matmul(q, k).to(rg::kFloat64),
                     rg::matmul(q.to(rg::kFloat64), k.to(rg::kFloat64)), 1e-4, 1e-4));
  rg::set_num_threads(threads);
}

TEST_CASE("gemm: a transposed A whose rows alias in the cache, computed the other way round") {
  // A read transposed with rows 1024, 1536 or 2048 floats apart and a long inner dim (a
  // weight gradient dYᵀ·X): oneDNN then computes Cᵀ = Bᵀ·A, transposed into C
  // (core/cpu/gemm.cpp). Against float64, with B in both layouts, B itself aliasing (the
  // direct route), and split over two threads by rows and by columns. (With RINGGRAD_GEMM=
  // eigen, ctest's gemm_eigen, the same products go to Eigen and must agree just as well.)
  rg::manual_seed(6);
  const int threads = rg::get_num_threads();
  struct Case {
    int64_t m, k, n;
    char lb;
  };
  // (1024, 1024, 1040) splits over two threads by columns: each panel's B and C are a
  // part of the whole width.
  for (Case c : {Case{1024, 1024, 64, 'N'}, Case{1536, 1024, 40, 'T'}, Case{2048, 1024, 17, 'N'},
                 Case{1024, 1024, 1040, 'N'}, Case{1024, 1024, 1024, 'N'},
                 Case{160, 1024, 1024, 'N'}})
    for (int t : {1, 2}) {
      const std::string what = std::to_string(c.m) + "x" + std::to_string(c.k) + "x" +
                               std::to_string(c.n) + " T" + c.lb + " threads " + std::to_string(t);
      CAPTURE(what);
      rg::set_num_threads(t);
      rg::Tensor a = operand(c.m, c.k, 'T'), b = operand(c.k, c.n, c.lb);
      rg::Tensor want = rg::matmul(a.to(rg::kFloat64), b.to(rg::kFloat64));
      CHECK(rg::allclose(rg::matmul(a, b).to(rg::kFloat64), want, 1e-4, 1e-4));
    }
  rg::set_num_threads(threads);
}

TEST_CASE("gemm: the engine in use is named") {
  const std::string engine = rg::cpu_gemm_engine();
  CHECK((engine == "eigen" || engine.rfind("onednn-", 0) == 0));
}
