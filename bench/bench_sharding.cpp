// bench_sharding.cpp — what each rank keeps in memory under DDP, ZeRO-1, ZeRO-2 and
// FSDP, and how fast FSDP trains next to DDP.
//
//   scripts/rgrun -n 4 build/bin/bench_sharding [--layers 6 --d-model 512]
//   scripts/rgrun -n 2 build/bin/bench_sharding --speed      (samples/s, DDP vs FSDP)
//
// A Transformer encoder (about 19M parameters by default: 6 layers, d_model 512) trains
// two AdamW steps under each strategy, on a small batch: the point is memory, not time
// (on this 2-core machine 4 ranks are oversubscribed). Per rank, after a step, with the
// activations gone: the bytes the training state holds (parameters, gradients — DDP's
// buckets — and optimizer state), and the peak of live tensor memory during a step.
// Adam in float32 under DDP: 4 (parameter) + 4 (gradient) + 8 (two moments) = 16 bytes per
// parameter on every rank; ZeRO-1 keeps 8/N of the 8, ZeRO-2 also 4/N of the gradients,
// FSDP (each encoder layer a unit) 16/N of everything, plus the layers gathered at a time.
// Prints (rank 0): RESULT bench=sharding world=N params_m=… ddp_mb=… zero1_mb=… zero2_mb=…
//                  fsdp_mb=… zero1_ratio=… zero2_ratio=… fsdp_ratio=… ddp_peak_mb=…
//                  zero1_peak_mb=… zero2_peak_mb=… fsdp_peak_mb=… fsdp_peak_ratio=…
// then, per strategy, the formulas beside the measurements (docs/learn/02-sharding.md), in
// bytes on rank 0: the training state it keeps, from the model's shapes alone (P elements in
// T tensors; P_0, T_0 the whole tensors ZeRO gives rank 0; each FSDP unit padded to N·S_u):
//   DDP 16P + 8T   ZeRO-1 8P + 8P_0 + 8T_0   ZeRO-2 4P + 12P_0 + 8T_0   FSDP Σ_u (16·S_u + 8)
// (8 bytes per AdamW step counter; in a world of one DDP's unused buckets add 4P), and
// what it sent in the second step (the communicator's wire_bytes model): DDP 2(N−1)/N·4P,
// ZeRO-1 3(N−1)/N·4P, ZeRO-2 2(N−1)/N·4P, FSDP 3(N−1)·Σ_u 4·S_u:
//   CHECK ddp_state_bytes predicted=… measured=…    (zero1_, zero2_, fsdp_ likewise)
//   CHECK ddp_sent_bytes predicted=… measured=…
// --speed: DDP and FSDP train the same model in turns (rounds of steps, interleaved so
// that both see the same machine), and the best round of each is kept:
//                  RESULT bench=sharding_speed world=N ddp_samples_s=… fsdp_samples_s=… ratio=…
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/fsdp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/parallel/zero.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace rg = ringgrad;
namespace par = rg::parallel;

namespace {

struct Measured {
  double state_mb = 0;  // live bytes after a step, activations freed
  double peak_mb = 0;   // peak live bytes during a step
  int64_t params = 0;
  int64_t state_bytes = 0;  // the same live bytes, exactly
  int64_t sent_bytes = 0;   // what this rank put on the wire in the step (wire_bytes)
};

enum class Strategy { DDP, Zero1, Zero2, FSDP };

// The encoder layer every model here is made of (8 heads, an MLP 4·d_model wide).
rg::nn::TransformerEncoderLayer encoder_layer(int64_t d_model) {
  return rg::nn::TransformerEncoderLayer(
      d_model, 8, {.dim_feedforward = 4 * d_model, .dropout = 0.0, .batch_first = true});
}

// A model, its optimizer, and one training step, under a strategy.
struct Trainer {
  rg::nn::TransformerEncoder model;
  std::unique_ptr<par::DistributedDataParallel> ddp;
  std::unique_ptr<par::FullyShardedDataParallel> fsdp;
  std::unique_ptr<rg::optim::Optimizer> plain;
  std::unique_ptr<par::ZeroRedundancyOptimizer> zero;

  Trainer(par::Communicator& comm, int64_t layers, int64_t d_model, Strategy strategy)
      : model(encoder_layer(d_model), layers) {
    auto adamw = [](std::vector<rg::Tensor> p) -> std::unique_ptr<rg::optim::Optimizer> {
      return std::make_unique<rg::optim::AdamW>(p, rg::optim::AdamOptions{.lr = 1e-4});
    };
    if (strategy == Strategy::DDP || strategy == Strategy::Zero1)
      ddp = std::make_unique<par::DistributedDataParallel>(model, comm);
    if (strategy == Strategy::DDP) plain = adamw(model.parameters());
    if (strategy == Strategy::Zero1 || strategy == Strategy::Zero2)
      zero = std::make_unique<par::ZeroRedundancyOptimizer>(
          model.parameters(), comm, adamw,
          par::ZeroOptions{.stage = strategy == Strategy::Zero1 ? 1 : 2});
    if (strategy == Strategy::FSDP) {
      fsdp = std::make_unique<par::FullyShardedDataParallel>(
          model, comm,
          par::FSDPOptions{.auto_wrap_policy =
                               par::wrap_modules_of_type<rg::nn::TransformerEncoderLayer>()});
      plain = adamw(fsdp->parameters());
    }
  }

  void step(const rg::Tensor& x) {
    plain ? plain->zero_grad() : zero->zero_grad();
    rg::Tensor y = fsdp ? (*fsdp)(x) : model(x);
    (y * y).mean().backward();
    plain ? plain->step() : zero->step();
  }
};

// From scratch: a fresh model, two steps, the memory of the second.
Measured measure(par::Communicator& comm, int64_t layers, int64_t d_model, Strategy strategy) {
  Measured m;
  rg::manual_seed(0);
  Trainer trainer(comm, layers, d_model, strategy);
  rg::Generator data(1);
  for (int s = 0; s < 2; ++s) {
    rg::Tensor x = rg::randn({2, 32, d_model}, {}, &data);
    if (s == 1) rg::reset_peak_memory(), comm.reset_wire_bytes();
    trainer.step(x);
  }
  m.sent_bytes = comm.wire_bytes();
  // The communication thread lets go of a finished operation's tensors just after the
  // caller's wait() returns; a barrier, queued behind them, makes the count exact.
  comm.barrier();
  for (const auto& [name, p] : trainer.model.named_parameters()) m.params += p.numel();
  if (trainer.fsdp) {  // the module's own parameters are released views: count the units
    m.params = 0;
    for (const auto& unit : trainer.fsdp->units()) m.params += unit.numel;
  }
  const rg::MemoryStats stats = rg::memory_stats();
  m.state_bytes = stats.live_bytes;
  m.state_mb = double(stats.live_bytes) / 1e6;
  m.peak_mb = double(stats.peak_bytes) / 1e6;
  return m;
}

// The formulas: what each strategy's rank keeps and sends, from the model's shapes alone
// (a fresh model, never trained: nothing here is measured).
struct Predicted {
  int64_t ddp = 0, zero1 = 0, zero2 = 0, fsdp = 0;                       // state bytes
  int64_t ddp_sent = 0, zero1_sent = 0, zero2_sent = 0, fsdp_sent = 0;  // bytes per step
};

Predicted predict(int64_t layers, int64_t d_model, int n, int rank) {
  rg::nn::TransformerEncoder model(encoder_layer(d_model), layers);
  std::vector<int64_t> numel;  // every parameter tensor's elements, in registration order
  for (const auto& [name, p] : model.named_parameters()) numel.push_back(p.numel());
  int64_t P = 0;
  for (int64_t e : numel) P += e;
  const int64_t T = static_cast<int64_t>(numel.size());
  Predicted out;
  // DDP: parameters, the gradient buckets (each .grad a view into one), AdamW's two moments
  // (4 + 4 + 8 bytes per element) and one float64 step counter per tensor.
  out.ddp = 16 * P + 8 * T;
  // A world of one averages nothing: the gradients stay autograd's own and the buckets,
  // allocated all the same, stay unused — 4P more (DDP, and ZeRO-1 over it).
  const int64_t idle_buckets = n == 1 ? 4 * P : 0;
  out.ddp += idle_buckets;
  // ZeRO: whole tensors, the largest first, each to the least-loaded rank (ties: the lower).
  std::vector<size_t> order(numel.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numel[a] > numel[b]; });
  std::vector<int64_t> load(static_cast<size_t>(n), 0), count(static_cast<size_t>(n), 0);
  for (size_t i : order) {
    const size_t r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[r] += numel[i], count[r] += 1;
  }
  const int64_t Pr = load[static_cast<size_t>(rank)], Tr = count[static_cast<size_t>(rank)];
  out.zero1 = 4 * P + 4 * P + 8 * Pr + 8 * Tr + idle_buckets;  // every gradient, own state
  out.zero2 = 4 * P + 4 * Pr + 8 * Pr + 8 * Tr;  // own gradients and own state
  // FSDP: each unit (an encoder layer; the rest, if any, the root) flattened and padded to
  // N·S_u, S_u = ceil(U_u / N); a rank keeps its shard, its gradient, AdamW's moments of it
  // and one step counter per unit.
  std::vector<int64_t> units;
  int64_t in_units = 0;
  for (auto& [name, m] : model.named_modules())
    if (dynamic_cast<rg::nn::TransformerEncoderLayer*>(m)) {
      units.push_back(m->num_parameters());
      in_units += units.back();
    }
  if (P > in_units) units.push_back(P - in_units);  // the root unit
  int64_t shards = 0;  // Σ_u S_u
  for (int64_t U : units) shards += (U + n - 1) / n;
  out.fsdp = 16 * shards + 8 * static_cast<int64_t>(units.size());
  // Sent per step, as the communicator counts it (communicator.h): an all-reduce 2(N−1)/N of
  // its bytes, a broadcast and a reduce (N−1)/N, an all-gather (N−1) times its shard, a
  // reduce-scatter (N−1)/N of its input (N shards).
  auto part = [&](double fraction, int64_t bytes) { return static_cast<int64_t>(fraction * double(bytes)); };
  const double f = double(n - 1) / n;
  int64_t broadcast = 0;  // one per parameter, from its owner
  for (int64_t e : numel) broadcast += part(f, 4 * e);
  // DDP's buckets, 4P bytes together (counted per bucket, each rounded down: whole bytes
  // whenever N is 1, 2 or 4, within a byte per bucket otherwise).
  const int64_t all_reduce = part(2 * f, 4 * P);
  out.ddp_sent = all_reduce;
  out.zero1_sent = all_reduce + broadcast;
  out.zero2_sent = broadcast + broadcast;  // a reduce of each gradient to its owner, same size
  for (int64_t U : units) {
    const int64_t S = (U + n - 1) / n;
    out.fsdp_sent += 2 * (n - 1) * 4 * S + part(f, 4 * S * n);  // 2 all-gathers, 1 reduce-scatter
  }
  return out;
}

// Samples per second (all ranks together) of the best of `rounds` rounds of `steps`
// steps, for DDP and FSDP in turns.
std::pair<double, double> speed(par::Communicator& comm, int64_t layers, int64_t d_model,
                                int64_t batch, int64_t seq, int rounds, int steps) {
  rg::manual_seed(0);
  Trainer ddp(comm, layers, d_model, Strategy::DDP);
  Trainer fsdp(comm, layers, d_model, Strategy::FSDP);
  rg::Generator data(1);
  rg::Tensor x = rg::randn({batch, seq, d_model}, {}, &data);
  ddp.step(x), fsdp.step(x);  // warm-up: caches, buckets, prefetch order
  double best[2] = {0, 0};
  for (int r = 0; r < rounds; ++r)
    for (int which = 0; which < 2; ++which) {
      Trainer& t = which == 0 ? ddp : fsdp;
      comm.barrier();
      auto start = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) t.step(x);
      comm.barrier();
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best[which] = std::max(best[which], double(steps * batch * comm.size()) / seconds);
    }
  return {best[0], best[1]};
}

}  // namespace

int main(int argc, char** argv) {
  par::World world(argc, argv);
  CLI::App app{"Per-rank memory of the training state: DDP, ZeRO-1, ZeRO-2, FSDP"};
  int64_t layers = 6, d_model = 512, batch = 4, seq = 64;
  int rounds = 3, steps = 3;
  bool run_speed = false;
  app.add_option("--layers", layers, "encoder layers")->check(CLI::PositiveNumber);
  app.add_option("--d-model", d_model, "model width (a multiple of 8)")->check(CLI::PositiveNumber);
  app.add_flag("--speed", run_speed, "measure samples/s of DDP and FSDP instead of memory");
  app.add_option("--batch-size", batch, "--speed: sequences per rank per step")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "--speed: tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "--speed: interleaved rounds")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "--speed: steps per round")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  return par::main_guard(world, [&] {
    par::Communicator& comm = world.communicator();
    if (run_speed) {
      auto [ddp, fsdp] = speed(comm, layers, d_model, batch, seq, rounds, steps);
      if (world.is_main())
        std::printf(
            "world %d, best of %d interleaved rounds of %d steps (batch %lld x %lld tokens per "
            "rank):\n  DDP  %8.2f samples/s\n  FSDP %8.2f samples/s  (%.2f of DDP)\n"
            "RESULT bench=sharding_speed world=%d ddp_samples_s=%.2f fsdp_samples_s=%.2f "
            "ratio=%.3f\n",
            world.size(), rounds, steps, static_cast<long long>(batch),
            static_cast<long long>(seq), ddp, fsdp, fsdp / ddp, world.size(), ddp, fsdp,
            fsdp / ddp);
      return 0;
    }
    const Measured ddp = measure(comm, layers, d_model, Strategy::DDP);
    const Measured zero1 = measure(comm, layers, d_model, Strategy::Zero1);
    const Measured zero2 = measure(comm, layers, d_model, Strategy::Zero2);
    const Measured fsdp = measure(comm, layers, d_model, Strategy::FSDP);
    const int64_t params = ddp.params;

    if (world.is_main()) {
      std::printf("world %d, %.1fM parameters (float32, AdamW), per rank:\n", world.size(),
                  double(params) / 1e6);
      std::printf("  %-8s %14s %14s\n", "", "state MB", "peak MB");
      std::printf("  %-8s %14.1f %14.1f\n", "DDP", ddp.state_mb, ddp.peak_mb);
      for (auto [name, m] : {std::pair{"ZeRO-1", zero1}, {"ZeRO-2", zero2}, {"FSDP", fsdp}})
        std::printf("  %-8s %14.1f %14.1f   (%.2f of DDP's state, %.2f of its peak)\n", name,
                    m.state_mb, m.peak_mb, m.state_mb / ddp.state_mb, m.peak_mb / ddp.peak_mb);
      std::printf(
          "RESULT bench=sharding world=%d params_m=%.1f ddp_mb=%.1f zero1_mb=%.1f zero2_mb=%.1f "
          "fsdp_mb=%.1f zero1_ratio=%.3f zero2_ratio=%.3f fsdp_ratio=%.3f ddp_peak_mb=%.1f "
          "zero1_peak_mb=%.1f zero2_peak_mb=%.1f fsdp_peak_mb=%.1f fsdp_peak_ratio=%.3f\n",
          world.size(), double(params) / 1e6, ddp.state_mb, zero1.state_mb, zero2.state_mb,
          fsdp.state_mb, zero1.state_mb / ddp.state_mb, zero2.state_mb / ddp.state_mb,
          fsdp.state_mb / ddp.state_mb, ddp.peak_mb, zero1.peak_mb, zero2.peak_mb, fsdp.peak_mb,
          fsdp.peak_mb / ddp.peak_mb);
      if (fsdp.params != params) std::printf("warning: FSDP counted %lld parameters\n", static_cast<long long>(fsdp.params));
    }
    // The formulas beside the measurements, for rank 0 (docs/learn/02-sharding.md).
    if (world.is_main()) {
      const Predicted p = predict(layers, d_model, world.size(), world.rank());
      std::printf("rank 0, bytes       state kept: formula   measured   sent in step 2: formula   measured\n");
      const struct {
        const char* name;
        const char* key;
        int64_t state, sent;
        const Measured& m;
      } rows[] = {{"DDP", "ddp", p.ddp, p.ddp_sent, ddp},
                  {"ZeRO-1", "zero1", p.zero1, p.zero1_sent, zero1},
                  {"ZeRO-2", "zero2", p.zero2, p.zero2_sent, zero2},
                  {"FSDP", "fsdp", p.fsdp, p.fsdp_sent, fsdp}};
      for (const auto& r : rows)
        std::printf("  %-8s %19lld %10lld %26lld %10lld\n", r.name, static_cast<long long>(r.state),
                    static_cast<long long>(r.m.state_bytes), static_cast<long long>(r.sent),
                    static_cast<long long>(r.m.sent_bytes));
      for (const auto& r : rows)
        std::printf("CHECK %s_state_bytes predicted=%lld measured=%lld\n", r.key,
                    static_cast<long long>(r.state), static_cast<long long>(r.m.state_bytes));
      for (const auto& r : rows)
        std::printf("CHECK %s_sent_bytes predicted=%lld measured=%lld\n", r.key,
                    static_cast<long long>(r.sent), static_cast<long long>(r.m.sent_bytes));
    }
    return 0;
  });
}
