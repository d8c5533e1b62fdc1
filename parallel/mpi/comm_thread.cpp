// comm_thread.cpp — the communication thread's loop, and waiting on its work.
//
// See comm_thread.h for the picture. Two details live here: how the thread
// waits (asleep when idle; polling while operations are in flight, eagerly at
// first, then in short naps), and the watchdog in MpiWork::wait(), which turns
// "a peer died and we wait forever" into a prompt, explained abort of the job.
// Trace events (core/trace.h) are recorded in start() and poll(), and by wait().
#include "ringgrad/parallel/mpi/comm_thread.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

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
  struct Waiting {  // counted while this caller waits: the thread polls eagerly meanwhile
    std::atomic<int>* n;
    explicit Waiting(std::atomic<int>* w) : n(w) { if (n) n->fetch_add(1); }
    ~Waiting() { if (n) n->fetch_sub(1); }
  } waiting(waiters_ && !is_completed() ? waiters_.get() : nullptr);
  if (info_->timeout_s > 0) {
    auto limit = std::chrono::duration<double>(info_->timeout_s);
    if (future_.wait_for(limit) == std::future_status::timeout) {
      // A peer died or stalled mid-operation: waiting longer would hang the
      // job forever. End every rank now, saying who gave up on what. (Called
      // from this thread while the communication thread may be inside MPI:
      // MPI_Abort is the one call that must work from anywhere.)
      std::string what = op_;
      if (seq > 0) what += " (collective #" + std::to_string(seq) + " on its communicator)";
      if (peer >= 0) what += std::string(" (") + (what.rfind("send", 0) == 0 ? "to" : "from") +
                             " rank " + std::to_string(info_->progress && static_cast<size_t>(peer) <
                                                       info_->progress->world_rank.size()
                                                           ? info_->progress->world_rank[peer]
                                                           : peer) +
                             ")";
      std::string who = "another rank has probably failed or stalled";
      if (seq > 0 && info_->progress) {
        std::string missing = info_->progress->missing(seq, info_->comm_rank);
        if (!missing.empty()) who = "ranks that have not reached it: " + missing;
      }
      std::fprintf(stderr,
                   "[rank %d/%d] error: %s did not complete within %g s "
                   "(RINGGRAD_COMM_TIMEOUT_S); %s. Aborting the job.\n",
                   info_->rank, info_->size, what.c_str(), info_->timeout_s, who.c_str());
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

// ---- the progress table ----

std::shared_ptr<ProgressTable> ProgressTable::create(MPI_Comm comm) {
  static_assert(sizeof(std::atomic<int64_t>) == sizeof(int64_t));
  auto table = std::make_shared<ProgressTable>();
  int size = 0, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &table->node) != MPI_SUCCESS)
    return nullptr;
  int64_t* base = nullptr;
  if (MPI_Win_allocate_shared(sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, table->node, &base,
                              &table->window) != MPI_SUCCESS) {
    MPI_Comm_free(&table->node);
    return nullptr;
  }
  *base = 0;
  table->mine = base;
  // Which slot is whose: the node's ranks translated to the communicator's and the job's.
  int node_size = 0;
  MPI_Comm_size(table->node, &node_size);
  MPI_Group node_group, comm_group, world_group;
  MPI_Comm_group(table->node, &node_group);
  MPI_Comm_group(comm, &comm_group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> node_ranks(static_cast<size_t>(node_size)), in_comm(node_ranks.size());
  for (int i = 0; i < node_size; ++i) node_ranks[static_cast<size_t>(i)] = i;
  MPI_Group_translate_ranks(node_group, node_size, node_ranks.data(), comm_group, in_comm.data());
  table->slots.assign(static_cast<size_t>(size), nullptr);
  for (int i = 0; i < node_size; ++i) {
    MPI_Aint bytes = 0;
    int unit = 0;
    int64_t* slot = nullptr;
    MPI_Win_shared_query(table->window, i, &bytes, &unit, &slot);
    table->slots[static_cast<size_t>(in_comm[static_cast<size_t>(i)])] =
        reinterpret_cast<std::atomic<int64_t>*>(slot);
  }
  std::vector<int> comm_ranks(static_cast<size_t>(size));
  table->world_rank.resize(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) comm_ranks[static_cast<size_t>(i)] = i;
  MPI_Group_translate_ranks(comm_group, size, comm_ranks.data(), world_group, table->world_rank.data());
  MPI_Group_free(&node_group);
  MPI_Group_free(&comm_group);
  MPI_Group_free(&world_group);
  MPI_Win_fence(0, table->window);  // every slot is 0 before anyone reads it
  return table;
}

std::string ProgressTable::missing(int64_t seq, int self) const {
  std::string out;
  int elsewhere = 0;
  for (size_t r = 0; r < slots.size(); ++r) {
    if (static_cast<int>(r) == self) continue;
    if (!slots[r]) {
      ++elsewhere;
      continue;
    }
    const int64_t at = slots[r]->load(std::memory_order_acquire);
    if (at >= seq) continue;
    if (!out.empty()) out += ", ";
    out += "rank " + std::to_string(world_rank[r]) +
           (at == 0 ? " (no collective yet)" : " (at collective #" + std::to_string(at) + ")");
  }
  if (out.empty() && elsewhere > 0)
    return "none on this host; " + std::to_string(elsewhere) + " rank(s) on other hosts, not visible from here";
  if (!out.empty() && elsewhere > 0)
    out += "; " + std::to_string(elsewhere) + " rank(s) on other hosts not visible from here";
  return out;
}

// ---- the thread ----

void CommThread::push(Op op) {
  if (trace::enabled()) op.queued_ns = trace::now_ns();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Collectives are numbered in the order they are issued, which every rank shares.
    if (op.peer < 0) op.work->seq = ++collectives_;
    op.work->peer = op.peer;
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

std::string comm_track_name(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> mine(static_cast<size_t>(size)), in_world(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) mine[static_cast<size_t>(i)] = i;
  MPI_Group_translate_ranks(group, size, mine.data(), world, in_world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  std::string name = "comm [";
  // (appended piece by piece: "," + std::to_string(…) trips GCC 12's -Wrestrict, bug 105651)
  for (int i = 0; i < size && i < 8; ++i) name.append(i ? "," : "").append(std::to_string(in_world[static_cast<size_t>(i)]));
  if (size > 8) name.append(",…] (").append(std::to_string(size)).append(" ranks)");
  else name.append("]");
  return name;
}

void CommThread::loop() {
  trace::set_thread_name(name_);
  for (;;) {
    Op op;
    bool have_op = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto ready = [&] { return !queue_.empty() || stop_; };
      if (in_flight_.empty()) {
        wake_.wait(lock, ready);  // nothing to poll: sleep until there is work
      } else if (idle_polls_ < kSpinPolls || waiters_->load(std::memory_order_relaxed) > 0) {
        // Sends/recvs in flight that may finish any moment, or a caller waiting on one: look
        // again at once (yielding the core to anyone who wants it meanwhile).
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
    // An operation that runs to completion inside run() (all_to_all, the shared-memory
    // all-reduce) is this slice. One that is only posted here (the other collectives,
    // send, recv) gets its interval, post to completion, from poll().
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
      if (progress_table && progress_table->mine && op.work->seq > 0)  // "I have reached collective #seq"
        reinterpret_cast<std::atomic<int64_t>*>(progress_table->mine)->store(op.work->seq,
                                                                       std::memory_order_release);
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
