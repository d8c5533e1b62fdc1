// context_parallel.cpp — the article's context-parallel example: one long sequence,
// sharded across ranks, through an unchanged nn::Transformer.
//
//   scripts/rgrun -n 2 build/bin/context_parallel [--seq 4096] [--d-model 128] [--steps 3]
//                                                 [--trace FILE.json] [--dp 1]
//                                                 [--log FILE.jsonl [--log-every 1]]
//
// As in the article (torch.nn.Transformer, input (1, T, d_model), output = model(x, x),
// loss = output.mean(), AdamW), but inside rg::parallel::context_parallel: each rank
// keeps T/N positions of the input, and every attention in the model — encoder and
// decoder self-attention and the decoder's cross-attention — runs as ring attention,
// the K/V shards travelling from rank to rank. No rank ever holds the whole sequence's
// activations, nor any T×T matrix. The parameters are replicated, so after backward
// the ranks average their gradients (what DDP does) and take the same AdamW step.
//
// --dp D composes data and context parallelism on a (dp, cp) device mesh of the
// N = D · cp ranks (parallel/device_mesh.h): the batch holds D sequences, each dp
// coordinate takes one, and its cp group shards it (the ring runs over the cp
// group); the gradients are averaged over all N ranks, as picotron does.
//
// With --check-up-to T (by default for sequences of up to 4096) every rank also runs the whole
// sequence alone, without context parallelism, and compares the output: the
// sharded run must give the same numbers.
// --trace writes a Chrome trace of the second step: on each rank's comm track the K/V
// sends and receives of the ring, next to the attention computing on the compute track.
// Each step prints the loss averaged over every rank's positions (the whole batch's loss);
// --log FILE.jsonl writes it as a JSON line every --log-every steps (examples/metrics_log.h),
// and a terminal shows a progress bar below the step lines (examples/progress_bar.h).
// Ends with: RESULT example=context_parallel world=N seq=T max_diff=… tokens_per_s=…
#include <ringgrad/parallel/context_parallel.h>
#include <ringgrad/parallel/device_mesh.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "metrics.h"
#include "metrics_log.h"
#include "parse_on_every_rank.h"
#include "progress_bar.h"

namespace rg = ringgrad;

int main(int argc, char** argv) {
  rg::parallel::World world(argc, argv);
  CLI::App app{"A Transformer over one long sequence sharded across ranks (ring attention)"};
  int64_t seq = 4096, d_model = 128, nhead = 8, layers = 1, steps = 3, check_up_to = 4096;
  int dp = 1;
  app.add_option("--seq", seq, "sequence length (divisible by the number of ranks)")
      ->check(CLI::PositiveNumber);
  app.add_option("--d-model", d_model, "model width")->check(CLI::PositiveNumber);
  app.add_option("--nhead", nhead, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--layers", layers, "encoder and decoder layers")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "training steps")->check(CLI::PositiveNumber);
  app.add_option("--dp", dp, "data-parallel replicas, each a sequence over N/dp ranks")
      ->check(CLI::PositiveNumber);
  std::string trace_path;
  app.add_option("--trace", trace_path, "write a Chrome trace of the second step to FILE.json");
  app.add_option("--check-up-to", check_up_to,
                 "compare with a single-process run when seq is at most this (0: never)");
  LogOptions log_options{.every = 1};  // --log FILE.jsonl --log-every N (metrics_log.h)
  log_options.add_options(app);
  if (auto code = parse_on_every_rank(world, app, argc, argv)) return *code;  // all ranks agree

  return rg::parallel::main_guard(world, [&] {
    // The mesh: dp replicas × cp ranks per sequence (a clear error if N is not dp · cp).
    RG_CHECK(world.size() % dp == 0, "context_parallel", "expected --dp to divide the ",
             world.size(), " ranks, got ", dp);
    rg::parallel::DeviceMesh mesh(world.communicator(), {{"dp", dp}, {"cp", world.size() / dp}});
    rg::parallel::Communicator& cp_group = mesh.group("cp");
    rg::parallel::Communicator& all = mesh.group({"dp", "cp"});
    const int cp_size = mesh.size("cp");
    rg::manual_seed(0);  // the same model and data on every rank
    rg::nn::Transformer model({.d_model = d_model, .nhead = nhead,
                               .num_encoder_layers = layers, .num_decoder_layers = layers,
                               .dim_feedforward = 2 * d_model, .dropout = 0.0,
                               .batch_first = true});
    rg::optim::AdamW opt(model.parameters(), {.lr = 1e-5});
    rg::Tensor input = rg::randn({dp, seq, d_model});  // one sequence per replica
    if (world.is_main())
      std::printf(
          "world %d = dp %d x cp %d: %d sequence(s) of (%lld, %lld), %lld positions per rank; "
          "%lld parameters; a full attention matrix would be %.0f MB per head\n",
          world.size(), dp, cp_size, dp, static_cast<long long>(seq),
          static_cast<long long>(d_model), static_cast<long long>(seq / cp_size),
          static_cast<long long>(model.num_parameters()), double(seq) * double(seq) * 4 / 1e6);

    // The single-process reference for the first step's output, before any update.
    rg::Tensor reference;
    if (check_up_to > 0 && seq <= check_up_to) {
      rg::NoGradGuard no_grad;
      reference = model.forward(input, input).narrow(0, mesh.rank("dp"), 1);  // my sequence's
    }
    rg::reset_peak_memory();  // measure the sharded run only

    double max_diff = -1, seconds = 0, last_loss = 0;
    LossMeter loss_meter;  // of the whole batch: each step's loss is averaged over every rank
    MetricsLog log(log_options.path, world.is_main());
    RateMeter rate;
    ProgressBar bar(world.is_main(), /*plain_lines=*/0);  // the step lines say how far it is
    bar.start("steps", steps, 0, double(dp * seq), "tokens");
    for (int64_t step = 0; step < steps; ++step) {
      const bool traced = !trace_path.empty() && step == std::min<int64_t>(1, steps - 1);
      if (traced) rg::trace::start(trace_path, world.rank(), world.size());
      auto start = std::chrono::steady_clock::now();
      // This replica's sequence; the guard shards it in place over the cp group.
      rg::Tensor x = input.narrow(0, mesh.rank("dp"), 1).contiguous();
      {
        auto cp = rg::parallel::context_parallel(cp_group, {&x}, /*seq_dims=*/{1});
        rg::Tensor output = model.forward(x, x);  // every attention is ring attention
        rg::Tensor loss = output.mean();          // this rank's positions
        loss.backward();
        if (step == 0 && reference.defined()) {
          rg::Tensor whole = cp.gather_sequence(output.detach(), 1);
          max_diff = (whole - reference).abs().max().item();
        }
        last_loss = loss.item();
      }
      // Equal shards: the average of all ranks' gradients (over dp and cp) is the
      // gradient of the mean over every sequence. Then every replica takes the same step.
      for (rg::Tensor& p : model.parameters()) {
        rg::Tensor g = p.grad();
        all.all_reduce(g, rg::parallel::Reduce::Avg);
      }
      opt.step();
      opt.zero_grad();
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (traced) {
        std::string where = rg::parallel::stop_trace(world, trace_path);
        bar.message("trace of step " + std::to_string(step + 1) + " written to " + where +
                    "\n  open it at https://ui.perfetto.dev");
      }
      // Equal shards: the mean of the ranks' losses is the loss of every sequence's positions.
      const double loss = sum_over_ranks(&all, last_loss) / all.size();
      loss_meter.add(loss);
      char line[160];
      std::snprintf(line, sizeof line, "step %lld/%lld  loss %.6f  %.2f s",
                    static_cast<long long>(step + 1), static_cast<long long>(steps), loss,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      bar.message(line);
      if (log_options.due(step + 1) || step + 1 == steps)
        log.write({{"step", step + 1}, {"loss", loss_meter.flush(nullptr)},  // already every rank's
                   {"tokens_per_s", std::round(rate.rate(double(dp * seq * (step + 1))))},
                   {"lr", opt.param_groups()[0].lr}});
      bar.set_loss(loss);
      bar.update(step + 1);
    }
    bar.close();
    rg::MemoryStats mem = rg::memory_stats();
    if (world.is_main()) {
      if (max_diff >= 0)
        std::printf("sharded vs single-process output: max |difference| = %.3g\n", max_diff);
      std::printf("peak tensor memory on rank 0: %.1f MB\n", double(mem.peak_bytes) / 1e6);
      std::printf(
          "RESULT example=context_parallel world=%d dp=%d seq=%lld max_diff=%.3g tokens_per_s=%.0f\n",
          world.size(), dp, static_cast<long long>(seq), max_diff,
          double(dp) * double(seq) * double(steps) / seconds);
    }
    return 0;
  });
}
