// bench_gemm_cuda.cpp — rg::matmul on the GPU against raw cuBLAS on the same buffers.
//
// For each shape, fp32, TF32, bf16 and fp16 (16-bit operands, float32 accumulation):
// TFLOP/s of rg::matmul (checks, dispatch, output allocation and all) next to
// cublasGemmEx on the same device buffers, and the ratio. Built only with CUDA; run by
// scripts/gpu-check.
// Ends with: RESULT bench=gemm_cuda min_ratio=… fp32_tflops=… tf32_tflops=… bf16_tflops=…
//            fp16_tflops=…
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
  double min_ratio = 1e9, fp32_big = 0, tf32_big = 0, bf16_big = 0, fp16_big = 0;
  std::printf("%-20s %5s %14s %14s %7s\n", "shape (M,K,N)", "mode", "ours TFLOP/s",
              "cuBLAS TFLOP/s", "ratio");
  struct Mode {
    const char* name;
    rg::DType dtype;
    cudaDataType_t type;
    bool tf32;
    double* big;
  };
  const Mode modes[] = {{"fp32", rg::kFloat32, CUDA_R_32F, false, &fp32_big},
                        {"tf32", rg::kFloat32, CUDA_R_32F, true, &tf32_big},
                        {"bf16", rg::kBFloat16, CUDA_R_16BF, false, &bf16_big},
                        {"fp16", rg::kFloat16, CUDA_R_16F, false, &fp16_big}};
  for (const Mode& mode : modes) {
    const bool tf32 = mode.tf32;
    rg::cuda::set_allow_tf32(tf32);
    cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    for (const Shape3& s : shapes) {
      rg::TensorOptions on_gpu{.device = rg::Device::cuda()};
      rg::Tensor a = rg::randn({s.m, s.k}, on_gpu).to(mode.dtype);
      rg::Tensor b = rg::randn({s.k, s.n}, on_gpu).to(mode.dtype);
      rg::Tensor c = rg::empty({s.m, s.n}, {.dtype = mode.dtype, .device = rg::Device::cuda()});
      float one = 1, zero = 0;
      auto raw = [&] {  // row-major C = A·B as column-major Cᵀ = Bᵀ·Aᵀ
        cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.n, s.m, s.k, &one, b.raw_data(),
                     mode.type, s.n, a.raw_data(), mode.type, s.k, &zero, c.raw_data(),
                     mode.type, s.n, compute, CUBLAS_GEMM_DEFAULT);
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
      std::printf("%-20s %5s %14.1f %14.1f %7.3f\n", name, mode.name, ours_tf, raw_tf,
                  ours_tf / raw_tf);
      if (s.m >= 2048) min_ratio = std::min(min_ratio, ours_tf / raw_tf);
      if (s.m == 4096) *mode.big = ours_tf;
    }
  }
  rg::cuda::set_allow_tf32(false);
  cublasDestroy(handle);
  std::printf(
      "RESULT bench=gemm_cuda min_ratio=%.3f fp32_tflops=%.1f tf32_tflops=%.1f bf16_tflops=%.1f "
      "fp16_tflops=%.1f\n",
      min_ratio, fp32_big, tf32_big, bf16_big, fp16_big);
  return 0;
}
