// storage.h — a block of device memory that tensors view.
//
// Many tensors (views) may share one Storage; it is freed when the last one
// goes. Every allocation is counted, so tests and benchmarks can see how many
// bytes are alive (a freed autograd graph must give its memory back).
//
// A CPU storage may be pinned (page-locked) when a GPU is present: the GPU then
// copies it in one direct DMA (what DataLoader's pin_memory asks for). Pinning is
// a request: without a usable GPU the storage gets ordinary memory, and pinned()
// says which one it got.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "ringgrad/core/device.h"

namespace ringgrad {

class Storage {
 public:
  // pin: for a CPU storage, ask for page-locked memory (ignored on other devices).
  Storage(size_t nbytes, Device device, bool pin = false);
  // Memory someone else allocated (from_blob): not counted in memory_stats;
  // `release` (may be empty) is called with data when the last view goes.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

  // Give the memory back while the views that name this storage live on, and take
  // new memory of the same size later (values are not kept): how FSDP frees a
  // sharded unit's gathered parameters between uses, as PyTorch's FSDP resizes
  // their storage to zero. Reading a view of a released storage is an error.
  // Storages this library allocated only (not from_blob, not pinned).
  void release_memory();
  void reallocate_memory();
  bool released() const { return released_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool pinned_ = false;
  bool external_ = false;
  bool released_ = false;
  std::function<void(void*)> release_;  // external memory only
};

struct MemoryStats {
  int64_t live_bytes = 0;   // bytes held by storages alive now
  int64_t peak_bytes = 0;   // most live bytes seen since start (or reset)
  int64_t allocations = 0;  // storages created since start
};

// Counters per device type (all CPU storages together, all CUDA storages together).
MemoryStats memory_stats(Device device = Device::cpu());
// Memory this library maps outside the allocator and hands out through from_blob (a
// communicator's shared-memory buckets): counted in memory_stats as ordinary storage is,
// `bytes` added when it is mapped and taken off (negative) when it goes.
void count_mapped_memory(Device device, int64_t bytes);
void reset_peak_memory(Device device = Device::cpu());
// Give the allocator's cached free blocks back to the system (like torch.cuda.empty_cache;
// on the CPU, cached pinned blocks too).
void empty_cache(Device device = Device::cpu());

}  // namespace ringgrad
