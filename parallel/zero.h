// zero.h — ZeroRedundancyOptimizer: ZeRO stage 1, each rank keeps the optimizer state
// of its own share of the parameters (torch.distributed.optim's name and behaviour).
//
//   rg::parallel::DistributedDataParallel ddp(model, comm);   // averaged gradients everywhere
//   rg::parallel::ZeroRedundancyOptimizer opt(model.parameters(), comm, [](auto params) {
//     return std::make_unique<rg::optim::AdamW>(params, rg::optim::AdamWOptions{.lr = 1e-3});
//   });
//   loss.backward(); opt.step(); opt.zero_grad();
//
// Data parallelism keeps N copies of everything; Adam's two moment buffers are
// twice the parameters, and every rank updates every parameter with the same
// numbers. ZeRO-1 gives each parameter (whole tensors) to one rank — the largest
// first, each to the rank that holds the fewest elements so far, as torch does —
// and each rank's optimizer holds state for its own parameters only:
//   1. step(): each rank's optimizer updates its own parameters, from the averaged
//      gradients DDP left in .grad (every rank has all of them);
//   2. each parameter is then broadcast from its owner, so every replica is whole and
//      equal again before the next forward.
// The update of each parameter is exactly the one DDP + the same optimizer would
// make (tests/mpi/test_zero.cpp: bit for bit). Optimizer state per rank: ~1/N.
//
// ZeRO-2 ({.stage = 2}, used *instead of* DDP): the gradients are sharded too. At
// construction rank 0's parameters are broadcast (as DDP does); during backward a
// hook sends each finished gradient to its owner only (reduce, averaging) instead
// of all-reducing it, and when backward ends every rank drops the gradients it does
// not own: each keeps ~1/N of them. Then step() as above. Same updates as DDP, up to
// the order of the sums (float64: ~1e-16). Gradient accumulation: backwards under
// no_sync() keep whole local gradients (no communication, every gradient on every rank,
// as DDP's no_sync); the first backward after it reduces the accumulated sums to their
// owners. Under ZeRO-1, DDP's no_sync does that.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "ringgrad/optim/optimizer.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

struct ZeroOptions {
  int stage = 1;  // 1: optimizer state sharded (with DDP); 2: gradients too (without DDP)
};

class ZeroRedundancyOptimizer {
 public:
  // make: builds the optimizer of this rank's parameters (any ringgrad optimizer).
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  ZeroRedundancyOptimizer(std::vector<Tensor> params, Communicator& comm, const Factory& make,
                          ZeroOptions options = {});

  // ZeRO-2 only: while a NoSync guard lives, backward accumulates local gradients and
  // sends nothing; the first backward after it reduces the sums (gradient accumulation).
  class NoSync {
   public:
    explicit NoSync(ZeroRedundancyOptimizer& zero);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    ZeroRedundancyOptimizer& zero_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  void step();       // update this rank's parameters, then broadcast every one from its owner
  void zero_grad();  // every parameter's gradient, as the optimizer's own zero_grad

  // Scales the gradients so that their global L2 norm is at most max_norm; returns the
  // norm before clipping, as optim::clip_grad_norm on every parameter would (a
  // collective). Under ZeRO-2, where each rank keeps only its own gradients, the
  // only correct way to clip.
  double clip_grad_norm_(double max_norm);

  int owner(size_t i) const { return owner_[i]; }  // the rank that updates parameter i
  const std::vector<Tensor>& local_parameters() const { return local_; }
  optim::Optimizer& local_optimizer() { return *optimizer_; }  // for schedules, checkpoints
  // Bytes of optimizer state this rank holds (Adam: two buffers per own parameter).
  int64_t local_state_bytes() const;

  // The whole optimizer's state, gathered on rank `to` (a collective: every rank
  // calls it) in the form the same optimizer over all the parameters, unsharded,
  // writes: "state.0.<index>.<name>" with indices into `params`, and the metadata
  // (steps, the group's lr, initial_lr, weight decay and size). A plain optimizer
  // — any world size, or one process — loads it with load_state_dict, so a
  // checkpoint moves between ZeRO and DDP. Other ranks get an empty result. The
  // local optimizer must have one parameter group (what `make` builds from a list).
  NamedTensors consolidate_state_dict(std::map<std::string, std::string>* metadata, int to = 0);
  // The reverse: every rank passes the whole state (as consolidate_state_dict or a
  // plain optimizer over the same parameters wrote it, at any world size) and keeps
  // its own parameters' part. Not a collective.
  void load_consolidated_state_dict(const NamedTensors& state,
                                    const std::map<std::string, std::string>& metadata);

 private:
  struct Stage2;  // ZeRO-2's per-backward state, shared with the gradient hooks

  Communicator& comm_;
  ZeroOptions options_;
  std::shared_ptr<Stage2> stage2_;
  std::vector<Tensor> params_;
  std::vector<int> owner_;
  std::vector<Tensor> local_;
  std::unique_ptr<optim::Optimizer> optimizer_;
};

// clip_grad_norm over gradients sharded across the ranks of comm: each rank passes
// the parameters whose gradients it owns (disjoint; together every one once). The
// squared norms are summed locally in float64, all-reduced, and each rank scales
// its own gradients by optim::clip_grad_norm's factor. Returns the global norm.
// `device`: where the sum travels, the same on every rank (the parameters' device).
double clip_grad_norm_sharded(const std::vector<Tensor>& owned, double max_norm,
                              Communicator& comm, Device device);

}  // namespace ringgrad::parallel
