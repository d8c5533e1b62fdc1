// grad_scaler_sync.h — one answer for all ranks to "did any gradient overflow?".
//
//   rg::optim::GradScaler scaler({.agree = rg::parallel::found_inf_all_reduce(comm)});
//
// A GradScaler skips the optimizer step when a gradient holds inf or NaN. Where each
// rank steps on its own gradients (no DDP averaging: ZeRO or FSDP shards, tensor- or
// pipeline-parallel pieces, local-SGD), one rank may overflow while the others do not;
// if only that rank skipped, the replicas would differ from then on. The function made
// here all-reduces the flag with Reduce::Max (1 if any rank found one), so every rank
// skips the same steps and backs off its scale the same way.
//
// It is a collective: every rank of `comm` calls it once per GradScaler::unscale_() (or
// step() that unscales), in the same order as its other collectives. The returned
// function keeps a reference to `comm`, which must outlive the scaler. The flag is a
// one-element float32 tensor on `device` (the CPU by default: a World's communicator
// moves CPU tensors over MPI; pass the GPU for a communicator that only moves CUDA
// tensors).
#pragma once

#include "ringgrad/core/device.h"
#include "ringgrad/optim/grad_scaler.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

optim::GradScalerOptions::Agree found_inf_all_reduce(Communicator& comm, Device device = kCPU);

}  // namespace ringgrad::parallel
