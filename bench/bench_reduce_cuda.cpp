// bench_reduce_cuda.cpp — reductions on the GPU against the memory bandwidth they need.
//
// A reduction reads its input once and writes little, so its roof is the GPU's
// read bandwidth. For each case: milliseconds per call of the ringgrad op (checks,
// output allocation and all), the bytes it must read divided by that time, and
// that rate as a fraction of a device-to-device cudaMemcpy of the same bytes
// (which reads and writes them: 2× the bytes, counted as such). Cases: a full sum
// of 10^8 floats (well under a millisecond on an H200), row and column sums, a million
// rows of 4 (short rows: many to a block), argmax over rows, cross-entropy over a
// vocabulary; then the same kinds of op on bfloat16, which the CUDA backend still stages
// through float32 copies (core/reduced_precision.cpp) — their fraction of the copy rate
// shows what that costs.
// Built only with CUDA; run by scripts/gpu-check.
// Ends with: RESULT bench=reduce_cuda sum_1e8_ms=… rows4_ms=… ce_ms=… ce_bf16_ms=…
//            min_fraction=… (of copy bandwidth, float32 cases) copy_GBps=…
#include <cuda_runtime.h>
#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace rg = ringgrad;

static double seconds_per_call(const std::function<void()>& f, int reps) {
  f();
  cudaDeviceSynchronize();  // the ops' stream and the copy's default stream
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    cudaDeviceSynchronize();  // the ops' stream and the copy's default stream
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best / reps;
}

int main() {
  if (!rg::cuda::is_available()) {
    std::printf("bench_reduce_cuda: no CUDA device\n");
    return 2;
  }
  const rg::TensorOptions gpu{.device = rg::Device::cuda()};

  // The roof: bytes per second of a device-to-device copy (read + write).
  const int64_t roof_n = 100'000'000;
  rg::Tensor src = rg::ones({roof_n}, gpu), dst = rg::empty({roof_n}, gpu);
  const double copy_s = seconds_per_call(
      [&] {
        cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDeviceToDevice,
                        nullptr);
      },
      20);
  const double roof = 2.0 * static_cast<double>(src.nbytes()) / copy_s;
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", roof / 1e9);

  struct Case {
    std::string name;
    rg::Tensor input;
    std::function<void(const rg::Tensor&)> op;
  };
  rg::Tensor labels = rg::randint(0, 32000, {8192}).to(rg::Device::cuda());
  const rg::TensorOptions bf16{.dtype = rg::kBFloat16, .device = rg::Device::cuda()};
  std::vector<Case> cases = {
      {"sum, all of 1e8", rg::randn({100'000'000}, gpu), [](auto& x) { x.sum(); }},
      {"sum dim 1, (8192, 12288)", rg::randn({8192, 12288}, gpu), [](auto& x) { x.sum(1); }},
      {"sum dim 0, (8192, 12288)", rg::randn({8192, 12288}, gpu), [](auto& x) { x.sum(0); }},
      {"argmax dim 1, (8192, 32000)", rg::randn({8192, 32000}, gpu), [](auto& x) { x.argmax(1); }},
      {"sum dim 1, (1e6, 4)", rg::randn({1'000'000, 4}, gpu), [](auto& x) { x.sum(1); }},
      {"cross_entropy, (8192, 32000)", rg::randn({8192, 32000}, gpu),
       [&](auto& x) { rg::nn::cross_entropy(x, labels); }},
      {"bf16 sum dim 1, (8192, 12288)", rg::randn({8192, 12288}, bf16), [](auto& x) { x.sum(1); }},
      {"bf16 softmax, (8192, 32000)", rg::randn({8192, 32000}, bf16),
       [](auto& x) { rg::softmax(x, -1); }},
      {"bf16 layer_norm, (8192, 4096)", rg::randn({8192, 4096}, bf16),
       [](auto& x) { rg::layer_norm(x, {4096}); }},
      {"bf16 cross_entropy, (8192, 32000)", rg::randn({8192, 32000}, bf16),
       [&](auto& x) { rg::nn::cross_entropy(x, labels); }},
  };
  std::printf("%-32s %10s %10s %10s\n", "case", "ms", "GB/s read", "of copy");
  double sum_ms = 0, rows4_ms = 0, ce_ms = 0, ce_bf16_ms = 0, min_fraction = 1e9;
  for (const Case& c : cases) {
    const double s = seconds_per_call([&] { c.op(c.input); }, 20);
    const double rate = static_cast<double>(c.input.nbytes()) / s;
    const double fraction = rate / roof;
    if (c.input.dtype() == rg::kFloat32) min_fraction = std::min(min_fraction, fraction);
    if (c.name == "sum, all of 1e8") sum_ms = s * 1e3;
    if (c.name == "sum dim 1, (1e6, 4)") rows4_ms = s * 1e3;
    if (c.name == "cross_entropy, (8192, 32000)") ce_ms = s * 1e3;
    if (c.name == "bf16 cross_entropy, (8192, 32000)") ce_bf16_ms = s * 1e3;
    std::printf("%-32s %10.3f %10.0f %9.0f%%\n", c.name.c_str(), s * 1e3, rate / 1e9,
                100 * fraction);
  }
  std::printf(
      "RESULT bench=reduce_cuda sum_1e8_ms=%.3f rows4_ms=%.3f ce_ms=%.3f ce_bf16_ms=%.3f "
      "min_fraction=%.2f copy_GBps=%.0f\n",
      sum_ms, rows4_ms, ce_ms, ce_bf16_ms, min_fraction, roof / 1e9);
  return 0;
}
