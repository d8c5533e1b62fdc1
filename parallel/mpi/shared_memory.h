// shared_memory.h — symmetric memory within a host, and an all-reduce that needs no MPI call
// there (and one MPI all-reduce per chunk across hosts: hierarchical).
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

// Which ranks of a communicator share a host, as two communicators: `local`, the ranks
// on this host, and `cross`, the ranks with this one's local index on every host (one
// per host). Made once per communicator (a collective), on its communication thread.
// RINGGRAD_TEST_RANKS_PER_HOST=k (a test hook) pretends that every k consecutive ranks
// are one host, so the hierarchical all-reduce runs on a single machine.
struct HostLayout {
  MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  int local_rank = 0, local_size = 1, hosts = 1;
  bool uniform = true;  // the same number of ranks on every host
  static std::shared_ptr<HostLayout> create(MPI_Comm comm);
  void free();  // collective; with the communicator
};

class SymmetricBuffer {
 public:
  // Collective over comm: every rank creates a segment of `nbytes` data bytes
  // and maps every other rank's. Returns null on every rank when the ranks do
  // not share one host, when some rank does not want it (RINGGRAD_SHM_ALLREDUCE=0
  // there), or when any rank could not get the memory (no /dev/shm, or too
  // little room in it): the caller then uses ordinary memory.
  //
  // Ranks on several hosts (the same number on each, more than one): each host's ranks
  // share their segments, and the all-reduce is hierarchical, the shape NCCL uses across
  // nodes — 2. each rank reduces its chunk over its host's buffers, 2b. MPI all-reduces
  // that chunk with the ranks holding the same chunk on the other hosts (`cross`: all
  // hosts' chunk owners work at once, each on 1/local_size of the bytes), 3. every rank
  // copies the other chunks from their owners on its host. Every rank ends with the same
  // bits; equal to the flat all-reduce exactly on integers, within rounding on floats
  // (the sums are grouped by host).
  static std::shared_ptr<SymmetricBuffer> create(MPI_Comm comm, const HostLayout& hosts,
                                                 size_t nbytes, bool wanted);
  bool hierarchical() const { return cross_ != MPI_COMM_NULL; }
  ~SymmetricBuffer();  // unmaps this rank's views; the memory goes with the last one
  SymmetricBuffer(const SymmetricBuffer&) = delete;
  SymmetricBuffer& operator=(const SymmetricBuffer&) = delete;

  void* data() const { return data_of(rank_); }
  size_t nbytes() const { return nbytes_; }

  // Steps 1–4 above over the first `count` elements, on every rank together.
  // Sum, Avg and Max for float32, float64, int64, bfloat16 and float16 (supports()
  // says which), with the same bits as MPI's all-reduce of integer-valued data and the
  // same division for Avg. bfloat16 and float16 are summed (and Avg divided) in float32
  // and rounded once — fewer roundings than MPI's path, which rounds per combination
  // (reduced_precision.h); across hosts, once per host plus once more for Avg. While waiting for peers it calls `progress`: MPI transfers
  // posted before this one must keep moving (a peer may be waiting for one of
  // them before it can arrive here).
  void all_reduce(DType dtype, int64_t count, Reduce op, const std::function<void()>& progress);
  static bool supports(DType dtype) { return dtype != DType::Bool; }
  // What all_reduce of `count` elements sends from this rank to the other hosts (2b):
  // 2(H−1)/H of its chunk's bytes, as a ring over the H hosts sends them; 0 on one host.
  // Communicator::cross_host_bytes() adds these up.
  int64_t cross_host_bytes(DType dtype, int64_t count) const;

 private:
  SymmetricBuffer(int rank, int size, size_t nbytes)
      : rank_(rank), size_(size), nbytes_(nbytes), base_(size, nullptr) {}
  void* data_of(int r) const;
  // Where rank r's chunk of `count` elements starts (r = size_: the end), cut at a
  // cache-line multiple so that no two ranks write one line.
  int64_t chunk_start(int r, int64_t count, int64_t element) const;
  // Step 2 (and 2b) for bfloat16/float16: accumulated in float32, rounded once per host.
  void reduce_reduced_precision_chunk(DType dtype, int64_t lo, int64_t hi, Reduce op,
                                      Reduce local_op);
  // Steps' ends: every rank's counter reaches epoch_.
  void barrier(const std::function<void()>& progress);

  int rank_, size_;  // on this host
  MPI_Comm cross_ = MPI_COMM_NULL;  // hierarchical: the other hosts' owners of my chunk
  int world_size_ = 1;              // ranks on all hosts (Avg divides by it)
  int hosts_ = 1;                   // hosts (cross_'s size)
  size_t nbytes_;
  std::vector<char*> base_;  // each rank's segment as mapped here (header, then data)
  uint64_t epoch_ = 0;       // barriers passed so far, the same count on every rank
};

}  // namespace ringgrad::parallel::mpi
