// communicator.cpp — the world of one: a Communicator with a single rank.
//
// A program started without mpirun runs with this backend, so the same training
// code works alone and in a group. Every collective over one rank is the
// identity: the sum (or average, or max) of one tensor is that tensor, a
// broadcast from rank 0 to rank 0 moves nothing. The Work handles it returns
// are complete from the start. Point to point has no peer to talk to, so send
// and recv are errors rather than silent no-ops (a recv could never be matched).
#include "ringgrad/parallel/communicator.h"

#include "ringgrad/core/factory.h"

namespace ringgrad::parallel {

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

class SingleCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "single"; }

  WorkHandle all_reduce_async(Tensor& t, Reduce op) override {
    check_defined(t, "all_reduce");
    // An integer average would round in the MPI backend: refuse it here too,
    // so a program that works alone also works under mpirun.
    RG_CHECK(op != Reduce::Avg || is_floating(t.dtype()), "all_reduce",
             "expected a floating-point tensor for Reduce::Avg, got ", t.dtype());
    return completed();
  }

  WorkHandle broadcast_async(Tensor& t, int root) override {
    check_defined(t, "broadcast");
    RG_CHECK(root == 0, "broadcast", "expected root in [0, 1), got ", root);
    return completed();
  }

  // (size=1, *t.shape): a copy, as on a real world, so writing into the
  // result never changes t.
  Tensor all_gather(const Tensor& t) override {
    check_defined(t, "all_gather");
    return t.clone().unsqueeze(0);
  }

  Tensor reduce_scatter(const Tensor& t, Reduce op) override {
    check_defined(t, "reduce_scatter");
    RG_CHECK(t.dim() >= 1, "reduce_scatter", "expected a tensor with at least one dim, got ",
             t.describe());
    RG_CHECK(op != Reduce::Avg || is_floating(t.dtype()), "reduce_scatter",
             "expected a floating-point tensor for Reduce::Avg, got ", t.dtype());
    return t.clone();
  }

  WorkHandle send_async(const Tensor&, int, int) override {
    fail("send", "expected a peer rank, got a world of one");
  }
  WorkHandle recv_async(Tensor&, int, int) override {
    fail("recv", "expected a peer rank, got a world of one");
  }

  void barrier() override {}
  void abort(int) override {}  // nobody else to stop

 private:
  static void check_defined(const Tensor& t, const char* op) {
    RG_CHECK(t.defined(), op, "expected a defined tensor, got an undefined one");
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator() {
  return std::make_unique<SingleCommunicator>();
}

}  // namespace ringgrad::parallel
