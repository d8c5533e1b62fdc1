// bench_gemm.cpp — does rg::matmul add anything to a GEMM?
//
// For each shape (M, K, N) it times rg::matmul(a, b) — checks, dispatch, output
// allocation and all — against raw Eigen GEMM on the very same buffers
// (C.noalias() = A * B into a preallocated C), at 1 thread and at 2 threads.
// Rounds alternate between the two and the best round of each counts, so a
// noisy neighbour hurts both alike. Prints GFLOP/s and ratios, then
//   RESULT bench=gemm min_ratio=… speedup_2t_1024=…
//
//   build/bin/bench_gemm [--quick]
#include <ringgrad/ringgrad.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

namespace rg = ringgrad;
using Clock = std::chrono::steady_clock;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Shape3 {
  int64_t m, k, n;
};

// Seconds per call of f: best of `rounds` rounds of `reps` calls.
static double time_best(const std::function<void()>& f, int reps) {
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double>(Clock::now() - t0).count() / reps;
}

struct Row {
  double ours = 0, eigen = 0;  // GFLOP/s
};

static Row measure(const Shape3& s, int threads, int rounds, double budget_s) {
  rg::set_num_threads(threads);
  Eigen::setNbThreads(threads);
  rg::Tensor a = rg::randn({s.m, s.k}), b = rg::randn({s.k, s.n});
  std::vector<float> c(static_cast<size_t>(s.m * s.n));
  Eigen::Map<const RowMat> A(a.data_ptr<float>(), s.m, s.k);
  Eigen::Map<const RowMat> B(b.data_ptr<float>(), s.k, s.n);
  Eigen::Map<RowMat> C(c.data(), s.m, s.n);

  auto ours = [&] { rg::Tensor out = rg::matmul(a, b); };
  auto raw = [&] {
    Eigen::setNbThreads(threads);  // Eigen's own threading, as a user of plain Eigen gets it
    C.noalias() = A * B;
  };
  // Check the two agree before timing them.
  rg::Tensor check = rg::matmul(a, b);
  raw();
  double max_diff = 0;
  for (size_t i = 0; i < c.size(); ++i)
    max_diff = std::max<double>(max_diff, std::abs(check.data_ptr<float>()[i] - c[i]));
  if (max_diff > 1e-3) std::printf("WARNING: results differ by %g\n", max_diff);

  double once = std::max(time_best(raw, 1), 1e-7);
  int reps = std::max(1, static_cast<int>(budget_s / rounds / 2 / once));
  double best_ours = 1e30, best_raw = 1e30;
  for (int r = 0; r < rounds; ++r) {
    best_raw = std::min(best_raw, time_best(raw, reps));
    best_ours = std::min(best_ours, time_best(ours, reps));
  }
  double flops = 2.0 * s.m * s.n * s.k;
  return {flops / best_ours / 1e9, flops / best_raw / 1e9};
}

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const std::vector<Shape3> shapes = {
      {64, 784, 256}, {64, 256, 10}, {1024, 1024, 1024}, {2048, 1024, 256}};
  const int rounds = quick ? 3 : 7;
  const double budget = quick ? 0.2 : 1.0;  // seconds per (shape, threads)

  std::vector<Row> one, two;
  for (int threads : {1, 2}) {
    std::printf("\nthreads = %d\n", threads);
    std::printf("%-20s %14s %14s %8s\n", "shape (M,K,N)", "ours GFLOP/s", "Eigen GFLOP/s", "ratio");
    for (const Shape3& s : shapes) {
      Row r = measure(s, threads, rounds, budget);
      (threads == 1 ? one : two).push_back(r);
      char name[64];
      std::snprintf(name, sizeof name, "(%ld,%ld,%ld)", long(s.m), long(s.k), long(s.n));
      std::printf("%-20s %14.1f %14.1f %8.3f\n", name, r.ours, r.eigen, r.ours / r.eigen);
    }
  }

  std::printf("\n%-20s %14s\n", "shape (M,K,N)", "ours 2t / 1t");
  double min_ratio = 1e9, min_scaling = 1e9;
  for (size_t i = 0; i < shapes.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "(%ld,%ld,%ld)", long(shapes[i].m), long(shapes[i].k),
                  long(shapes[i].n));
    double scaling = two[i].ours / one[i].ours;
    std::printf("%-20s %14.2f\n", name, scaling);
    min_ratio = std::min({min_ratio, one[i].ours / one[i].eigen, two[i].ours / two[i].eigen});
    min_scaling = std::min(min_scaling, scaling);
  }
  std::printf("\nRESULT bench=gemm min_ratio=%.3f speedup_2t_1024=%.2f min_speedup_2t=%.2f\n",
              min_ratio, two[2].ours / one[2].ours, min_scaling);
  return 0;
}
