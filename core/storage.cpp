// storage.cpp — allocation through the device's backend, with live-byte counters.
//
// Pinned CPU storages come from the CUDA backend's pinned allocator
// (core/cuda/pinned.h), which gives nothing without a usable GPU: such a
// storage then falls back to the CPU allocator, and pinned() is false.
#include "ringgrad/core/storage.h"

#include <atomic>

#include "ringgrad/core/backend.h"
#include "ringgrad/core/error.h"
#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/cuda/pinned.h"
#include "ringgrad/core/reuse.h"

namespace ringgrad {
namespace {

struct Counters {
  std::atomic<int64_t> live{0}, peak{0}, allocations{0};
};

Counters& counters(Device d) {
  static Counters cpu_counters, cuda_counters;
  return d.is_cpu() ? cpu_counters : cuda_counters;
}

}  // namespace

namespace {

void count_live(Device device, size_t nbytes) {
  Counters& c = counters(device);
  int64_t live = c.live.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  int64_t peak = c.peak.load();
  while (live > peak && !c.peak.compare_exchange_weak(peak, live)) {
  }
}

void count_allocation(Device device, size_t nbytes) {
  count_live(device, nbytes);
  counters(device).allocations.fetch_add(1);
}

}  // namespace

namespace detail {
void count_storage_cached(Device device, size_t nbytes) {
  counters(device).live.fetch_sub(static_cast<int64_t>(nbytes));
}
void count_storage_reused(Device device, size_t nbytes) { count_live(device, nbytes); }
}  // namespace detail

Storage::Storage(size_t nbytes, Device device, bool pin) : nbytes_(nbytes), device_(device) {
  if (pin && device.is_cpu()) data_ = cuda::allocate_pinned(nbytes);
  pinned_ = data_ != nullptr;
  if (!pinned_) data_ = backend(device, "allocate").allocate(nbytes);
  count_allocation(device, nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release)
    : data_(data), nbytes_(nbytes), device_(device), external_(true), release_(std::move(release)) {}

void Storage::release_memory() {
  RG_CHECK(!external_ && !pinned_, "release_memory",
           "expected a storage this library allocated, got ",
           external_ ? "external memory (from_blob)" : "pinned memory");
  if (released_) return;
  backend(device_, "free").deallocate(data_, nbytes_);
  counters(device_).live.fetch_sub(static_cast<int64_t>(nbytes_));
  data_ = nullptr;
  released_ = true;
}

void Storage::reallocate_memory() {
  if (!released_) return;
  data_ = backend(device_, "allocate").allocate(nbytes_);
  count_allocation(device_, nbytes_);
  released_ = false;
}

Storage::~Storage() {
  if (external_) {
    if (release_) release_(data_);
    return;
  }
  if (released_) return;
  if (pinned_)
    cuda::free_pinned(data_, nbytes_);
  else
    backend(device_, "free").deallocate(data_, nbytes_);
  counters(device_).live.fetch_sub(static_cast<int64_t>(nbytes_));
}

void count_mapped_memory(Device device, int64_t bytes) {
  if (bytes >= 0)
    count_live(device, static_cast<size_t>(bytes));
  else
    counters(device).live.fetch_add(bytes);
}

MemoryStats memory_stats(Device device) {
  Counters& c = counters(device);
  return {c.live.load(), c.peak.load(), c.allocations.load()};
}

void empty_cache(Device device) {
  if (device.is_cpu()) {
    detail::release_reused_tensors();  // this thread's dead small tensors, back to the allocator
    cpu::release_cached_memory();
    cuda::release_pinned_memory();
  } else {
    cuda::release_cached_memory();
  }
}

void reset_peak_memory(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.live.load());
}

}  // namespace ringgrad
