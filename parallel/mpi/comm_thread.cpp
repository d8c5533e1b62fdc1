// comm_thread.cpp — the communication thread's loop, and waiting on its work.
//
// See comm_thread.h for the picture. Two details live here: how the thread
// waits (asleep when idle; polling while sends/recvs are in flight, eagerly at
// first, then in short naps), and the watchdog in MpiWork::wait(), which turns
// "a peer died and we wait forever" into a prompt, explained abort of the job.
// Trace events (core/trace.h) are recorded in start() and poll(), and by wait().
#include "ringgrad/parallel/mpi/comm_thread.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "ringgrad/core/trace.h"

namespace ringgrad::parallel::mpi {

void throw_mpi(const char* op, int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  std::string where = file;  // from parallel/ on: short, and the same on every machine
  if (size_t at = where.rfind("parallel/"); at != std::string::npos) where = where.substr(at);
  throw Error(detail::concat("[", op, "] ", call, " failed: ", std::string(text, length), " (",
                             where, ":", line, ")"));
}

std::string Op::trace_name() const {
  std::string name = work->op();
  if (bytes > 0) name.append(" ").append(trace::format_bytes(static_cast<double>(bytes)));
  if (peer >= 0)
    name.append(name.rfind("send", 0) == 0 ? " to " : " from ").append(std::to_string(peer));
  return name;
}

// ---- Work ----

void MpiWork::wait() {
  // Shown only when the caller really waits: a slice on the caller's track.
  trace::Span span(trace::enabled() && !is_completed() ? std::string("wait ") + op_ : std::string(),
                   "comm");
  if (info_->timeout_s > 0) {
    auto limit = std::chrono::duration<double>(info_->timeout_s);
    if (future_.wait_for(limit) == std::future_status::timeout) {
      // A peer died or stalled mid-operation: waiting longer would hang the
      // job forever. End every rank now, saying who gave up on what. (Called
      // from this thread while the communication thread may be inside MPI:
      // MPI_Abort is the one call that must work from anywhere.)
      std::fprintf(stderr,
                   "[rank %d/%d] error: %s did not complete within %g s "
                   "(RINGGRAD_COMM_TIMEOUT_S); another rank has probably failed. "
                   "Aborting the job.\n",
                   info_->rank, info_->size, op_, info_->timeout_s);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  future_.get();  // rethrows the operation's error
  if (finish_) std::exchange(finish_, nullptr)();
}

bool MpiWork::is_completed() {
  return future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

// ---- the thread ----

void CommThread::push(Op op) {
  if (trace::enabled()) op.queued_ns = trace::now_ns();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(op));
  }
  wake_.notify_one();
}

void CommThread::request_stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
}

void CommThread::loop() {
  trace::set_thread_name("comm");
  for (;;) {
    Op op;
    bool have_op = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto ready = [&] { return !queue_.empty() || stop_; };
      if (in_flight_.empty()) {
        wake_.wait(lock, ready);  // nothing to poll: sleep until there is work
      } else if (idle_polls_ < kSpinPolls) {
        // Sends/recvs in flight that may finish any moment: look again at
        // once (yielding the core to anyone who wants it meanwhile).
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      } else {
        // In flight for a while (a large or late message): poll less often,
        // leaving the cores to the computation this transfer overlaps.
        wake_.wait_for(lock, std::chrono::microseconds(50), ready);
      }
      if (!queue_.empty()) {
        op = std::move(queue_.front());
        queue_.pop_front();
        have_op = true;
      } else if (stop_ && in_flight_.empty()) {
        return;
      }
    }
    if (have_op) start(std::move(op));
    bool progressed = poll() || have_op;
    idle_polls_ = progressed ? 0 : idle_polls_ + 1;
  }
}

void CommThread::start(Op op) {
  try {
    // A collective runs to completion inside run(): this slice is the whole
    // all-reduce. A send/recv is only posted here; poll() records its interval.
    // The slice ends before succeed(): a caller woken by it may stop tracing at once.
    MPI_Request request;
    {
      trace::Span span(trace::enabled() ? op.trace_name() : std::string(), "comm");
      if (trace::enabled()) {
        op.started_ns = trace::now_ns();
        double queued_ms = static_cast<double>(op.started_ns - op.queued_ns) / 1e6;
        if (op.queued_ns > 0) span.add(trace::arg("queued_ms", queued_ms));
        span.add(trace::arg("bytes", static_cast<double>(op.bytes)));
      }
      request = op.run();
    }
    if (request == MPI_REQUEST_NULL) {
      op.work->succeed();
    } else {
      in_flight_.push_back({request, std::move(op)});
    }
  } catch (...) {
    op.work->fail_with(std::current_exception());
  }
}

// MPI_Test also drives MPI's progress engine: posted transfers advance here.
bool CommThread::poll() {
  size_t before = in_flight_.size();
  for (size_t i = 0; i < in_flight_.size();) {
    auto& [request, op] = in_flight_[i];
    int done = 0;
    MPI_Status status;
    try {
      RG_MPI(op.work->op(), MPI_Test, &request, &done, &status);
      if (done && op.on_complete) op.on_complete(status);
    } catch (...) {
      op.work->fail_with(std::current_exception());
      in_flight_.erase(in_flight_.begin() + i);
      continue;
    }
    if (done) {
      if (trace::enabled() && op.started_ns > 0)
        trace::interval(op.trace_name(), "comm", op.started_ns, trace::now_ns(),
                        {trace::arg("bytes", static_cast<double>(op.bytes))});
      op.work->succeed();
      in_flight_.erase(in_flight_.begin() + i);
    } else {
      ++i;
    }
  }
  return in_flight_.size() < before;
}

}  // namespace ringgrad::parallel::mpi
