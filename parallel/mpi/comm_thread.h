// comm_thread.h — the MPI backend's engine: one thread that makes every MPI call of
// one communicator.
//
//   caller thread(s)                       communication thread (one per communicator:
//                                          the world's, and each group's)
//   ----------------                       -----------------------------------
//   reduce_async(g)     --push Op-->  [ FIFO queue ] --pop--> MPI_Ireduce(g)    -> polled
//   ...keeps computing...                                    MPI_Isend/Irecv   -> polled
//   work->wait()  <-------------- promise/future -----------
//
// * Every MPI call of a communicator happens on its thread, so operations start in
//   issue order: if every rank issues the same collectives in the same order (DDP
//   does), they match. A job with groups has several such threads calling MPI at
//   once, which needs MPI_THREAD_MULTIPLE (split() checks that MPI offers it).
// * broadcast, reduce, all_gather and reduce_scatter are posted non-blocking (MPI_Ibcast,
//   MPI_Ireduce, MPI_Iallgather, MPI_Ireduce_scatter_block), in issue order, and completed
//   by polling like sends: the thread polls eagerly for a moment, then in naps, where MPI's
//   blocking calls would busy-wait for a late peer on a core the computation needs (on a
//   machine whose cores the ranks share, ZeRO-2's and FSDP's steps ran 1.1-1.3x longer
//   so). all_reduce, all_to_all and the shared-memory all-reduce run to completion here:
//   an all-reduce is most often on the caller's critical path, where MPI's blocking
//   algorithm is faster than its non-blocking one advanced by polls.
// * send/recv are posted as MPI_Isend/MPI_Irecv and completed later by polling
//   (MPI_Test), so a rank can have a send and a receive in flight at once.
//   Were they blocking, a ring exchange (every rank sends to r+1, then receives
//   from r-1) would deadlock: each thread stuck in its send, nobody receiving.
//
// With tracing on (core/trace.h), this thread is a "comm [ranks]" track (the job's ranks
// the communicator connects: comm_track_name): each collective, send and recv is an
// interval from post to completion ("all_reduce 812 KB"; the shared-memory all-reduce a
// slice while it runs), so the overlap with backward is visible.
//
// Internal to parallel/mpi/ (it includes <mpi.h>); users see Communicator only.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel::mpi {

// An MPI return code other than MPI_SUCCESS becomes a ringgrad::Error naming
// our operation, the MPI call, MPI's own explanation, and where:
//   "[recv] MPI_Test failed: MPI_ERR_TRUNCATE: message truncated
//   (parallel/mpi/comm_thread.cpp:124)"
[[noreturn]] void throw_mpi(const char* op, int code, const char* call, const char* file, int line);
#define RG_MPI(op, fn, ...)                                                            \
  do {                                                                                 \
    int rg_mpi_code_ = fn(__VA_ARGS__);                                                \
    if (rg_mpi_code_ != MPI_SUCCESS)                                                   \
      ::ringgrad::parallel::mpi::throw_mpi(op, rg_mpi_code_, #fn, __FILE__, __LINE__); \
  } while (0)

// How far each rank of a communicator has got: slot i holds the number of the last
// collective that rank i of the communicator has entered (1, 2, … in issue order, the
// same numbering on every rank). It lives in memory shared by the ranks on one host
// (MPI_Win_allocate_shared), so a rank whose wait times out reads its peers' progress
// without calling MPI — NCCL's flight recorder has the same idea — and names the ranks
// that never arrived. Ranks on other hosts are not in it (null slots).
struct ProgressTable {
  std::vector<std::atomic<int64_t>*> slots;  // by rank in the communicator; null: another host
  std::vector<int> world_rank;               // rank in the communicator -> rank in the job
  int64_t* mine = nullptr;                   // this rank's slot
  MPI_Win window = MPI_WIN_NULL;             // freed with the communicator
  MPI_Comm node = MPI_COMM_NULL;
  // Made on the communication thread (a collective on comm); null if MPI cannot.
  static std::shared_ptr<ProgressTable> create(MPI_Comm comm);
  // "rank 1 (at collective 55), rank 3 (none yet)" for the ranks before collective `seq`;
  // "" when every rank on this host has reached it.
  std::string missing(int64_t seq, int self) const;
};

// What a Work needs to report a timeout: who we are and how long to wait.
struct WatchdogInfo {
  int rank = 0, size = 1;
  double timeout_s = 300.0;  // <= 0: wait forever
  std::shared_ptr<ProgressTable> progress;  // null: no view of the peers
  int comm_rank = 0;                        // this rank in the communicator
};

// A promise that the communication thread fulfils.
class MpiWork : public Work {
 public:
  // waiters: its communication thread's count of callers waiting (CommThread::waiters).
  MpiWork(const char* op, std::shared_ptr<const WatchdogInfo> info,
          std::shared_ptr<std::atomic<int>> waiters = nullptr)
      : op_(op), info_(std::move(info)), waiters_(std::move(waiters)), future_(promise_.get_future().share()) {}

  // Waits (at most the timeout, then aborts the job), rethrows the
  // operation's error, then runs finish_ once.
  void wait() override;
  bool is_completed() override;
  const char* op() const { return op_; }
  int64_t seq = 0;  // a collective's number on its communicator (1, 2, …); 0: send/recv
  int peer = -1;    // send/recv: the other rank (in the communicator)

  void succeed() { promise_.set_value(); }
  void fail_with(std::exception_ptr e) { promise_.set_exception(e); }
  std::function<void()> finish_;  // e.g. copy into a strided destination; caller's thread

 private:
  const char* op_;
  std::shared_ptr<const WatchdogInfo> info_;
  std::shared_ptr<std::atomic<int>> waiters_;
  std::promise<void> promise_;
  std::shared_future<void> future_;
};

// One queued operation. run() makes the MPI call on the communication thread
// and returns MPI_REQUEST_NULL when the operation is done, or the request of a
// posted send/recv, which the thread polls; on_complete() then checks the result.
struct Op {
  std::function<MPI_Request()> run;
  std::function<void(const MPI_Status&)> on_complete;
  std::shared_ptr<MpiWork> work;
  // For traces (core/trace.h): what the operation moves, and when.
  int64_t bytes = 0;
  int peer = -1;                   // send/recv: the other rank
  int64_t queued_ns = 0;           // when push() queued it (tracing on)
  int64_t started_ns = 0;          // when run() was called (tracing on)
  std::string trace_name() const;  // "all_reduce 812 KB", "send 4 KB to 1"
};

// The name of the communication thread of `comm` in a trace: "comm" and the ranks of the
// job it connects, "comm [0,1,2,3]" (at most 8 listed: "comm [0,4,8,…] (16 ranks)"), so
// that every group of a mesh has its own track, named the same on each of its ranks.
std::string comm_track_name(MPI_Comm comm);

class CommThread {
 public:
  // name: the thread's track in traces, e.g. "comm [0,2]" (comm_track_name).
  CommThread(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {}
  MPI_Comm comm() const { return comm_; }

  // Caller side: queue an operation and wake the thread; ask it to stop.
  void push(Op op);
  void request_stop();

  // Thread side: start queued operations in order; poll posted sends/recvs.
  // Returns once stopped with an empty queue and nothing in flight.
  void loop();
  // For an operation that waits on this thread without calling MPI (the
  // shared-memory all-reduce): keeps posted sends/recvs moving meanwhile. A
  // peer may need our send to arrive before it can join that operation.
  void progress() { poll(); }
  // How many callers wait on an operation of this thread now (MpiWork::wait). While any does,
  // the thread polls without napping: a caller that waits has nothing to overlap, and MPI's
  // non-blocking collectives (a schedule of rounds) advance only as fast as they are polled.
  std::shared_ptr<std::atomic<int>> waiters() const { return waiters_; }

 private:
  void start(Op op);
  bool poll();  // whether any operation finished

  MPI_Comm comm_;

  std::string name_;
  int64_t collectives_ = 0;  // numbered in push() (guarded by mutex_), published in start()
 public:
  std::shared_ptr<ProgressTable> progress_table;  // set once, before the first collective
  std::shared_ptr<struct HostLayout> hosts;        // made by the first symmetric_empty
 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Op> queue_;                               // guarded by mutex_
  bool stop_ = false;                                  // guarded by mutex_
  std::vector<std::pair<MPI_Request, Op>> in_flight_;  // communication thread only
  static constexpr int kSpinPolls = 200;               // ~tens of µs of eager polling, then naps
  int idle_polls_ = 0;                                 // polls since anything started or finished
  std::shared_ptr<std::atomic<int>> waiters_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace ringgrad::parallel::mpi
