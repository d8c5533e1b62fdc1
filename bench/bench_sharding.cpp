// bench_sharding.cpp — what each rank keeps in memory under DDP and under ZeRO-1.
//
//   scripts/rgrun -n 4 build/bin/bench_sharding [--layers 6 --d-model 512]
//
// A Transformer encoder (about 19M parameters by default: 6 layers, d_model 512) trains
// two AdamW steps under each strategy, on a small batch: the point is memory, not time
// (on this 2-core machine 4 ranks are oversubscribed). Per rank, after a step, with the
// activations gone: the bytes the training state holds (parameters, gradients — DDP's
// buckets — and optimizer state), and the peak of live tensor memory during a step.
// Adam in float32 under DDP: 4 (parameter) + 4 (gradient) + 8 (two moments) = 16 bytes per
// parameter on every rank; ZeRO-1 keeps 8/N of the 8, ZeRO-2 also 4/N of the gradients.
// FSDP is not built yet: its column says so.
// Prints (rank 0): RESULT bench=sharding world=N params_m=… ddp_mb=… zero1_mb=… zero2_mb=…
//                  zero1_ratio=… zero2_ratio=… ddp_peak_mb=… zero1_peak_mb=… zero2_peak_mb=…
//                  fsdp_mb=n/a
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/parallel/zero.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
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
};

// 0: DDP + AdamW; 1: DDP + ZeRO-1; 2: ZeRO-2 alone (it averages the gradients itself).
// From scratch: a fresh model, two steps, the memory of the second.
Measured measure(par::Communicator& comm, int64_t layers, int64_t d_model, int zero_stage) {
  Measured m;
  rg::manual_seed(0);
  rg::nn::TransformerEncoder model(
      rg::nn::TransformerEncoderLayer(d_model, 8,
                                      {.dim_feedforward = 4 * d_model, .dropout = 0.0,
                                       .batch_first = true}),
      layers);
  for (const rg::Tensor& p : model.parameters()) m.params += p.numel();
  std::unique_ptr<par::DistributedDataParallel> ddp;
  if (zero_stage < 2) ddp = std::make_unique<par::DistributedDataParallel>(model, comm);
  auto adamw = [](std::vector<rg::Tensor> p) -> std::unique_ptr<rg::optim::Optimizer> {
    return std::make_unique<rg::optim::AdamW>(p, rg::optim::AdamOptions{.lr = 1e-4});
  };
  std::unique_ptr<rg::optim::Optimizer> plain;
  std::unique_ptr<par::ZeroRedundancyOptimizer> zero;
  if (zero_stage == 0)
    plain = adamw(model.parameters());
  else
    zero = std::make_unique<par::ZeroRedundancyOptimizer>(model.parameters(), comm, adamw,
                                                          par::ZeroOptions{.stage = zero_stage});
  rg::Generator data(1);
  for (int s = 0; s < 2; ++s) {
    rg::Tensor x = rg::randn({2, 32, d_model}, {}, &data);
    if (s == 1) rg::reset_peak_memory();
    plain ? plain->zero_grad() : zero->zero_grad();
    rg::Tensor y = model(x);
    (y * y).mean().backward();
    plain ? plain->step() : zero->step();
  }
  const rg::MemoryStats stats = rg::memory_stats();
  m.state_mb = double(stats.live_bytes) / 1e6;
  m.peak_mb = double(stats.peak_bytes) / 1e6;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  // DDP's buckets in ordinary memory, which memory_stats counts (shared-memory
  // buckets are mapped, not allocated, and would not show). Every rank sets it alike.
  setenv("RINGGRAD_SHM_ALLREDUCE", "0", /*overwrite=*/0);
  par::World world(argc, argv);
  CLI::App app{"Per-rank memory of the training state: DDP, ZeRO-1, ZeRO-2"};
  int64_t layers = 6, d_model = 512;
  app.add_option("--layers", layers, "encoder layers")->check(CLI::PositiveNumber);
  app.add_option("--d-model", d_model, "model width (a multiple of 8)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  return par::main_guard(world, [&] {
    par::Communicator& comm = world.communicator();
    const Measured ddp = measure(comm, layers, d_model, 0);
    const Measured zero1 = measure(comm, layers, d_model, 1);
    const Measured zero2 = measure(comm, layers, d_model, 2);
    const int64_t params = ddp.params;

    if (world.is_main()) {
      std::printf("world %d, %.1fM parameters (float32, AdamW), per rank:\n", world.size(),
                  double(params) / 1e6);
      std::printf("  %-8s %14s %14s\n", "", "state MB", "peak MB");
      std::printf("  %-8s %14.1f %14.1f\n", "DDP", ddp.state_mb, ddp.peak_mb);
      std::printf("  %-8s %14.1f %14.1f   (%.2f of DDP's state)\n", "ZeRO-1", zero1.state_mb,
                  zero1.peak_mb, zero1.state_mb / ddp.state_mb);
      std::printf("  %-8s %14.1f %14.1f   (%.2f of DDP's state)\n", "ZeRO-2", zero2.state_mb,
                  zero2.peak_mb, zero2.state_mb / ddp.state_mb);
      std::printf("  FSDP: not built yet\n");
      std::printf(
          "RESULT bench=sharding world=%d params_m=%.1f ddp_mb=%.1f zero1_mb=%.1f zero2_mb=%.1f "
          "zero1_ratio=%.3f zero2_ratio=%.3f ddp_peak_mb=%.1f zero1_peak_mb=%.1f "
          "zero2_peak_mb=%.1f fsdp_mb=n/a\n",
          world.size(), double(params) / 1e6, ddp.state_mb, zero1.state_mb, zero2.state_mb,
          zero1.state_mb / ddp.state_mb, zero2.state_mb / ddp.state_mb, ddp.peak_mb,
          zero1.peak_mb, zero2.peak_mb);
    }
    return 0;
  });
}
