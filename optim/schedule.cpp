// schedule.cpp — step and warmup+cosine learning-rate schedules.
#include "ringgrad/optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace ringgrad::optim {

void LRSchedule::step() { resume_at(steps_ + 1); }

void LRSchedule::resume_at(int64_t step) {
  RG_CHECK(step >= 0, "LRSchedule", "expected a step >= 0, got ", step);
  steps_ = step;
  double f = factor(steps_);
  for (ParamGroup& g : optimizer_.param_groups()) g.lr = g.initial_lr * f;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRSchedule(optimizer), step_size_(step_size), gamma_(gamma) {
  RG_CHECK(step_size > 0, "StepLR", "expected step_size > 0, got ", step_size);
}

double StepLR::factor(int64_t step) const {
  return std::pow(gamma_, static_cast<double>(step / step_size_));
}

WarmupCosine::WarmupCosine(Optimizer& optimizer, WarmupCosineOptions options)
    : LRSchedule(optimizer), options_(options) {
  RG_CHECK(options.warmup_steps >= 0 && options.total_steps > options.warmup_steps, "WarmupCosine",
           "expected 0 <= warmup_steps < total_steps, got ", options.warmup_steps, " and ",
           options.total_steps);
  // Step 0 of a warmup starts from lr 0, as the first optimizer step would see it.
  if (options.warmup_steps > 0)
    for (ParamGroup& g : optimizer_.param_groups()) g.lr = 0;
}

double WarmupCosine::factor(int64_t step) const {
  if (step < options_.warmup_steps)
    return static_cast<double>(step) / static_cast<double>(options_.warmup_steps);
  double progress =
      static_cast<double>(std::min(step, options_.total_steps) - options_.warmup_steps) /
      static_cast<double>(options_.total_steps - options_.warmup_steps);
  double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return options_.min_factor + (1.0 - options_.min_factor) * cosine;
}

}  // namespace ringgrad::optim
