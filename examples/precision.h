// precision.h — the examples' --precision fp32|bf16|fp16 and DDP's --comm-hook.
//
//   Precision precision;                      // before parsing: registers --precision
//   precision.add_options(app);
//   ...
//   rg::optim::GradScaler scaler({.enabled = precision.scaled()});   // fp16 only
//   for (...) {
//     opt.zero_grad();
//     rg::Tensor loss;
//     {
//       rg::autocast amp(device, precision.dtype(), precision.mixed());  // off for fp32
//       loss = criterion(model(x), y);
//     }
//     scaler.scale(loss).backward();          // outside the region, as in PyTorch
//     scaler.step(opt);
//     scaler.update();
//   }
//
// PyTorch's AMP recipe (torch.autocast(..., enabled=use_amp), GradScaler(enabled=use_fp16)):
// the model stays float32, its parameters are the master weights and get float32
// gradients; inside the region matmul/linear/attention run in 16 bits and the losses and
// norms in float32 (core/autocast.h). fp32 turns both off: autocast(enabled = false) and a
// disabled GradScaler (scale() returns the loss, step() just steps), so it computes exactly
// what the examples computed before the flag existed. bf16 has float32's range and needs
// no loss scaling; fp16's small gradients would underflow without it (optim/grad_scaler.h).
#pragma once

#include <ringgrad/optim/grad_scaler.h>
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/zero.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <string>

struct Precision {
  std::string name = "fp32";

  void add_options(CLI::App& app) {
    app.add_option("--precision", name,
                   "fp32, or mixed precision: bf16 (autocast) or fp16 (autocast + GradScaler)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  }
  bool mixed() const { return name != "fp32"; }   // forward and loss under autocast
  bool scaled() const { return name == "fp16"; }  // a GradScaler
  // The autocast region's dtype (bfloat16 for fp32 too: the region is disabled then).
  ringgrad::DType dtype() const { return name == "fp16" ? ringgrad::kFloat16 : ringgrad::kBFloat16; }
};

// --comm-hook none|bf16|fp16: what DDP's gradient buckets are sent as (parallel/ddp.h).
struct CommHookOption {
  std::string name = "none";

  void add_options(CLI::App& app) {
    app.add_option("--comm-hook", name,
                   "DDP gradient compression: none, bf16 (bf16_compress_hook) or fp16 "
                   "(fp16_compress_hook)")
        ->check(CLI::IsMember({"none", "bf16", "fp16"}));
  }
  ringgrad::parallel::DDPCommHook hook() const {
    if (name == "bf16") return ringgrad::parallel::DDPCommHook::BF16Compress;
    if (name == "fp16") return ringgrad::parallel::DDPCommHook::FP16Compress;
    return ringgrad::parallel::DDPCommHook::None;
  }
};

// ZeRO's step as an optim::Optimizer over this rank's own parameters (torch's
// ZeroRedundancyOptimizer is an Optimizer; ours is not), so that a GradScaler unscales
// exactly the gradients this rank steps on and runs step() — update, then broadcast from
// the owners — only when no rank found an inf/NaN.
class ZeroStep : public ringgrad::optim::Optimizer {
 public:
  explicit ZeroStep(ringgrad::parallel::ZeroRedundancyOptimizer& zero)
      : Optimizer({{zero.local_parameters(), {}}}, 0.0, 0.0), zero_(zero) {}
  void step() override { zero_.step(); }
  std::string name() const override { return "ZeroStep"; }
  std::vector<StateBuffer> state_buffers() const override { return {}; }

 private:
  ringgrad::parallel::ZeroRedundancyOptimizer& zero_;
};
