// grad_scaler.cpp — dynamic loss scaling: torch.amp.GradScaler's unscale_/step/update,
// with the scale kept as a float32 value and updated as torch's _amp_update_scale_ does.
#include "ringgrad/optim/grad_scaler.h"

#include <charconv>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <utility>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::optim {

namespace {

constexpr const char* kOp = "GradScaler";
constexpr int64_t kMaxInterval = std::numeric_limits<int32_t>::max();  // torch: an int32 tracker

// torch keeps the scale in a float32 tensor: every value it takes is rounded to float32.
double as_float32(double v) { return static_cast<double>(static_cast<float>(v)); }

// Numbers in a state_dict keep every bit (std::to_string keeps 6 decimals).
std::string exact(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

void check_scale(double scale, const char* what) {
  RG_CHECK(std::isfinite(scale) && scale > 0 && std::isfinite(as_float32(scale)) &&
               as_float32(scale) > 0,
           kOp, "expected ", what, " to be finite and > 0 as a float32, got ", scale);
}
void check_growth_factor(double f) {
  RG_CHECK(std::isfinite(f) && f > 1, kOp, "expected growth_factor > 1 and finite, got ", f);
}
void check_backoff_factor(double f) {
  RG_CHECK(f > 0 && f < 1, kOp, "expected backoff_factor in (0, 1), got ", f);
}
void check_growth_interval(int64_t n) {
  RG_CHECK(n >= 1 && n <= kMaxInterval, kOp, "expected growth_interval in [1, 2^31 - 1], got ",
           n);
}

// A state_dict number, strictly: the whole text one finite number, or an error naming the
// key and the text.
double state_number(const std::map<std::string, std::string>& state, const std::string& key) {
  auto it = state.find(key);
  RG_CHECK(it != state.end(), kOp, "expected the state_dict key \"", key,
           "\", got a state_dict without it");
  const std::string& text = it->second;
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  RG_CHECK(error == std::errc() && end == text.data() + text.size() && std::isfinite(value), kOp,
           "expected \"", key, "\" to be a finite number, got \"", text, "\"");
  return value;
}

// True when any element of g is inf or NaN: g·0 is 0 for finite elements and NaN for
// the others, so the sum is NaN exactly when one is there. One small op per gradient on
// its own device, read back once per device (see below).
Tensor non_finite_probe(const Tensor& g) { return (g * 0.0).sum().to(kFloat32); }

}  // namespace

GradScaler::GradScaler(GradScalerOptions o)
    : enabled_(o.enabled),
      scale_(as_float32(o.init_scale)),
      growth_factor_(o.growth_factor),
      backoff_factor_(o.backoff_factor),
      growth_interval_(o.growth_interval),
      agree_(std::move(o.agree)) {
  check_scale(o.init_scale, "init_scale");
  check_growth_factor(o.growth_factor);
  check_backoff_factor(o.backoff_factor);
  check_growth_interval(o.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  RG_CHECK(loss.defined(), kOp, "expected a loss tensor in scale(), got an undefined tensor");
  if (!enabled_) return loss;
  RG_CHECK(is_floating(loss.dtype()), kOp, "expected a floating-point loss in scale(), got ",
           loss.describe());
  // A 16-bit loss: multiplied in float32 and rounded once (inf when it overflows float16),
  // and the backward multiplies the incoming gradient by the scale the same way.
  if (is_reduced_precision(loss.dtype())) return (loss.to(kFloat32) * scale_).to(loss.dtype());
  return loss * scale_;
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!enabled_) return;
  OptimizerState& st = per_optimizer_[&optimizer];
  RG_CHECK(st.stage != Stage::Unscaled, kOp,
           "expected one unscale_() per optimizer between update()s, got a second "
           "unscale_() on this optimizer since the last update()");
  RG_CHECK(st.stage != Stage::Stepped, kOp,
           "expected unscale_() before step(), got unscale_() after step() on this optimizer");

  NoGradGuard no_grad;
  // torch: inv_scale = scale.double().reciprocal().float()
  const double inv_scale = as_float32(1.0 / scale_);
  bool found_inf = false, checked = false;
  // The probes of the gradients on one device add up into one scalar, read once: one
  // device-to-host wait per device and call, not per parameter.
  Tensor pending;
  auto read = [&] {
    if (pending.defined() && std::isnan(pending.item())) found_inf = true;
    pending = Tensor();
  };
  for (ParamGroup& group : optimizer.param_groups()) {
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      checked = true;
      // Checked before dividing, as torch does: a finite scaled gradient stays "finite".
      Tensor probe = non_finite_probe(g);
      if (pending.defined() && pending.device() != probe.device()) read();
      pending = pending.defined() ? pending + probe : probe;
      g.mul_(inv_scale);
    }
  }
  read();
  // Every rank calls agree once here, gradients or not (it may be a collective).
  if (agree_) found_inf = agree_(found_inf);
  st.checked = checked;
  st.found_inf = found_inf;
  st.stage = Stage::Unscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  {
    auto it = per_optimizer_.find(&optimizer);
    RG_CHECK(it == per_optimizer_.end() || it->second.stage != Stage::Stepped, kOp,
             "expected one step() per optimizer between update()s, got a second step() on this "
             "optimizer since the last update()");
    if (it == per_optimizer_.end() || it->second.stage == Stage::Ready) unscale_(optimizer);
  }
  OptimizerState& st = per_optimizer_.at(&optimizer);
  RG_CHECK(st.checked, kOp,
           "expected at least one gradient among the optimizer's parameters in step(), got "
           "none (no inf checks were recorded for this optimizer)");
  const bool stepping = !st.found_inf;
  if (stepping) optimizer.step();
  st.stage = Stage::Stepped;
  return stepping;
}

void GradScaler::update() {
  if (!enabled_) return;
  bool checked = false, found_inf = false;
  for (const auto& [opt, st] : per_optimizer_) {
    checked = checked || st.checked;
    found_inf = found_inf || st.found_inf;
  }
  RG_CHECK(checked, kOp,
           "expected step() or unscale_() on an optimizer with gradients before update(), got "
           "none since the last update() (no inf checks were recorded prior to update)");
  // torch's _amp_update_scale_ (CPU kernel): float32 scale, factors applied in double.
  // (">=" where torch has "==": the same while the tracker is below the interval, which
  // set_growth_interval may lower; torch would then never grow again.)
  if (found_inf) {
    scale_ = as_float32(scale_ * backoff_factor_);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 >= growth_interval_) {
    const double grown = as_float32(scale_ * growth_factor_);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    growth_tracker_ += 1;
  }
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  check_scale(new_scale, "update(new_scale)'s new_scale");
  scale_ = as_float32(new_scale);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const { return enabled_ ? scale_ : 1.0; }

void GradScaler::set_growth_factor(double factor) {
  check_growth_factor(factor);
  growth_factor_ = factor;
}

void GradScaler::set_backoff_factor(double factor) {
  check_backoff_factor(factor);
  backoff_factor_ = factor;
}

void GradScaler::set_growth_interval(int64_t interval) {
  check_growth_interval(interval);
  growth_interval_ = interval;
}

std::map<std::string, std::string> GradScaler::state_dict() const {
  if (!enabled_) return {};
  return {{"scale", exact(scale_)},
          {"growth_factor", exact(growth_factor_)},
          {"backoff_factor", exact(backoff_factor_)},
          {"growth_interval", std::to_string(growth_interval_)},
          {"_growth_tracker", std::to_string(growth_tracker_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, std::string>& state) {
  if (!enabled_) return;
  RG_CHECK(!state.empty(), kOp,
           "expected a state_dict with scale, growth_factor, backoff_factor, growth_interval "
           "and _growth_tracker, got an empty one (saved from a disabled GradScaler?)");
  static const char* const kKeys[] = {"scale", "growth_factor", "backoff_factor",
                                      "growth_interval", "_growth_tracker"};
  for (const auto& [key, value] : state) {
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    RG_CHECK(known, kOp,
             "expected state_dict keys scale, growth_factor, backoff_factor, growth_interval "
             "and _growth_tracker, got \"",
             key, "\" = \"", value, "\"");
  }
  const double scale = state_number(state, "scale");
  RG_CHECK(scale > 0 && std::isfinite(as_float32(scale)) && as_float32(scale) > 0, kOp,
           "expected \"scale\" to be finite and > 0 as a float32, got \"", state.at("scale"),
           "\"");
  const double growth = state_number(state, "growth_factor");
  RG_CHECK(growth > 1, kOp, "expected \"growth_factor\" > 1, got \"", state.at("growth_factor"),
           "\"");
  const double backoff = state_number(state, "backoff_factor");
  RG_CHECK(backoff > 0 && backoff < 1, kOp, "expected \"backoff_factor\" in (0, 1), got \"",
           state.at("backoff_factor"), "\"");
  const double interval = state_number(state, "growth_interval");
  RG_CHECK(interval >= 1 && interval <= static_cast<double>(kMaxInterval) &&
               interval == std::floor(interval),
           kOp, "expected \"growth_interval\" to be a whole number in [1, 2^31 - 1], got \"",
           state.at("growth_interval"), "\"");
  const double tracker = state_number(state, "_growth_tracker");
  RG_CHECK(tracker >= 0 && tracker < interval && tracker == std::floor(tracker), kOp,
           "expected \"_growth_tracker\" to be a whole number in [0, growth_interval = ",
           static_cast<int64_t>(interval), "), got \"", state.at("_growth_tracker"), "\"");

  scale_ = as_float32(scale);
  growth_factor_ = growth;
  backoff_factor_ = backoff;
  growth_interval_ = static_cast<int64_t>(interval);
  growth_tracker_ = static_cast<int64_t>(tracker);
}

}  // namespace ringgrad::optim
