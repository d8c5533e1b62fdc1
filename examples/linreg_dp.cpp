// linreg_dp.cpp — data parallelism for classical ML (the article's Dask example), in C++.
//
//   scripts/rgrun -n 2 build/bin/linreg_dp [--rows 1000000] [--gd [--steps 300]]
//                                          [--log FILE.jsonl [--log-every 50]]
//
// 1,000,000 synthetic rows of 10 features, y = Σx + 0.1·noise. Each rank holds
// only its own slice of the rows. Two ways to fit y ≈ x·w + b:
//   default: the normal equations. Each rank computes its slice's AᵀA (11×11) and
//            Aᵀy (11), with A = [x, 1]; one all-reduce sums them over ranks; every
//            rank then solves the same small system. Exactly one communication.
//   --gd:    gradient descent: each rank's gradient of its share of the mean squared
//            error, all-reduced (summed) every step, then the same update on every rank.
// Row i is drawn from counter i of a seeded generator, so the data, and the
// answer, are the same for every number of ranks.
// Prints the fit's mean squared error over all rows (each rank's share, summed). --log
// FILE.jsonl writes it as JSON lines (examples/metrics_log.h): with --gd every --log-every
// steps and at the last (and a progress bar on a terminal), otherwise one line for the solve.
// Ends with: RESULT example=linreg_dp world=N max_coef_err=…
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "metrics.h"
#include "metrics_log.h"
#include "parse_on_every_rank.h"
#include "progress_bar.h"

namespace rg = ringgrad;

constexpr int64_t kFeatures = 10;

// Rows [begin, end) of the global data set: x (rows, 10), y (rows, 1), float64.
static void make_rows(int64_t begin, int64_t end, rg::Tensor& x, rg::Tensor& y) {
  rg::Generator gx(1), gnoise(2);
  gx.advance(static_cast<uint64_t>(begin * kFeatures));  // skip the rows other ranks own
  gnoise.advance(static_cast<uint64_t>(begin));
  x = rg::randn({end - begin, kFeatures}, {.dtype = rg::kFloat64}, &gx);
  y = x.sum(1, true) + 0.1 * rg::randn({end - begin, 1}, {.dtype = rg::kFloat64}, &gnoise);
}

// Solve the symmetric positive definite system M·w = v (Cholesky; M is 11×11).
static std::vector<double> solve_spd(std::vector<double> m, std::vector<double> v, int n) {
  for (int j = 0; j < n; ++j) {  // M = L·Lᵀ, L stored in the lower triangle of m
    for (int k = 0; k < j; ++k) m[j * n + j] -= m[j * n + k] * m[j * n + k];
    m[j * n + j] = std::sqrt(m[j * n + j]);
    for (int i = j + 1; i < n; ++i) {
      for (int k = 0; k < j; ++k) m[i * n + j] -= m[i * n + k] * m[j * n + k];
      m[i * n + j] /= m[j * n + j];
    }
  }
  for (int i = 0; i < n; ++i) {  // L·z = v
    for (int k = 0; k < i; ++k) v[i] -= m[i * n + k] * v[k];
    v[i] /= m[i * n + i];
  }
  for (int i = n - 1; i >= 0; --i) {  // Lᵀ·w = z
    for (int k = i + 1; k < n; ++k) v[i] -= m[k * n + i] * v[k];
    v[i] /= m[i * n + i];
  }
  return v;
}

int main(int argc, char** argv) {
  rg::parallel::World world(argc, argv);
  CLI::App app{"Fit a linear regression data-parallel (run under scripts/rgrun -n N)"};
  int64_t rows = 1000000;
  bool gd = false;
  int steps = 300;
  app.add_option("--rows", rows, "rows in the whole data set")->check(CLI::PositiveNumber);
  app.add_flag("--gd", gd, "fit by data-parallel gradient descent instead of normal equations");
  app.add_option("--steps", steps, "gradient descent steps")->check(CLI::PositiveNumber);
  LogOptions log_options{.every = 50};  // --log FILE.jsonl --log-every N (metrics_log.h)
  log_options.add_options(app, "gradient descent steps per --log line");
  if (auto code = parse_on_every_rank(world, app, argc, argv)) return *code;  // all ranks agree

  return rg::parallel::main_guard(world, [&] {
    auto& comm = world.communicator();
    int64_t begin = rows * world.rank() / world.size(),
            end = rows * (world.rank() + 1) / world.size();
    rg::Tensor x, y;
    make_rows(begin, end, x, y);
    rg::Tensor a = rg::cat({x, rg::ones({end - begin, 1}, {.dtype = rg::kFloat64})}, 1);  // [x, 1]
    const int n = kFeatures + 1;

    MetricsLog log(log_options.path, world.is_main());
    RateMeter rate;
    std::vector<double> w;
    if (!gd) {
      rg::Tensor ata = rg::matmul(a.t(), a).contiguous();  // (11, 11): this slice's share
      rg::Tensor aty = rg::matmul(a.t(), y).contiguous();  // (11, 1)
      comm.all_reduce(ata);                                // Σ over ranks = the full AᵀA
      comm.all_reduce(aty);
      w = solve_spd(ata.tolist<double>(), aty.tolist<double>(), n);
    } else {
      rg::Tensor wt = rg::zeros({n, 1}, {.dtype = rg::kFloat64, .requires_grad = true});
      ProgressBar bar(world.is_main(), /*plain_lines=*/0);
      bar.start("gradient descent", steps, 0, double(rows), "rows");
      for (int step = 0; step < steps; ++step) {
        rg::Tensor r = rg::matmul(a, wt) - y;
        rg::Tensor loss =
            (r * r).sum() / static_cast<double>(rows);  // this rank's share of the MSE
        loss.backward();
        rg::Tensor g = wt.grad();
        comm.all_reduce(g);  // Σ of the shares = the gradient of the global MSE
        rg::NoGradGuard no_grad;
        wt.sub_(g * 0.3);
        wt.set_grad(rg::Tensor());
        if (log_options.due(step + 1) || step + 1 == steps) {
          const double mse = sum_over_ranks(&comm, loss.item());  // before this step: Σ shares
          bar.set_loss(mse);
          log.write({{"step", step + 1}, {"loss", mse},
                     {"samples_per_s", std::round(rate.rate(double(rows) * (step + 1)))}, {"lr", 0.3}});
        }
        bar.update(step + 1);
      }
      bar.close();
      w = wt.tolist<double>();
    }
    // The fit's mean squared error over every row: each rank's residuals, summed.
    rg::Tensor wt = rg::from_vector(w, {n, 1});
    rg::Tensor r = rg::matmul(a, wt) - y;
    const double mse = sum_over_ranks(&comm, (r * r).sum().item()) / double(rows);
    if (!gd) log.write({{"step", 1}, {"loss", mse}});  // the one solve
    double max_err = 0;
    for (int i = 0; i < kFeatures; ++i) max_err = std::max(max_err, std::abs(w[i] - 1.0));
    if (world.is_main()) {
      std::printf("%s on %lld rows over %d rank(s)\ncoefficients:",
                  gd ? "gradient descent" : "normal equations", static_cast<long long>(rows),
                  world.size());
      for (int i = 0; i < kFeatures; ++i) std::printf(" %.5f", w[i]);
      std::printf("\nintercept: %.5f\ntraining MSE: %.6f (all rows)\n", w[kFeatures], mse);
      std::printf("RESULT example=linreg_dp world=%d max_coef_err=%.6f\n", world.size(), max_err);
    }
    return 0;
  });
}
