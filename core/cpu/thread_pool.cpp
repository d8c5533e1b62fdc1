// thread_pool.cpp — chunks claimed from a shared counter; the caller never waits
// for a worker that has not started.
#include "ringgrad/core/cpu/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ringgrad::cpu {
namespace {

thread_local bool inside_chunk = false;

// One call of parallel_chunks. Shared with the workers that join it, so a late
// worker can still look at it safely after the caller has returned.
struct Job {
  const std::function<void(int64_t)>* fn = nullptr;  // valid while unfinished chunks remain
  int64_t chunks = 0;
  int max_workers = 0;  // threads - 1
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<int> joined{0};
  std::mutex error_mutex;
  std::exception_ptr error;

  // Claim and run chunks until none are left.
  void work() {
    for (int64_t c; (c = next.fetch_add(1)) < chunks;) {
      try {
        inside_chunk = true;
        (*fn)(c);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
      inside_chunk = false;
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void run(int64_t chunks, int threads, const std::function<void(int64_t)>& fn) {
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->chunks = chunks;
    job->max_workers = threads - 1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(workers_.size()) < threads - 1)
        workers_.emplace_back([this] { worker_loop(); });
      job_ = job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    job->work();  // the caller takes chunks too, starting at once
    // Wait only for chunks that were claimed: each is running on some thread now.
    while (job->done.load(std::memory_order_acquire) < chunks) std::this_thread::yield();
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      // Training issues parallel work every few tens of microseconds: spin a
      // little before sleeping, so the next job finds this worker awake (a
      // futex wake-up costs about as much as a small GEMM panel).
      for (int i = 0; i < kSpinChecks && generation_.load(std::memory_order_acquire) == seen; ++i)
        std::this_thread::yield();
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_.load() != seen; });
        if (stopping_) return;
        seen = generation_.load();
        job = job_;
      }
      if (job->joined.fetch_add(1) < job->max_workers) job->work();
    }
  }

  static constexpr int kSpinChecks = 2000;  // ~50–200 µs of yielding

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::thread> workers_;
  std::shared_ptr<Job> job_;
  std::atomic<uint64_t> generation_{0};
  bool stopping_ = false;
};

Pool& pool() {
  static Pool instance;
  return instance;
}

}  // namespace

bool in_parallel_region() { return inside_chunk; }

void parallel_chunks(int64_t chunks, int threads, const std::function<void(int64_t)>& fn) {
  if (chunks <= 0) return;
  if (threads <= 1 || chunks == 1 || inside_chunk) {
    for (int64_t c = 0; c < chunks; ++c) fn(c);
    return;
  }
  pool().run(chunks, threads, fn);
}

}  // namespace ringgrad::cpu
