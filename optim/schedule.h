// schedule.h — learning-rate schedules. Call step() once per optimizer step
// (or once per epoch for StepLR, as in PyTorch); each sets every group's lr
// from the group's initial lr.
//
//   rg::optim::WarmupCosine sched(opt, {.warmup_steps = 100, .total_steps = 5000});
//   for (...) { ...; opt.step(); sched.step(); }
#pragma once

#include "ringgrad/optim/optimizer.h"

namespace ringgrad::optim {

class LRSchedule {
 public:
  explicit LRSchedule(Optimizer& optimizer) : optimizer_(optimizer) {}
  virtual ~LRSchedule() = default;
  void step();  // advance one step and apply
  int64_t steps() const { return steps_; }
  // Continue a resumed run: jump to `step` (the optimizer's steps(), say) and apply.
  void resume_at(int64_t step);
  virtual double factor(int64_t step) const = 0;  // lr = initial_lr · factor(step)

 protected:
  Optimizer& optimizer_;
  int64_t steps_ = 0;
};

// lr · gamma^(floor(step / step_size)).
class StepLR : public LRSchedule {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double factor(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

struct WarmupCosineOptions {
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_factor = 0.0;  // the floor, as a fraction of the initial lr
};

// Linear warmup from 0 to the initial lr over warmup_steps, then a cosine
// decay to min_factor·lr at total_steps (and flat after).
class WarmupCosine : public LRSchedule {
 public:
  WarmupCosine(Optimizer& optimizer, WarmupCosineOptions options);
  double factor(int64_t step) const override;

 private:
  WarmupCosineOptions options_;
};

}  // namespace ringgrad::optim
