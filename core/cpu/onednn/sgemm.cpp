// sgemm.cpp — oneDNN's sgemm on the calling thread (see onednn.h).
//
// Debian's oneDNN is built for OpenMP: dnnl_sgemm uses omp_get_max_threads() threads.
// That setting is per thread (an OpenMP "ICV"), so setting it to 1 on the calling thread
// for the call makes this one GEMM single-threaded without touching any other thread's,
// and puts the caller's own setting back after.
#include "ringgrad/core/cpu/onednn/onednn.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include "ringgrad/core/error.h"

namespace ringgrad::cpu::onednn {

bool available() { return true; }

std::string version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

void sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int caller_threads = omp_get_max_threads();
  if (caller_threads != 1) omp_set_num_threads(1);
  const dnnl_status_t status =
      dnnl_sgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (caller_threads != 1) omp_set_num_threads(caller_threads);
  RG_CHECK(status == dnnl_success, "matmul", "oneDNN's sgemm failed with status ", int(status),
           " for ", transa, transb, " m ", m, " n ", n, " k ", k, " lda ", lda, " ldb ", ldb,
           " ldc ", ldc, " (set RINGGRAD_GEMM=eigen to use Eigen instead)");
}

}  // namespace ringgrad::cpu::onednn
