// backend.cpp — CPU memory and the backend singleton.
#include <cstdlib>
#include <cstring>
#include <new>

#include "ringgrad/core/cpu/cpu_backend.h"

namespace ringgrad::cpu {

// 64-byte alignment: a cache line, and enough for any SIMD width Eigen uses.
void* CpuBackend::allocate(size_t nbytes) {
  size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) fail("allocate", "expected to allocate ", nbytes, " bytes on cpu, got out of memory");
  return p;
}

void CpuBackend::deallocate(void* ptr, size_t) { std::free(ptr); }

void CpuBackend::copy_to_host(void* host_dst, const void* src, size_t nbytes) {
  std::memcpy(host_dst, src, nbytes);
}

void CpuBackend::copy_from_host(void* dst, const void* host_src, size_t nbytes) {
  std::memcpy(dst, host_src, nbytes);
}

Backend& backend() {
  static CpuBackend instance;
  return instance;
}

}  // namespace ringgrad::cpu
