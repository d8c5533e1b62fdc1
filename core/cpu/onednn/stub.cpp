// stub.cpp — a build without oneDNN (see onednn.h): the CPU GEMM is Eigen's.
#include "ringgrad/core/cpu/onednn/onednn.h"

#include "ringgrad/core/error.h"

namespace ringgrad::cpu::onednn {

bool available() { return false; }
std::string version() { return ""; }

void sgemm(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
           int64_t, float, float*, int64_t) {
  fail("matmul", "built without oneDNN (install libdnnl-dev and rebuild)");
}

}  // namespace ringgrad::cpu::onednn
