// storage.cpp — allocation through the device's backend, with live-byte counters.
#include "ringgrad/core/storage.h"

#include <atomic>

#include "ringgrad/core/backend.h"
#include "ringgrad/core/cpu/cpu_backend.h"

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

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = backend(device, "allocate").allocate(nbytes);
  Counters& c = counters(device);
  int64_t live = c.live.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  int64_t peak = c.peak.load();
  while (live > peak && !c.peak.compare_exchange_weak(peak, live)) {
  }
  c.allocations.fetch_add(1);
}

Storage::~Storage() {
  backend(device_, "free").deallocate(data_, nbytes_);
  counters(device_).live.fetch_sub(static_cast<int64_t>(nbytes_));
}

MemoryStats memory_stats(Device device) {
  Counters& c = counters(device);
  return {c.live.load(), c.peak.load(), c.allocations.load()};
}

void empty_cache(Device device) {
  if (device.is_cpu()) cpu::release_cached_memory();
  else cuda::release_cached_memory();
}

void reset_peak_memory(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.live.load());
}

}  // namespace ringgrad
