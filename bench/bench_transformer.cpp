// bench_transformer.cpp — forward+backward tokens/s of one TransformerEncoderLayer.
//
// d_model 256, nhead 4, dim_feedforward 1024, seq 128, batch 16, no dropout,
// batch_first; the same layer and shapes as bench/torch_transformer.py. Each step
// runs the layer forward, backpropagates a fixed random upstream gradient and
// clears the gradients (no optimizer: this times the layer).
//
//   build/bin/bench_transformer [--threads N] [--steps 20]   (or RINGGRAD_NUM_THREADS=N)
// Prints: RESULT bench=transformer threads=N tokens_per_s=… gflops=… peak_rss_mb=…
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include <ringgrad/ringgrad.h>

namespace rg = ringgrad;

int main(int argc, char** argv) {
  CLI::App app{"Time forward+backward of one TransformerEncoderLayer"};
  int threads = rg::get_num_threads(), steps = 20, warmup = 3;
  int64_t d_model = 256, nhead = 4, ff = 1024, seq = 128, batch = 16;
  app.add_option("--threads", threads, "CPU threads (default: RINGGRAD_NUM_THREADS or all cores)")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "sequence length")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  rg::set_num_threads(threads);
  rg::manual_seed(0);

  rg::nn::TransformerEncoderLayer layer(
      d_model, nhead, {.dim_feedforward = ff, .dropout = 0.0, .batch_first = true});
  rg::Tensor x = rg::randn({batch, seq, d_model}).requires_grad_();
  rg::Tensor upstream = rg::randn({batch, seq, d_model});

  auto step = [&] {
    layer.zero_grad();
    x.set_grad(rg::Tensor());
    rg::Tensor y = layer(x);
    y.backward(upstream);
  };
  for (int i = 0; i < warmup; ++i) step();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Multiply-adds ×2 of forward; backward is about twice the forward.
  double tokens = double(batch * seq);
  double fwd = 2 * tokens * (4.0 * d_model * d_model + 2.0 * d_model * ff) +
               2 * 2.0 * double(batch) * double(seq) * double(seq) * double(d_model);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "RESULT bench=transformer threads=%d tokens_per_s=%.0f gflops=%.1f ms_per_step=%.1f "
      "peak_rss_mb=%.0f\n",
      threads, tokens * steps / seconds, 3 * fwd * steps / seconds / 1e9, 1e3 * seconds / steps,
      double(usage.ru_maxrss) / 1024.0);
  return 0;
}
