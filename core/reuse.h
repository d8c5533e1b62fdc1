// reuse.h — small CPU tensors, kept when they die and handed out again (reuse.cpp).
#pragma once

#include <cstddef>

#include "ringgrad/core/tensor.h"

namespace ringgrad::detail {

// Up to this many bytes of data a new CPU tensor from rg::empty goes through the cache.
constexpr size_t kReuseMaxBytes = 64 * 1024;

// A new contiguous CPU tensor of `shape` and `dtype` (nbytes of data, at most
// kReuseMaxBytes): a dead tensor of the same size from this thread's cache where there is
// one, else a new one that will go into the cache when it dies.
Tensor small_cpu_tensor(const Shape& shape, DType dtype, size_t nbytes);

// Frees the tensors this thread's cache holds (rg::empty_cache calls it).
void release_reused_tensors();

// memory_stats' live-byte counter (storage.cpp): a storage waiting in the cache does not
// count as live; taken out again, it counts as a new allocation.
void count_storage_cached(Device device, size_t nbytes);
void count_storage_reused(Device device, size_t nbytes);

}  // namespace ringgrad::detail
