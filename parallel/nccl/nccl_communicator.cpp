// nccl_communicator.cpp — Communicator over NCCL, for CUDA tensors (one GPU per rank).
//
// One rank, one DDP bucket being all-reduced while backward goes on:
//
//   compute stream: ..kernels writing the bucket..[ready]..more backward..(waits for [done]) step
//                                                    |                        ^
//   comm stream:                       (waits for [ready]) ncclAllReduce --[done]
//
// * Setup. Rank 0 asks NCCL for a unique id (128 bytes); the bootstrap
//   communicator (MPI under mpirun, the world of one otherwise) broadcasts it,
//   and every rank joins with ncclCommInitRank on its own GPU.
// * A stream of its own. On the compute stream an all-reduce would wait for all
//   the kernels issued before it, and the rest of backward would wait for the
//   all-reduce. On the comm stream the GPU reduces one bucket while it computes
//   the gradients of the next.
// * Two events order the two streams, and the host does not wait for either:
//   [ready], recorded on the compute stream when the operation is issued: the
//   comm stream waits for it, so NCCL reads the bucket only after the kernels
//   that wrote it (and overwrites memory only after the kernels that still read it);
//   [done], recorded on the comm stream after the operation: wait() makes the
//   compute stream wait for it, so the kernels issued after wait() (the
//   optimizer step) see the result.
// * Memory. The caching allocator (core/cuda/runtime.cu) hands a freed block
//   out again in compute-stream order, without events. So a Work keeps its
//   tensors alive until wait() — or its destruction, if never waited for — has
//   made the compute stream wait for [done]: whatever reuses that memory later
//   runs after the collective. And NCCL starts only after [ready], that is,
//   after every earlier kernel that used the same memory.
// * Sends and receives. An NCCL send blocks the GPU until the peer's receive
//   runs. A ring step (every rank sends to r+1, receives from r-1) issued as two
//   separate NCCL calls would deadlock: every rank stuck in its send. So
//   send_async/recv_async only post; the posted operations start together, as
//   one ncclGroupStart/ncclGroupEnd group, at the next operation, wait() or
//   is_completed() of this communicator. That is MPI's meaning of non-blocking
//   (posted before waiting: in flight together). Each one still waits only for
//   its own [ready], so the transfer overlaps the kernels issued after the post.
//   NCCL matches sends and receives by their order between two ranks: tags are
//   checked, then ignored.
// * Errors. NCCL return codes become ringgrad::Error with the call and
//   file:line. Failures inside running kernels (a peer died, a network error)
//   are asynchronous, and wait() does not block the host (the host waits only
//   where it reads a result: a copy to the CPU synchronises the compute stream,
//   which waits for [done]). A watchdog thread watches every operation in flight
//   instead, polling ncclCommGetAsyncError: on an NCCL error, or when one has run
//   longer than RINGGRAD_COMM_TIMEOUT_S seconds (default 300), it aborts the
//   communicator (ncclCommAbort stops its kernels, so the GPU is not stuck
//   either), prints which operation failed on which rank, and ends the job
//   through the bootstrap communicator (MPI_Abort), as the MPI backend's
//   watchdog does; in a world of one the next operation on this communicator
//   throws the reason. barrier() and shutdown still wait on the host.
//   RINGGRAD_COMM_TIMEOUT_S=off: no watchdog, no time limit.
#include "ringgrad/parallel/nccl/nccl_communicator.h"

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ringgrad/core/cuda/common.cuh"  // RG_CUDA_CHECK, cuda::compute_stream()
#include "ringgrad/core/factory.h"
#include "ringgrad/parallel/nccl/group.h"
#include "ringgrad/parallel/nccl/translate.h"  // dtypes, reductions, errors; RG_NCCL

namespace ringgrad::parallel {

bool nccl_is_built() { return true; }

namespace {

using nccl_detail::nccl_op;
using nccl_detail::nccl_type;
using nccl_detail::throw_nccl;

size_t count(const Tensor& t) { return static_cast<size_t>(t.numel()); }

// ---- events ----

// A CUDA event: a marker in a stream that another stream, or the host, can wait for.
class Event {
 public:
  Event() { RG_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  // Safe while a stream still waits for it: cudaStreamWaitEvent took the marker
  // when it was called, and CUDA frees a pending event once the GPU passes it.
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t stream) { RG_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  // Work issued to `stream` from now on starts after this marker (the GPU waits, not the host).
  void block(cudaStream_t stream) const { RG_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }
  // Whether the GPU has passed the marker (one never recorded counts as passed).
  bool passed() const {
    cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not yet" is no error: don't leave it for a later check
      return false;
    }
    RG_CUDA_CHECK(status);
    return true;
  }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// ---- state shared by the communicator and its Work handles ----

class NcclWork;

// A send or receive posted but not started yet (see "Sends and receives").
struct PendingP2P {
  bool is_send = true;
  Tensor buf;  // contiguous
  int peer = 0;
  std::unique_ptr<Event> ready;  // recorded on the compute stream when posted
  std::shared_ptr<NcclWork> work;
};

struct NcclState {
  int rank = 0, size = 1, device = 0;
  double timeout_s = 300.0;  // <= 0: no watchdog
  ncclComm_t comm = nullptr;
  cudaStream_t compute = nullptr;      // where every op runs (core/cuda)
  cudaStream_t comm_stream = nullptr;  // where NCCL's kernels run
  std::mutex mutex;  // one NCCL call at a time (a communicator is not thread-safe)
  std::atomic<bool> aborted{false};
  std::string abort_reason;         // guarded by mutex
  std::vector<PendingP2P> pending;  // guarded by mutex

  void check_usable(const char* op) const;  // mutex held
  void start_pending();                     // mutex held
  void host_wait(const Event& done, const char* op);
  void abort(const std::string& reason);

  // ---- the watchdog: every operation in flight, until the GPU has passed its [done]
  struct Watched {
    std::shared_ptr<const Event> done;
    const char* op;
    std::chrono::steady_clock::time_point start;
  };
  std::function<void()> end_job;  // the bootstrap's abort (MPI_Abort; nothing in a world of one)
  std::mutex watch_mutex;
  std::condition_variable watch_wake;
  std::vector<Watched> watched;  // guarded by watch_mutex
  bool stop_watching = false;    // guarded by watch_mutex
  std::thread watchdog;
  void watch(std::shared_ptr<const Event> done, const char* op);
  void watch_loop();
  void stop_watchdog();
};

// The handle of one operation. [done] is recorded on the comm stream right after
// it; until wait(), the Work holds the tensors NCCL reads and writes.
class NcclWork : public Work {
 public:
  NcclWork(const char* op, std::shared_ptr<NcclState> state, std::vector<Tensor> keep)
      : op_(op), state_(std::move(state)), keep_(std::move(keep)) {}
  ~NcclWork() override;
  void wait() override;
  bool is_completed() override;

  const char* op() const { return op_; }
  const Event& done() const { return *done_; }
  // Called once, with the state's mutex held: the operation is on the comm
  // stream (mark_started), or it could not get there (fail_with).
  void mark_started(cudaStream_t comm_stream) {
    done_->record(comm_stream);
    started_ = true;
    state_->watch(done_, op_);
  }
  void fail_with(std::exception_ptr error) {
    error_ = std::move(error);
    started_ = true;
  }
  std::function<void()> finish_;  // after the operation, on the caller's thread (a copy back)

 private:
  void start_if_posted();

  const char* op_;
  std::shared_ptr<NcclState> state_;
  std::shared_ptr<Event> done_ = std::make_shared<Event>();  // shared with the watchdog
  std::vector<Tensor> keep_;
  bool started_ = false;  // guarded by the state's mutex while false
  bool waited_ = false;
  std::exception_ptr error_;
};

void NcclState::check_usable(const char* op) const {
  RG_CHECK(!aborted, op, "expected a working NCCL communicator, got one aborted after an earlier ",
           "error (", abort_reason, ")");
}

// Starts every posted send and receive, in posting order, as one group.
// Errors go to their Works (wait() rethrows them), not to whoever started the group.
void NcclState::start_pending() {
  if (pending.empty()) return;
  std::vector<PendingP2P> group = std::move(pending);
  pending.clear();
  try {
    check_usable(group.front().work->op());
    // Each transfer starts after its own [ready]: the compute work issued
    // before it was posted (which wrote what a send reads, or may still read
    // what a receive overwrites).
    for (PendingP2P& p : group) p.ready->block(comm_stream);
    // Between ncclGroupStart and ncclGroupEnd NCCL only records the calls;
    // ncclGroupEnd launches them together, so none waits for another to begin.
    // (in_group ends the group even after a failed call in it: group.h)
    const PendingP2P* failed = nullptr;
    nccl_detail::in_group(
        ncclSuccess, &ncclGroupStart, &ncclGroupEnd,
        [&](auto note) {
          for (PendingP2P& p : group) {
            void* data = p.buf.raw_data();
            ncclDataType_t type = nccl_type(p.buf.dtype());
            ncclResult_t result =
                p.is_send ? ncclSend(data, count(p.buf), type, p.peer, comm, comm_stream)
                          : ncclRecv(data, count(p.buf), type, p.peer, comm, comm_stream);
            if (result != ncclSuccess && !failed) failed = &p;
            note(result, p.is_send ? "ncclSend" : "ncclRecv");
          }
        },
        [&](ncclResult_t code, const char* call) {
          throw_nccl((failed ? failed : &group.front())->work->op(), code, call, __FILE__, __LINE__);
        });
    // [done] of each: after the whole group on the comm stream.
    for (PendingP2P& p : group) p.work->mark_started(comm_stream);
  } catch (...) {
    for (PendingP2P& p : group) p.work->fail_with(std::current_exception());
  }
}

// Blocks the host until the GPU has passed `done`, watching NCCL's asynchronous
// error state meanwhile. An NCCL error, or more than timeout_s seconds (when
// > 0), aborts the communicator and throws, naming the operation and the rank.
void NcclState::host_wait(const Event& done, const char* op) {
  auto start = std::chrono::steady_clock::now();
  for (int polls = 0; !done.passed(); ++polls) {
    RG_CHECK(!aborted, op, "expected the operation to complete on rank ", rank, "/", size,
             ", got the NCCL communicator aborted while waiting for it");
    ncclResult_t async = ncclSuccess;
    {
      // Skip this look if another thread is inside an NCCL call (perhaps one
      // that will never return): the timeout below must still fire.
      std::unique_lock<std::mutex> lock(mutex, std::try_to_lock);
      if (lock.owns_lock() && comm) RG_NCCL(op, ncclCommGetAsyncError, comm, &async);
    }
    if (async != ncclSuccess && async != ncclInProgress) {
      const char* last = ncclGetLastError(nullptr);
      std::string why =
          detail::concat(ncclGetErrorString(async), last && *last ? ": " : "", last ? last : "");
      abort(why);
      fail(op, "expected the operation to complete on rank ", rank, "/", size,
           ", got an NCCL error: ", why,
           " (ncclCommGetAsyncError); the NCCL communicator was aborted");
    }
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s > 0 && waited > timeout_s) {
      // A peer died or stalled mid-operation: waiting longer would hang this
      // rank (and its GPU) forever. Abort, say who gave up on what, and let the
      // error end the job (main_guard aborts every rank).
      abort(detail::concat(op, " timed out"));
      fail(op, "did not complete within ", timeout_s, " s on rank ", rank, "/", size,
           " (RINGGRAD_COMM_TIMEOUT_S); another rank has probably failed or stalled. The NCCL "
           "communicator was aborted.");
    }
    // Eagerly at first (most operations end soon after they are waited for),
    // then in naps that leave the core to the rest of the program.
    if (polls < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // Passed because the watchdog aborted the communicator (its kernels stopped)?
  RG_CHECK(!aborted, op, "expected the operation to complete on rank ", rank, "/", size,
           ", got the NCCL communicator aborted while waiting for it");
}

// ncclCommAbort stops this rank's NCCL kernels (so the streams move on) and
// frees the communicator without waiting for any peer; every later operation
// is an error. If another thread is inside an NCCL call (perhaps one that will
// never return), aborting under it is not safe: the communicator is only
// marked, and the error on its way up ends the job instead (main_guard).
void NcclState::abort(const std::string& reason) {
  std::unique_lock<std::mutex> lock(mutex, std::try_to_lock);
  if (lock.owns_lock()) {
    if (!aborted) abort_reason = reason;
    // Marked before ncclCommAbort: it stops the kernels at once, so an event
    // (a barrier's [done]) may pass while it still runs, and whoever sees it
    // pass must already see the communicator as aborted.
    aborted = true;
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
  }
  aborted = true;
}

// ---- the watchdog ----

void NcclState::watch(std::shared_ptr<const Event> done, const char* op) {
  if (timeout_s <= 0) return;
  std::lock_guard<std::mutex> lock(watch_mutex);
  if (stop_watching) return;  // the communicator is going away
  if (!watchdog.joinable())
    watchdog = std::thread([this] { watch_loop(); });  // joined by stop_watchdog()
  watched.push_back({std::move(done), op, std::chrono::steady_clock::now()});
  watch_wake.notify_one();
}

// Every millisecond while something is in flight: drop the operations the GPU has
// finished; look at NCCL's asynchronous error; time the oldest one. On an error
// or a timeout: abort the communicator, say so, end the job.
void NcclState::watch_loop() {
  cudaSetDevice(device);  // this thread's CUDA calls go to this rank's GPU
  std::unique_lock<std::mutex> lock(watch_mutex);
  while (!stop_watching) {
    std::string why;
    const char* op = "?";
    try {
      std::erase_if(watched, [](const Watched& w) { return w.done->passed(); });
      if (watched.empty()) {
        watch_wake.wait(lock);
        continue;
      }
      const Watched oldest = watched.front();
      op = oldest.op;
      lock.unlock();
      ncclResult_t async = ncclSuccess;
      {
        // Skip this look if another thread is inside an NCCL call (perhaps one
        // that will never return): the timeout below must still fire.
        std::unique_lock<std::mutex> nccl_lock(mutex, std::try_to_lock);
        if (nccl_lock.owns_lock() && comm && ncclCommGetAsyncError(comm, &async) != ncclSuccess)
          async = ncclSuccess;
      }
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - oldest.start).count();
      if (async != ncclSuccess && async != ncclInProgress) {
        const char* last = ncclGetLastError(nullptr);
        why = detail::concat(op, ": NCCL error ", ncclGetErrorString(async),
                             last && *last ? ": " : "", last ? last : "");
      } else if (waited > timeout_s) {
        why = detail::concat(op, " did not complete within ", timeout_s,
                             " s (RINGGRAD_COMM_TIMEOUT_S); another rank has probably failed "
                             "or stalled");
      }
    } catch (const std::exception& e) {  // a CUDA error while looking: as bad as an NCCL one
      why = detail::concat(op, ": ", e.what());
    }
    if (lock.owns_lock()) lock.unlock();
    if (!why.empty() && !aborted) {
      std::fprintf(stderr, "[rank %d/%d] error: %s. Aborting the NCCL communicator%s\n", rank, size,
                   why.c_str(), size > 1 ? " and the job." : ".");
      std::fflush(stderr);
      abort(why);  // its kernels stop: the streams move on
      if (end_job) end_job();
    }
    lock.lock();
    if (aborted) watched.clear();  // nothing more to watch: every later call throws
    watch_wake.wait_for(lock, std::chrono::milliseconds(1));
  }
}

void NcclState::stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(watch_mutex);
    stop_watching = true;
  }
  watch_wake.notify_all();
  if (watchdog.joinable()) watchdog.join();
}

// ---- Work ----

// A posted send/recv starts, with the rest of its group, when someone waits for it.
void NcclWork::start_if_posted() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (!started_) state_->start_pending();
}

void NcclWork::wait() {
  start_if_posted();
  if (error_) std::rethrow_exception(error_);
  if (waited_) return;
  // [done] -> compute stream: kernels issued from now on (the optimizer step
  // that reads the averaged gradients, an op that reuses this memory) run after
  // the operation. This is all that correctness needs; the host does not wait
  // (a failed or stalled peer is the watchdog's to catch).
  done_->block(state_->compute);
  RG_CHECK(!state_->aborted, op_, "expected the operation to complete on rank ", state_->rank, "/",
           state_->size, ", got the NCCL communicator aborted before it was waited for");
  waited_ = true;
  if (finish_) std::exchange(finish_, nullptr)();  // the copy back runs on the compute stream too
  keep_.clear();  // the memory may be reused now: see "Memory" above
}

bool NcclWork::is_completed() {
  start_if_posted();
  if (error_ || state_->aborted) return true;  // wait() reports the error
  return done_->passed();
}

NcclWork::~NcclWork() {
  // Dropped without wait(): its tensors go back to the allocator now, so the
  // compute stream must wait for the operation before anything can reuse
  // their memory. (A posted Work is held by its group until it starts.)
  if (started_ && !waited_ && !error_) cudaStreamWaitEvent(state_->compute, done_->get(), 0);
}

// ---- the communicator ----

// NCCL works on contiguous memory. A strided tensor gets a contiguous copy to
// work in, copied back into it by wait(), after the operation.
struct InPlace {
  Tensor buf;
  std::function<void()> copy_back;
};
InPlace in_place(Tensor& t) {
  if (t.is_contiguous()) return {t, nullptr};
  Tensor buf = t.contiguous();
  return {buf, [t, buf]() mutable { t.copy_(buf); }};
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, int device)
      : bootstrap_(bootstrap), state_(std::make_shared<NcclState>()) {
    NcclState& s = *state_;
    s.rank = bootstrap.rank();
    s.size = bootstrap.size();
    use_device(device);

    // 1. Rank 0 makes the id; the bootstrap communicator carries its bytes to
    //    every rank (as int64s: a dtype every backend moves).
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0);
    if (s.rank == 0) RG_NCCL("nccl", ncclGetUniqueId, &id);
    Tensor bytes = empty({static_cast<int64_t>(sizeof(id) / sizeof(int64_t))}, {.dtype = kInt64});
    std::memcpy(bytes.raw_data(), &id, sizeof(id));
    bootstrap.broadcast(bytes, 0);
    std::memcpy(&id, bytes.raw_data(), sizeof(id));

    // 2. Every rank joins; this returns once all of them have (it synchronises them).
    ncclResult_t joined = ncclCommInitRank(&s.comm, s.size, id, s.rank);
    if (joined != ncclSuccess)
      throw_nccl("nccl", joined, "ncclCommInitRank", __FILE__, __LINE__,
                 detail::concat(" on rank ", s.rank, "/", s.size, ", cuda:", device,
                                ". NCCL needs one GPU per rank: a host with G GPUs runs at most "
                                "G ranks (on one GPU: world size 1, or tensors on the CPU)"));
    start_streams();
  }

  // A group made by ncclCommSplit (do_split): NCCL made the communicator; ending the
  // job still goes through the parent's bootstrap.
  NcclCommunicator(Communicator& bootstrap, int device, ncclComm_t comm)
      : bootstrap_(bootstrap), state_(std::make_shared<NcclState>()) {
    NcclState& s = *state_;
    s.comm = comm;
    RG_NCCL("split", ncclCommUserRank, comm, &s.rank);
    RG_NCCL("split", ncclCommCount, comm, &s.size);
    use_device(device);
    start_streams();
  }

  // This rank's GPU, current from now on, and the compute stream that must live on it.
  void use_device(int device) {
    NcclState& s = *state_;
    s.device = device;
    s.timeout_s = comm_timeout_seconds();
    int gpus = cuda::device_count();
    RG_CHECK(gpus > 0, "nccl",
             "expected a CUDA device, got none (the NCCL backend moves CUDA "
             "tensors; the driver reports no usable GPU)");
    RG_CHECK(device >= 0 && device < gpus, "nccl", "expected a GPU index in [0, ", gpus, "), got ",
             device);
    // NCCL binds the communicator to the current device, and the streams below
    // belong to it: this rank's GPU first.
    RG_CUDA_CHECK(cudaSetDevice(device));
    s.compute = cuda::compute_stream();
    int stream_device = -1;
    RG_CUDA_CHECK(cudaStreamGetDevice(s.compute, &stream_device));
    RG_CHECK(stream_device == device, "nccl",
             "expected the compute stream on this rank's GPU cuda:", device,
             ", got it on cuda:", stream_device,
             " (CUDA was used before the GPU was chosen: construct the World first in main)");
  }

  void start_streams() {
    NcclState& s = *state_;
    // 3. The comm stream. Non-blocking: it never waits for the legacy default
    //    stream, only for the events above.
    RG_CUDA_CHECK(cudaStreamCreateWithFlags(&s.comm_stream, cudaStreamNonBlocking));
    barrier_buf_ = zeros({1}, {.device = Device::cuda(s.device)});
    // What the watchdog does after aborting: end every rank, through the bootstrap
    // (MPI_Abort under mpirun; nothing to stop in a world of one). The watchdog is
    // stopped in the destructor, before bootstrap_ could go.
    s.end_job = [bootstrap = &bootstrap_] { bootstrap->abort(1); };
  }

  ~NcclCommunicator() override {
    NcclState& s = *state_;
    bool destroyed = false;
    if (!s.aborted && s.comm && std::uncaught_exceptions() == 0) {
      try {
        // As the MPI backend does at exit: what was posted still happens.
        {
          std::lock_guard<std::mutex> lock(s.mutex);
          s.start_pending();
        }
        // Every NCCL operation of this rank is done (within the timeout), so
        // ncclCommDestroy has nothing left to flush; it synchronises with the
        // other ranks, which are ending too.
        Event drained;
        drained.record(s.comm_stream);
        s.host_wait(drained, "shutdown");
        s.stop_watchdog();  // before the communicator goes: the watchdog reads it
        RG_NCCL("shutdown", ncclCommDestroy, s.comm);
        s.comm = nullptr;
        destroyed = true;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d/%d] %s\n", s.rank, s.size, e.what());
      }
    }
    // Destroyed by an exception (peers may be inside a collective, waiting for
    // this rank; ncclCommDestroy could wait for them), or a failed shutdown:
    // abort, which is local and immediate.
    if (!destroyed) s.abort("the communicator was destroyed during an error");
    s.stop_watchdog();
    // Sends/receives posted but never started (the aborted paths above): their
    // Works learn why, and the group lets go of them (each holds the state: a
    // cycle that would keep both alive).
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      for (PendingP2P& p : s.pending)
        p.work->fail_with(std::make_exception_ptr(Error(detail::concat(
            "[", p.work->op(), "] the NCCL communicator was destroyed before this ",
            p.is_send ? "send" : "recv", " started"))));
      s.pending.clear();
    }
    if (s.comm_stream) cudaStreamDestroy(s.comm_stream);  // freed once its work is done
  }

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  std::string backend_name() const override { return "nccl"; }

  // An all-reduce of one number: it completes on a rank only once every rank
  // has issued it, and (the comm stream runs in order) after every NCCL
  // operation this rank issued before it. The host waits for it, whatever
  // RINGGRAD_COMM_TIMEOUT_S says (0 then means: without a time limit).
  void barrier() override {
    auto work = launch("barrier", {barrier_buf_}, [&](ncclComm_t comm, cudaStream_t stream) {
      RG_NCCL("barrier", ncclAllReduce, barrier_buf_.raw_data(), barrier_buf_.raw_data(), 1,
              ncclFloat32, ncclSum, comm, stream);
    });
    work->wait();
    state_->host_wait(work->done(), "barrier");
  }

  // Stops this rank's NCCL work at once, then ends every rank through the
  // bootstrap communicator (MPI_Abort; a world of one has nobody to stop).
  void abort(int code) override {
    state_->abort("abort() after an error on this rank");
    bootstrap_.abort(code);
  }

 protected:
  // NCCL moves memory of this rank's GPU only.
  void check_tensor(const Tensor& t, const char* op) const override {
    RG_CHECK(t.device().is_cuda(), op, "expected a CUDA tensor for the nccl backend, got ",
             t.device(), " (", t.describe(), "; CPU tensors go through the MPI backend)");
    RG_CHECK(t.device().index == state_->device, op,
             "expected a tensor on this rank's GPU cuda:", state_->device, ", got ", t.describe());
  }

  WorkHandle do_all_reduce_async(Tensor& t, Reduce op) override {
    InPlace io = in_place(t);
    auto work = launch("all_reduce", {io.buf}, [&](ncclComm_t comm, cudaStream_t stream) {
      // In place: the send and receive buffers are the same.
      RG_NCCL("all_reduce", ncclAllReduce, io.buf.raw_data(), io.buf.raw_data(), count(io.buf),
              nccl_type(io.buf.dtype()), nccl_op(op, io.buf.dtype()), comm, stream);
    });
    work->finish_ = std::move(io.copy_back);
    return work;
  }

  WorkHandle do_broadcast_async(Tensor& t, int root) override {
    InPlace io = in_place(t);
    auto work = launch("broadcast", {io.buf}, [&](ncclComm_t comm, cudaStream_t stream) {
      RG_NCCL("broadcast", ncclBroadcast, io.buf.raw_data(), io.buf.raw_data(), count(io.buf),
              nccl_type(io.buf.dtype()), root, comm, stream);
    });
    work->finish_ = std::move(io.copy_back);
    return work;
  }

  // In place: root's t gets the reduction; the others' t is read.
  WorkHandle do_reduce_async(Tensor& t, int root, Reduce op) override {
    InPlace io = in_place(t);
    auto work = launch("reduce", {io.buf}, [&](ncclComm_t comm, cudaStream_t stream) {
      RG_NCCL("reduce", ncclReduce, io.buf.raw_data(), io.buf.raw_data(), count(io.buf),
              nccl_type(io.buf.dtype()), nccl_op(op, io.buf.dtype()), root, comm, stream);
    });
    work->finish_ = std::move(io.copy_back);
    return work;
  }

  // Rank r's `in` becomes the r-th chunk of every rank's `out` (contiguous).
  WorkHandle do_all_gather_async(Tensor& out, const Tensor& in) override {
    Tensor src = in.contiguous();
    return launch("all_gather", {src, out}, [&](ncclComm_t comm, cudaStream_t stream) {
      RG_NCCL("all_gather", ncclAllGather, src.raw_data(), out.raw_data(), count(src),
              nccl_type(src.dtype()), comm, stream);
    });
  }

  // Chunk r of every rank's `in`, reduced, into rank r's `out` (contiguous).
  WorkHandle do_reduce_scatter_async(Tensor& out, const Tensor& in, Reduce op) override {
    Tensor src = in.contiguous();
    return launch("reduce_scatter", {src, out}, [&](ncclComm_t comm, cudaStream_t stream) {
      RG_NCCL("reduce_scatter", ncclReduceScatter, src.raw_data(), out.raw_data(), count(out),
              nccl_type(src.dtype()), nccl_op(op, src.dtype()), comm, stream);
    });
  }

  // send.count[j] elements of `in` to rank j, recv.count[i] from rank i into `out`: one
  // grouped send and receive per peer (NCCL has no all-to-all call of its own).
  WorkHandle do_all_to_all_async(Tensor& out, const Tensor& in, const Exchange& send,
                                 const Exchange& recv) override {
    Tensor src = in.contiguous();
    return launch("all_to_all", {src, out}, [&](ncclComm_t comm, cudaStream_t stream) {
      const size_t element = element_size(src.dtype());
      const ncclDataType_t type = nccl_type(src.dtype());
      const char* from = static_cast<const char*>(src.raw_data());
      char* into = static_cast<char*>(out.raw_data());
      nccl_detail::in_group(  // ended even when a call in it fails (group.h)
          ncclSuccess, &ncclGroupStart, &ncclGroupEnd,
          [&](auto note) {
            for (size_t peer = 0; peer < size_t(size()); ++peer) {
              if (send.count[peer] > 0)
                note(ncclSend(from + send.offset[peer] * element, size_t(send.count[peer]), type,
                              int(peer), comm, stream),
                     "ncclSend");
              if (recv.count[peer] > 0)
                note(ncclRecv(into + recv.offset[peer] * element, size_t(recv.count[peer]), type,
                              int(peer), comm, stream),
                     "ncclRecv");
            }
          },
          [](ncclResult_t code, const char* call) {
            throw_nccl("all_to_all", code, call, __FILE__, __LINE__);
          });
    });
  }

  // Groups of a World start their own NCCL communicators from their MPI group
  // (world.cpp); a communicator that is NCCL alone (RINGGRAD_COMM=nccl) splits itself
  // with ncclCommSplit (NCCL >= 2.18): a collective over this communicator, issued
  // after everything posted before it. NCCL orders each group by key, ties by rank.
  // NCCL wants no operation outstanding on a communicator being split (with some
  // still running on the comm stream, several GPUs can deadlock in it): the host
  // first waits, watched as any wait is, until the comm stream has drained.
  std::unique_ptr<Communicator> do_split(int color, int key) override {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    NcclState& s = *state_;
    ncclComm_t child = nullptr;
    Event drained;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.check_usable("split");
      s.start_pending();
      drained.record(s.comm_stream);
    }
    s.host_wait(drained, "split");  // (outside the lock: host_wait looks at NCCL's errors under it)
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.check_usable("split");
      RG_CUDA_CHECK(cudaSetDevice(s.device));
      RG_NCCL("split", ncclCommSplit, s.comm, color == kNoGroup ? NCCL_SPLIT_NOCOLOR : color, key,
              &child, nullptr);
    }
    if (color == kNoGroup) return nullptr;
    return std::make_unique<NcclCommunicator>(bootstrap_, s.device, child);
#else
    fail("split", "expected NCCL 2.18 or newer for ncclCommSplit, got ", NCCL_MAJOR, ".",
         NCCL_MINOR, " (split the World's communicator instead: its groups start their own "
         "NCCL communicators from MPI groups)");
#endif
  }

  // The data is read while the send is in flight: do not change t before wait().
  WorkHandle do_send_async(const Tensor& t, int dst, int tag) override {
    return post("send", /*is_send=*/true, {t.contiguous(), nullptr}, dst);
  }

  WorkHandle do_recv_async(Tensor& t, int src, int tag) override {
    return post("recv", /*is_send=*/false, in_place(t), src);
  }

 private:
  // Issues one collective: on the comm stream, after [ready]; [done] after it.
  std::shared_ptr<NcclWork> launch(const char* op, std::vector<Tensor> keep,
                                   const std::function<void(ncclComm_t, cudaStream_t)>& call) {
    NcclState& s = *state_;
    auto work = std::make_shared<NcclWork>(op, state_, std::move(keep));
    std::lock_guard<std::mutex> lock(s.mutex);
    s.check_usable(op);
    s.start_pending();  // sends/recvs posted earlier go first: NCCL sees every rank's calls in
                        // issue order
    // [ready]: the comm stream waits for everything issued so far on the compute stream.
    Event ready;
    ready.record(s.compute);
    ready.block(s.comm_stream);
    call(s.comm, s.comm_stream);
    work->mark_started(s.comm_stream);  // [done]
    return work;
  }

  // Posts a send or receive; it starts with its group (start_pending).
  std::shared_ptr<NcclWork> post(const char* op, bool is_send, InPlace io, int peer) {
    NcclState& s = *state_;
    auto work = std::make_shared<NcclWork>(op, state_, std::vector<Tensor>{io.buf});
    work->finish_ = std::move(io.copy_back);
    auto ready = std::make_unique<Event>();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.check_usable(op);
    ready->record(s.compute);  // this transfer's [ready]
    s.pending.push_back({is_send, io.buf, peer, std::move(ready), work});
    return work;
  }

  Communicator& bootstrap_;
  std::shared_ptr<NcclState> state_;
  Tensor barrier_buf_;  // one float32 on this rank's GPU
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device) {
  return std::make_unique<NcclCommunicator>(bootstrap, device);
}

}  // namespace ringgrad::parallel
