// mpi_communicator.cpp — Communicator over MPI_COMM_WORLD, for CPU tensors.
//
// Each operation is checked on the caller's thread (Communicator's shared checks,
// then check_tensor below), then queued for the communication thread
// (comm_thread.h) as a small closure that makes the MPI call. The closures hold
// the tensors they use, so memory stays alive until MPI is done with it. MPI failures come back
// from wait() as ringgrad::Error naming the MPI call: MPI_ERRORS_RETURN makes
// MPI return error codes instead of killing the process.
#include "ringgrad/parallel/mpi/mpi_communicator.h"

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "ringgrad/core/dtype_table.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/op_utils.h"
#include "ringgrad/parallel/mpi/comm_thread.h"
#include "ringgrad/parallel/mpi/reduced_precision.h"
#include "ringgrad/parallel/mpi/shared_memory.h"

namespace ringgrad::parallel {

namespace {

using mpi::CommThread;
using mpi::MpiWork;
using mpi::WatchdogInfo;

// ---- dtypes and reductions ----

// MPI has no 16-bit float type: bfloat16 and float16 travel as 2-byte words, and their
// reductions are our own MPI_Ops (mpi/reduced_precision.h).
const DTypeTable<MPI_Datatype>& mpi_types() {
  static const DTypeTable<MPI_Datatype> table(
      "MPI", {{kFloat32, MPI_FLOAT},
              {kFloat64, MPI_DOUBLE},
              {kInt64, MPI_INT64_T},
              {kBool, MPI_C_BOOL},
              {kBFloat16, MPI_UINT16_T},
              {kFloat16, MPI_UINT16_T}});
  return table;
}
MPI_Datatype mpi_type(DType t) { return mpi_types()(t); }

// Avg is a Sum followed by a division (done by the caller of this). MPI only
// allows logical operators on booleans: their "sum" and "max" are both OR.
// bfloat16/float16: a user-defined op that adds in float32 and rounds per combination.
MPI_Op mpi_op(Reduce op, DType t) {
  if (t == DType::Bool) return MPI_LOR;
  if (is_reduced_precision(t)) return mpi::reduced_precision_op(t, op);
  return op == Reduce::Max ? MPI_MAX : MPI_SUM;
}

// In place: t /= n, for the float dtypes (Avg is refused for the others); the 16-bit
// ones divide in float32 and round once more.
void divide(const Tensor& t, int n) {
  int64_t count = t.numel();
  if (is_reduced_precision(t.dtype())) {
    mpi::divide_reduced_precision(t.dtype(), t.raw_data(), count, n);
  } else if (t.dtype() == DType::Float32) {
    float* p = static_cast<float*>(t.raw_data());
    for (int64_t i = 0; i < count; ++i) p[i] /= static_cast<float>(n);
  } else {
    double* p = static_cast<double*>(t.raw_data());
    for (int64_t i = 0; i < count; ++i) p[i] /= n;
  }
}


// The symmetric buffers alive on this rank, by data pointer: all_reduce looks
// its tensor up here. Shared with each buffer's tensor, which removes its
// entry when it goes (possibly after the communicator).
class SymmetricRegistry {
 public:
  void add(const std::shared_ptr<mpi::SymmetricBuffer>& b) {
    std::lock_guard<std::mutex> lock(mutex_);
    buffers_[b->data()] = b;
  }
  void remove(const void* data) {
    std::lock_guard<std::mutex> lock(mutex_);
    buffers_.erase(data);
  }
  // The buffer that t is exactly (all of it, contiguous), if any.
  std::shared_ptr<mpi::SymmetricBuffer> find(const Tensor& t) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = buffers_.find(t.raw_data());
    if (it == buffers_.end() || !t.is_contiguous()) return nullptr;
    auto b = it->second.lock();
    return b && b->nbytes() == t.nbytes() ? b : nullptr;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<const void*, std::weak_ptr<mpi::SymmetricBuffer>> buffers_;
};

// The thread level MPI granted at initialisation (MULTIPLE lets groups' threads
// call MPI concurrently).
int& mpi_thread_level() {
  static int level = 0;
  return level;
}

// ---- the communicator ----

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owns_mpi) : owns_mpi_(owns_mpi) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
    auto info = std::make_shared<WatchdogInfo>();
    // A timeout names the rank in the whole job, also from inside a group.
    MPI_Comm_rank(MPI_COMM_WORLD, &info->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &info->size);
    info->timeout_s = comm_timeout_seconds();
    info->comm_rank = rank_;
    info_ = info;
    // The thread shares ownership of its state, so that if we must leave it
    // running (see the destructor) it never touches freed memory.
    thread_state_ = std::make_shared<CommThread>(comm, mpi::comm_track_name(comm));
    thread_ = std::thread([state = thread_state_] { state->loop(); });
    // Collective #1: the table of every rank's progress, for the watchdog's message.
    std::shared_ptr<mpi::ProgressTable> table;
    enqueue(new_work("progress table"), 0, -1, [&table, comm] {
      table = mpi::ProgressTable::create(comm);
      return MPI_REQUEST_NULL;
    })->wait();
    info->progress = table;
    thread_state_->progress_table = table;  // read by the thread from its next operation on
  }

  ~MpiCommunicator() override {
    thread_state_->request_stop();
    if (std::uncaught_exceptions() > 0) {
      // We are being destroyed by an exception. The other ranks may be inside
      // a collective waiting for us, and MPI_Finalize waits for them: finalizing
      // would hang the job. Leave MPI as it is; the process exits with an error
      // and mpirun then ends every rank (it does so when a rank exits without
      // MPI_Finalize). The thread may be blocked in MPI: let it go.
      static std::atomic<bool> said{false};  // once a process, not once for each of its groups
      if (!said.exchange(true))
        std::fprintf(stderr,
                     "[rank %d/%d] leaving MPI without finalizing (an exception is "
                     "propagating); mpirun will end the other ranks\n",
                     info_->rank, info_->size);  // the rank in the job, also for a group
      thread_.detach();
      return;
    }
    thread_.join();  // finishes whatever was queued
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;  // the program finalised MPI itself
    if (auto& hosts = thread_state_->hosts) hosts->free();  // collectives too
    if (auto& table = thread_state_->progress_table) {  // collectives: every rank frees its own
      MPI_Win_free(&table->window);
      MPI_Comm_free(&table->node);
    }
    MPI_Comm comm = thread_state_->comm();
    MPI_Comm_free(&comm);
    if (owns_mpi_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "mpi"; }

  void barrier() override {
    MPI_Comm comm = thread_state_->comm();
    enqueue(new_work("barrier"), 0, -1, [=] {
      RG_MPI("barrier", MPI_Barrier, comm);
      return MPI_REQUEST_NULL;
    })->wait();
  }

  Tensor symmetric_empty(const Shape& shape, TensorOptions options) override {
    if (!options.device.is_cpu() || size_ == 1) return empty(shape, options);
    size_t nbytes =
        detail::checked_nbytes(shape, options.dtype.value_or(kFloat32), "symmetric_empty");
    std::shared_ptr<mpi::SymmetricBuffer> buffer;
    MPI_Comm comm = thread_state_->comm();
    bool wanted = use_shared_memory_;  // every rank joins, wanted or not: a collective
    std::shared_ptr<mpi::HostLayout>& hosts = thread_state_->hosts;
    enqueue(new_work("symmetric_empty"), 0, -1, [&buffer, &hosts, comm, nbytes, wanted] {
      if (!hosts) hosts = mpi::HostLayout::create(comm);  // the first time: a collective too
      buffer = mpi::SymmetricBuffer::create(comm, *hosts, nbytes, wanted);
      return MPI_REQUEST_NULL;
    })->wait();
    if (!buffer) return empty(shape, options);
    symmetric_->add(buffer);
    // The tensor owns the mapping; when it goes, so does the registry entry. Its bytes
    // count in memory_stats like any storage's: this rank holds them.
    count_mapped_memory(Device::cpu(), static_cast<int64_t>(nbytes));
    return from_blob(
        buffer->data(), shape,
        [buffer, registry = symmetric_, nbytes](void* data) {
          registry->remove(data);
          count_mapped_memory(Device::cpu(), -static_cast<int64_t>(nbytes));
        },
        options);
  }

  // Straight from the caller's thread, not through the queue: the
  // communication thread may be stuck in a collective that will never finish.
  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

 protected:
  // The MPI backend moves host memory, and an MPI count is an int.
  void check_tensor(const Tensor& t, const char* op) const override {
    RG_CHECK(t.device().is_cpu(), op,
             "expected a CPU tensor (the MPI backend moves host memory; CUDA tensors go "
             "through the NCCL backend), got ",
             t.describe());
    RG_CHECK(t.numel() <= INT_MAX, op, "expected at most ", INT_MAX,
             " elements (an MPI count is an int), got ", t.numel());
  }

  WorkHandle do_all_reduce_async(Tensor& t, Reduce op) override {
    if (auto shared = symmetric_->find(t); shared && mpi::SymmetricBuffer::supports(t.dtype())) {
      // Every rank holds the same symmetric tensor, so every rank comes here.
      // It runs on the communication thread (in issue order), which keeps its
      // sends/recvs in flight moving while it waits for the peers.
      CommThread* thread = thread_state_.get();  // runs this closure: alive meanwhile
      cross_host_bytes_ += shared->cross_host_bytes(t.dtype(), t.numel());  // at issue
      return enqueue(new_work(shared->hierarchical() ? "all_reduce (hierarchical)"
                                                     : "all_reduce (shared memory)"),
                     t.nbytes(), -1,
                     [shared, t, op, thread] {
                       shared->all_reduce(t.dtype(), t.numel(), op,
                                          [thread] { thread->progress(); });
                       return MPI_REQUEST_NULL;
                     });
    }
    auto [buf, work] = in_place_buffer(t, "all_reduce");
    int n = static_cast<int>(t.numel()), size = size_;
    MPI_Comm comm = thread_state_->comm();
    // Blocking: an all-reduce is most often on the caller's critical path (tensor
    // parallelism's, a loss's), and MPI's blocking algorithm finishes it sooner than its
    // non-blocking one advanced by this thread's polls (tp 2: 1.4-1.7x the step).
    return enqueue(work, t.nbytes(), -1, [=] {
      RG_MPI("all_reduce", MPI_Allreduce, MPI_IN_PLACE, buf.raw_data(), n, mpi_type(buf.dtype()),
             mpi_op(op, buf.dtype()), comm);
      if (op == Reduce::Avg) divide(buf, size);
      return MPI_REQUEST_NULL;
    });
  }

  WorkHandle do_broadcast_async(Tensor& t, int root) override {
    auto [buf, work] = in_place_buffer(t, "broadcast");
    int n = static_cast<int>(t.numel());
    MPI_Comm comm = thread_state_->comm();
    return enqueue(work, t.nbytes(), -1, [=] {
      MPI_Request request;
      RG_MPI("broadcast", MPI_Ibcast, buf.raw_data(), n, mpi_type(buf.dtype()), root, comm, &request);
      return request;
    });
  }

  // Root reduces in place (MPI_IN_PLACE); the others only send theirs.
  WorkHandle do_reduce_async(Tensor& t, int root, Reduce op) override {
    auto [buf, work] = in_place_buffer(t, "reduce");
    int n = static_cast<int>(t.numel()), size = size_;
    const bool is_root = rank_ == root;
    MPI_Comm comm = thread_state_->comm();
    return enqueue(
        work, t.nbytes(), -1,
        [=] {
          void* data = buf.raw_data();
          MPI_Request request;
          RG_MPI("reduce", MPI_Ireduce, is_root ? MPI_IN_PLACE : data, is_root ? data : nullptr, n,
                 mpi_type(buf.dtype()), mpi_op(op, buf.dtype()), root, comm, &request);
          return request;
        },
        [=](const MPI_Status&) {
          if (is_root && op == Reduce::Avg) divide(buf, size);
        });
  }

  // Rank r's `in` becomes the r-th chunk of every rank's `out` (contiguous).
  WorkHandle do_all_gather_async(Tensor& out, const Tensor& in) override {
    Tensor src = in.contiguous();
    int n = static_cast<int>(src.numel());
    MPI_Comm comm = thread_state_->comm();
    return enqueue(new_work("all_gather"), out.nbytes(), -1, [=] {
      MPI_Datatype type = mpi_type(src.dtype());
      MPI_Request request;
      RG_MPI("all_gather", MPI_Iallgather, src.raw_data(), n, type, out.raw_data(), n, type, comm, &request);
      return request;
    });
  }

  // Chunk r of every rank's `in`, reduced, into rank r's `out` (contiguous).
  WorkHandle do_reduce_scatter_async(Tensor& out, const Tensor& in, Reduce op) override {
    Tensor src = in.contiguous();
    int n = static_cast<int>(out.numel()), size = size_;
    MPI_Comm comm = thread_state_->comm();
    return enqueue(
        new_work("reduce_scatter"), src.nbytes(), -1,
        [=] {
          MPI_Request request;
          RG_MPI("reduce_scatter", MPI_Ireduce_scatter_block, src.raw_data(), out.raw_data(), n,
                 mpi_type(src.dtype()), mpi_op(op, src.dtype()), comm, &request);
          return request;
        },
        [=](const MPI_Status&) {
          if (op == Reduce::Avg) divide(out, size);
        });
  }

  // send.count[j] elements of `in` to rank j, recv.count[i] from rank i into `out`
  // (contiguous). Counts and offsets fit an int: check_tensor refused larger tensors.
  WorkHandle do_all_to_all_async(Tensor& out, const Tensor& in, const Exchange& send,
                                 const Exchange& recv) override {
    Tensor src = in.contiguous();
    const auto ints = [](const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); };
    const std::vector<int> send_counts = ints(send.count), send_at = ints(send.offset),
                           recv_counts = ints(recv.count), recv_at = ints(recv.offset);
    MPI_Comm comm = thread_state_->comm();
    return enqueue(new_work("all_to_all"), src.nbytes(), -1, [=] {
      MPI_Datatype type = mpi_type(src.dtype());
      RG_MPI("all_to_all", MPI_Alltoallv, src.raw_data(), send_counts.data(), send_at.data(), type,
             out.raw_data(), recv_counts.data(), recv_at.data(), type, comm);
      return MPI_REQUEST_NULL;
    });
  }

  // A group is a new MPI communicator with a communication thread of its own:
  // MPI_THREAD_MULTIPLE lets the groups' threads call MPI at the same time.
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    RG_CHECK(mpi_thread_level() >= MPI_THREAD_MULTIPLE, "split",
             "expected an MPI with MPI_THREAD_MULTIPLE (each group has its own communication "
             "thread), got thread level ", mpi_thread_level());
    MPI_Comm parent = thread_state_->comm(), child = MPI_COMM_NULL;
    enqueue(new_work("split"), 0, -1, [&child, parent, color, key] {
      RG_MPI("split", MPI_Comm_split, parent, color == kNoGroup ? MPI_UNDEFINED : color, key,
             &child);
      return MPI_REQUEST_NULL;
    })->wait();
    if (child == MPI_COMM_NULL) return nullptr;
    MPI_Comm_set_errhandler(child, MPI_ERRORS_RETURN);
    return std::make_unique<MpiCommunicator>(child, /*owns_mpi=*/false);
  }

  // The data is read while the send is in flight: do not change t before wait().
  WorkHandle do_send_async(const Tensor& t, int dst, int tag) override {
    Tensor buf = t.contiguous();
    int n = static_cast<int>(t.numel());
    MPI_Comm comm = thread_state_->comm();
    return enqueue(new_work("send"), buf.nbytes(), dst, [=] {
      MPI_Request request;
      RG_MPI("send", MPI_Isend, buf.raw_data(), n, mpi_type(buf.dtype()), dst, tag, comm, &request);
      return request;
    });
  }

  int64_t total_cross_host_bytes() const override { return cross_host_bytes_.load(); }

  WorkHandle do_recv_async(Tensor& t, int src, int tag) override {
    auto [buf, work] = in_place_buffer(t, "recv");
    int n = static_cast<int>(t.numel());
    MPI_Comm comm = thread_state_->comm();
    auto post = [=] {
      MPI_Request request;
      RG_MPI("recv", MPI_Irecv, buf.raw_data(), n, mpi_type(buf.dtype()), src, tag, comm, &request);
      return request;
    };
    // A longer message is an MPI error (truncation); a shorter one is caught here.
    auto check_count = [n, src, dtype = t.dtype()](const MPI_Status& status) {
      int got = 0;
      MPI_Get_count(&status, mpi_type(dtype), &got);
      RG_CHECK(got == n, "recv", "expected ", n, " ", dtype, " elements from rank ", src, ", got ",
               got);
    };
    return enqueue(work, t.nbytes(), src, post, check_count);
  }

 private:
  std::shared_ptr<MpiWork> new_work(const char* op) {
    return std::make_shared<MpiWork>(op, info_, thread_state_->waiters());
  }

  // bytes and peer only label the operation in traces (core/trace.h).
  WorkHandle enqueue(std::shared_ptr<MpiWork> work, int64_t bytes, int peer,
                     std::function<MPI_Request()> run,
                     std::function<void(const MPI_Status&)> on_complete = nullptr) {
    mpi::Op op{std::move(run), std::move(on_complete), work};
    op.bytes = bytes;
    op.peer = peer;
    thread_state_->push(std::move(op));
    return work;
  }

  // MPI writes into contiguous memory. A non-contiguous t gets a contiguous
  // copy to work in, copied back into t by wait() on the caller's thread.
  std::pair<Tensor, std::shared_ptr<MpiWork>> in_place_buffer(Tensor& t, const char* op) {
    auto work = new_work(op);
    if (t.is_contiguous()) return {t, work};
    Tensor buf = t.contiguous();
    work->finish_ = [t, buf]() mutable { t.copy_(buf); };
    return {buf, work};
  }

  int rank_ = 0, size_ = 1;
  bool owns_mpi_ = false;
  std::shared_ptr<const WatchdogInfo> info_;
  // RINGGRAD_SHM_ALLREDUCE=0: symmetric_empty gives ordinary memory, so every all-reduce
  // goes through MPI (to compare the two).
  bool use_shared_memory_ = shared_memory_allreduce();
  std::shared_ptr<SymmetricRegistry> symmetric_ = std::make_shared<SymmetricRegistry>();
  std::atomic<int64_t> cross_host_bytes_{0};  // what hierarchical all-reduces sent to other hosts
  std::shared_ptr<CommThread> thread_state_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(int& argc, char**& argv) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  RG_CHECK(!finalized, "World", "expected MPI to be usable, got MPI already finalized");
  int provided = 0;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    // MULTIPLE where MPI has it: each communicator (the world, every process
    // group) has its own communication thread, and two of them may be inside MPI
    // at once. SERIALIZED (one at a time) is enough without groups.
    RG_MPI("World", MPI_Init_thread, &argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  }
  RG_CHECK(provided >= MPI_THREAD_SERIALIZED, "World",
           "expected an MPI with thread level MPI_THREAD_SERIALIZED or higher, got level ",
           provided);
  mpi_thread_level() = provided;
  // Errors come back as return codes (and so as exceptions), instead of MPI's
  // default of killing the process. A private duplicate of MPI_COMM_WORLD keeps
  // our messages apart from any the program sends itself.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm comm;
  RG_MPI("World", MPI_Comm_dup, MPI_COMM_WORLD, &comm);
  return std::make_unique<MpiCommunicator>(comm, !initialized);
}

}  // namespace ringgrad::parallel
