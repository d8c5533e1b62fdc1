// bench_gpt.cpp — training tokens/s of the GPT of examples/gpt/model.h, and its MFU.
//
//   build/bin/bench_gpt [--threads N] [--steps 20] [--layers 4 --d-model 128 --heads 4
//                        --seq 128 --batch-size 32]
//   scripts/rgrun -n 2 build/bin/bench_gpt --threads 1     data parallel: the same global
//                                                           batch, split over the ranks (DDP)
//   (bench/compare_gpt.sh runs it beside bench/torch_gpt.py, nanoGPT's model in PyTorch)
//
// One training step as examples/gpt.cpp takes it, without the data pipeline: forward,
// cross-entropy over the 256 byte values, backward, gradients clipped to norm 1, AdamW
// (lr 1e-3, weight decay 0.01). The tokens are random bytes from a fixed generator, a new
// batch each step (what the values are does not change the time). After --warmup steps,
// --steps are timed. Under rgrun each of the N ranks takes --batch-size / N of every
// step's sequences and DDP averages the gradients: the same training, N processes.
//
// MFU (model FLOPs utilisation): the model's training FLOPs per token
// (gpt::train_flops_per_token, examples/gpt/budget.h: nanoGPT's count) × tokens/s, over
// the rate this machine's float32 GEMM reaches with the same threads (rg::matmul, the
// fastest of three large products: examples/mfu.h), measured in this run.
//
// Memory (bench/bench_memory.sh runs the comparisons): --recompute none|selective|full
// (GPTConfig in examples/gpt/model.h) and --grad-accum N (each rank's rows of a step in N
// micro-batches, DDP's all-reduce on the last only) change what a step keeps alive.
// state_mb is what lives between steps (parameters and AdamW's state; the gradients are
// freed by zero_grad), peak_tensor_mb the most tensor memory held during the timed steps,
// and activation_mb = peak_tensor_mb − state_mb: what the step itself adds at its peak
// (the saved activations, the gradients as backward makes them, temporaries).
//
// Prints (rank 0): RESULT bench=gpt world=N threads=N tokens_per_s=… (all ranks') ms_per_step=… mfu=… model_gflops=…
//         gemm_gflops=… params=… … recompute=… grad_accum=… state_mb=… activation_mb=… peak_tensor_mb=…
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <utility>

#include "../examples/gpt/budget.h"
#include "../examples/gpt/model.h"
#include "../examples/mfu.h"  // the yardstick: this machine's GEMM rate

namespace rg = ringgrad;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  rg::parallel::World world(argc, argv);
  CLI::App app{"Training tokens/s and MFU of the GPT of examples/gpt/model.h"};
  int threads = rg::get_num_threads(), steps = 20, warmup = 3;
  gpt::GPTConfig config;
  int64_t batch = 32;
  app.add_option("--threads", threads, "CPU threads (default: RINGGRAD_NUM_THREADS or all cores)")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--layers", config.layers, "Transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--d-model", config.d_model, "model width")->check(CLI::PositiveNumber);
  app.add_option("--heads", config.heads, "attention heads (dividing --d-model)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seq", config.seq, "context length")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch, "sequences per step")->check(CLI::PositiveNumber);
  int64_t accumulation = 1;
  app.add_option("--grad-accum", accumulation, "micro-batches per step on each rank")->check(CLI::PositiveNumber);
  app.add_option("--recompute", config.recompute, "none, selective (each block's MLP) or full (each block)")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  CLI11_PARSE(app, argc, argv);
  return rg::parallel::main_guard(world, [&] {
    RG_CHECK(config.d_model % config.heads == 0, "bench_gpt", "expected --heads dividing --d-model ",
             config.d_model, ", got ", config.heads);
    RG_CHECK(batch % (world.size() * accumulation) == 0, "bench_gpt",
             "expected --batch-size divisible by the world size x --grad-accum ", world.size() * accumulation,
             ", got ", batch);
    rg::set_num_threads(threads);
    const double gemm = mfu::rank_peak_flops(world);  // one rank's: MFU is per rank, over its share
    const int64_t local = batch / world.size();

    rg::manual_seed(0);
    gpt::GPT model(config);
    std::unique_ptr<rg::parallel::DistributedDataParallel> ddp;
    if (world.size() > 1) ddp = std::make_unique<rg::parallel::DistributedDataParallel>(model, world.communicator());
    rg::optim::AdamW opt(model.parameters(), {.lr = 1e-3, .weight_decay = 0.01});
    rg::Generator data(1 + uint64_t(world.rank()));
    auto step = [&] {
      rg::Tensor tokens = rg::randint(0, config.vocab, {local, config.seq}, &data);
      rg::Tensor targets = rg::randint(0, config.vocab, {local, config.seq}, &data);
      opt.zero_grad();
      const int64_t rows = local / accumulation;
      for (int64_t k = 0; k < accumulation; ++k) {
        std::optional<rg::parallel::DistributedDataParallel::NoSync> quiet;
        if (ddp && k + 1 < accumulation) quiet.emplace(*ddp);  // all-reduce after the last only
        rg::Tensor x = tokens.narrow(0, k * rows, rows), y = targets.narrow(0, k * rows, rows);
        rg::Tensor logits = ddp ? (*ddp)(x) : model(x);  // (B/N/accumulation, T, 256)
        (rg::nn::cross_entropy(logits.reshape({-1, config.vocab}), y.reshape({-1})) *
         (1.0 / double(accumulation)))
            .backward();
      }
      rg::optim::clip_grad_norm(model.parameters(), 1.0);
      opt.step();
    };
    for (int i = 0; i < warmup; ++i) step();
    opt.zero_grad();  // the gradients freed: what lives between steps
    const int64_t state = rg::memory_stats().live_bytes;
    rg::reset_peak_memory();
    world.communicator().barrier();  // start the clock together
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double seconds = seconds_since(start);

    const double tokens_per_s = double(batch * config.seq) * steps / seconds;  // every rank's
    // MFU per rank: its share of the tokens against its own GEMM rate.
    const double flops = gpt::train_flops_per_token(config, model.num_parameters()) * tokens_per_s /
                         world.size();
    if (world.is_main())
      std::printf(
        "RESULT bench=gpt world=%d threads=%d tokens_per_s=%.0f ms_per_step=%.1f mfu=%.3f model_gflops=%.1f "
        "gemm_gflops=%.1f params=%lld layers=%lld d_model=%lld seq=%lld batch=%lld "
        "recompute=%s grad_accum=%lld state_mb=%.1f activation_mb=%.1f peak_tensor_mb=%.1f\n",
        world.size(), threads, tokens_per_s, 1e3 * seconds / steps, flops / gemm, flops / 1e9, gemm / 1e9,
        static_cast<long long>(model.num_parameters()), static_cast<long long>(config.layers),
        static_cast<long long>(config.d_model), static_cast<long long>(config.seq),
        static_cast<long long>(batch), config.recompute.c_str(), static_cast<long long>(accumulation),
        double(state) / 1e6, double(rg::memory_stats().peak_bytes - state) / 1e6,
        double(rg::memory_stats().peak_bytes) / 1e6);
    return 0;
  });
}
