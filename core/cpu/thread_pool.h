// thread_pool.h — the CPU's worker threads (internal).
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
#include <functional>

namespace ringgrad::cpu {

// Run fn(c) for every c in [0, chunks) on up to `threads` threads (the caller
// is one of them); returns when all are done. An exception from fn is rethrown
// here (the first one). Called from inside a chunk, it runs serially.
void parallel_chunks(int64_t chunks, int threads, const std::function<void(int64_t)>& fn);

// Whether the calling thread is running a chunk of parallel_chunks.
bool in_parallel_region();

}  // namespace ringgrad::cpu
