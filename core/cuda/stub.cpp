// stub.cpp — the CUDA backend of a build without CUDA.
//
// Linked instead of core/cuda/*.cu when CMake found no CUDA toolkit (or
// RINGGRAD_CUDA=OFF): there are no devices, and any attempt to use one says so.
// Pinned host memory is only worth having for copies to a GPU: here there is
// none to give, and callers (DataLoader's pin_memory) keep ordinary memory.
#include "ringgrad/core/backend.h"
#include "ringgrad/core/cuda/pinned.h"

namespace ringgrad {

int cuda::device_count() { return 0; }
bool cuda::is_built() { return false; }
void cuda::synchronize() {}
void cuda::set_allow_tf32(bool) {}
void cuda::release_cached_memory() {}
void cuda::set_device(int) { fail("set_device", "built without CUDA: there is no GPU to select"); }
void* cuda::allocate_pinned(size_t) { return nullptr; }
void cuda::free_pinned(void*, size_t) noexcept {}  // never called: nothing was handed out
void cuda::release_pinned_memory() {}

Backend& cuda::backend(const char* op) {
  fail(op,
       "built without CUDA: reconfigure with -DRINGGRAD_CUDA=ON on a machine with the "
       "CUDA toolkit, or keep tensors on the CPU");
}

}  // namespace ringgrad
