// communicator.cpp — the contract every Communicator keeps, checked once; and
// the world of one.
//
// The public collectives check their arguments here and call the backend's
// do_* method: a backend never repeats these checks, and a new one (a process
// group, say) gets them for free.
//
// The world of one: a program started without mpirun runs with this backend, so the same training
// code works alone and in a group. Every collective over one rank is the
// identity: the sum (or average, or max) of one tensor is that tensor, a
// broadcast from rank 0 to rank 0 moves nothing. The Work handles it returns
// are complete from the start. Point to point has no peer to talk to, so send
// and recv are errors rather than silent no-ops (a recv could never be matched).
#include "ringgrad/parallel/communicator.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/factory.h"

namespace ringgrad::parallel {

// ---- the contract ----

void Communicator::check(const Tensor& t, const char* op) const {
  RG_CHECK(t.defined(), op, "expected a defined tensor, got an undefined one");
  check_tensor(t, op);
}

void Communicator::check_rank(int r, const char* op, const char* what) const {
  RG_CHECK(r >= 0 && r < size(), op, "expected ", what, " in [0, ", size(), "), got ", r);
}

// An integer average would have to round: refused on every backend alike, so a
// program that works alone also works under mpirun.
static void check_reduce(const Tensor& t, Reduce op, const char* name) {
  RG_CHECK(op != Reduce::Avg || is_floating(t.dtype()), name,
           "expected a floating-point tensor for Reduce::Avg, got ", t.dtype());
}

void Communicator::count_wire_bytes(double fraction, const Tensor& t) {
  wire_bytes_ += static_cast<int64_t>(fraction * double(t.nbytes()));
}

WorkHandle Communicator::all_reduce_async(Tensor& t, Reduce op) {
  check(t, "all_reduce");
  check_reduce(t, op, "all_reduce");
  count_wire_bytes(2.0 * (size() - 1) / size(), t);
  return do_all_reduce_async(t, op);
}

WorkHandle Communicator::broadcast_async(Tensor& t, int root) {
  check(t, "broadcast");
  check_rank(root, "broadcast", "root");
  count_wire_bytes(double(size() - 1) / size(), t);
  return do_broadcast_async(t, root);
}

WorkHandle Communicator::reduce_async(Tensor& t, int root, Reduce op) {
  check(t, "reduce");
  check_rank(root, "reduce", "root");
  check_reduce(t, op, "reduce");
  count_wire_bytes(double(size() - 1) / size(), t);
  return do_reduce_async(t, root, op);
}

Tensor Communicator::all_gather(const Tensor& t) {
  check(t, "all_gather");
  Shape shape = t.shape();
  shape.insert(shape.begin(), size());
  Tensor out = empty(shape, {.dtype = t.dtype(), .device = t.device()});
  count_wire_bytes(size() - 1, t);
  do_all_gather_async(out, t)->wait();
  return out;
}

// The buffers of a gather or scatter: `whole` holds size() chunks of part.numel().
void Communicator::check_chunks(const Tensor& whole, const Tensor& part, const Tensor& out,
                                const char* op) const {
  check(whole, op);
  check(part, op);
  RG_CHECK(whole.dtype() == part.dtype() && whole.device() == part.device(), op,
           "expected both tensors of one dtype on one device, got ", whole.describe(), " and ",
           part.describe());
  RG_CHECK(out.is_contiguous(), op, "expected a contiguous output buffer, got ", out.describe());
  RG_CHECK(whole.numel() == part.numel() * size(), op, "expected ", size(), " × ", part.numel(),
           " = ", part.numel() * size(), " elements in the whole buffer (one chunk per rank), got ",
           whole.describe());
}

WorkHandle Communicator::all_gather_async(Tensor& out, const Tensor& in) {
  check_chunks(out, in, out, "all_gather");
  count_wire_bytes(size() - 1, in);
  return do_all_gather_async(out, in);
}

WorkHandle Communicator::all_to_all_async(Tensor& out, const Tensor& in) {
  check(in, "all_to_all");
  check(out, "all_to_all");
  RG_CHECK(in.dtype() == out.dtype() && in.device() == out.device(), "all_to_all",
           "expected both tensors of one dtype on one device, got ", in.describe(), " and ",
           out.describe());
  RG_CHECK(out.is_contiguous(), "all_to_all", "expected a contiguous output buffer, got ",
           out.describe());
  RG_CHECK(in.numel() == out.numel() && in.numel() % size() == 0, "all_to_all",
           "expected in and out of one size, divisible into ", size(),
           " chunks (one per rank), got ", in.describe(), " and ", out.describe());
  count_wire_bytes(double(size() - 1) / size(), in);
  return do_all_to_all_async(out, in);
}

Tensor Communicator::reduce_scatter(const Tensor& t, Reduce op) {
  check(t, "reduce_scatter");
  check_reduce(t, op, "reduce_scatter");
  RG_CHECK(t.dim() >= 1 && t.size(0) % size() == 0, "reduce_scatter",
           "expected dim 0 divisible by the world size ", size(), ", got shape ", t.shape());
  Shape shape = t.shape();
  shape[0] /= size();
  Tensor out = empty(shape, {.dtype = t.dtype(), .device = t.device()});
  count_wire_bytes(double(size() - 1) / size(), t);
  do_reduce_scatter_async(out, t, op)->wait();
  return out;
}

WorkHandle Communicator::reduce_scatter_async(Tensor& out, const Tensor& in, Reduce op) {
  check_chunks(in, out, out, "reduce_scatter");
  check_reduce(in, op, "reduce_scatter");
  count_wire_bytes(double(size() - 1) / size(), in);
  return do_reduce_scatter_async(out, in, op);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  RG_CHECK(color >= 0 || color == kNoGroup, "split", "expected a color >= 0 (or kNoGroup), got ",
           color);
  return do_split(color, key);
}

std::unique_ptr<Communicator> Communicator::new_group(const std::vector<int>& ranks) {
  RG_CHECK(!ranks.empty(), "new_group", "expected at least one rank, got none");
  std::vector<bool> seen(static_cast<size_t>(size()), false);
  int position = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    check_rank(ranks[i], "new_group", "ranks");
    RG_CHECK(!seen[static_cast<size_t>(ranks[i])], "new_group", "expected distinct ranks, got ",
             ranks[i], " twice");
    seen[static_cast<size_t>(ranks[i])] = true;
    if (ranks[i] == rank()) position = static_cast<int>(i);
  }
  return split(position >= 0 ? 0 : kNoGroup, position);
}

WorkHandle Communicator::send_async(const Tensor& t, int dst, int tag) {
  check(t, "send");
  check_rank(dst, "send", "dst");
  RG_CHECK(tag >= 0, "send", "expected a tag >= 0, got ", tag);
  count_wire_bytes(1.0, t);
  return do_send_async(t, dst, tag);
}

WorkHandle Communicator::recv_async(Tensor& t, int src, int tag) {
  check(t, "recv");
  check_rank(src, "recv", "src");
  RG_CHECK(tag >= 0, "recv", "expected a tag >= 0, got ", tag);
  return do_recv_async(t, src, tag);
}

double comm_timeout_seconds() {
  const char* text = std::getenv("RINGGRAD_COMM_TIMEOUT_S");
  if (!text) return 300.0;
  errno = 0;
  char* end = nullptr;
  double seconds = std::strtod(text, &end);
  RG_CHECK(end != text && *end == '\0' && errno == 0 && std::isfinite(seconds) && seconds >= 0,
           "RINGGRAD_COMM_TIMEOUT_S",
           "expected a number of seconds >= 0 (0: wait without a limit), got '", text, "'");
  return seconds;
}

// Backends without memory their peers can reach: ordinary memory.
Tensor Communicator::symmetric_empty(const Shape& shape, TensorOptions options) {
  return empty(shape, options);
}

namespace {

// A Work that was done before anyone asked.
class CompletedWork : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

WorkHandle completed() { return std::make_shared<CompletedWork>(); }

// Checks nothing itself: the contract (above) is the same as on a real world.
class SingleCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "single"; }
  void barrier() override {}
  void abort(int) override {}  // nobody else to stop

 protected:
  WorkHandle do_all_reduce_async(Tensor&, Reduce) override { return completed(); }
  WorkHandle do_broadcast_async(Tensor&, int) override { return completed(); }
  WorkHandle do_reduce_async(Tensor&, int, Reduce) override { return completed(); }
  // One rank: its chunk is the whole buffer, copied (as on a real world, the
  // output never shares memory with the input).
  WorkHandle do_all_gather_async(Tensor& out, const Tensor& in) override {
    out.copy_(in.reshape(out.shape()));
    return completed();
  }
  WorkHandle do_reduce_scatter_async(Tensor& out, const Tensor& in, Reduce) override {
    out.copy_(in.reshape(out.shape()));
    return completed();
  }
  WorkHandle do_all_to_all_async(Tensor& out, const Tensor& in) override {
    out.copy_(in.reshape(out.shape()));
    return completed();
  }
  std::unique_ptr<Communicator> do_split(int color, int) override {
    if (color == kNoGroup) return nullptr;
    return make_single_communicator();
  }
  WorkHandle do_send_async(const Tensor&, int, int) override {
    fail("send", "expected a peer rank, got a world of one");
  }
  WorkHandle do_recv_async(Tensor&, int, int) override {
    fail("recv", "expected a peer rank, got a world of one");
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator() {
  return std::make_unique<SingleCommunicator>();
}

void broadcast_tensors(Communicator& comm, const std::vector<Tensor>& tensors, int root) {
  NoGradGuard no_grad;
  for (const Tensor& t : tensors) {
    Tensor data = t.detach();
    comm.broadcast(data, root);
  }
}

void all_reduce_grads(const std::vector<Tensor>& params, Communicator& comm, Reduce op) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) comm.all_reduce(g, op);
  }
}

}  // namespace ringgrad::parallel
