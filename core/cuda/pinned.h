// pinned.h — page-locked host memory for CPU storages (internal to ringgrad).
//
// A CPU tensor in page-locked ("pinned") memory goes to the GPU in one direct,
// asynchronous DMA; one in ordinary (pageable) memory must first be copied into
// a pinned buffer. Storage asks for pinned memory here when a caller wants it
// (the DataLoader with pin_memory = true). Declared without <cuda_runtime.h>, so
// that code compiled without CUDA can call it: core/cuda/runtime.cu implements
// it with cudaMallocHost, and core/cuda/stub.cpp gives nothing, so a build
// without CUDA (or a machine without a GPU) keeps using ordinary memory.
#pragma once

#include <cstddef>

namespace ringgrad::cuda {

// At least nbytes of pinned host memory, or nullptr when there is none to give
// (no CUDA in this build, no usable GPU, or the driver refused): the caller then
// allocates ordinary memory instead.
void* allocate_pinned(size_t nbytes);

// Hand back a block from allocate_pinned. A copy to the GPU queued from it may
// still be running: the block is handed out again, or freed, only after the GPU
// work queued up to now has finished. Never throws (called from destructors).
void free_pinned(void* ptr, size_t nbytes) noexcept;

// Free the cached pinned blocks, waiting for their copies (empty_cache on the CPU;
// the staging buffers of host-to-device copies go with empty_cache on the GPU).
void release_pinned_memory();

}  // namespace ringgrad::cuda
