// ddp.h — DistributedDataParallel: the same model on every rank, gradients averaged.
//
//   rg::parallel::World world(argc, argv);
//   SimpleModel model;
//   rg::parallel::DistributedDataParallel ddp(model, world.communicator());
//   rg::optim::Adam opt(model.parameters(), {.lr = 1e-3});
//   …  loss = rg::nn::cross_entropy(ddp(x), y);
//      loss.backward();    // buckets are all-reduced while backward still runs
//      opt.step();         // every rank applies the same averaged gradient
//
// Start with examples/ddp_from_scratch.cpp: the same idea in one page (broadcast,
// then one blocking ring all-reduce per gradient from a hook). This is that idea
// with buckets and overlap. How it works (PyTorch DDP's engineering; ddp.cpp
// follows these steps in order):
//  1. Construction broadcasts rank 0's parameters and buffers: every replica starts equal.
//  2. Parameters are grouped into buckets of ~25 MB, in reverse order of
//     registration (roughly the order backward produces their gradients), the
//     first bucket small so communication starts early.
//  3. A gradient hook on each parameter fires when its gradient is final for
//     this backward; it copies the gradient, divided by the world size, into
//     its bucket. When a bucket is full it starts a non-blocking all-reduce
//     (a sum: of pre-divided gradients, so the average) and backward carries
//     on. Buckets start strictly in order, so every rank issues the same
//     collectives in the same order.
//  4. At the end of backward, DDP waits for the buckets and points each .grad at
//     its averaged slice of the bucket: optimizer.step() sees the global gradient.
// In a world of one there is nothing to average: DDP keeps its checks (unused
// parameters) but copies and sends nothing.
// The contract (tested with 1–4 processes): N ranks with batch B end with the
// same parameters as one process with batch N·B.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringgrad/nn/module.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

struct DDPOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  // Parameters that get no gradient in a backward: an error naming them
  // (default), or, when true, reduced as zeros.
  bool find_unused_parameters = false;
  // After backward each .grad is a view into DDP's bucket (the averaged values in
  // place, no copy back), as PyTorch's gradient_as_bucket_view: the next synchronised
  // backward overwrites it, so copy a .grad you want to keep across steps. false:
  // .grad gets its own copy.
  bool gradient_as_bucket_view = true;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::Module& module, Communicator& comm, DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Tensor forward(const Tensor& x) { return module_(x); }  // module_(x): traced when tracing
  Tensor operator()(const Tensor& x) { return forward(x); }
  nn::Module& module() { return module_; }

  // While a NoSync guard lives, backward only accumulates local gradients (no
  // communication); the first backward after it averages the accumulated sum.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp) { ddp_.sync_ = false; }
    ~NoSync() { ddp_.sync_ = true; }

   private:
    DistributedDataParallel& ddp_;
  };
  NoSync no_sync() { return NoSync(*this); }

  size_t num_buckets() const;
  // Seconds backward has spent waiting for all-reduces to finish (what overlap did not hide).
  double comm_wait_seconds() const;
  // Bucket i's parameter names, in the order their gradients fill it.
  std::vector<std::string> bucket_parameters(size_t i) const;

  struct State;  // buckets and per-backward bookkeeping (ddp.cpp)

 private:
  nn::Module& module_;
  Communicator& comm_;
  DDPOptions options_;
  bool sync_ = true;
  std::shared_ptr<State> state_;  // shared with the hooks
};

}  // namespace ringgrad::parallel
