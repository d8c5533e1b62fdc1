// schedule.cpp — learning-rate schedules (torch.optim.lr_scheduler's closed forms),
// ReduceLROnPlateau, and their state for checkpoints.
#include "ringgrad/optim/schedule.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace ringgrad::optim {

namespace {

constexpr double kMaxCount = 9007199254740992.0;  // 2^53

// Doubles in checkpoint metadata keep every bit.
std::string exact(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

}  // namespace

// ---------------------------------------------------------------- Schedule

std::vector<double> Schedule::last_lr() const {
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer_.param_groups()) lrs.push_back(g.lr);
  return lrs;
}

std::map<std::string, std::string> Schedule::state_dict() const {
  return {{"name", name()}, {"steps", std::to_string(steps_)}};
}

double Schedule::state_number(const std::map<std::string, std::string>& state,
                              const std::string& key, bool count, bool infinite_ok) {
  auto it = state.find(key);
  RG_CHECK(it != state.end(), "schedule", "expected the schedule's state \"", key,
           "\", got a checkpoint without it");
  const std::string& text = it->second;
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  bool ok = error == std::errc() && end == text.data() + text.size() && !std::isnan(value) &&
            (infinite_ok || std::isfinite(value));
  if (count) ok = ok && value >= 0 && value <= kMaxCount && value == std::floor(value);
  RG_CHECK(ok, "schedule", "expected the schedule's state \"", key, "\" to be ",
           count ? "a whole number in [0, 2^53]" : (infinite_ok ? "a number" : "a finite number"),
           ", got \"", text, "\"");
  return value;
}

void Schedule::check_keys(const std::map<std::string, std::string>& state,
                          const std::vector<std::string>& keys) const {
  for (const auto& [key, value] : state)
    RG_CHECK(
        key == "name" || std::find(keys.begin(), keys.end(), key) != keys.end(), "schedule",
        "expected ", name(), " state keys (name",
        [&] {
          std::string s;
          for (const std::string& k : keys) s += ", " + k;
          return s;
        }(),
        "), got \"", key, "\" = \"", value, "\"");
  if (auto it = state.find("name"); it != state.end())
    RG_CHECK(it->second == name(), "schedule", "expected the state of a ", name(),
             " schedule, got one of ", it->second);
}

void Schedule::load_state_dict(const std::map<std::string, std::string>& state) {
  check_keys(state, {"steps"});
  steps_ = static_cast<int64_t>(state_number(state, "steps", true));
}

// ---------------------------------------------------------------- LRSchedule

void LRSchedule::step() { resume_at(steps_ + 1); }

void LRSchedule::resume_at(int64_t step) {
  RG_CHECK(step >= 0, name().c_str(), "expected a step >= 0, got ", step);
  check_step(step);
  steps_ = step;
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].lr = lr(g, steps_);
    if (std::optional<double> m = momentum(g, steps_)) groups[g].momentum = *m;
  }
}

void LRSchedule::load_state_dict(const std::map<std::string, std::string>& state) {
  check_keys(state, {"steps"});
  const auto step = static_cast<int64_t>(state_number(state, "steps", true));
  check_step(step);
  resume_at(step);
}

double FactorSchedule::lr(size_t group, int64_t step) const {
  return optimizer_.param_groups()[group].initial_lr * factor(step);
}

// ---------------------------------------------------------------- StepLR, WarmupCosine

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : FactorSchedule(optimizer), step_size_(step_size), gamma_(gamma) {
  RG_CHECK(step_size > 0, "StepLR", "expected step_size > 0, got ", step_size);
  resume_at(0);
}

double StepLR::factor(int64_t step) const {
  return std::pow(gamma_, static_cast<double>(step / step_size_));
}

WarmupCosine::WarmupCosine(Optimizer& optimizer, WarmupCosineOptions options)
    : FactorSchedule(optimizer), options_(options) {
  RG_CHECK(options.warmup_steps >= 0 && options.total_steps > options.warmup_steps, "WarmupCosine",
           "expected 0 <= warmup_steps < total_steps, got ", options.warmup_steps, " and ",
           options.total_steps);
  resume_at(0);  // step 0 of a warmup starts from lr 0, as the first optimizer step sees it
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

// ---------------------------------------------------------------- LambdaLR, LinearLR, cosine

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.param_groups().size(), lambda)) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> per_group)
    : LRSchedule(optimizer), lambdas_(std::move(per_group)) {
  RG_CHECK(lambdas_.size() == optimizer.param_groups().size(), "LambdaLR", "expected ",
           optimizer.param_groups().size(), " lr_lambdas (one per group), got ", lambdas_.size());
  for (const Lambda& f : lambdas_)
    RG_CHECK(static_cast<bool>(f), "LambdaLR", "expected callable lr_lambdas, got an empty one");
  resume_at(0);
}

double LambdaLR::lr(size_t group, int64_t step) const {
  return optimizer_.param_groups()[group].initial_lr * lambdas_[group](step);
}

LinearLR::LinearLR(Optimizer& optimizer, LinearLROptions o)
    : FactorSchedule(optimizer), options_(o) {
  RG_CHECK(o.start_factor > 0 && o.start_factor <= 1 && o.end_factor >= 0 && o.end_factor <= 1,
           "LinearLR", "expected start_factor in (0, 1] and end_factor in [0, 1], got ",
           o.start_factor, " and ", o.end_factor);
  RG_CHECK(o.total_iters > 0, "LinearLR", "expected total_iters > 0, got ", o.total_iters);
  resume_at(0);
}

double LinearLR::factor(int64_t step) const {
  const auto& o = options_;
  return o.start_factor + (o.end_factor - o.start_factor) *
                              static_cast<double>(std::min(o.total_iters, step)) /
                              static_cast<double>(o.total_iters);
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRSchedule(optimizer), T_max_(T_max), eta_min_(eta_min) {
  RG_CHECK(T_max > 0, "CosineAnnealingLR", "expected T_max > 0, got ", T_max);
  RG_CHECK(std::isfinite(eta_min) && eta_min >= 0, "CosineAnnealingLR",
           "expected a finite eta_min >= 0, got ", eta_min);
  resume_at(0);
}

double CosineAnnealingLR::lr(size_t group, int64_t step) const {
  const double base = optimizer_.param_groups()[group].initial_lr;
  return eta_min_ +
         (base - eta_min_) *
             (1 + std::cos(M_PI * static_cast<double>(step) / static_cast<double>(T_max_))) / 2;
}

// ---------------------------------------------------------------- OneCycleLR

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleLROptions o)
    : LRSchedule(optimizer), options_(std::move(o)) {
  const auto& opt = options_;
  if (opt.total_steps > 0) {
    total_steps_ = opt.total_steps;
  } else {
    RG_CHECK(opt.epochs > 0 && opt.steps_per_epoch > 0, "OneCycleLR",
             "expected total_steps > 0, or epochs > 0 and steps_per_epoch > 0, got total_steps ",
             opt.total_steps, ", epochs ", opt.epochs, ", steps_per_epoch ", opt.steps_per_epoch);
    total_steps_ = opt.epochs * opt.steps_per_epoch;
  }
  RG_CHECK(opt.pct_start >= 0 && opt.pct_start <= 1, "OneCycleLR",
           "expected pct_start in [0, 1], got ", opt.pct_start);
  RG_CHECK(opt.div_factor > 0 && opt.final_div_factor > 0, "OneCycleLR",
           "expected div_factor > 0 and final_div_factor > 0, got ", opt.div_factor, " and ",
           opt.final_div_factor);
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  RG_CHECK(opt.max_lr.size() == 1 || opt.max_lr.size() == groups.size(), "OneCycleLR",
           "expected one max_lr or one per group (", groups.size(), "), got ", opt.max_lr.size());
  const double total = static_cast<double>(total_steps_);
  if (opt.three_phase)
    phases_ = {{opt.pct_start * total - 1, 0, 1, 0, 1},
               {2 * opt.pct_start * total - 2, 1, 0, 1, 0},
               {total - 1, 0, 2, 0, 0}};
  else
    phases_ = {{opt.pct_start * total - 1, 0, 1, 0, 1}, {total - 1, 1, 2, 1, 0}};
  if (opt.cycle_momentum) {
    for (const auto* list : {&opt.base_momentum, &opt.max_momentum})
      RG_CHECK(list->size() == 1 || list->size() == groups.size(), "OneCycleLR",
               "expected one base_momentum and max_momentum or one per group (", groups.size(),
               "), got ", list->size());
    for (size_t g = 0; g < groups.size(); ++g) {
      const double base = opt.base_momentum.size() == 1 ? opt.base_momentum[0] : opt.base_momentum[g];
      const double max = opt.max_momentum.size() == 1 ? opt.max_momentum[0] : opt.max_momentum[g];
      RG_CHECK(base >= 0 && max >= 0 && base < 1 && max < 1, "OneCycleLR",
               "expected base_momentum and max_momentum in [0, 1), got ", base, " and ", max);
      momenta_.push_back({max, base});
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const double max_lr = opt.max_lr.size() == 1 ? opt.max_lr[0] : opt.max_lr[g];
    RG_CHECK(std::isfinite(max_lr) && max_lr >= 0, "OneCycleLR",
             "expected a finite max_lr >= 0, got ", max_lr);
    const double initial = max_lr / opt.div_factor;
    lrs_.push_back({initial, max_lr, initial / opt.final_div_factor});
    groups[g].initial_lr = initial;  // as torch sets group["initial_lr"]
  }
  resume_at(0);
}

void OneCycleLR::check_step(int64_t step) const {
  RG_CHECK(step <= total_steps_, "OneCycleLR", "Tried to step ", step,
           " times. The specified number of total steps is ", total_steps_);
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::phase_at(int64_t step) const {
  const double s = static_cast<double>(step);
  double start_step = 0;
  for (size_t i = 0;; ++i) {
    const Phase& phase = phases_[i];
    if (s <= phase.end_step || i + 1 == phases_.size())
      return {&phase, (s - start_step) / (phase.end_step - start_step)};
    start_step = phase.end_step;
  }
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.cos) return end + (start - end) / 2.0 * (std::cos(M_PI * pct) + 1);
  return (end - start) * pct + start;
}

double OneCycleLR::lr(size_t group, int64_t step) const {
  const auto [phase, pct] = phase_at(step);
  return anneal(lrs_[group][phase->start], lrs_[group][phase->end], pct);
}

std::optional<double> OneCycleLR::momentum(size_t group, int64_t step) const {
  if (!options_.cycle_momentum) return std::nullopt;
  const auto [phase, pct] = phase_at(step);
  return anneal(momenta_[group][phase->momentum_start], momenta_[group][phase->momentum_end], pct);
}

// ---------------------------------------------------------------- SequentialLR

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<LRSchedule*> schedules,
                           std::vector<int64_t> milestones)
    : LRSchedule(optimizer), schedules_(std::move(schedules)), milestones_(std::move(milestones)) {
  RG_CHECK(!schedules_.empty(), "SequentialLR", "expected at least one schedule, got none");
  RG_CHECK(milestones_.size() + 1 == schedules_.size(), "SequentialLR",
           "expected one milestone fewer than schedules, got ", schedules_.size(),
           " schedules and ", milestones_.size(), " milestones");
  for (size_t i = 0; i < schedules_.size(); ++i)
    RG_CHECK(schedules_[i] != nullptr && &schedules_[i]->optimizer() == &optimizer_, "SequentialLR",
             "expected schedules of this optimizer, got ",
             schedules_[i] ? "one of another optimizer" : "a null one", " at index ", i);
  for (size_t i = 1; i < milestones_.size(); ++i)
    RG_CHECK(milestones_[i] > milestones_[i - 1], "SequentialLR",
             "expected increasing milestones, got ", milestones_[i - 1], " then ", milestones_[i]);
  RG_CHECK(milestones_.empty() || milestones_[0] > 0, "SequentialLR",
           "expected milestones > 0, got ", milestones_.empty() ? 0 : milestones_[0]);
  resume_at(0);
}

std::pair<const LRSchedule*, int64_t> SequentialLR::in_charge(int64_t step) const {
  // torch: idx = bisect_right(milestones, step); the schedule restarts at each milestone.
  const size_t idx = static_cast<size_t>(
      std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin());
  return {schedules_[idx], idx == 0 ? step : step - milestones_[idx - 1]};
}

double SequentialLR::lr(size_t group, int64_t step) const {
  const auto [schedule, local] = in_charge(step);
  return schedule->lr(group, local);
}

std::optional<double> SequentialLR::momentum(size_t group, int64_t step) const {
  const auto [schedule, local] = in_charge(step);
  return schedule->momentum(group, local);
}

// ---------------------------------------------------------------- ReduceLROnPlateau

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions o)
    : Schedule(optimizer), options_(std::move(o)) {
  RG_CHECK(options_.factor < 1 && options_.factor >= 0, "ReduceLROnPlateau",
           "expected a factor in [0, 1), got ", options_.factor);
  RG_CHECK(options_.patience >= 0 && options_.cooldown >= 0, "ReduceLROnPlateau",
           "expected patience >= 0 and cooldown >= 0, got ", options_.patience, " and ",
           options_.cooldown);
  RG_CHECK(std::isfinite(options_.threshold) && std::isfinite(options_.eps), "ReduceLROnPlateau",
           "expected a finite threshold and eps, got ", options_.threshold, " and ", options_.eps);
  const size_t groups = optimizer_.param_groups().size();
  std::vector<double>& min_lr = options_.min_lr;
  if (min_lr.empty()) min_lr = {0.0};
  RG_CHECK(min_lr.size() == 1 || min_lr.size() == groups, "ReduceLROnPlateau", "expected ", groups,
           " min_lrs (or one for all), got ", min_lr.size());
  if (min_lr.size() == 1) min_lr.assign(groups, min_lr[0]);
  best_ = options_.max ? -INFINITY : INFINITY;  // torch's mode_worse
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  const double t = options_.threshold;
  if (!options_.max) return options_.relative ? a < best * (1.0 - t) : a < best - t;
  return options_.relative ? a > best * (t + 1.0) : a > best + t;
}

void ReduceLROnPlateau::step(double metric) {
  ++steps_;
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad steps in the cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience) {
    std::vector<ParamGroup>& groups = optimizer_.param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      const double old_lr = groups[g].lr;
      const double new_lr = std::max(old_lr * options_.factor, options_.min_lr[g]);
      if (old_lr - new_lr > options_.eps) groups[g].lr = new_lr;
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
}

std::map<std::string, std::string> ReduceLROnPlateau::state_dict() const {
  std::map<std::string, std::string> state = Schedule::state_dict();
  state["best"] = exact(best_);
  state["num_bad_epochs"] = std::to_string(num_bad_epochs_);
  state["cooldown_counter"] = std::to_string(cooldown_counter_);
  return state;
}

void ReduceLROnPlateau::load_state_dict(const std::map<std::string, std::string>& state) {
  check_keys(state, {"steps", "best", "num_bad_epochs", "cooldown_counter"});
  const auto steps = static_cast<int64_t>(state_number(state, "steps", true));
  const double best = state_number(state, "best", false, /*infinite_ok=*/true);
  const auto bad = static_cast<int64_t>(state_number(state, "num_bad_epochs", true));
  const auto cooldown = static_cast<int64_t>(state_number(state, "cooldown_counter", true));
  steps_ = steps;
  best_ = best;
  num_bad_epochs_ = bad;
  cooldown_counter_ = cooldown;
}

}  // namespace ringgrad::optim
