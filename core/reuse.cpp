// reuse.cpp — small CPU tensors kept when they die and handed out again.
//
// A training step makes and drops the same small tensors every step: a batch of 64 rows of
// 10 logits, their gradient, a bias's row. Each new tensor was four mallocs and four frees
// (the TensorImpl, its Storage, the shape and the strides vectors) and a trip through the
// caching allocator's lock: ~1,500 instructions, a quarter of what the 64×256×10 GEMM of
// the article's MLP spends in oneDNN (callgrind). So a tensor from rg::empty of at most
// kReuseMaxBytes carries a deleter that, when its last handle goes, keeps the TensorImpl
// with its Storage, its data and its vectors' capacity in a small per-thread cache instead
// of freeing them; the next rg::empty of the same byte size on that thread takes it back
// and only writes the new shape, strides and dtype. The shared_ptr's control block is
// kept likewise (BlockAllocator).
//
// A dead tensor is kept only when nothing else can still reach its parts: its storage is
// still the one it was made with (set_data may have replaced it), no view shares it
// (use_count 1), and its memory was not released (Storage::release_memory). No handle can
// revive it: the deleter runs once the last shared_ptr is gone, when every weak_ptr (an
// AccumulateGrad's) already reads expired. Its autograd fields are cleared on the way in.
//
// The cache is a fixed array (kSlots entries, each at most kReuseMaxBytes: 1 MiB a thread
// at most; when it is full the entry that waited longest is freed), plain data so it can
// be used at any point of a thread's or the program's exit; a thread_local with a
// destructor frees what it holds when its thread ends, and from then on that thread's
// dying tensors are freed as usual.
#include "ringgrad/core/reuse.h"

#include <cstring>
#include <memory>

namespace ringgrad::detail {
namespace {

constexpr int kSlots = 16;

struct Cache {
  struct Slot {
    size_t nbytes;
    TensorImpl* impl;
  };
  Slot slots[kSlots];
  int count = 0;
};

// The shared_ptrs' control blocks, kept the same way (BlockAllocator below serves only
// small_cpu_tensor's shared_ptr, so they are all of one size).
struct Blocks {
  void* free[kSlots];
  int count = 0;
};

thread_local Cache cache;          // trivially destructible: valid until the thread is gone
thread_local Blocks blocks;        // likewise
thread_local bool closed = false;  // this thread's cache was freed at its exit: keep nothing

// A cached tensor freed after all (its slot already given up).
void free_slot(const Cache::Slot& s) {
  count_storage_reused(s.impl->storage->device(), s.nbytes);  // ~Storage counts it gone
  delete s.impl;
}

void free_cached() {
  while (cache.count > 0) free_slot(cache.slots[--cache.count]);
  while (blocks.count > 0) ::operator delete(blocks.free[--blocks.count]);
}

// Frees the cache when its thread ends; constructed (so its destructor registered) where
// the thread first keeps a tensor or a block.
struct FreeAtExit {
  bool armed = false;
  ~FreeAtExit() {
    free_cached();
    closed = true;
  }
};
thread_local FreeAtExit free_at_exit;

// The allocator of the control blocks: a freed block waits for the next tensor.
template <typename T>
struct BlockAllocator {
  using value_type = T;
  BlockAllocator() = default;
  template <typename U>
  BlockAllocator(const BlockAllocator<U>&) {}
  T* allocate(size_t n) {
    if (n == 1 && blocks.count > 0) return static_cast<T*>(blocks.free[--blocks.count]);
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n == 1 && !closed && blocks.count < kSlots) {
      free_at_exit.armed = true;
      blocks.free[blocks.count++] = p;
    } else {
      ::operator delete(p);
    }
  }
  template <typename U>
  bool operator==(const BlockAllocator<U>&) const {
    return true;
  }
};

// The shared_ptr deleter of a tensor from small_cpu_tensor.
struct KeepOrFree {
  Storage* own;  // the storage it was made with
  void operator()(TensorImpl* impl) const noexcept {
    const std::shared_ptr<Storage>& s = impl->storage;
    if (closed || s.get() != own || s.use_count() != 1 || own->released()) {
      delete impl;
      return;
    }
    // Clearing these may free other tensors (a gradient, a hook's captures), which may
    // come back here and take slots: look at the cache only after.
    impl->requires_grad = false;
    impl->grad_fn.reset();
    impl->grad.reset();
    impl->grad_accumulator.reset();
    impl->post_accumulate_grad_hooks.clear();
    if (cache.count == kSlots) {  // full: the one that waited longest makes room
      Cache::Slot oldest = cache.slots[0];
      std::memmove(cache.slots, cache.slots + 1, (kSlots - 1) * sizeof(Cache::Slot));
      --cache.count;
      free_slot(oldest);
    }
    free_at_exit.armed = true;  // registers its destructor, on this thread's first use
    count_storage_cached(own->device(), own->nbytes());
    cache.slots[cache.count++] = {own->nbytes(), impl};
  }
};

// The cached tensor of exactly nbytes that died last, taken out of the cache; or null.
TensorImpl* take(size_t nbytes) {
  for (int i = cache.count; i-- > 0;) {
    if (cache.slots[i].nbytes != nbytes) continue;
    TensorImpl* impl = cache.slots[i].impl;
    --cache.count;  // the rest keep their order, oldest first
    std::memmove(cache.slots + i, cache.slots + i + 1, (cache.count - i) * sizeof(Cache::Slot));
    count_storage_reused(impl->storage->device(), nbytes);
    return impl;
  }
  return nullptr;
}

}  // namespace

Tensor small_cpu_tensor(const Shape& shape, DType dtype, size_t nbytes) {
  TensorImpl* impl = take(nbytes);
  if (!impl) {
    auto fresh = std::make_unique<TensorImpl>();
    fresh->storage = std::make_shared<Storage>(nbytes, Device::cpu());
    impl = fresh.release();
  }
  Storage* own = impl->storage.get();
  // On bad_alloc the deleter runs.
  std::shared_ptr<TensorImpl> handle(impl, KeepOrFree{own}, BlockAllocator<TensorImpl>{});
  impl->shape = shape;  // into the capacity it already has, mostly
  contiguous_strides(shape, impl->strides);
  impl->offset = 0;
  impl->dtype = dtype;
  return Tensor(std::move(handle));
}

void release_reused_tensors() {
  if (!closed) free_cached();
}

}  // namespace ringgrad::detail
