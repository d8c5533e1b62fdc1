// allocator.cu — CUDA memory: the device caching allocator, pinned host blocks, and
// host<->device copies (through pinned staging buffers when the host memory is pageable).
//
// Memory: a caching allocator. cudaMalloc and cudaFree synchronise the device
// and cost tens of microseconds; training frees and allocates the same sizes
// every step. Freed blocks go on a free list by rounded size and are handed
// out again. All ops run on one stream, so a block freed by one op and reused
// by the next is used in stream order: no event is needed between them.
//
// Host-to-device copies: the GPU's copy engines read only page-locked (pinned)
// host memory. A tensor in ordinary (pageable) memory is first copied into a
// pinned staging buffer, then sent with one asynchronous DMA; a CPU tensor that
// already lives in pinned memory (a DataLoader batch with pin_memory = true) is
// sent directly. Pinned blocks for CPU storages are cached like device blocks,
// but the host can touch them while the GPU still reads them: their reuse waits
// for an event (see PinnedAllocator).
#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ringgrad/core/cuda/cuda_backend.h"
#include "ringgrad/core/cuda/device_errors.cuh"
#include "ringgrad/core/cuda/pinned.h"

namespace ringgrad::cuda {
namespace {

class CachingAllocator {
 public:
  // 512-byte granules below 1 MiB, 2 MiB above: few distinct sizes, little waste.
  static size_t rounded(size_t n) {
    size_t unit = n < (size_t(1) << 20) ? 512 : (size_t(2) << 20);
    return (std::max<size_t>(n, 1) + unit - 1) / unit * unit;
  }
  void* allocate(size_t nbytes) {
    size_t size = rounded(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& list = free_[size];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {  // give the cache back and try once more
      cudaGetLastError();
      release();
      err = cudaMalloc(&p, size);
    }
    RG_CUDA_CHECK(err);
    return p;
  }
  void deallocate(void* p, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[rounded(nbytes)].push_back(p);
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    cudaStreamSynchronize(compute_stream());  // blocks may still be in use by queued kernels
    for (auto& [size, list] : free_)
      for (void* p : list) cudaFree(p);
    free_.clear();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
};

CachingAllocator& allocator() {
  static auto* instance = new CachingAllocator;  // outlives every static Tensor
  return *instance;
}

// Pinned host blocks for CPU storages. cudaMallocHost locks every page and costs
// milliseconds, and a data loader asks for the same batch size every step, so
// freed blocks are kept by size, like the device allocator's. Unlike a device
// block, a pinned block is written by the host (the loader fills the next batch
// into it) while the GPU may still be reading it for a copy queued earlier. So a
// freed block records an event on the compute stream, after every copy queued
// from it so far, and is handed out again only once that event has completed.
class PinnedAllocator {
 public:
  static size_t rounded(size_t nbytes) {
    return (std::max<size_t>(nbytes, 1) + 4095) / 4096 * 4096;
  }

  void* allocate(size_t nbytes) {
    const size_t size = rounded(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& list = free_[size];
      for (auto it = list.begin(); it != list.end(); ++it) {
        // Not ready: the GPU has not yet reached the point where the block was
        // freed. (Clear the error state, which later launch checks would see.)
        // Anything else is a real failure (a fault on the device): say so.
        cudaError_t state = cudaEventQuery(blocks_.at(address(*it)).freed);
        if (state == cudaErrorNotReady) {
          cudaGetLastError();
          continue;
        }
        RG_CUDA_CHECK(state);
        void* p = *it;
        list.erase(it);
        cached_ -= size;
        return p;
      }
    }
    // Every cached block of this size may still be read by the GPU: take a new one.
    void* p = nullptr;
    cudaEvent_t freed = nullptr;
    if (cudaMallocHost(&p, size) != cudaSuccess) {
      cudaGetLastError();  // out of page-locked memory is not sticky: clear it
      return wait_for_cached(size);
    }
    if (cudaEventCreateWithFlags(&freed, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      cudaFreeHost(p);
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_[address(p)] = {size, freed};
    return p;
  }

  void deallocate(void* p, size_t nbytes) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(address(p));
    if (it == blocks_.end()) return;  // not ours (cannot happen): leave it alone
    Block& b = it->second;
    // Copies from this block may still be queued on the compute stream; the event
    // completes after all of them, and allocate() hands the block out only then.
    bool recorded = false;
    try {
      recorded = cudaEventRecord(b.freed, compute_stream()) == cudaSuccess;
    } catch (...) {  // compute_stream() could not be made
    }
    if (recorded && cached_ + b.size > kMaxCached) {  // cache full: free it once the GPU is done
      recorded = cudaEventSynchronize(b.freed) == cudaSuccess;
      if (recorded) {
        cudaEventDestroy(b.freed);
        cudaFreeHost(p);
        blocks_.erase(it);
        return;
      }
    }
    if (!recorded) {
      // CUDA is failing or shutting down (process exit): the block can no longer
      // be proven idle, so it is neither reused nor freed.
      cudaGetLastError();
      blocks_.erase(it);
      return;
    }
    free_[b.size].push_back(p);
    cached_ += b.size;
  }

  // Whether [p, p + nbytes) lies inside one block of ours.
  bool contains(const void* p, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(address(p));
    if (it == blocks_.begin()) return false;
    --it;
    return address(p) + nbytes <= it->first + it->second.size;
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, list] : free_)
      for (void* p : list) {
        Block& b = blocks_.at(address(p));
        cudaEventSynchronize(b.freed);  // the GPU may still be copying from it
        cudaEventDestroy(b.freed);
        cudaFreeHost(p);
        blocks_.erase(address(p));
      }
    free_.clear();
    cached_ = 0;
  }

 private:
  static constexpr size_t kMaxCached = size_t(256) << 20;  // pinned memory is scarce
  struct Block {
    size_t size;        // rounded
    cudaEvent_t freed;  // recorded on the compute stream when the block was last given back
  };
  static uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

  // Out of pinned memory: wait for the oldest cached block of this size, if any.
  void* wait_for_cached(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& list = free_[size];
    if (list.empty()) return nullptr;  // the caller falls back to pageable memory
    void* p = list.front();
    list.erase(list.begin());
    cached_ -= size;
    // The GPU may still be reading it for a copy queued before it was freed.
    // (A failure here is a fault on the device, not a busy block: say so.)
    RG_CUDA_CHECK(cudaEventSynchronize(blocks_.at(address(p)).freed));
    return p;
  }

  std::mutex mutex_;
  std::map<uintptr_t, Block> blocks_;                    // every block of ours, live or cached
  std::unordered_map<size_t, std::vector<void*>> free_;  // cached blocks by size, oldest first
  size_t cached_ = 0;
};

PinnedAllocator& pinned_allocator() {
  static auto* instance = new PinnedAllocator;  // outlives every static Tensor
  return *instance;
}

// Copies from pageable memory of at least this size go through the staging
// buffers; smaller ones through a pinned ring (SmallStaging, below).
constexpr size_t kStageMin = size_t(64) << 10;
constexpr size_t kStageChunk = size_t(8) << 20;  // each buffer holds at most this much

// Two pinned staging buffers, used in turn, for host-to-device copies from
// pageable memory: the host copies a chunk into one buffer and queues its DMA,
// then goes on (the next chunk, or the caller's next op) while the GPU reads it.
// Before a buffer is overwritten, the host waits for the event recorded after
// the DMA that last read it; with two buffers, filling one overlaps the DMA of
// the other. A copy larger than a buffer goes in kStageChunk pieces.
class Staging {
 public:
  // Queues dst <- src; when it returns, the caller may free or change src.
  void copy(void* dst, const void* src, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t done = 0; done < nbytes;) {
      const size_t n = std::min(nbytes - done, kStageChunk);
      Slot& slot = slots_[next_];
      next_ ^= 1;
      char* to = static_cast<char*>(dst) + done;
      const char* from = static_cast<const char*>(src) + done;
      // The GPU may still be reading this buffer for an earlier copy (which waits
      // behind the work queued before it): wait until it has, then overwrite.
      if (slot.queued) RG_CUDA_CHECK(cudaEventSynchronize(slot.done));
      slot.queued = false;
      if (!reserve(slot, n)) {
        // No pinned memory to be had: the driver's own path, waited for as below.
        RG_CUDA_CHECK(
            cudaMemcpyAsync(to, from, nbytes - done, cudaMemcpyHostToDevice, compute_stream()));
        RG_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));  // src may change next
        return;
      }
      std::memcpy(slot.host, from, n);
      RG_CUDA_CHECK(cudaMemcpyAsync(to, slot.host, n, cudaMemcpyHostToDevice, compute_stream()));
      // Marks the end of this DMA: the next user of the buffer waits for it.
      RG_CUDA_CHECK(cudaEventRecord(slot.done, compute_stream()));
      slot.queued = true;
      done += n;
    }
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Slot& slot : slots_) {
      // A DMA may still be reading the buffer: wait for it before freeing.
      if (slot.queued) RG_CUDA_CHECK(cudaEventSynchronize(slot.done));
      slot.queued = false;
      if (slot.host) RG_CUDA_CHECK(cudaFreeHost(slot.host));
      slot.host = nullptr;
      slot.capacity = 0;
    }
  }

 private:
  struct Slot {
    void* host = nullptr;  // pinned
    size_t capacity = 0;
    cudaEvent_t done = nullptr;  // recorded after the last DMA that reads the buffer
    bool queued = false;         // that DMA may not have run yet
  };

  // Make slot hold at least n bytes (the slot is idle); false if no pinned memory is left.
  static bool reserve(Slot& slot, size_t n) {
    if (!slot.done) RG_CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
    if (slot.capacity >= n) return true;
    if (slot.host) RG_CUDA_CHECK(cudaFreeHost(slot.host));
    slot.host = nullptr;
    slot.capacity = 0;
    const size_t mib = size_t(1) << 20;
    const size_t capacity = std::min(kStageChunk, (n + mib - 1) / mib * mib);
    if (cudaMallocHost(&slot.host, capacity) != cudaSuccess) {
      cudaGetLastError();  // out of page-locked memory is not sticky: clear it
      slot.host = nullptr;
      return false;
    }
    slot.capacity = capacity;
    return true;
  }

  std::mutex mutex_;
  Slot slots_[2];
  int next_ = 0;
};

Staging& staging() {
  static auto* instance = new Staging;
  return *instance;
}

// Small copies from pageable memory (a batch's labels, a scalar): a 4 MiB pinned
// ring, carved in order. Each copy records an event after its DMA, and a region
// of the ring is written again only after the events of the copies that used it
// have completed. By the time the ring comes round (thousands of label batches
// later) they long have: the host almost never waits, and never for the whole
// stream — where the driver's own path for pageable memory had to wait each time
// (the caller may change its buffer as soon as the copy returns).
class SmallStaging {
 public:
  static constexpr size_t kCapacity = size_t(4) << 20;
  static constexpr size_t kAlign = 256;

  // Queues dst <- src (nbytes < kStageMin); false when no pinned memory is to be
  // had (the caller then takes the waited-for path).
  bool copy(void* dst, const void* src, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!ring_ && !allocate()) return false;
    retire_completed();
    const size_t n = (nbytes + kAlign - 1) / kAlign * kAlign;
    if (head_ + n > kCapacity) {
      // Wrap. The copies of the previous lap that sit past head_ are the oldest:
      // wait for them first, so that after the wrap the oldest one in flight is
      // at the start of the ring (where the overlap test below looks).
      while (!inflight_.empty() && inflight_.front().begin >= head_) {
        RG_CUDA_CHECK(cudaEventSynchronize(inflight_.front().done));
        retire_front();
      }
      head_ = 0;
    }
    // Wait for the copies still reading [head_, head_ + n): the oldest ones.
    while (!inflight_.empty() && inflight_.front().begin < head_ + n &&
           head_ < inflight_.front().end) {
      RG_CUDA_CHECK(cudaEventSynchronize(inflight_.front().done));
      retire_front();
    }
    char* slot = ring_ + head_;
    std::memcpy(slot, src, nbytes);
    RG_CUDA_CHECK(cudaMemcpyAsync(dst, slot, nbytes, cudaMemcpyHostToDevice, compute_stream()));
    cudaEvent_t done = take_event();
    RG_CUDA_CHECK(cudaEventRecord(done, compute_stream()));
    inflight_.push_back({head_, head_ + n, done});
    head_ += n;
    return true;
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!inflight_.empty()) {
      RG_CUDA_CHECK(cudaEventSynchronize(inflight_.front().done));
      retire_front();
    }
    if (ring_) RG_CUDA_CHECK(cudaFreeHost(ring_));
    ring_ = nullptr;
    head_ = 0;
  }

 private:
  struct Inflight {
    size_t begin, end;  // the region of the ring the copy reads
    cudaEvent_t done;   // recorded after its DMA
  };

  bool allocate() {
    if (cudaMallocHost(reinterpret_cast<void**>(&ring_), kCapacity) != cudaSuccess) {
      cudaGetLastError();  // out of page-locked memory is not sticky: clear it
      ring_ = nullptr;
      return false;
    }
    return true;
  }
  // Drop the copies already finished (oldest first), keeping their events for reuse.
  void retire_completed() {
    while (!inflight_.empty()) {
      cudaError_t status = cudaEventQuery(inflight_.front().done);
      if (status == cudaErrorNotReady) {
        (void)cudaGetLastError();  // "not yet" is no error: don't leave it for a later check
        break;
      }
      RG_CUDA_CHECK(status);
      retire_front();
    }
  }
  void retire_front() {
    free_events_.push_back(inflight_.front().done);
    inflight_.pop_front();
  }
  cudaEvent_t take_event() {
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e;
    RG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  std::mutex mutex_;
  char* ring_ = nullptr;
  size_t head_ = 0;
  std::deque<Inflight> inflight_;
  std::vector<cudaEvent_t> free_events_;
};

SmallStaging& small_staging() {
  static auto* instance = new SmallStaging;  // outlives every static Tensor
  return *instance;
}

}  // namespace

void release_cached_memory() {
  if (device_count() == 0) return;
  allocator().release();
  staging().release();
  small_staging().release();
}

void* allocate_pinned(size_t nbytes) {
  return device_count() > 0 ? pinned_allocator().allocate(nbytes) : nullptr;
}
void free_pinned(void* ptr, size_t nbytes) noexcept { pinned_allocator().deallocate(ptr, nbytes); }
void release_pinned_memory() {
  if (device_count() > 0) pinned_allocator().release();
}

void* CudaBackend::allocate(size_t nbytes) { return allocator().allocate(nbytes); }
void CudaBackend::deallocate(void* ptr, size_t nbytes) { allocator().deallocate(ptr, nbytes); }

// Host copies wait for the stream: the host reads (or may overwrite) the bytes next.
void CudaBackend::copy_to_host(void* host_dst, const void* src, size_t nbytes) {
  RG_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, compute_stream()));
  RG_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
  raise_device_error();  // a bad index an earlier kernel found (device_errors.cuh)
}

// Host-to-device copies are queued on the compute stream, in order with the ops
// that read dst, and return as soon as the caller may free or change host_src.
void CudaBackend::copy_from_host(void* dst, const void* host_src, size_t nbytes) {
  if (nbytes == 0) return;
  if (pinned_allocator().contains(host_src, nbytes)) {
    // A pinned CPU storage of ours: one DMA straight from it, not waited for.
    // Its block cannot be reused or freed under the DMA: free_pinned records an
    // event after it, and the block is handed out again only once that event has
    // completed. (Like torch's non_blocking copies from pinned memory, a host
    // write into the same tensor right after .to(cuda) would race the DMA; the
    // DataLoader's batches are only read.)
    RG_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, compute_stream()));
  } else if (nbytes >= kStageMin) {
    staging().copy(dst, host_src, nbytes);  // pageable: through a pinned buffer, not waited for
  } else if (!small_staging().copy(dst, host_src, nbytes)) {  // small: the pinned ring
    // No pinned memory: the driver stages it, and may return before it has read
    // all of host_src; the caller may free or change host_src next, so wait.
    RG_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, compute_stream()));
    RG_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
  }
}

}  // namespace ringgrad::cuda
