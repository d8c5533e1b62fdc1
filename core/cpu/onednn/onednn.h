// onednn.h — oneDNN's sgemm, for the CPU GEMM where the build has oneDNN.
//
// CMake compiles sgemm.cpp when it finds oneDNN (Debian: libdnnl-dev) and stub.cpp
// otherwise, so gemm.cpp asks available() instead of using #ifdef.
//
// sgemm is dnnl_sgemm's row-major contract, run on the calling thread only: ringgrad's
// thread pool decides the parallelism (core/cpu/gemm.cpp cuts a product into panels),
// so oneDNN must not start threads of its own under it.
#pragma once

#include <cstdint>
#include <string>

namespace ringgrad::cpu::onednn {

// Whether this build has oneDNN, and its version ("2.6.3"; "" without).
bool available();
std::string version();

// C = alpha·op(A)·op(B) + beta·C, all row-major: op(A) is m×k (transa 'N': A[i·lda + p];
// 'T': A[p·lda + i]), op(B) is k×n (transb 'N': B[p·ldb + j]; 'T': B[j·ldb + p]), C is m×n
// with row stride ldc. Single-threaded. Throws on an error status.
void sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace ringgrad::cpu::onednn
