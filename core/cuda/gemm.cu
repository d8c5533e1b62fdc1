// gemm.cu — matmul through cuBLAS, transposes as flags, one strided-batched call (64-bit sizes).
//
// cuBLAS is column-major and our tensors are row-major. A row-major C (m×n) is
// the column-major matrix Cᵀ (n×m), and Cᵀ = Bᵀ·Aᵀ, so we ask cuBLAS for
// Bᵀ·Aᵀ: a row-major operand is already its own transpose in column-major
// terms (op N, leading dimension = its row stride), and a column-major operand
// (a transposed view) needs op T with its column stride. No operand is copied.
#include "ringgrad/core/cuda/cuda_backend.h"
#include "ringgrad/core/dtype_table.h"

namespace ringgrad::cuda {

void CudaBackend::gemm(const GemmArgs& g) {
  RG_ASSERT(!g.bias && !g.relu && !g.gelu_out);  // (gemm_adds_bias is false: addmm adds the bias after)
  if (g.m == 0 || g.n == 0) return;
  const bool b_row_major = g.b_col_stride == 1;
  const bool a_row_major = g.a_col_stride == 1;
  cublasOperation_t op_b = b_row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  cublasOperation_t op_a = a_row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  int64_t ld_b = b_row_major ? g.b_row_stride : g.b_col_stride;
  int64_t ld_a = a_row_major ? g.a_row_stride : g.a_col_stride;
  // cuBLAS wants ld >= rows of the stored matrix even when a dim is 1.
  ld_b = std::max<int64_t>(ld_b, b_row_major ? g.n : g.k);
  ld_a = std::max<int64_t>(ld_a, a_row_major ? g.k : g.m);
  ld_b = std::max<int64_t>(ld_b, 1);
  ld_a = std::max<int64_t>(ld_a, 1);

  // cuBLAS's type for the operands, and the precision it accumulates in.
  // bfloat16 and float16 run on the tensor cores and accumulate in float32 (each product
  // rounded once into C), as PyTorch's matmul on them does.
  static const DTypeTable<cudaDataType_t> types(
      "cuBLAS", {{kFloat32, CUDA_R_32F}, {kFloat64, CUDA_R_64F}, {kBFloat16, CUDA_R_16BF},
                 {kFloat16, CUDA_R_16F}});
  const cudaDataType_t type = types(g.dtype);
  const cublasComputeType_t compute =
      g.dtype == kFloat64                          ? CUBLAS_COMPUTE_64F
      : g.dtype == kFloat32 && tf32_allowed()      ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                   : CUBLAS_COMPUTE_32F;
  // alpha and beta in the compute type: double for float64, float for float32.
  double alpha_d = g.alpha, beta_d = g.beta;
  float alpha_f = static_cast<float>(g.alpha), beta_f = static_cast<float>(g.beta);
  const void* alpha = g.dtype == kFloat64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = g.dtype == kFloat64 ? static_cast<const void*>(&beta_d) : &beta_f;
  // k == 0 is a valid product (all zeros): cuBLAS then only scales C by beta.
  // The _64 entry point takes every size and leading dimension as int64: a
  // dimension of 2^31 or more (a 139 GB card holds such tensors) is not truncated.
  RG_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      cublas_handle(), op_b, op_a, g.n, g.m, g.k, alpha, g.b, type, ld_b, g.b_batch_stride, g.a,
      type, ld_a, g.a_batch_stride, beta, g.c, type, g.ldc(), g.c_batch_stride, g.batch, compute,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace ringgrad::cuda
