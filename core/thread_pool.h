// thread_pool.h — the CPU's worker threads (internal): what the CPU backend's kernels
// (core/cpu/) split their work over, and cpu_relax for any polling loop (the MPI
// communicator's shared-memory barrier polls with it too).
//
// Why not OpenMP: an OpenMP parallel region ends with a barrier that waits for
// every thread of the team. When another process holds one of the cores, the
// worker on that core may not even have started when the caller finishes its
// share, and the caller sits out the rest of the other process's time slice —
// a training step then runs 3x slower on two threads than on one (we measured
// it; PyTorch on this machine shows the same disease).
//
// Here the caller and the workers claim chunks from one shared counter. The
// caller waits only for chunks that a worker has actually started: a worker
// that wakes up late finds nothing left and goes back to sleep, so adding a
// thread can cost at most one chunk's worth of waiting, never a time slice.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>

namespace ringgrad::cpu {

// A borrowed callable void(int64_t): the chunk body parallel_chunks runs. It only points
// at the caller's lambda, so passing one allocates nothing — a std::function holding a
// lambda with many captures would allocate on every call. Like std::function_ref, it must
// not outlive the callable it was made from: make one only as parallel_chunks' argument.
class ChunkFn {
 public:
  template <typename F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, ChunkFn> &&
             std::is_invocable_v<std::remove_reference_t<F>&, int64_t>)
  ChunkFn(F&& f)  // NOLINT(google-explicit-constructor): a lambda converts, like std::function
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* obj, int64_t c) { (*static_cast<std::remove_reference_t<F>*>(obj))(c); }) {}

  void operator()(int64_t c) const { call_(obj_, c); }

  // Its two words, and a ChunkFn made back from them (the pool keeps them in atomics).
  using Call = void (*)(void*, int64_t);
  void* object() const { return obj_; }
  Call call() const { return call_; }
  ChunkFn(void* object, Call call) : obj_(object), call_(call) {}

 private:
  void* obj_;
  Call call_;
};

// Run fn(c) for every c in [0, chunks) on up to `threads` threads (the caller
// is one of them); returns when all are done. An exception from fn is rethrown
// here (the first one). Called from inside a chunk, or while another thread's
// call holds the pool, it runs serially on the calling thread.
void parallel_chunks(int64_t chunks, int threads, ChunkFn fn);

// Whether the calling thread is running a chunk of parallel_chunks (on the pool).
bool in_parallel_region();

// How many worker threads the pool has started, and how many of them are asleep now,
// waiting for a job (for tests).
int pool_workers();
int sleeping_workers();

// One turn of a polling loop: tells the core we are waiting (x86 pause: the loop does not
// flood the memory system, and a sibling hyperthread may run).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace ringgrad::cpu
