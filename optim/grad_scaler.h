// grad_scaler.h — dynamic loss scaling for float16 training (torch.amp.GradScaler).
//
//   rg::optim::GradScaler scaler;                  // init_scale 2^16, grows ×2 every 2000 steps
//   for (...) {
//     opt.zero_grad();
//     Tensor loss = criterion(model(x), y);        // float16 (or float32) loss
//     scaler.scale(loss).backward();               // gradients of loss · scale
//     scaler.step(opt);                            // unscale, then step unless a grad is inf/NaN
//     scaler.update();                             // back off after inf/NaN, grow after a streak
//   }
//
// Small float16 gradients underflow to zero; multiplying the loss by a large scale S
// before backward lifts them into range, and dividing the gradients by S before the step
// puts them back. When S is too large some gradient overflows (inf or NaN): that step is
// skipped and S is multiplied by backoff_factor; after growth_interval steps in a row
// without one, S is multiplied by growth_factor. The numbers follow PyTorch exactly (the
// scale is a float32 value, as torch's scale tensor is; tests/test_grad_scaler.cpp checks
// a run against torch's).
//
// To clip gradients, unscale first: scaler.unscale_(opt); clip_grad_norm(...);
// scaler.step(opt) (step does not unscale twice).
//
// Distributed training: all ranks must skip the same steps, or their parameters drift
// apart. Plain DDP averages the gradients, so an inf on one rank reaches every rank; where
// gradients stay local (ZeRO, FSDP shards, tensor/pipeline parallel pieces) give the
// scaler an `agree` function that combines the ranks' answers:
//
//   rg::optim::GradScaler scaler({.agree = rg::parallel::found_inf_all_reduce(comm)});
//
// (parallel/grad_scaler_sync.h: an all-reduce of the flag with Reduce::Max.) optim/ sits
// below parallel/, so it takes the function and knows nothing of communicators. The
// agree function is called once per unscale_() (or step() that unscales): a collective,
// so every rank unscales the same optimizers in the same order.
//
// Differences from PyTorch, each on purpose:
//  - step() returns whether the optimizer stepped (torch's returns the optimizer's
//    step() result, None); the same as comparing get_scale() before and after update().
//  - float16 (and bfloat16) gradients are unscaled like float32 ones: torch refuses
//    float16 gradients ("Attempting to unscale FP16 gradients") because it expects
//    float32 parameters under autocast; here parameters may be float16 themselves (their
//    optimizer keeps a float32 master copy). Unscaling a float16 gradient can round small
//    values to zero: the scale protects the backward, not the step.
//  - scale() keeps the loss's dtype: a float16 loss times the scale is rounded once to
//    float16 (inf when it overflows). torch returns float32 for a 0-dim float16 loss
//    (type promotion with its 0-dim float32 scale); the gradients are the same either way.
//  - The scale exists from construction (torch creates it at the first scale()).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "ringgrad/core/tensor.h"
#include "ringgrad/optim/optimizer.h"

namespace ringgrad::optim {

struct GradScalerOptions {
  // Whether any rank found an inf or NaN gradient, given this rank's answer. Empty: this
  // rank's answer (one process, or DDP, whose averaged gradients agree already).
  using Agree = std::function<bool(bool found_inf_here)>;

  double init_scale = 65536.0;  // 2^16, rounded to float32 as torch's scale tensor is
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;  // >= 1
  bool enabled = true;  // false: scale() returns the loss, step() just steps
  Agree agree = nullptr;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss · scale, differentiable, in loss's dtype (a float16 loss: computed in float32 and
  // rounded once). Disabled: loss itself.
  Tensor scale(const Tensor& loss) const;

  // Divides every gradient of optimizer's parameters by the scale, in place, and records
  // whether any was inf or NaN (checked before dividing, as torch does; then passed through
  // options.agree). Once per optimizer between update()s, and not after step().
  void unscale_(Optimizer& optimizer);

  // unscale_(optimizer) unless done already, then optimizer.step() unless an inf/NaN was
  // found. Returns whether it stepped. Once per optimizer between update()s; needs at
  // least one gradient among the optimizer's parameters (as torch does).
  bool step(Optimizer& optimizer);

  // After the step(s) of an iteration: an inf/NaN in any optimizer since the last update
  // multiplies the scale by backoff_factor and resets the growth tracker; otherwise the
  // tracker counts one more step and, reaching growth_interval, the scale is multiplied by
  // growth_factor (if the result is finite) and the tracker reset.
  void update();
  // Sets the scale to new_scale (finite, > 0; rounded to float32) instead; the tracker
  // stays.
  void update(double new_scale);

  double get_scale() const;  // 1.0 when disabled
  double get_growth_factor() const { return growth_factor_; }
  void set_growth_factor(double factor);
  double get_backoff_factor() const { return backoff_factor_; }
  void set_backoff_factor(double factor);
  int64_t get_growth_interval() const { return growth_interval_; }
  void set_growth_interval(int64_t interval);
  int64_t get_growth_tracker() const { return growth_tracker_; }  // torch's _growth_tracker
  bool is_enabled() const { return enabled_; }

  // torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker
  // (numbers as text that keeps every bit, as Schedule::state_dict does); empty when
  // disabled.
  std::map<std::string, std::string> state_dict() const;
  // Loads a state_dict (a disabled scaler ignores it, as torch's does). Strict: exactly
  // the five keys; scale finite and > 0, growth_factor > 1, backoff_factor in (0, 1),
  // growth_interval a whole number >= 1, _growth_tracker a whole number in
  // [0, growth_interval). Errors name the key and the value; checks everything before it
  // changes anything.
  void load_state_dict(const std::map<std::string, std::string>& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    bool checked = false;    // some gradient was looked at (torch: found_inf_per_device)
    bool found_inf = false;  // after agree
  };

  bool enabled_;
  double scale_;  // always a float32 value
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  int64_t growth_tracker_ = 0;
  GradScalerOptions::Agree agree_;
  std::map<const Optimizer*, OptimizerState> per_optimizer_;  // since the last update()
};

}  // namespace ringgrad::optim
