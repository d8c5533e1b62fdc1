// communicator.h — how ranks talk: the collectives data parallelism is made of.
//
//   rg::parallel::World world(argc, argv);          // mpirun -> N ranks; plain run -> 1
//   rg::parallel::Communicator& comm = world.communicator();
//   comm.all_reduce(grad, rg::parallel::Reduce::Avg);  // every rank now holds the average
//
// One interface, several backends: MPI for CPU tensors, NCCL for
// CUDA tensors (parallel/nccl/), and a world of one where every collective is
// the identity. Everything above — DDP, ring attention — is written against
// this interface only. Operations on one communicator run in the order they
// were issued, on every rank; the *_async forms return at once with a Work
// handle whose wait() makes the result visible to what comes after it (so DDP
// can keep computing gradients while earlier buckets are being reduced). On the
// CPU backends wait() blocks until the operation is done; on NCCL it orders the
// GPU's compute stream after it and returns (the host waits when it reads).
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringgrad/core/safetensors.h"  // NamedTensors
#include "ringgrad/core/tensor.h"

namespace ringgrad::parallel {

enum class Reduce { Sum, Avg, Max };

// The kinds of operation a communicator counts its traffic by (wire_bytes(kind)).
enum class Collective { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Send };
inline constexpr int kCollectives = 7;
// "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "send".
const char* collective_name(Collective kind);

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;  // rethrows the operation's error, if any
  virtual bool is_completed() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

// The contract every backend keeps, checked here once for all of them: the
// public collectives are not virtual. Each checks its arguments (a defined
// tensor the backend can move, ranks in [0, size), tag >= 0, Reduce::Avg only
// on floating tensors, the sizes of gathered and scattered buffers) and then calls
// the backend's protected do_* method, which may assume them — the rule core/
// follows too ("ops check, backends compute", core/backend.h). A backend adds
// only its own check_tensor (which tensors it moves: CPU for MPI, its GPU for NCCL).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi", "nccl", "single"; a World on a GPU host: "nccl+mpi" or "nccl+single"
  // (CUDA tensors over NCCL, CPU tensors over the other; see world.h).
  virtual std::string backend_name() const = 0;

  // In place: afterwards every rank's t holds the reduction over all ranks' t.
  WorkHandle all_reduce_async(Tensor& t, Reduce op = Reduce::Sum);
  void all_reduce(Tensor& t, Reduce op = Reduce::Sum) { all_reduce_async(t, op)->wait(); }
  // In place: every rank's t becomes root's t.
  WorkHandle broadcast_async(Tensor& t, int root);
  void broadcast(Tensor& t, int root = 0) { broadcast_async(t, root)->wait(); }
  // In place on root only: root's t becomes the reduction over all ranks' t; the
  // others' t is only read (ZeRO-2 sends each gradient to the rank that owns it).
  WorkHandle reduce_async(Tensor& t, int root, Reduce op = Reduce::Sum);
  void reduce(Tensor& t, int root, Reduce op = Reduce::Sum) { reduce_async(t, root, op)->wait(); }
  // Every rank's t, stacked: result (size, *t.shape) in rank order.
  Tensor all_gather(const Tensor& t);
  // The same into a caller's buffer, not waited for (torch's all_gather_into_tensor):
  // out — contiguous, size · in.numel() elements of in's dtype, on in's device —
  // gets rank r's `in` as its r-th chunk. Sharded training overlaps it with compute.
  WorkHandle all_gather_async(Tensor& out, const Tensor& in);
  // t (size·k, …) reduced over ranks; rank r keeps rows [r·k, (r+1)·k).
  Tensor reduce_scatter(const Tensor& t, Reduce op = Reduce::Sum);
  // The same into a caller's buffer, not waited for (torch's reduce_scatter_tensor):
  // in has size · out.numel() elements; out (contiguous) gets the reduction over
  // the ranks of in's r-th chunk of out.numel() elements, r = this rank.
  WorkHandle reduce_scatter_async(Tensor& out, const Tensor& in, Reduce op = Reduce::Sum);
  // Every rank sends chunk j of `in` to rank j and receives rank i's chunk into chunk i
  // of `out` (MPI_Alltoall; torch's all_to_all_single): in and out have size() equal
  // chunks of one dtype, out contiguous. Ulysses' context parallelism turns sequence
  // shards into head shards with it.
  WorkHandle all_to_all_async(Tensor& out, const Tensor& in);
  void all_to_all(Tensor& out, const Tensor& in) { all_to_all_async(out, in)->wait(); }
  // The same with rows of different counts (MPI_Alltoallv; torch's all_to_all_single with
  // split sizes): rank j gets send_rows[j] rows of `in` (dim 0, in rank order), and rank i's
  // rows land in order in `out`, recv_rows[i] of them. in and out share dtype, device and
  // the shape after dim 0; out is contiguous. Rank i's send_rows[j] must equal rank j's
  // recv_rows[i] — an expert layer sends its counts first, by the all_to_all above.
  WorkHandle all_to_all_async(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_rows,
                              const std::vector<int64_t>& recv_rows);
  // Point to point (contiguous tensors; shapes and dtypes must match on both sides).
  WorkHandle send_async(const Tensor& t, int dst, int tag = 0);
  WorkHandle recv_async(Tensor& t, int src, int tag = 0);
  void send(const Tensor& t, int dst, int tag = 0) { send_async(t, dst, tag)->wait(); }
  void recv(Tensor& t, int src, int tag = 0) { recv_async(t, src, tag)->wait(); }
  virtual void barrier() = 0;

  // Bytes this rank has put on the wire through this communicator, counted as ring
  // algorithms send them: all_reduce 2(N−1)/N of the tensor, all_gather (N−1) × its
  // input, reduce_scatter, all_to_all, broadcast and reduce (N−1)/N of theirs, send all
  // of it; all_to_all with counts the rows it sends to other ranks. A model of the traffic
  // (MPI and NCCL may choose other algorithms), the same on every backend: what benchmarks
  // compare between methods.
  int64_t wire_bytes() const { return wire_bytes_.load(); }
  // The same by kind of operation, and how many operations of that kind went on the wire
  // (with more than one rank; a model of a step's time needs both: each operation's
  // latency, and its bytes).
  int64_t wire_bytes(Collective kind) const { return by_kind_[size_t(kind)].bytes.load(); }
  int64_t operations(Collective kind) const { return by_kind_[size_t(kind)].operations.load(); }
  // Of what this rank sent, the bytes that went to other hosts in hierarchical all-reduces
  // (symmetric_empty tensors, ranks on several hosts: parallel/mpi/shared_memory.h):
  // per all-reduce, 2(H−1)/H of this rank's chunk (its 1/k of the tensor, k ranks per
  // host), as a ring over the H hosts sends it. 0 on one host, and where the backend does
  // not know (other operations across hosts; NCCL, which picks its own algorithm).
  int64_t cross_host_bytes() const {
    return total_cross_host_bytes() - cross_host_bytes_at_reset_;
  }
  void reset_wire_bytes() {  // every count
    wire_bytes_ = 0;
    for (Counted& c : by_kind_) c.bytes = 0, c.operations = 0;
    cross_host_bytes_at_reset_ = total_cross_host_bytes();
  }

  // ---- process groups
  // A sub-communicator (MPI_Comm_split): the ranks that pass the same color >= 0
  // form one group, numbered in order of key (ties: by rank here); a rank that
  // passes kNoGroup gets nullptr. Every rank of this communicator calls it, in
  // the same order as its other collectives. A group keeps this same contract and
  // checks, with its own rank numbering; it must be destroyed before its parent.
  // A world of one splits into worlds of one.
  static constexpr int kNoGroup = -1;
  std::unique_ptr<Communicator> split(int color, int key);
  // torch's new_group: the group of `ranks`, ranks[i] becoming its rank i. Every
  // rank calls it (a collective); the ranks not listed get nullptr.
  std::unique_ptr<Communicator> new_group(const std::vector<int>& ranks);

  // A tensor that will be all-reduced again and again, like DDP's buckets, in
  // "symmetric memory" (PyTorch's term): every rank allocates it together —
  // same shape and dtype, same order: it is a collective. The MPI backend
  // places it where every rank of its host can read it, and all_reduce of the
  // whole tensor then runs without MPI within the host, each rank reading the
  // others' copies — and, with ranks on several hosts (the same number on each),
  // through MPI between hosts for one chunk per rank: hierarchical
  // (parallel/mpi/shared_memory.h). Elsewhere it is ordinary memory. Contents
  // start unspecified, as with empty().
  virtual Tensor symmetric_empty(const Shape& shape, TensorOptions options = {});
  // Ends every rank of the job at once (MPI_Abort) after a fatal error on this
  // one, so that no rank waits forever for a peer that is gone. A world of one
  // has nobody to stop and returns; the caller then returns its error code.
  virtual void abort(int code) = 0;

 protected:
  // The backend's own condition on a tensor, after the shared ones (defined):
  // its device, or a size its library cannot count. Throws ringgrad::Error.
  virtual void check_tensor(const Tensor& t, const char* op) const {}

  // The backend's collectives, called with arguments already checked.
  virtual WorkHandle do_all_reduce_async(Tensor& t, Reduce op) = 0;
  virtual WorkHandle do_broadcast_async(Tensor& t, int root) = 0;
  virtual WorkHandle do_reduce_async(Tensor& t, int root, Reduce op) = 0;
  virtual WorkHandle do_all_gather_async(Tensor& out, const Tensor& in) = 0;
  virtual WorkHandle do_reduce_scatter_async(Tensor& out, const Tensor& in, Reduce op) = 0;
  // An all-to-all's layout in one buffer, in elements, one entry per rank in rank order:
  // how many go to (come from) that rank, and where they start.
  struct Exchange {
    std::vector<int64_t> count, offset;
  };
  // send.count[j] elements of `in` (contiguous) from send.offset[j] to rank j, recv.count[i]
  // from rank i into `out` at recv.offset[i] (the equal-chunk form passes equal counts).
  virtual WorkHandle do_all_to_all_async(Tensor& out, const Tensor& in, const Exchange& send,
                                         const Exchange& recv) = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key) = 0;
  virtual WorkHandle do_send_async(const Tensor& t, int dst, int tag) = 0;
  virtual WorkHandle do_recv_async(Tensor& t, int src, int tag) = 0;
  // cross_host_bytes() since the communicator was made: backends that know count it.
  virtual int64_t total_cross_host_bytes() const { return 0; }

 private:
  void check(const Tensor& t, const char* op) const;
  void check_rank(int r, const char* op, const char* what) const;
  void check_chunks(const Tensor& whole, const Tensor& part, const Tensor& out,
                    const char* op) const;
  void check_exchange(const Tensor& in, const Tensor& out) const;
  // The layout of counts[r] elements for each rank r, one after another.
  static Exchange exchange_of(std::vector<int64_t> counts);
  // wire_bytes (in all, and of `kind`) += fraction · t's bytes; one more operation of `kind`.
  void count_wire_bytes(Collective kind, double fraction, const Tensor& t);
  void count_wire_bytes(Collective kind, int64_t bytes);
  struct Counted {
    std::atomic<int64_t> bytes{0}, operations{0};
  };
  std::atomic<int64_t> wire_bytes_{0};
  std::array<Counted, kCollectives> by_kind_;
  std::atomic<int64_t> cross_host_bytes_at_reset_{0};
};

// RINGGRAD_COMM_TIMEOUT_S: seconds a rank waits for an operation before it ends
// the job, naming the operation, its number and (MPI backend, ranks on this host) the
// ranks that never reached it (default 300; `off`: wait forever, returned as 0). Read by
// every backend through this one function; anything else — 0, a negative number, a
// word — is an error naming the variable and the value.
double comm_timeout_seconds();
// RINGGRAD_SHM_ALLREDUCE: 1 (the default) lets the MPI backend all-reduce through the
// host's shared memory; 0 sends every all-reduce through MPI (to compare the two).
// Anything else is an error naming the variable and the value.
bool shared_memory_allreduce();
// RINGGRAD_TEST_RANKS_PER_HOST=k, a test hook: every k consecutive ranks are one "host",
// so that one machine plays several (parallel/mpi/shared_memory.h). 0 when not set; a value
// that is not a whole number >= 1 is an error naming the variable.
int test_ranks_per_host();

// Every tensor made equal to root's, one broadcast each, in order (a collective):
// how DDP, ZeRO-2 and FSDP start every replica from the same parameters and buffers.
void broadcast_tensors(Communicator& comm, const std::vector<Tensor>& tensors, int root = 0);
// Every parameter's .grad (those that have one) reduced over comm in place, one
// all-reduce each, in order (a collective): Avg averages data-parallel replicas' gradients,
// Sum adds partial gradients (sequence-parallel LayerNorms).
void all_reduce_grads(const std::vector<Tensor>& params, Communicator& comm, Reduce op = Reduce::Sum);

// ---- ranks that agree or stop
// Every rank started with the same arguments is something a launcher cannot promise
// (a different --batch-size on one host pairs all-reduces of different steps; a
// different --lr diverges the replicas silently). These compare, at start-up, what
// must be equal on every rank, and stop every rank at once when it is not.

// A collective: every rank passes its values (setting name -> value as text); when any
// rank's differ from rank 0's, every rank throws the same ringgrad::Error naming the
// setting, the ranks and both values ("ranks disagree on batch_size: rank 0 has 64,
// rank 1 has 32"), which main_guard turns into the end of the job. `what` says whose
// settings they are, for the message.
void check_same_across_ranks(Communicator& comm, const std::map<std::string, std::string>& values,
                             const std::string& what = "the settings");

// check_same_across_ranks over the names, dtypes and shapes of a module's state (a
// collective): a replica built with another model stops with an error naming the
// tensor and both shapes, before a broadcast of mismatched sizes could hang or corrupt.
void check_same_layout_across_ranks(Communicator& comm, const NamedTensors& state,
                                    const std::string& what);

// A collective: every rank says whether it goes on (nullopt) or leaves now with an exit
// code (an argument error, --help). If any rank leaves, all do: the result is the code
// this rank should return (its own, or the first leaving rank's for the others, who
// print which rank left); nullopt when every rank goes on. A rank that simply returned
// would leave the others waiting in their first collective until the watchdog fires.
std::optional<int> agree_to_start(Communicator& comm, std::optional<int> exit_code);

// A world of one: every collective leaves its tensor as it is.
std::unique_ptr<Communicator> make_single_communicator();

}  // namespace ringgrad::parallel
