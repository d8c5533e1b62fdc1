// bench_gemm.cpp — does rg::matmul add anything to the GEMM library under it?
//
// For each shape (M, K, N) it times rg::matmul(a, b) — checks, dispatch, output
// allocation, ringgrad's thread pool cutting the product into panels — against two
// raw GEMMs on the very same buffers, each with its own threading as a user of the
// plain library gets it:
//   oneDNN  dnnl_sgemm (OpenMP threads = the thread count), where the build has oneDNN;
//   Eigen   C.noalias() = A * B (Eigen's threads = the thread count).
// at 1 thread and at 2 threads. Rounds alternate between the contenders (in an order
// that rotates) and the best round of each counts, so a noisy neighbour hurts all alike.
// Each timing starts on an idle machine: after its last call OpenMP's threads spin for
// ~8 ms (libgomp's default wait policy) and Eigen's for a while too, and a contender timed
// in that wake ran its second thread on a core still taken (ours measured 0.78–0.89 of
// oneDNN at 2 threads so; ~1.0 after a pause). Prints GFLOP/s and ratios, then
//   RESULT bench=gemm engine=… min_ratio_onednn=… min_ratio_eigen=… speedup_2t_1024=…
//
//   build/bin/bench_gemm [--quick]
//   RINGGRAD_GEMM=eigen build/bin/bench_gemm     (ours on Eigen instead of oneDNN)
#include <ringgrad/ringgrad.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#if RINGGRAD_BENCH_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

namespace rg = ringgrad;
using Clock = std::chrono::steady_clock;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

constexpr bool kHaveOneDnn = RINGGRAD_BENCH_ONEDNN;

struct Shape3 {
  int64_t m, k, n;
  bool a_transposed = false;  // A stored (K, M) and read as its transpose: a weight gradient dYᵀ·X
};

// Seconds per call of f over `reps` calls, after a pause that lets the threads of the
// contender timed before it stop spinning, and then `reps / 4` untimed calls: on this
// virtual machine a core that slept 30 ms runs slower for the next millisecond or so
// (a 64×256×10 product: 7.2 µs in a loop; after a pause 20 µs for the first 10 calls,
// 9.7 for calls 40–80), which the timing would otherwise count.
double time_reps(const std::function<void()>& f, int reps) {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  for (int i = 0; i < std::max(1, reps / 4); ++i) f();
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double>(Clock::now() - t0).count() / reps;
}

struct Row {
  double ours = 0, onednn = 0, eigen = 0;  // GFLOP/s
};

double max_abs_diff(const rg::Tensor& ours, const std::vector<float>& c) {
  double d = 0;
  for (size_t i = 0; i < c.size(); ++i)
    d = std::max<double>(d, std::abs(ours.data_ptr<float>()[i] - c[i]));
  return d;
}

Row measure(const Shape3& s, int threads, int rounds, double budget_s) {
  rg::set_num_threads(threads);
  // A as it lies: (M, K), or (K, M) read through .t() (no copy on either side).
  rg::Tensor stored = s.a_transposed ? rg::randn({s.k, s.m}) : rg::randn({s.m, s.k});
  rg::Tensor a = s.a_transposed ? stored.t() : stored, b = rg::randn({s.k, s.n});
  std::vector<float> c(static_cast<size_t>(s.m * s.n));
  using ColMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  Eigen::Map<const RowMat> A(stored.data_ptr<float>(), s.m, s.k);
  Eigen::Map<const ColMat> At(stored.data_ptr<float>(), s.m, s.k);
  Eigen::Map<const RowMat> B(b.data_ptr<float>(), s.k, s.n);
  Eigen::Map<RowMat> C(c.data(), s.m, s.n);

  auto ours = [&] { rg::Tensor out = rg::matmul(a, b); };
  auto eigen = [&] {
    Eigen::setNbThreads(threads);  // Eigen's own threading, as a user of plain Eigen gets it
    if (s.a_transposed)
      C.noalias() = At * B;
    else
      C.noalias() = A * B;
  };
  auto onednn = [&] {
#if RINGGRAD_BENCH_ONEDNN
    omp_set_num_threads(threads);  // oneDNN's own (OpenMP) threading
    dnnl_sgemm(s.a_transposed ? 'T' : 'N', 'N', s.m, s.n, s.k, 1.0f, stored.data_ptr<float>(),
               s.a_transposed ? s.m : s.k, b.data_ptr<float>(), s.n, 0.0f, c.data(), s.n);
#endif
  };
  // Check they agree before timing them.
  rg::Tensor check = rg::matmul(a, b);
  const double tol = 1e-4 * std::sqrt(double(s.k)) * 10;
  eigen();
  if (max_abs_diff(check, c) > tol) std::printf("WARNING: ours and Eigen differ\n");
  if (kHaveOneDnn) {
    onednn();
    if (max_abs_diff(check, c) > tol) std::printf("WARNING: ours and oneDNN differ\n");
  }

  double once = std::max(time_reps(ours, 1), 1e-7);
  int reps = std::max(1, static_cast<int>(budget_s / rounds / 3 / once));
  // Each round times every contender once, in an order that rotates from round to round,
  // so none is always the one timed right after another's threads went to sleep.
  struct Contender {
    std::function<void()> f;
    double best = 1e30;
  };
  std::vector<Contender> contenders = {{ours}, {eigen}};
  if (kHaveOneDnn) contenders.push_back({onednn});
  const size_t n = contenders.size();
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < n; ++i) {
      Contender& c = contenders[(i + r) % n];
      c.best = std::min(c.best, time_reps(c.f, reps));
    }
  double gflop = 2.0 * s.m * s.n * s.k / 1e9;
  return {gflop / contenders[0].best, kHaveOneDnn ? gflop / contenders[2].best : 0.0,
          gflop / contenders[1].best};
}

std::string name_of(const Shape3& s) {
  char name[64];
  std::snprintf(name, sizeof name, "(%ld,%ld,%ld)%s", long(s.m), long(s.k), long(s.n),
                s.a_transposed ? " A^T" : "");
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  // The article's MLP (64×784×256, 64×256×10), a transformer layer's projections at
  // 2048 tokens, d 256 (QKV, FF up, FF down), their weight gradients (dYᵀ·X: A read
  // transposed, K = the 2048 tokens), and the classic square (last).
  const std::vector<Shape3> shapes = {
      {64, 784, 256},         {64, 256, 10},          {2048, 256, 768},
      {2048, 256, 1024},      {2048, 1024, 256},      {768, 2048, 256, true},
      {1024, 2048, 256, true}, {256, 2048, 1024, true}, {1024, 1024, 1024}};
  const size_t square = shapes.size() - 1;
  const int rounds = quick ? 6 : 12;
  const double budget = quick ? 0.3 : 1.5;  // seconds per (shape, threads)
  std::printf("rg::matmul's float32 GEMM: %s\n", rg::cpu_gemm_engine().c_str());

  std::vector<Row> one, two;
  for (int threads : {1, 2}) {
    std::printf("\nthreads = %d\n", threads);
    std::printf("%-20s %10s %10s %10s %12s %11s\n", "shape (M,K,N)", "ours", "oneDNN", "Eigen",
                "ours/oneDNN", "ours/Eigen");
    for (const Shape3& s : shapes) {
      Row r = measure(s, threads, rounds, budget);
      (threads == 1 ? one : two).push_back(r);
      std::printf("%-20s %10.1f %10.1f %10.1f %12.3f %11.3f\n", name_of(s).c_str(), r.ours,
                  r.onednn, r.eigen, kHaveOneDnn ? r.ours / r.onednn : 0.0, r.ours / r.eigen);
    }
  }

  std::printf("\n(GFLOP/s)\n%-20s %14s\n", "shape (M,K,N)", "ours 2t / 1t");
  double min_onednn = 1e9, min_eigen = 1e9, min_scaling = 1e9;
  for (size_t i = 0; i < shapes.size(); ++i) {
    double scaling = two[i].ours / one[i].ours;
    std::printf("%-20s %14.2f\n", name_of(shapes[i]).c_str(), scaling);
    if (kHaveOneDnn)
      min_onednn = std::min({min_onednn, one[i].ours / one[i].onednn, two[i].ours / two[i].onednn});
    min_eigen = std::min({min_eigen, one[i].ours / one[i].eigen, two[i].ours / two[i].eigen});
    min_scaling = std::min(min_scaling, scaling);
  }
  std::printf(
      "\nRESULT bench=gemm engine=%s min_ratio_onednn=%.3f min_ratio_eigen=%.3f "
      "speedup_2t_1024=%.2f min_speedup_2t=%.2f\n",
      rg::cpu_gemm_engine().c_str(), kHaveOneDnn ? min_onednn : 0.0, min_eigen,
      two[square].ours / one[square].ours, min_scaling);
  return 0;
}
