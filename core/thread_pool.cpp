// thread_pool.cpp — chunks claimed from a shared counter; the caller never waits
// for a worker that has not started.
//
// A job is one cache line (JobLine): the ticket, the chunk body and the chunk count. A
// waiting worker polls that line, so when the caller publishes a job the worker gets
// everything it needs to start in one transfer between cores (~150 ns one way on the
// 2-vCPU development VMs), not one per object of a chain (a job pointer, the job, a
// std::function, the lambda it holds). Nothing is allocated per call.
//
// The ticket is (generation << 32) | next chunk. To publish a job the caller closes the
// last one (its ticket's chunk set past any count), writes the new job's fields, then a
// ticket with the next generation and chunk 1 (chunk 0 is the caller's own). Everyone
// else claims a chunk by a compare-exchange of the ticket from (generation, c) to
// (generation, c + 1), after reading the fields under that same ticket: a worker whose
// read raced with the next job's fields finds the ticket changed and fails, so no chunk
// runs twice or under another job's body. The caller returns only when every claimed
// chunk is done, so no worker still runs a chunk of a job when the next is published.
// Measured (2 vCPUs, the first chunk of a worker to start): ~580 ns with a job allocated
// per call and reached through pointers, ~440 ns so; a 64×256×10 GEMM split over two
// threads 3.5 → 2.9 µs.
#include "ringgrad/core/thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ringgrad::cpu {
namespace {

thread_local bool inside_chunk = false;

// Poll ready() until it is true (returns true) or `budget` has passed (returns false).
template <typename F>
bool spin_until(F&& ready, std::chrono::microseconds budget) {
  if (ready()) return true;
  const auto until = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      cpu_relax();
      if (ready()) return true;
    }
    if (std::chrono::steady_clock::now() >= until) return false;
  }
}

constexpr uint64_t kChunkBits = 32;
constexpr uint64_t kChunkMask = (uint64_t(1) << kChunkBits) - 1;
// The most chunks one job holds.
constexpr int64_t kMaxChunks = int64_t(1) << 30;

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_.store(true);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  int sleepers() const { return sleepers_.load(); }
  int workers() const { return worker_count_.load(); }

  // Run the job on the pool; false (nothing run) when another thread's job holds it.
  bool run(int64_t chunks, int threads, const ChunkFn& fn) {
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
    if (static_cast<int>(workers_.size()) < threads - 1) {
      try {
        std::lock_guard<std::mutex> lock(mutex_);
        while (static_cast<int>(workers_.size()) < threads - 1) {
          const int index = static_cast<int>(workers_.size());
          workers_.emplace_back([this, index] { worker_loop(index); });
          worker_count_.store(static_cast<int>(workers_.size()));
        }
      } catch (...) {  // no thread could be started: the pool stays usable
        busy_.store(false, std::memory_order_release);
        throw;
      }
    }
    // Close the last job first (its generation, no chunk left to claim), so that a worker
    // still trying to claim from it, which may read the fields below as they are being
    // written, fails its compare-exchange: without this, a late claim with the last job's
    // ticket and this job's larger chunk count would run a chunk twice.
    const uint64_t last = job_.ticket.load(std::memory_order_relaxed) >> kChunkBits;
    job_.ticket.store(last << kChunkBits | kChunkMask, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    const uint64_t generation = (last + 1) & kChunkMask;
    job_.fn_object.store(fn.object(), std::memory_order_relaxed);
    job_.fn_call.store(fn.call(), std::memory_order_relaxed);
    job_.chunks.store(chunks, std::memory_order_relaxed);
    job_.workers.store(threads - 1, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);  // (error_ is null: the last job took it)
    // Publish (seq_cst: see worker_loop for why a sleeping worker cannot miss it), with
    // chunk 0 already the caller's: no compare-exchange of the caller's contends with the
    // workers' first.
    job_.ticket.store(generation << kChunkBits | 1);
    if (sleepers_.load() > 0) {
      { std::lock_guard<std::mutex> lock(mutex_); }
      wake_.notify_all();
    }
    run_chunk(0, fn);
    work(generation);  // the caller takes chunks too
    // Every chunk is claimed now; wait for those that other threads are running.
    auto all_done = [&] { return done_.load(std::memory_order_acquire) >= chunks; };
    if (!spin_until(all_done, kWaitSpin))
      while (!all_done()) std::this_thread::yield();
    std::exception_ptr error = std::exchange(error_, nullptr);
    busy_.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);
    return true;
  }

 private:
  // Everything a worker reads to join a job, on one cache line. The fields other than
  // the ticket are written before the ticket that publishes them, and read after it;
  // a reader checks by its compare-exchange that the ticket still has the generation it
  // read them under.
  struct alignas(64) JobLine {
    std::atomic<uint64_t> ticket{0};  // generation << 32 | next chunk
    std::atomic<void*> fn_object{nullptr};  // the chunk body, a ChunkFn's two words
    std::atomic<ChunkFn::Call> fn_call{nullptr};
    std::atomic<int64_t> chunks{0};
    std::atomic<int> workers{0};  // workers 0 .. workers-1 may join
  };

  // Claim and run chunks of `generation` until none is left (or the generation ended).
  void work(uint64_t generation) {
    for (;;) {
      uint64_t ticket = job_.ticket.load(std::memory_order_acquire);
      void* object;
      ChunkFn::Call call;
      do {
        if ((ticket >> kChunkBits) != generation) return;
        object = job_.fn_object.load(std::memory_order_relaxed);
        call = job_.fn_call.load(std::memory_order_relaxed);
        const int64_t chunks = job_.chunks.load(std::memory_order_relaxed);
        if (static_cast<int64_t>(ticket & kChunkMask) >= chunks) return;
        // The fields above are read before the compare-exchange checks the generation.
        std::atomic_thread_fence(std::memory_order_acquire);
      } while (!job_.ticket.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acq_rel,
                                                  std::memory_order_acquire));
      run_chunk(static_cast<int64_t>(ticket & kChunkMask), ChunkFn(object, call));
    }
  }

  // Run chunk c; an exception is kept for the caller (the first one).
  void run_chunk(int64_t c, const ChunkFn& fn) {
    try {
      inside_chunk = true;
      fn(c);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    inside_chunk = false;
    done_.fetch_add(1, std::memory_order_release);
  }

  void worker_loop(int index) {
    uint64_t seen = 0;  // the last generation this worker looked at
    bool wanted = true;  // whether the last job took this worker (its index < workers)
    auto fresh = [&] { return (job_.ticket.load() >> kChunkBits) != seen || stopping_.load(); };
    for (;;) {
      // Training issues parallel work every few tens of microseconds: poll for the next
      // job a little, then check it between yields of the core (another process may run),
      // and only then sleep — a futex wake-up costs about as much as a small GEMM panel.
      // A worker the last job did not take (a call with fewer threads) sleeps at once,
      // leaving the cores to those that work.
      bool awake = wanted && spin_until(fresh, kPollSpin);
      for (int i = 0; wanted && !awake && i < kYieldChecks; ++i) {
        std::this_thread::yield();
        awake = fresh();
      }
      if (!awake) {
        // Counted as a sleeper before the last look at the ticket (both seq_cst), so a
        // caller that publishes after that look sees the count and wakes this worker.
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, fresh);
        sleepers_.fetch_sub(1);
      }
      if (stopping_.load()) return;
      seen = job_.ticket.load() >> kChunkBits;
      wanted = index < job_.workers.load(std::memory_order_relaxed);
      if (wanted) work(seen);
    }
  }

  // A waiting worker polls for kPollSpin (it sees a new job within ~100 ns), then checks
  // between kYieldChecks yields of its core (~50–200 µs), then sleeps. The caller polls
  // for the last chunks for kWaitSpin, then yields its core between checks.
  static constexpr std::chrono::microseconds kPollSpin{20}, kWaitSpin{20};
  static constexpr int kYieldChecks = 2000;

  JobLine job_;
  alignas(64) std::atomic<int64_t> done_{0};  // chunks of the current job finished
  alignas(64) std::atomic<bool> busy_{false};  // a caller's job holds the pool
  std::atomic<int> sleepers_{0}, worker_count_{0};
  std::atomic<bool> stopping_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::mutex mutex_;  // guards workers_ and the sleepers' wait
  std::condition_variable wake_;
  std::vector<std::thread> workers_;
};

Pool& pool() {
  static Pool instance;
  return instance;
}

}  // namespace

bool in_parallel_region() { return inside_chunk; }

int pool_workers() { return pool().workers(); }
int sleeping_workers() { return pool().sleepers(); }

void parallel_chunks(int64_t chunks, int threads, ChunkFn fn) {
  if (chunks <= 0) return;
  // More chunks than a ticket counts (2^30) would be a batch of a billion products:
  // run on this thread.
  if (threads <= 1 || chunks == 1 || chunks > kMaxChunks || inside_chunk ||
      !pool().run(chunks, threads, fn))
    for (int64_t c = 0; c < chunks; ++c) fn(c);
}

}  // namespace ringgrad::cpu
