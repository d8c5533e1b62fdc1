// bench_gemm_cuda.cpp — rg::matmul on the GPU against raw cuBLAS on the same buffers.
//
// For each shape, fp32 and TF32: TFLOP/s of rg::matmul (checks, dispatch,
// output allocation and all) next to cublasGemmEx on the same device buffers,
// and the ratio. Built only with CUDA; run by scripts/gpu-check.
// Ends with: RESULT bench=gemm_cuda min_ratio=… fp32_tflops=… tf32_tflops=…
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

namespace rg = ringgrad;

static double seconds_per_call(const std::function<void()>& f, int reps) {
  f();
  cudaDeviceSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  cudaDeviceSynchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

int main() {
  if (!rg::cuda::is_available()) {
    std::printf("bench_gemm_cuda: no CUDA device\n");
    return 2;
  }
  struct Shape3 {
    int64_t m, k, n;
  };
  std::vector<Shape3> shapes = {{64, 784, 256}, {2048, 2048, 2048}, {4096, 4096, 4096}};
  cublasHandle_t handle;
  cublasCreate(&handle);
  double min_ratio = 1e9, fp32_big = 0, tf32_big = 0;
  std::printf("%-20s %5s %14s %14s %7s\n", "shape (M,K,N)", "mode", "ours TFLOP/s",
              "cuBLAS TFLOP/s", "ratio");
  for (bool tf32 : {false, true}) {
    rg::cuda::set_allow_tf32(tf32);
    cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    for (const Shape3& s : shapes) {
      rg::Tensor a = rg::randn({s.m, s.k}, {.device = rg::Device::cuda()});
      rg::Tensor b = rg::randn({s.k, s.n}, {.device = rg::Device::cuda()});
      rg::Tensor c = rg::empty({s.m, s.n}, {.device = rg::Device::cuda()});
      float one = 1, zero = 0;
      auto raw = [&] {  // row-major C = A·B as column-major Cᵀ = Bᵀ·Aᵀ
        cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.n, s.m, s.k, &one, b.raw_data(),
                     CUDA_R_32F, s.n, a.raw_data(), CUDA_R_32F, s.k, &zero, c.raw_data(),
                     CUDA_R_32F, s.n, compute, CUBLAS_GEMM_DEFAULT);
      };
      auto ours = [&] { rg::Tensor out = rg::matmul(a, b); };
      double flops = 2.0 * s.m * s.n * s.k;
      int reps = std::max(3, static_cast<int>(2e11 / flops));
      double t_raw = 1e30, t_ours = 1e30;
      for (int round = 0; round < 3; ++round) {
        t_raw = std::min(t_raw, seconds_per_call(raw, reps));
        t_ours = std::min(t_ours, seconds_per_call(ours, reps));
      }
      double ours_tf = flops / t_ours / 1e12, raw_tf = flops / t_raw / 1e12;
      char name[64];
      std::snprintf(name, sizeof name, "(%ld,%ld,%ld)", long(s.m), long(s.k), long(s.n));
      std::printf("%-20s %5s %14.1f %14.1f %7.3f\n", name, tf32 ? "tf32" : "fp32", ours_tf, raw_tf,
                  ours_tf / raw_tf);
      if (s.m >= 2048) min_ratio = std::min(min_ratio, ours_tf / raw_tf);
      if (s.m == 4096) (tf32 ? tf32_big : fp32_big) = ours_tf;
    }
  }
  rg::cuda::set_allow_tf32(false);
  cublasDestroy(handle);
  std::printf("RESULT bench=gemm_cuda min_ratio=%.3f fp32_tflops=%.1f tf32_tflops=%.1f\n",
              min_ratio, fp32_big, tf32_big);
  return 0;
}
