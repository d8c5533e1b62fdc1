// bench_context_parallel.cpp — the three context-parallel methods side by side.
//
//   scripts/rgrun -n 2 build/bin/bench_context_parallel [--seq 8192 --heads 4 --head-dim 32]
//   scripts/rgrun -n 4 build/bin/bench_context_parallel --seq 8192
//
// Causal self-attention over one sequence of --seq positions (float32, batch 1),
// forward and backward, inside a context_parallel region: the ring with the zigzag
// layout, the ring with the contiguous layout (to see the load imbalance zigzag
// removes: with causal attention the last contiguous shard has N times the work of the
// first), the all-gather method, and Ulysses. Per method, the best of --repeats steps
// after a warm-up: time per step (the slowest rank's), bytes this rank sent (the
// communicator's wire_bytes model, the largest over ranks), and peak tensor memory per
// rank (the largest), and the busiest rank's compute-thread CPU time: what the step would
// take with a core per rank (with more ranks than cores, ranks lend each other cores and
// the wall clock hides the imbalance). Prints, per method (rank 0):
//   RESULT bench=context_parallel method=M layout=L world=N seq=T ms_per_step=… busiest_cpu_ms=…
//          sent_mb=… peak_mb=…
// then the zigzag speedup over the contiguous ring, by wall clock and by busiest CPU time:
//   RESULT bench=context_parallel_balance world=N seq=T zigzag_speedup=… zigzag_speedup_cpu=…
#include <ringgrad/parallel/context_parallel.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <string>
#include <vector>

namespace rg = ringgrad;
namespace par = rg::parallel;

namespace {

// CPU seconds of the calling thread: the compute this rank did, whether or not it had a
// core to itself (on an oversubscribed machine the wall clock hides the imbalance).
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Row {
  const char* method;
  const char* layout;
  par::ContextParallelMethod m;
  par::SequenceLayout l;
};

}  // namespace

int main(int argc, char** argv) {
  par::World world(argc, argv);
  CLI::App app{"Context parallelism: ring (zigzag, contiguous), all-gather, Ulysses"};
  int64_t seq = 8192, heads = 4, head_dim = 32;
  int repeats = 2;
  app.add_option("--seq", seq, "sequence length (divisible by 2 x world size)")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "attention heads (divisible by the world size for Ulysses)")
      ->check(CLI::PositiveNumber);
  app.add_option("--head-dim", head_dim, "features per head")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "measured steps per method (after a warm-up)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  return par::main_guard(world, [&] {
    par::Communicator& comm = world.communicator();
    const int n = world.size();
    rg::manual_seed(0);
    const rg::Tensor q0 = rg::randn({1, heads, seq, head_dim}), k0 = rg::randn({1, heads, seq, head_dim}),
                     v0 = rg::randn({1, heads, seq, head_dim});
    if (world.is_main())
      std::printf("world %d: causal attention, 1 x %lld heads x %lld positions x %lld features, "
                  "forward + backward, best of %d\n",
                  n, static_cast<long long>(heads), static_cast<long long>(seq),
                  static_cast<long long>(head_dim), repeats);
    std::vector<Row> rows = {
        {"ring", "zigzag", par::ContextParallelMethod::Ring, par::SequenceLayout::Zigzag},
        {"ring", "contiguous", par::ContextParallelMethod::Ring, par::SequenceLayout::Contiguous},
        {"allgather", "zigzag", par::ContextParallelMethod::AllGather, par::SequenceLayout::Zigzag},
        {"ulysses", "zigzag", par::ContextParallelMethod::Ulysses, par::SequenceLayout::Zigzag}};
    double zigzag_ms = 0, contiguous_ms = 0, zigzag_cpu = 0, contiguous_cpu = 0;
    for (const Row& row : rows) {
      if (row.m == par::ContextParallelMethod::Ulysses && heads % n != 0) continue;
      double best = 1e300, sent = 0, peak = 0, best_cpu = 1e300;
      for (int run = 0; run <= repeats; ++run) {
        rg::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(),
                   v = v0.clone().requires_grad_();
        rg::Tensor qs = q.detach(), ks = k.detach(), vs = v.detach();
        comm.barrier();
        comm.reset_wire_bytes();
        rg::reset_peak_memory();
        const auto start = std::chrono::steady_clock::now();
        const double cpu_start = thread_cpu_seconds();
        {
          auto cp = par::context_parallel(comm, {&qs, &ks, &vs}, /*seq_dims=*/{2},
                                          {.causal = true, .method = row.m, .layout = row.l});
          qs.requires_grad_(), ks.requires_grad_(), vs.requires_grad_();
          rg::Tensor out = rg::nn::attention(qs, ks, vs, {.causal = true});
          out.sum().backward();
        }
        double ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double cpu = 1e3 * (thread_cpu_seconds() - cpu_start);
        rg::Tensor stats = rg::from_vector(std::vector<double>{
            ms, double(comm.wire_bytes()) / 1e6, double(rg::memory_stats().peak_bytes) / 1e6, cpu});
        comm.all_reduce(stats, par::Reduce::Max);
        std::vector<double> s = stats.tolist<double>();
        if (run > 0 && s[0] < best) best = s[0], sent = s[1], peak = s[2];
        if (run > 0) best_cpu = std::min(best_cpu, s[3]);
      }
      if (row.m == par::ContextParallelMethod::Ring) {
        (row.l == par::SequenceLayout::Zigzag ? zigzag_ms : contiguous_ms) = best;
        (row.l == par::SequenceLayout::Zigzag ? zigzag_cpu : contiguous_cpu) = best_cpu;
      }
      if (world.is_main())
        std::printf("RESULT bench=context_parallel method=%s layout=%s world=%d seq=%lld "
                    "ms_per_step=%.1f busiest_cpu_ms=%.1f sent_mb=%.2f peak_mb=%.1f\n",
                    row.method, row.layout, n, static_cast<long long>(seq), best, best_cpu, sent, peak);
    }
    if (world.is_main())
      std::printf("RESULT bench=context_parallel_balance world=%d seq=%lld zigzag_speedup=%.2f "
                  "zigzag_speedup_cpu=%.2f\n",
                  n, static_cast<long long>(seq), contiguous_ms / zigzag_ms, contiguous_cpu / zigzag_cpu);
    return 0;
  });
}
