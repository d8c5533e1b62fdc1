// fsdp.h — FullyShardedDataParallel (ZeRO stage 3): parameters, gradients and
// optimizer state all sharded; each rank holds 1/N of everything between uses.
//
//   rg::parallel::FullyShardedDataParallel fsdp(model, comm, {
//       .auto_wrap_policy = rg::parallel::wrap_modules_of_type<Block>()});
//   rg::optim::AdamW opt(fsdp.parameters(), {.lr = 1e-3});  // this rank's shards
//   …  loss = rg::nn::cross_entropy(fsdp(x), y);
//      loss.backward();    // each unit's gradient is reduce-scattered as soon as it is final
//      opt.step();         // every rank updates its own shard only
//
// Read ddp.h first: FSDP keeps DDP's contract (N ranks with batch B end where one
// process with batch N·B ends) and trades memory for communication. How it works
// (PyTorch's FSDP, fsdp.cpp follows these steps in order):
//  1. Units. The wrapping policy picks submodules (say every Transformer block);
//     each becomes a unit, and the parameters outside every unit form the root unit.
//     A unit's parameters are flattened into one buffer, padded to a multiple of N,
//     and cut into N equal shards: rank r keeps shard r (a leaf tensor: what the
//     optimizer steps) and the module's parameters become views into the flat buffer,
//     whose memory is released. So between uses each rank holds 1/N of the model.
//  2. Forward. A hook before each unit's forward all-gathers its flat buffer from
//     the N shards (the parameters' views see the whole values again); a hook after
//     it releases the buffer (reshard_after_forward). While a unit computes, the next
//     unit's all-gather is already in flight (forward_prefetch). The root unit is
//     gathered for the whole forward and backward.
//  3. Backward. The gradient reaching a unit's output first gathers the unit again
//     (and starts the gather of the unit backward visits next: backward_prefetch).
//     When every parameter of the unit has its gradient, the gradients are flattened
//     (pre-divided by N) and reduce-scattered: rank r receives the sum of everyone's
//     shard r — the averaged gradient of exactly the parameters it owns — in its
//     shard's .grad. The full parameters are released at once, the full gradients when
//     their reduce-scatter completes: at most two are in flight (a third waits for the
//     oldest), so the whole gradients of at most two units are alive at once.
//  4. The end of backward waits for the last reduce-scatters; optimizer.step() then
//     updates each shard from its averaged gradient, as DDP's optimizer would.
// Communication per step: 2 all-gathers + 1 reduce-scatter of the parameters, 1.5×
// DDP's all-reduce (an all-reduce is a reduce-scatter plus an all-gather). Memory:
// shards of everything, plus the one or two units gathered at a time.
//
// Module hooks run for calls through module(x) or Module::call (nn/module.h): a
// unit whose forward() is called directly is not gathered, and reading its
// released parameters is an error that says so. Parameters that do not require
// grad, and buffers, stay whole on every rank (broadcast from rank 0, as in DDP).
// Flattening puts all of a unit's parameters under one set of optimizer options:
// per-parameter groups (no weight decay on biases) need one unit per group, as in
// PyTorch's FSDP without use_orig_params.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ringgrad/nn/module.h"
#include "ringgrad/optim/optimizer.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

// Which submodules become units: called with each module's dotted name ("layers.0")
// and the module itself, for every module below the root.
using WrapPolicy = std::function<bool(const std::string& name, nn::Module& module)>;

// The usual policy: every module of type M (e.g. the Transformer block) is a unit.
template <typename M>
WrapPolicy wrap_modules_of_type() {
  return [](const std::string&, nn::Module& m) { return dynamic_cast<M*>(&m) != nullptr; };
}

struct FSDPOptions {
  WrapPolicy auto_wrap_policy;  // unset: the whole model is one unit
  // Release each unit's gathered parameters after its forward (gather again in
  // backward). false keeps them until backward: more memory, one all-gather less.
  bool reshard_after_forward = true;
  bool forward_prefetch = true;   // start the next unit's all-gather during this forward
  bool backward_prefetch = true;  // and the previous unit's during this backward
};

class FullyShardedDataParallel {
 public:
  FullyShardedDataParallel(nn::Module& module, Communicator& comm, FSDPOptions options = {});
  ~FullyShardedDataParallel();
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  nn::Module& module() { return module_; }

  // What the optimizer steps: this rank's shard of each unit (one flat tensor per
  // unit, 1/N of the unit's padded parameter count), with the averaged gradient in
  // .grad after each synchronised backward.
  std::vector<Tensor> parameters() const;

  // While a NoSync guard lives, backward accumulates full local gradients on the
  // module's parameters (no communication); the first backward after it
  // reduce-scatters the accumulated sum (as DDP::no_sync and PyTorch's FSDP).
  class NoSync {
   public:
    explicit NoSync(FullyShardedDataParallel& fsdp) : fsdp_(fsdp) { fsdp_.sync_ = false; }
    ~NoSync() { fsdp_.sync_ = true; }

   private:
    FullyShardedDataParallel& fsdp_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // Scales the sharded gradients so that the global gradient's L2 norm is at most
  // max_norm; returns the norm before clipping: the same as optim::clip_grad_norm
  // on the whole unsharded gradient (a collective: every rank calls it).
  double clip_grad_norm_(double max_norm);

  // While a FullParams guard lives every unit is gathered: the module's parameters
  // hold the whole values, and the module can be called on its own (to generate,
  // print or copy them; the units' hooks stand aside). With writeback, changes made
  // to them are copied into the shards when it ends. A collective on construction:
  // every rank makes one.
  class FullParams {
   public:
    FullParams(FullyShardedDataParallel& fsdp, bool writeback);
    ~FullParams();
    FullParams(const FullParams&) = delete;
    FullParams& operator=(const FullParams&) = delete;

   private:
    FullyShardedDataParallel& fsdp_;
    bool writeback_;
  };
  FullParams summon_full_params(bool writeback = true) { return FullParams(*this, writeback); }

  // The module's whole state dict (parameters by their original names, then
  // buffers), on rank `to` (a collective; other ranks get an empty result): what
  // nn::save writes, so a checkpoint loads into an unsharded model, DDP, or FSDP
  // at any world size.
  NamedTensors full_state_dict(int to = 0);
  // Loads a whole state dict (every rank passes the same one, e.g. read from
  // one file) into the shards; strict as Module::load_state_dict.
  void load_full_state_dict(const NamedTensors& state, bool strict = true);

  // The state of `opt` — an optimizer over parameters(), one group — in the form
  // the same optimizer over module().parameters(), unsharded, writes, on rank `to`
  // (a collective; other ranks get an empty result): per-element buffers (Adam's
  // moments) gathered and cut per parameter, per-parameter counters ("step")
  // copied to each. A plain optimizer loads it, at any world size; and so does
  // load_full_optim_state_dict, which takes the whole state on every rank and keeps
  // this rank's shard of it (not a collective).
  NamedTensors full_optim_state_dict(const optim::Optimizer& opt,
                                     std::map<std::string, std::string>* metadata, int to = 0);
  void load_full_optim_state_dict(optim::Optimizer& opt, const NamedTensors& state,
                                  const std::map<std::string, std::string>& metadata);

  // The units, root first: name ("" for the root), parameter names, sizes.
  struct UnitInfo {
    std::string name;
    std::vector<std::string> parameters;
    int64_t numel = 0;        // the unit's parameter elements
    int64_t shard_numel = 0;  // this rank's shard (the padded count / N)
  };
  std::vector<UnitInfo> units() const;
  // Seconds forward and backward waited for all-gathers and reduce-scatters (what
  // prefetching and overlap did not hide).
  double comm_wait_seconds() const;

  struct State;  // units and per-step bookkeeping (fsdp.cpp)

 private:
  nn::Module& module_;
  bool sync_ = true;
  std::shared_ptr<State> state_;  // shared with the hooks
};

}  // namespace ringgrad::parallel
