// threads.cpp — the one thread-count setting.
#include "ringgrad/core/threads.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "ringgrad/core/error.h"

namespace ringgrad {
namespace {

int initial_threads() {
  if (const char* env = std::getenv("RINGGRAD_NUM_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= 4096) return static_cast<int>(n);
    fail("RINGGRAD_NUM_THREADS", "expected a whole number >= 1, got \"", env, "\"");
  }
  unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(cores);
}

std::atomic<int>& thread_setting() {
  static std::atomic<int> n{initial_threads()};
  return n;
}

}  // namespace

void set_num_threads(int n) {
  RG_CHECK(n >= 1, "set_num_threads", "expected n >= 1, got ", n);
  thread_setting().store(n);
}

int get_num_threads() { return thread_setting().load(std::memory_order_relaxed); }

}  // namespace ringgrad
