// mfu.h — model FLOPs utilisation: one yardstick for the examples and the benchmarks.
//
//   const double peak = mfu::peak_flops();               // FLOP/s of this machine, measured
//   std::printf("… model_gflops=%.2f mfu=%.3f", flops_per_s / 1e9, flops_per_s / peak);
//
// MFU is the model's useful FLOPs per second over what the machine could do. The model's
// FLOPs are counted as PaLM and nanoGPT count them: 6 per parameter per token or sample
// (2 in forward, a multiply-add; 4 in backward, the input's and the weight's gradients),
// plus a Transformer's attention (gpt::train_flops_per_token in examples/gpt/budget.h).
// Work that is not the model's — recomputation's second forward, padding — is not counted.
//
// The yardstick, on the CPU: this machine's float32 GEMM rate on the threads in use,
// measured in the run (rg::matmul, the fastest of three large products, each the best of
// three), because a CPU publishes no figure its kernels could reach. (The same measurement
// runs on a GPU where the tensors are; a datasheet's peak would read lower MFU: a GPU's
// dense peak is what its tensor cores reach only on the largest GEMMs.)
#pragma once

#include <ringgrad/ringgrad.h>
#include <ringgrad/parallel/world.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

namespace mfu {

// The fastest float32 GEMM (FLOP/s) this process runs on `device` with its current threads:
// 1024 x 1024 x 1024, and twice as long in m or in n. Three shapes, not one: on some CPUs
// one shape meets a slow path of the GEMM library (oneDNN 2.6 at 1024³ on two threads of
// an AMD EPYC: 70 GFLOP/s where 2048 x 1024 x 1024 runs at 170).
inline double peak_flops(ringgrad::Device device = ringgrad::kCPU) {
  namespace rg = ringgrad;
  double best = 0;
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1024, 1024}, {2048, 1024}, {1024, 2048}}) {
    const int64_t k = 1024;
    rg::Tensor a = rg::randn({m, k}).to(device), b = rg::randn({k, n}).to(device);
    rg::Tensor c = rg::matmul(a, b);  // warm-up: the GEMM engine, the thread pool
    rg::cuda::synchronize();
    for (int i = 0; i < 3; ++i) {
      const auto start = std::chrono::steady_clock::now();
      c = rg::matmul(a, b);
      rg::cuda::synchronize();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, 2.0 * double(m * n * k) / s);
    }
  }
  return best;
}

// One rank's yardstick in a world of processes that share the machine: rank 0 measures while
// the others wait (so that they do not slow it down), and every rank gets its figure.
inline double rank_peak_flops(ringgrad::parallel::World& world, ringgrad::Device device = ringgrad::kCPU) {
  namespace rg = ringgrad;
  world.communicator().barrier();
  rg::Tensor peak = rg::full({1}, world.is_main() ? peak_flops(device) : 0.0, {.dtype = rg::kFloat64});
  world.communicator().broadcast(peak, 0);
  return peak.item();
}

}  // namespace mfu
