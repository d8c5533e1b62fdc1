// shared_memory.h — symmetric memory on one host, and an all-reduce that needs no MPI call.
//
// When every rank runs on the same host, each can map the others' memory. A
// tensor made by Communicator::symmetric_empty lives in such memory: rank r's
// copy is a POSIX shared-memory segment that every other rank has mapped too.
// An all-reduce of that tensor then works the way NCCL works over NVLink —
// ranks read each other's buffers directly — instead of copying messages
// through MPI:
//
//     rank 0's buffer [ c0 | c1 | c2 ]   rank 1's [ c0 | c1 | c2 ]   rank 2's [ … ]
//
//   1. arrive   every rank's buffer holds its contribution;
//   2. reduce   rank r sums chunk c_r over all N buffers into its own buffer
//               (only rank r computes c_r, so every rank ends with the same bits);
//   3. gather   rank r copies every other chunk c_p from rank p's buffer;
//   4. leave    nobody writes its buffer again (the next backward) before every
//               peer has finished reading from it.
// Each step ends at a barrier made of one counter per rank, in the header of
// that rank's own segment: its owner writes it (release), the others read it
// (acquire), so a rank that sees a peer's counter also sees the peer's data.
// Per rank that reads 2·(N−1)/N of the buffer from other cores and writes all
// of it once; MPI's all-reduce moves the same bytes through intermediate
// buffers, with a kernel copy or two on the way.
//
// Internal to parallel/mpi/: the MPI communicator makes these (collectively, on
// its communication thread) and runs their all-reduce there, in issue order.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ringgrad/core/dtype.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel::mpi {

class SymmetricBuffer {
 public:
  // Collective over comm: every rank creates a segment of `nbytes` data bytes
  // and maps every other rank's. Returns null on every rank when the ranks do
  // not share one host, when some rank does not want it (RINGGRAD_SHM_ALLREDUCE=0
  // there), or when any rank could not get the memory (no /dev/shm, or too
  // little room in it): the caller then uses ordinary memory.
  static std::shared_ptr<SymmetricBuffer> create(MPI_Comm comm, size_t nbytes, bool wanted);
  ~SymmetricBuffer();  // unmaps this rank's views; the memory goes with the last one
  SymmetricBuffer(const SymmetricBuffer&) = delete;
  SymmetricBuffer& operator=(const SymmetricBuffer&) = delete;

  void* data() const { return data_of(rank_); }
  size_t nbytes() const { return nbytes_; }

  // Steps 1–4 above over the first `count` elements, on every rank together.
  // Sum, Avg and Max for float32, float64 and int64 (supports() says which),
  // with the same bits as MPI's all-reduce of integer-valued data and the same
  // division for Avg. While waiting for peers it calls `progress`: MPI transfers
  // posted before this one must keep moving (a peer may be waiting for one of
  // them before it can arrive here).
  void all_reduce(DType dtype, int64_t count, Reduce op, const std::function<void()>& progress);
  static bool supports(DType dtype) { return dtype != DType::Bool; }

 private:
  SymmetricBuffer(int rank, int size, size_t nbytes)
      : rank_(rank), size_(size), nbytes_(nbytes), base_(size, nullptr) {}
  void* data_of(int r) const;
  // Steps' ends: every rank's counter reaches epoch_.
  void barrier(const std::function<void()>& progress);

  int rank_, size_;
  size_t nbytes_;
  std::vector<char*> base_;  // each rank's segment as mapped here (header, then data)
  uint64_t epoch_ = 0;       // barriers passed so far, the same count on every rank
};

}  // namespace ringgrad::parallel::mpi
