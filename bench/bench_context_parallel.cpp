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
// and, per method, two formulas beside the measurements (docs/learn/05-context-parallel.md),
// with X = 4·B·H·(T/N)·D the bytes of one rank's shard of q, k, v or the output and
// L = 4·B·H·(T/N) those of its log-sum-exp:
//   bytes sent per rank per step (forward + backward; the largest over ranks)
//     ring (3N−2)·2X   allgather 4(N−1)·X   ulysses 8·(N−1)/N·X
//   bytes kept from forward to backward (the output and what backward needs; the warm-up
//   step, the largest over ranks)
//     ring zigzag 3X + L   ring contiguous X + L   allgather 2N·X + 2X + L   ulysses 5X + L
//     (allgather X more where the local kernel is not the fused one: it copies q's pieces)
//   CHECK ring_zigzag_sent_bytes predicted=… measured=…    (and _kept_bytes; each method, layout)
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

// The formulas, from the algorithms (parallel/ring_attention.cpp, context_parallel.cpp).
struct Predicted {
  int64_t sent = 0, kept = 0;
};

// Whether the CPU's local attention kernel is the fused one, forward and backward, for
// this head dim (core/threads.h): it reads q, k, v where they lie.
bool fused_kernel(int64_t head_dim) {
  return rg::cpu_attention_kernel(head_dim, head_dim, false, true) == "fused" &&
         rg::cpu_attention_kernel(head_dim, head_dim, true, true) == "fused";
}

Predicted predict(const Row& row, int n, int64_t heads, int64_t seq, int64_t head_dim) {
  const int64_t X = 4 * heads * (seq / n) * head_dim;  // one shard of q, k, v or out (B = 1)
  const int64_t L = 4 * heads * (seq / n);             // its log-sum-exp, one float per row
  // The communicator's count of one collective (communicator.h): a fraction of its bytes.
  auto part = [](double fraction, int64_t bytes) { return static_cast<int64_t>(fraction * double(bytes)); };
  const double f = double(n - 1) / n;
  Predicted p;
  switch (row.m) {
    case par::ContextParallelMethod::Ring:
      // Forward: N−1 hops of this rank's K and V block. Backward: the same N−1 hops, and
      // N hops of the dK, dV accumulator (the last one brings it home). Each send counts whole.
      p.sent = (n - 1) * 2 * X + (n - 1) * 2 * X + (n > 1 ? n : 0) * 2 * X;
      // Its own K, V (the caller's), the output and lse; zigzag copies q's two halves and
      // keeps O in two pieces beside the output.
      p.kept = row.l == par::SequenceLayout::Zigzag ? 3 * X + L : X + L;
      break;
    case par::ContextParallelMethod::AllGather:
      // Forward: K and V all-gathered (N−1 shards each). Backward: dK and dV reduce-scattered.
      p.sent = 2 * part(n - 1, X) + 2 * part(f, n * X);
      // The whole K and V (N shards each), the output's two pieces and lse, the output;
      // and q's two pieces where the local kernel cannot read them where they lie (the
      // GEMM route copies them, and keeps the copies; the fused kernel does not).
      p.kept = 2 * n * X + 2 * X + L + (fused_kernel(head_dim) ? 0 : X);
      break;
    case par::ContextParallelMethod::Ulysses:
      // Forward: q, k, v to head shards and the output back, four all-to-alls of X bytes
      // ((N−1)/N of each leaves the rank); backward: their four adjoints, the same.
      p.sent = 8 * part(f, X);
      // q, k, v and O in head layout (whole sequence, H/N heads), lse, the output.
      p.kept = 5 * X + L;
      break;
  }
  return p;
}

struct Measured {
  int64_t sent = 0, kept = 0;  // the largest over ranks
  bool same = true;            // every rank the same
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
    std::vector<std::pair<const Row*, Measured>> checked;
    for (const Row& row : rows) {
      if (row.m == par::ContextParallelMethod::Ulysses && heads % n != 0) continue;
      double best = 1e300, sent = 0, peak = 0, best_cpu = 1e300;
      int64_t kept = 0;  // bytes alive after forward that were not before it (the warm-up)
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
          const int64_t before = rg::memory_stats().live_bytes;
          rg::Tensor out = rg::nn::attention(qs, ks, vs, {.causal = true});
          if (run == 0) {
            // The communication thread lets go of a finished transfer's tensors just after
            // the caller's wait() returns; a barrier, queued behind them, makes the count
            // exact. Only in the warm-up, which is not timed.
            comm.barrier();
            kept = rg::memory_stats().live_bytes - before;
          }
          out.sum().backward();
        }
        double ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double cpu = 1e3 * (thread_cpu_seconds() - cpu_start);
        const double wire = double(comm.wire_bytes());
        rg::Tensor stats = rg::from_vector(std::vector<double>{
            ms, wire / 1e6, double(rg::memory_stats().peak_bytes) / 1e6, cpu,
            wire, -wire, double(kept), -double(kept)});  // exact in a double (below 2^53)
        comm.all_reduce(stats, par::Reduce::Max);
        std::vector<double> s = stats.tolist<double>();
        if (run > 0 && s[0] < best) best = s[0], sent = s[1], peak = s[2];
        if (run > 0) best_cpu = std::min(best_cpu, s[3]);
        if (run == 0)
          checked.push_back({&row, Measured{int64_t(s[4]), int64_t(s[6]), s[4] == -s[5] && s[6] == -s[7]}});
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
    if (world.is_main()) {
      std::printf("bytes per rank per step      sent: formula   measured     kept for backward: formula   measured\n");
      for (const auto& [row, m] : checked) {
        const Predicted p = predict(*row, n, heads, seq, head_dim);
        std::printf("  %-9s %-10s %20lld %10lld %30lld %10lld%s\n", row->method, row->layout,
                    static_cast<long long>(p.sent), static_cast<long long>(m.sent),
                    static_cast<long long>(p.kept), static_cast<long long>(m.kept),
                    m.same ? "" : "   (the ranks differ: the largest)");
      }
      for (const auto& [row, m] : checked) {
        const Predicted p = predict(*row, n, heads, seq, head_dim);
        std::printf("CHECK %s_%s_sent_bytes predicted=%lld measured=%lld\n", row->method, row->layout,
                    static_cast<long long>(p.sent), static_cast<long long>(m.sent));
        std::printf("CHECK %s_%s_kept_bytes predicted=%lld measured=%lld\n", row->method, row->layout,
                    static_cast<long long>(p.kept), static_cast<long long>(m.kept));
      }
    }
    return 0;
  });
}
