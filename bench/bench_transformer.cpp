// bench_transformer.cpp — forward+backward tokens/s of one TransformerEncoderLayer.
//
// d_model 256, nhead 4, dim_feedforward 1024, seq 128, batch 16, no dropout,
// batch_first; the same layer and shapes as bench/torch_transformer.py. Each step
// runs the layer forward, backpropagates a fixed random upstream gradient and
// clears the gradients (no optimizer: this times the layer).
//
// --precision bf16|fp16: the layer and its input in that dtype, so every activation is
// 16-bit (an optimizer would keep float32 master weights: optim/optimizer.h);
// --autocast bf16|fp16: the layer stays float32 and runs under rg::autocast (PyTorch's AMP).
// peak_tensor_mb is the most tensor memory alive at once during the timed steps
// (memory_stats: activations, gradients, parameters, scratch), whatever the precision.
//
//   build/bin/bench_transformer [--threads N] [--steps 20] [--precision fp32|bf16|fp16]
//                               [--autocast off|bf16|fp16]   (or RINGGRAD_NUM_THREADS=N)
//                               [--trace FILE.json]   (the timed steps: modules, backward nodes)
// Prints: RESULT bench=transformer threads=N precision=… autocast=… tokens_per_s=… gflops=…
//         ms_per_step=… peak_rss_mb=… peak_tensor_mb=…
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

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
  const std::map<std::string, rg::DType> dtypes{
      {"fp32", rg::kFloat32}, {"bf16", rg::kBFloat16}, {"fp16", rg::kFloat16}};
  std::string precision = "fp32", autocast = "off";
  app.add_option("--precision", precision, "dtype of the layer and its activations")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--autocast", autocast, "run the float32 layer under rg::autocast")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  std::string trace_path;
  app.add_option("--trace", trace_path, "write a Chrome trace of the timed steps to FILE.json");
  CLI11_PARSE(app, argc, argv);
  const rg::DType dtype = dtypes.at(precision);
  rg::set_num_threads(threads);
  rg::manual_seed(0);

  rg::nn::TransformerEncoderLayer layer(
      d_model, nhead, {.dim_feedforward = ff, .dropout = 0.0, .batch_first = true});
  layer.to(dtype);
  rg::Tensor x = rg::randn({batch, seq, d_model}).to(dtype).requires_grad_();
  rg::Tensor upstream = rg::randn({batch, seq, d_model}).to(dtype);

  auto step = [&] {
    layer.zero_grad();
    x.set_grad(rg::Tensor());
    rg::Tensor y;
    if (autocast == "off") {
      y = layer(x);
    } else {
      rg::autocast guard(rg::kCPU, dtypes.at(autocast));
      y = layer(x);
    }
    y.backward(upstream.to(y.dtype()));
  };
  for (int i = 0; i < warmup; ++i) step();
  rg::reset_peak_memory();
  if (!trace_path.empty()) rg::trace::start(trace_path);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!trace_path.empty()) std::printf("trace: %s\n", rg::trace::stop().c_str());

  // Multiply-adds ×2 of forward; backward is about twice the forward.
  double tokens = double(batch * seq);
  double fwd = 2 * tokens * (4.0 * d_model * d_model + 2.0 * d_model * ff) +
               2 * 2.0 * double(batch) * double(seq) * double(seq) * double(d_model);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "RESULT bench=transformer threads=%d precision=%s autocast=%s tokens_per_s=%.0f "
      "gflops=%.1f ms_per_step=%.1f peak_rss_mb=%.0f peak_tensor_mb=%.1f\n",
      threads, precision.c_str(), autocast.c_str(), tokens * steps / seconds,
      3 * fwd * steps / seconds / 1e9, 1e3 * seconds / steps, double(usage.ru_maxrss) / 1024.0,
      double(rg::memory_stats().peak_bytes) / (1024.0 * 1024.0));
  return 0;
}
