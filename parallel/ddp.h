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
//
// 16-bit communication (parallel/README.md, "16-bit gradients on the wire"):
//  * a bucket holds one dtype, its gradients': a bfloat16 model (model.to(kBFloat16))
//    has bfloat16 buckets — half of float32's bytes on the wire — and a model mixing
//    dtypes has separate buckets per dtype;
//  * for float32 gradients, {.comm_hook = DDPCommHook::BF16Compress} is PyTorch's
//    bf16_compress_hook: each bucket is rounded to bfloat16, all-reduced (summed in
//    float32 where the backend can: see communicator.h), and written back to the
//    float32 bucket; FP16Compress is fp16_compress_hook with float16.
// The contract (tested with 1–4 processes): N ranks with batch B end with the
// same parameters as one process with batch N·B.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringgrad/nn/module.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

// PyTorch's built-in DDP communication hooks (torch.distributed.algorithms.
// ddp_comm_hooks.default_hooks): what a bucket of float32 (or float64) gradients
// becomes on the wire. Buckets already in 16 bits are sent as they are.
enum class DDPCommHook {
  None,          // all-reduced in the gradients' own dtype (allreduce_hook)
  BF16Compress,  // bf16_compress_hook: sent as bfloat16, half the bytes; float32's range
  FP16Compress,  // fp16_compress_hook: sent as float16, half the bytes; 3 more bits of
                 // precision, but values past 65504 overflow (and below ~6e-8 vanish)
};
const char* comm_hook_name(DDPCommHook hook);  // "bf16_compress_hook", …

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
  // Compress float32 buckets to 16 bits for the all-reduce (PyTorch's
  // ddp.register_comm_hook(None, bf16_compress_hook)). The average is computed in
  // float32 and rounded: the shared-memory all-reduce rounds it once, MPI's and
  // NCCL's once per step of their reduction (communicator.h), plus the rounding of
  // each rank's gradient/N to 16 bits before it is sent.
  DDPCommHook comm_hook = DDPCommHook::None;
  // Parameters (by their names in module.state_dict()) DDP leaves alone: not broadcast
  // from rank 0, not compared across ranks, not averaged — the caller synchronises them
  // (expert parallelism's experts, which differ from rank to rank and are averaged over
  // their own replicas: parallel/expert_parallel.h). torch's
  // DistributedDataParallel._set_params_and_buffers_to_ignore_for_model.
  std::vector<std::string> ignored_parameters;
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
  // Bucket i as it travels: its gradients' dtype, the dtype on the wire (16 bits
  // with a compression hook), and the bytes one all-reduce of it hands to the
  // communicator.
  struct BucketInfo {
    DType dtype;
    DType wire_dtype;
    int64_t wire_bytes;
  };
  BucketInfo bucket_info(size_t i) const;
  // Bytes handed to all-reduce so far, summed over every synchronised backward (each
  // bucket's wire_bytes per backward; 0 in a world of one, which sends nothing).
  int64_t allreduce_bytes() const;

  struct State;  // buckets and per-backward bookkeeping (ddp.cpp)

 private:
  nn::Module& module_;
  Communicator& comm_;
  DDPOptions options_;
  bool sync_ = true;
  std::shared_ptr<State> state_;  // shared with the hooks
};

}  // namespace ringgrad::parallel
