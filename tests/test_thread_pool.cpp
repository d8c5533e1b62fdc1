// test_thread_pool.cpp — the CPU's worker pool (core/thread_pool.cpp): every chunk
// runs exactly once, on as many threads as asked, whatever the timing; errors come back
// to the caller; a nested call or a second caller runs on its own thread.
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ringgrad/core/thread_pool.h"
#include "test_helpers.h"

using ringgrad::cpu::in_parallel_region;
using ringgrad::cpu::parallel_chunks;

namespace {

// Run `chunks` chunks on `threads` threads, `calls` times in a row; how often each
// chunk ran, summed over the calls.
std::vector<int> run_counts(int64_t chunks, int threads, int calls) {
  std::vector<std::atomic<int>> ran(static_cast<size_t>(chunks));
  for (int i = 0; i < calls; ++i)
    parallel_chunks(chunks, threads, [&](int64_t c) { ran[c].fetch_add(1); });
  return std::vector<int>(ran.begin(), ran.end());
}

// Poll ready() until it is true or `seconds` have passed; whether it became true.
template <typename F>
bool wait_until(F&& ready, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!ready())
    if (std::chrono::steady_clock::now() > until) return false;
  return true;
}
bool wait_for(const std::atomic<bool>& flag, double seconds) {
  return wait_until([&] { return flag.load(); }, seconds);
}

}  // namespace

TEST_CASE("thread pool: every chunk runs exactly once") {
  for (int threads : {1, 2, 3, 4})
    for (int64_t chunks : {1, 2, 3, 7, 64, 1000}) {
      CAPTURE(threads);
      CAPTURE(chunks);
      std::vector<int> counts = run_counts(chunks, threads, 20);
      for (int64_t c = 0; c < chunks; ++c) REQUIRE(counts[c] == 20);
    }
}

TEST_CASE("thread pool: many short jobs in a row, each chunk once (generations never mix)") {
  // Jobs follow each other within a microsecond: a worker that read one job's ticket may
  // try to claim after the next was published. A chunk run twice, or by a job's body
  // that was not its own, shows up as a wrong count.
  for (int threads : {2, 3}) {
    std::vector<std::atomic<int>> a(3), b(5);
    for (int i = 0; i < 10000; ++i) {
      parallel_chunks(3, threads, [&](int64_t c) { a[c].fetch_add(1); });
      parallel_chunks(5, threads, [&](int64_t c) { b[c].fetch_add(1); });
    }
    for (auto& x : a) CHECK(x.load() == 10000);
    for (auto& x : b) CHECK(x.load() == 10000);
  }
}

TEST_CASE("thread pool: a sleeping worker is woken for the next job") {
  // Wait until every worker has stopped polling and sleeps on the condition variable.
  parallel_chunks(2, 2, [](int64_t) {});
  const int workers = ringgrad::cpu::pool_workers();
  REQUIRE(workers >= 1);
  REQUIRE(wait_until([&] { return ringgrad::cpu::sleeping_workers() == workers; }, 10.0));
  // The caller runs chunk 0 and waits there for chunk 1 to start: only a woken worker
  // can start it (the caller would take it only after chunk 0).
  std::atomic<bool> started{false}, seen{false};
  parallel_chunks(2, 2, [&](int64_t c) {
    if (c == 1) started = true;
    if (c == 0) seen = wait_for(started, 10.0);
  });
  CHECK(seen.load());
}

TEST_CASE("thread pool: up to `threads` threads take part, the caller among them") {
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex m;
  std::set<std::thread::id> ids;
  std::atomic<int> inside{0};
  std::atomic<bool> all{false};
  // Every chunk waits (bounded) until three threads are inside at once.
  parallel_chunks(3, 3, [&](int64_t) {
    {
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    }
    if (inside.fetch_add(1) + 1 == 3) all = true;
    wait_for(all, 10.0);
  });
  CHECK(all.load());
  CHECK(ids.size() == 3);
  CHECK(ids.count(caller) == 1);
  // Two threads asked for: never more than two at once, with more workers in the pool.
  std::atomic<int> now{0}, most{0};
  for (int i = 0; i < 200; ++i)
    parallel_chunks(8, 2, [&](int64_t) {
      int n = now.fetch_add(1) + 1;
      for (int m0 = most.load(); n > m0 && !most.compare_exchange_weak(m0, n);) {
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      now.fetch_sub(1);
    });
  CHECK(most.load() <= 2);
}

TEST_CASE("thread pool: an exception in a chunk reaches the caller; the pool goes on") {
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH_AS(parallel_chunks(16, 2,
                                       [&](int64_t c) {
                                         ran.fetch_add(1);
                                         if (c == 11) throw std::runtime_error("chunk 11 failed");
                                       }),
                       "chunk 11 failed", std::runtime_error);
  CHECK(ran.load() == 16);  // the other chunks still ran
  std::vector<int> counts = run_counts(16, 2, 10);
  for (int n : counts) CHECK(n == 10);
}

TEST_CASE("thread pool: a call inside a chunk runs all its chunks") {
  std::atomic<int> total{0}, outside{0};
  CHECK_FALSE(in_parallel_region());
  parallel_chunks(4, 2, [&](int64_t) {
    if (!in_parallel_region()) outside.fetch_add(1);
    parallel_chunks(5, 2, [&](int64_t) { total.fetch_add(1); });
  });
  CHECK_FALSE(in_parallel_region());
  CHECK(outside.load() == 0);
  CHECK(total.load() == 20);
}

TEST_CASE("thread pool: two threads calling at once both finish, every chunk once") {
  std::vector<std::atomic<int>> a(6), b(6);
  std::thread other([&] {
    for (int i = 0; i < 5000; ++i)
      parallel_chunks(6, 2, [&](int64_t c) { b[c].fetch_add(1); });
  });
  for (int i = 0; i < 5000; ++i)
    parallel_chunks(6, 2, [&](int64_t c) { a[c].fetch_add(1); });
  other.join();
  for (auto& x : a) CHECK(x.load() == 5000);
  for (auto& x : b) CHECK(x.load() == 5000);
}
