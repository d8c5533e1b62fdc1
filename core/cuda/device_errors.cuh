// device_errors.cuh — errors a kernel finds, reported by the host at its next synchronisation.
//
// A kernel cannot throw, and stopping the stream to let the host check every
// index first (copy the indices back, wait) would cost a synchronisation per
// index_select, gather or cross-entropy — every training step. Instead the
// kernels that read indices check each one themselves: a bad index is skipped
// (no wild read or write) and the first one is recorded in a small slot of
// mapped pinned memory, which the GPU writes and the host reads directly. The
// host looks at the slot whenever it synchronises anyway (copy_to_host, which
// .item() and printing use; cuda::synchronize) and throws it there as
// ringgrad::Error naming the op, the bad index and the allowed range:
//
//   [index_select] expected indices in [-5, 5) for a dim of size 5, got 7 (found
//   on the GPU by an earlier kernel; reported at the next synchronisation)
//
// So an error surfaces a little later than on the CPU (at the next read of a
// result), never silently and never as memory corruption.
#pragma once

#include <cstdint>

namespace ringgrad::cuda {

enum class IndexOp : int { IndexSelect = 1, IndexAdd, Gather, ScatterAdd, CrossEntropy };

struct DeviceError {
  int state;        // 0: none; 1: being written; 2: written
  int op;           // an IndexOp
  long long value;  // the bad index
  long long lo, hi; // the allowed range [lo, hi)
};

// The slot, as the kernels see it (mapped pinned memory, made on first use).
DeviceError* device_error_slot();
// After a synchronisation: throws the error a kernel recorded, if any, and clears it.
void raise_device_error();

#if defined(__CUDACC__)
// Whether lo <= v < hi; records the first bad index of the whole program run.
__device__ inline bool index_ok(DeviceError* e, IndexOp op, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v < hi) return true;
  if (atomicCAS_system(&e->state, 0, 1) == 0) {  // system scope: host memory
    e->op = static_cast<int>(op);
    e->value = v;
    e->lo = lo;
    e->hi = hi;
    __threadfence_system();  // the fields before the flag, as the host sees them
    atomicExch_system(&e->state, 2);
  }
  return false;
}
#endif

}  // namespace ringgrad::cuda
