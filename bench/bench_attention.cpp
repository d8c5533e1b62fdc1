// bench_attention.cpp — how close does the CPU blockwise attention come to GEMM speed?
//
// For each case (T, d, causal) it times one forward and one backward of the local
// attention kernel, called directly: rg::attention_forward(q, k, v) and then
// rg::attention_backward(q, k, v, out, lse, dout) (no autograd), float32, q, k, v of
// shape (1, H, T, d), H chosen so small T still has enough work (H = 2^27 / T², at
// least 1, at most 64). FLOPs counted as in FlashAttention: 4·T²·d per head for the
// forward, 10·T²·d for the backward with its recomputation, 14·T²·d in all; causal
// counts half of that. The reference rate, gemm_gflops, is rg::matmul of two float32
// 1024×1024 matrices on the same thread count, measured in this same run (best of the
// rounds before and after the attention cases). efficiency = gflops / gemm_gflops.
// Every rate is the best of a few rounds (the machine is shared). --heads H sets H: at
// T = 512 the default 64 heads (32 MiB of operands) are read from memory, two stay in
// the cache — the kernel alone (docs/performance/attention.md, section 8).
//
// Then, in the same sitting, the same shapes through PyTorch: torch_attention.py
// (torch.nn.functional.scaled_dot_product_attention on CPU, forward + backward through
// autograd), run with $RINGGRAD_TORCH_PYTHON (default bench/.venv/bin/python) when it
// exists; ratio = our gflops / torch's.
//
//   build/bin/bench_attention [--quick] [--threads 1|2] [--T 4096] [--d 64] [--causal 0|1]
//                             [--heads H] [--no-torch]
// Prints per case and thread count:
//   RESULT bench=attention T=… d=… causal=… threads=… heads=… gflops=… gemm_gflops=…
//          efficiency=… torch_gflops=… ratio=…
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace rg = ringgrad;
using Clock = std::chrono::steady_clock;

struct Case {
  int64_t t, d;
  bool causal;
  int64_t fixed_heads = 0;  // --heads: this many instead of the default
  int64_t heads() const {
    return fixed_heads ? fixed_heads : std::clamp<int64_t>((int64_t(1) << 27) / (t * t), 1, 64);
  }
  double flops() const { return 14.0 * double(t) * double(t) * double(d) * heads() * (causal ? 0.5 : 1); }
};

static double seconds_of(const std::function<void()>& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds of this process (all its threads) spent in f: with one thread, the time f
// would take on a core of its own, however busy the machine is.
static double cpu_seconds_of(const std::function<void()>& f) {
  auto now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  double t0 = now();
  f();
  return now() - t0;
}

// Best seconds per call of f over `rounds` rounds (a round repeats f for >= min_round_s),
// stopping early once `budget_s` is spent. The first call is a warm-up.
static double best_time(const std::function<void()>& f, int rounds, double min_round_s,
                        double budget_s) {
  double once = seconds_of(f), spent = once, best = 1e30;
  if (once > budget_s / 2) best = once;  // a long call: the warm-up counts as a round
  for (int r = 0; r < rounds && spent < budget_s; ++r) {
    int reps = std::max(1, int(min_round_s / std::max(once, 1e-6)));
    double s = seconds_of([&] {
      for (int i = 0; i < reps; ++i) f();
    });
    spent += s;
    best = std::min(best, s / reps);
  }
  return best;
}

static double gemm_gflops(int rounds) {
  rg::Tensor a = rg::randn({1024, 1024}), b = rg::randn({1024, 1024});
  double s = best_time([&] { rg::Tensor c = rg::matmul(a, b); }, rounds, 0.3, 10.0);
  return 2.0 * 1024 * 1024 * 1024 / s / 1e9;
}

struct Rates {
  double fwd, bwd, total;  // GFLOP/s: forward (4·T²·d), backward (10·T²·d), both
  double cpu;              // both, per CPU second of the process (all threads)
};

// Forward and backward timed apart, each the best of its rounds.
static Rates attention_gflops(const Case& c, int rounds, double budget_s, int64_t block_q,
                              int64_t block_k) {
  rg::manual_seed(0);
  rg::Tensor q = rg::randn({1, c.heads(), c.t, c.d}), k = rg::randn({1, c.heads(), c.t, c.d});
  rg::Tensor v = rg::randn({1, c.heads(), c.t, c.d}), dout = rg::randn({1, c.heads(), c.t, c.d});
  rg::AttentionOptions o;
  o.causal = c.causal;
  if (block_q) o.block_q = block_q;
  if (block_k) o.block_k = block_k;
  rg::AttentionOutput r;
  double best_fwd = 1e30, best_bwd = 1e30, best_cpu = 1e30;
  auto step = [&] {
    double fwd = 0, bwd = 0;
    double cpu = cpu_seconds_of([&] {
      fwd = seconds_of([&] { r = rg::attention_forward(q, k, v, o); });
      bwd = seconds_of(
          [&] { rg::AttentionGrads g = rg::attention_backward(q, k, v, r.out, r.lse, dout, o); });
    });
    best_fwd = std::min(best_fwd, fwd), best_bwd = std::min(best_bwd, bwd);
    best_cpu = std::min(best_cpu, cpu);
  };
  best_time(step, rounds, 0.0, budget_s);
  const double f = c.flops() / 14 / 1e9;
  return {4 * f / best_fwd, 10 * f / best_bwd, 14 * f / (best_fwd + best_bwd), 14 * f / best_cpu};
}

// torch's gflops per case, from one run of torch_attention.py over all cases.
using Key = std::tuple<int64_t, int64_t, bool>;
static std::map<Key, double> torch_gflops(const std::vector<Case>& cases, int threads, int rounds,
                                          std::string& version) {
  namespace fs = std::filesystem;
  const fs::path here = fs::path(__FILE__).parent_path();
  const char* env = std::getenv("RINGGRAD_TORCH_PYTHON");
  const fs::path python = env ? fs::path(env) : here / ".venv/bin/python";
  std::map<Key, double> out;
  if (!fs::exists(python)) {
    std::printf("# no PyTorch comparison: %s not found (set RINGGRAD_TORCH_PYTHON)\n",
                python.c_str());
    return out;
  }
  std::string spec;
  for (const Case& c : cases)
    spec += (spec.empty() ? "" : ",") + std::to_string(c.t) + ":" + std::to_string(c.d) + ":" +
            std::to_string(int(c.causal)) + ":" + std::to_string(c.heads());
  std::string cmd = python.string() + " " + (here / "torch_attention.py").string() +
                    " --threads " + std::to_string(threads) + " --rounds " +
                    std::to_string(rounds) + " --cases " + spec + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char line[1024];
  while (std::fgets(line, sizeof line, p)) {
    std::fputs(line, stdout);
    long long t, d;
    int causal;
    double gf;
    char ver[128];
    if (std::sscanf(line, "RESULT bench=torch_attention T=%lld d=%lld causal=%d %*s %*s gflops=%lf torch=%127s",
                    &t, &d, &causal, &gf, ver) == 5) {
      out[{t, d, causal != 0}] = gf;
      version = ver;
    }
  }
  pclose(p);
  return out;
}

int main(int argc, char** argv) {
  CLI::App app{"CPU blockwise attention (forward + backward) against GEMM and PyTorch"};
  bool quick = false, no_torch = false;
  std::vector<int> threads_list = {1, 2};
  std::vector<int64_t> ts, ds;
  std::vector<int> causals = {0, 1};
  app.add_flag("--quick", quick, "CI-sized: a few small cases, fewer rounds");
  app.add_option("--threads", threads_list, "thread counts (rg::set_num_threads)");
  app.add_option("--T", ts, "sequence lengths (default 512 … 32768; quick: 512 2048)");
  app.add_option("--d", ds, "head dims (default 64 128; quick: 64)");
  app.add_option("--causal", causals, "0, 1 or both");
  app.add_flag("--no-torch", no_torch, "skip the PyTorch comparison");
  int64_t block_q = 0, block_k = 0, heads = 0;
  app.add_option("--heads", heads,
                 "heads H for every T (default 2^27/T^2 within [1, 64]); use with --T: few heads "
                 "at a small T stay in the cache, so against the default it shows what reading "
                 "each head from memory costs")
      ->check(CLI::Range(int64_t(1), int64_t(1024)));
  app.add_option("--block-q", block_q, "tile rows (0: AttentionOptions' default)");
  app.add_option("--block-k", block_k, "tile columns (0: AttentionOptions' default)");
  CLI11_PARSE(app, argc, argv);
  if (ts.empty()) ts = quick ? std::vector<int64_t>{512, 2048}
                             : std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384, 32768};
  if (ds.empty()) ds = quick ? std::vector<int64_t>{64} : std::vector<int64_t>{64, 128};
  const int rounds = quick ? 2 : 3;
  const double budget = quick ? 2.0 : 15.0;  // seconds per case, at most (after one call)

  std::vector<Case> cases;
  for (int64_t d : ds)
    for (int64_t t : ts)
      for (int c : causals) cases.push_back({t, d, c != 0, heads});
  const std::string h_rule = heads ? std::to_string(heads) + " (--heads)" : "clamp(2^27/T^2, 1, 64)";
  std::printf("# bench_attention: fwd+bwd = attention_forward + attention_backward, float32, "
              "q/k/v (1, H, T, d), H = %s; flops 14*T^2*d*H (causal: half)\n"
              "# gemm_gflops = rg::matmul float32 1024x1024x1024, same threads, this run "
              "(best of before and after the cases)\n",
              h_rule.c_str());
  for (int threads : threads_list) {
    rg::set_num_threads(threads);
    double gemm = gemm_gflops(rounds + 2);
    std::vector<double> ours;
    for (const Case& c : cases) {
      Rates r = attention_gflops(c, rounds, budget, block_q, block_k);
      ours.push_back(r.total);
      std::printf("#   threads=%d T=%lld d=%lld causal=%d: %.1f GFLOP/s (forward %.1f, backward "
                  "%.1f; per CPU second %.1f)\n",
                  threads, (long long)c.t, (long long)c.d, int(c.causal), r.total, r.fwd, r.bwd,
                  r.cpu);
      std::fflush(stdout);
    }
    gemm = std::max(gemm, gemm_gflops(rounds + 2));
    std::string version = "none";
    std::map<Key, double> torch;
    if (!no_torch) torch = torch_gflops(cases, threads, rounds, version);
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      auto it = torch.find({c.t, c.d, c.causal});
      double tg = it == torch.end() ? 0 : it->second;
      std::printf("RESULT bench=attention T=%lld d=%lld causal=%d threads=%d heads=%lld "
                  "gflops=%.1f gemm_gflops=%.1f efficiency=%.2f torch_gflops=%.1f ratio=%.2f "
                  "torch=%s\n",
                  (long long)c.t, (long long)c.d, int(c.causal), threads, (long long)c.heads(),
                  ours[i], gemm, ours[i] / gemm, tg, tg > 0 ? ours[i] / tg : 0.0,
                  version.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}
