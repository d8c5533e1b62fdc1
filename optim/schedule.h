// schedule.h — learning-rate schedules, with torch.optim.lr_scheduler's formulas and
// defaults. Call step() once per optimizer step (or once per epoch, as in PyTorch);
// each sets every group's lr. ReduceLROnPlateau is stepped with a metric instead.
//
//   rg::optim::WarmupCosine sched(opt, {.warmup_steps = 100, .total_steps = 5000});
//   for (...) { ...; opt.step(); sched.step(); }
//
//   rg::optim::ReduceLROnPlateau plateau(opt, {.patience = 2});
//   for (epoch ...) { train(); plateau.step(validation_loss); }
//
// Every schedule's state is a few named numbers (state_dict); a Checkpoint keeps them as
// "schedule.<key>" metadata (optim/checkpoint.h), so a resumed run continues the schedule.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ringgrad/optim/optimizer.h"

namespace ringgrad::optim {

// What every schedule shares: its optimizer, and a state to save and load.
class Schedule {
 public:
  explicit Schedule(Optimizer& optimizer) : optimizer_(optimizer) {}
  virtual ~Schedule() = default;
  virtual std::string name() const = 0;
  Optimizer& optimizer() const { return optimizer_; }
  // How many times it was stepped (torch's last_epoch).
  int64_t steps() const { return steps_; }
  // Each group's current lr (torch's get_last_lr()).
  std::vector<double> last_lr() const;
  // The state a resumed run needs: {"name", "steps"} and whatever else the schedule
  // keeps (its configuration is the constructor's, as in torch's state_dict beside
  // the code that built it). Numbers keep every bit.
  virtual std::map<std::string, std::string> state_dict() const;
  // Loads a state_dict: every key must be one this schedule writes ("name", when
  // present, must be name()); numbers are parsed strictly, and an error names the
  // key and the value. Checks everything before it changes anything.
  virtual void load_state_dict(const std::map<std::string, std::string>& state);

 protected:
  // A number of `state`, strictly: the whole text one number (whole and in [0, 2^53]
  // when `count`; finite unless `infinite_ok`), or an error naming the key and the text.
  static double state_number(const std::map<std::string, std::string>& state,
                             const std::string& key, bool count, bool infinite_ok = false);
  void check_keys(const std::map<std::string, std::string>& state,
                  const std::vector<std::string>& keys) const;

  Optimizer& optimizer_;
  int64_t steps_ = 0;
};

// A schedule whose lr is a function of the step count: step() advances by one and sets
// each group's lr to lr(group, steps()). Constructing one applies step 0 (torch does the
// same: LinearLR starts at start_factor · lr, OneCycleLR at max_lr / div_factor).
class LRSchedule : public Schedule {
 public:
  using Schedule::Schedule;
  void step();  // advance one step and apply
  // Continue a resumed run: jump to `step` (the optimizer's steps(), say) and apply.
  void resume_at(int64_t step);
  // The lr of group `group` at `step` (torch's closed form).
  virtual double lr(size_t group, int64_t step) const = 0;
  // The group's momentum (SGD's momentum, Adam's beta1) at `step`, for schedules that
  // move it (OneCycleLR's cycle_momentum); nullopt leaves it as it is.
  virtual std::optional<double> momentum(size_t, int64_t) const { return std::nullopt; }
  void load_state_dict(const std::map<std::string, std::string>& state) override;

 protected:
  virtual void check_step(int64_t) const {}
};

// lr = initial_lr · factor(step).
class FactorSchedule : public LRSchedule {
 public:
  using LRSchedule::LRSchedule;
  virtual double factor(int64_t step) const = 0;
  double lr(size_t group, int64_t step) const override;
};

// lr · gamma^(floor(step / step_size)).
class StepLR : public FactorSchedule {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  std::string name() const override { return "StepLR"; }
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
class WarmupCosine : public FactorSchedule {
 public:
  WarmupCosine(Optimizer& optimizer, WarmupCosineOptions options);
  std::string name() const override { return "WarmupCosine"; }
  double factor(int64_t step) const override;

 private:
  WarmupCosineOptions options_;
};

// torch's LambdaLR: lr = initial_lr · lambda(step), one function for all groups or one
// per group. (Its state is the step count: the functions are the program's, as in torch.)
class LambdaLR : public LRSchedule {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, Lambda lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> per_group);
  std::string name() const override { return "LambdaLR"; }
  double lr(size_t group, int64_t step) const override;

 private:
  std::vector<Lambda> lambdas_;
};

struct LinearLROptions {
  double start_factor = 1.0 / 3;  // in (0, 1]
  double end_factor = 1.0;        // in [0, 1]
  int64_t total_iters = 5;
};

// torch's LinearLR: the factor goes linearly from start_factor to end_factor over
// total_iters steps, then stays.
class LinearLR : public FactorSchedule {
 public:
  LinearLR(Optimizer& optimizer, LinearLROptions options = {});
  std::string name() const override { return "LinearLR"; }
  double factor(int64_t step) const override;

 private:
  LinearLROptions options_;
};

// torch's CosineAnnealingLR: eta_min + (initial_lr − eta_min)·(1 + cos(π·step/T_max))/2.
// Past T_max it follows the cosine back up, as torch's does (periodic, period 2·T_max).
class CosineAnnealingLR : public LRSchedule {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);
  std::string name() const override { return "CosineAnnealingLR"; }
  double lr(size_t group, int64_t step) const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

struct OneCycleLROptions {
  std::vector<double> max_lr = {};  // one for all groups, or one per group
  int64_t total_steps = 0;          // or 0 and epochs · steps_per_epoch
  int64_t epochs = 0, steps_per_epoch = 0;
  double pct_start = 0.3;
  bool cos = true;  // anneal_strategy: "cos" (true) or "linear"
  double div_factor = 25;
  double final_div_factor = 1e4;
  bool three_phase = false;
  // Cycle the momentum (SGD's momentum, Adam's beta1) inversely to the lr, between
  // max_momentum and base_momentum (one value for all groups, or one per group).
  bool cycle_momentum = true;
  std::vector<double> base_momentum = {0.85}, max_momentum = {0.95};
};

// torch's OneCycleLR: from max_lr/div_factor up to max_lr over pct_start of the steps,
// then down to (max_lr/div_factor)/final_div_factor (three_phase: back to the start
// first, then down). It sets each group's initial_lr to max_lr/div_factor, as torch
// does. Stepping past total_steps is an error. With cycle_momentum (torch's default) the
// momentum goes the other way: max_momentum → base_momentum while the lr rises, back while
// it falls (an SGD built without momentum gains it, as in torch).
class OneCycleLR : public LRSchedule {
 public:
  OneCycleLR(Optimizer& optimizer, OneCycleLROptions options);
  std::string name() const override { return "OneCycleLR"; }
  double lr(size_t group, int64_t step) const override;
  std::optional<double> momentum(size_t group, int64_t step) const override;
  int64_t total_steps() const { return total_steps_; }

 protected:
  void check_step(int64_t step) const override;

 private:
  struct Phase {
    double end_step;
    int start, end;  // 0: initial lr, 1: max lr, 2: min lr
    int momentum_start, momentum_end;  // 0: max_momentum, 1: base_momentum
  };
  // Phase of `step` and how far into it (0..1): pct.
  std::pair<const Phase*, double> phase_at(int64_t step) const;
  double anneal(double start, double end, double pct) const;
  OneCycleLROptions options_;
  int64_t total_steps_;
  std::vector<Phase> phases_;
  std::vector<std::array<double, 3>> lrs_;  // per group: initial, max, min
  std::vector<std::array<double, 2>> momenta_;  // per group: max, base
};

// torch's SequentialLR: schedules[0] until milestones[0], then schedules[1] from its own
// step 0, and so on. Step only the SequentialLR (it sets the lr from the active schedule
// at its local step); its state is its step count.
class SequentialLR : public LRSchedule {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<LRSchedule*> schedules,
               std::vector<int64_t> milestones);
  std::string name() const override { return "SequentialLR"; }
  double lr(size_t group, int64_t step) const override;
  std::optional<double> momentum(size_t group, int64_t step) const override;

 private:
  // The schedule in charge at `step` and the step it is at (it restarts at its milestone).
  std::pair<const LRSchedule*, int64_t> in_charge(int64_t step) const;
  std::vector<LRSchedule*> schedules_;
  std::vector<int64_t> milestones_;
};

struct ReduceLROnPlateauOptions {
  bool max = false;                 // mode: "min" (false: lower is better) or "max"
  double factor = 0.1;              // new lr = lr · factor, < 1
  int64_t patience = 10;            // bad steps tolerated before reducing
  double threshold = 1e-4;          // what counts as better
  bool relative = true;             // threshold_mode: "rel" (true) or "abs"
  int64_t cooldown = 0;             // steps after a reduction in which bad steps are not counted
  std::vector<double> min_lr = {};  // {} (0), one for all groups, or one per group
  double eps = 1e-8;                // a reduction smaller than eps is not made
};

// torch's ReduceLROnPlateau: step(metric) once per evaluation; after more than `patience`
// steps without improvement the lr of every group is multiplied by `factor` (not below
// min_lr). Its state: best, num_bad_epochs, cooldown_counter and the step count; the lrs
// themselves are the optimizer's (saved with it).
class ReduceLROnPlateau : public Schedule {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  std::string name() const override { return "ReduceLROnPlateau"; }
  void step(double metric);
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t cooldown_counter() const { return cooldown_counter_; }
  std::map<std::string, std::string> state_dict() const override;
  void load_state_dict(const std::map<std::string, std::string>& state) override;

 private:
  bool is_better(double a, double best) const;
  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0;
};

}  // namespace ringgrad::optim
