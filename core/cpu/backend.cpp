// backend.cpp — CPU memory (a small caching allocator) and the backend singleton.
//
// Training allocates the same sizes every step, so freed blocks are kept on
// free lists by (rounded) size and handed out again. Big blocks matter most:
// malloc serves them from fresh mmap'd pages, and touching fresh pages costs a
// page fault per 4 KiB — for a 4 MiB GEMM output that is ~8% of the GEMM.
// Small ones matter for small ops, where an aligned malloc + free is a
// visible share of the op.
//
// Blocks of 2 MiB and more are 2 MiB-aligned whole huge pages, marked for the kernel's
// transparent huge pages (madvise MADV_HUGEPAGE; Linux's default THP mode "madvise" gives
// them only to memory so marked). A 4 KiB page per TLB entry covers too little of a
// training step's activations: attention reading a head's rows in a (B, T, H·D)
// projection (rows 3 KiB apart) touches a new page every row or so. bench_transformer,
// 2 threads: ~5% faster with them. A block wastes under 2 MiB to the rounding.
// RINGGRAD_HUGE_PAGES=0 turns this off (plain 4 KiB-rounded blocks).
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/threads.h"

namespace ringgrad::cpu {
namespace {

constexpr size_t kAlignment = 64;         // a cache line; enough for any SIMD width
constexpr size_t kBig = 64 * 1024;  // from here on sizes round to whole pages
constexpr size_t kPage = 4096;
constexpr size_t kHugePage = size_t(2) << 20;  // x86-64's transparent huge page
constexpr size_t kMaxCached = size_t(1) << 30;  // never hold more than 1 GiB of free blocks

// RINGGRAD_HUGE_PAGES=1|0 (default 1), read once.
bool huge_pages_wanted() {
  static const bool yes = [] {
    const char* env = std::getenv("RINGGRAD_HUGE_PAGES");
    const std::string_view v = env ? env : "1";
    RG_CHECK(v == "1" || v == "0", "RINGGRAD_HUGE_PAGES", "expected 1 or 0, got \"", v, "\"");
    return v == "1";
  }();
  return yes;
}

class CachingAllocator {
 public:
  static bool huge(size_t nbytes) { return nbytes >= kHugePage && huge_pages_wanted(); }

  static size_t rounded(size_t nbytes) {
    nbytes = std::max<size_t>(nbytes, 1);
    size_t unit = huge(nbytes) ? kHugePage : nbytes >= kBig ? kPage : kAlignment;
    return (nbytes + unit - 1) / unit * unit;
  }

  void* allocate(size_t nbytes) {
    size_t size = rounded(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        return p;
      }
    }
    const size_t alignment = huge(size) ? kHugePage : kAlignment;
    void* p = std::aligned_alloc(alignment, size);
    if (!p) {
      release_cached();
      p = std::aligned_alloc(alignment, size);
    }
    if (!p) fail("allocate", "expected to allocate ", nbytes, " bytes on cpu, got out of memory");
    // A hint: where the kernel has no THP (or says never) the block stays in 4 KiB pages.
#ifdef MADV_HUGEPAGE
    if (huge(size)) (void)madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
  }

  void deallocate(void* p, size_t nbytes) {
    size_t size = rounded(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + size <= kMaxCached) {
        free_[size].push_back(p);
        cached_ += size;
        return;
      }
    }
    std::free(p);
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

CachingAllocator& allocator() {
  static CachingAllocator* instance = new CachingAllocator;  // outlives every static Tensor
  return *instance;
}

}  // namespace

void* CpuBackend::allocate(size_t nbytes) { return allocator().allocate(nbytes); }
void CpuBackend::deallocate(void* ptr, size_t nbytes) { allocator().deallocate(ptr, nbytes); }

void CpuBackend::copy_to_host(void* host_dst, const void* src, size_t nbytes) {
  std::memcpy(host_dst, src, nbytes);
}

void CpuBackend::copy_from_host(void* dst, const void* host_src, size_t nbytes) {
  std::memcpy(dst, host_src, nbytes);
}

void release_cached_memory() { allocator().release_cached(); }

}  // namespace ringgrad::cpu

void ringgrad::check_cpu_settings() {
  get_num_threads();
  cpu_gemm_engine();
  cpu_attention_kernel(64, 64);
  cpu::huge_pages_wanted();
}

namespace ringgrad::cpu {

Backend& backend() {
  static CpuBackend instance;
  return instance;
}

}  // namespace ringgrad::cpu
