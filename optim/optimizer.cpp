// optimizer.cpp — parameter groups, state, SGD, Adam/AdamW, gradient clipping.
#include "ringgrad/optim/optimizer.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"
#include "ringgrad/core/trace.h"

namespace ringgrad::optim {

using GroupList = std::vector<std::pair<std::vector<Tensor>, GroupOptions>>;

Optimizer::Optimizer(GroupList groups, double lr, double weight_decay) {
  RG_CHECK(std::isfinite(lr) && lr >= 0, "optimizer", "expected a finite lr >= 0, got ", lr);
  RG_CHECK(std::isfinite(weight_decay) && weight_decay >= 0, "optimizer",
           "expected a finite weight_decay >= 0, got ", weight_decay);
  for (auto& [params, opts] : groups) {
    ParamGroup g;
    g.params = std::move(params);
    g.lr = g.initial_lr = opts.lr.value_or(lr);
    g.weight_decay = opts.weight_decay.value_or(weight_decay);
    RG_CHECK(std::isfinite(g.lr) && g.lr >= 0 && std::isfinite(g.weight_decay) && g.weight_decay >= 0,
             "optimizer", "expected group ", groups_.size(),
             " with a finite lr >= 0 and weight_decay >= 0, got lr ", g.lr, " and weight_decay ",
             g.weight_decay);
    for (const Tensor& p : g.params)
      RG_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), "optimizer",
               "expected leaf parameters that require grad, got ", p.describe());
    groups_.push_back(std::move(g));
  }
}

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_)
    for (Tensor& p : g.params) p.set_grad(Tensor());
}

std::map<std::string, Tensor>& Optimizer::state(size_t group, size_t index) {
  return state_[{group, index}];
}

// Doubles in checkpoint metadata keep every bit (std::to_string keeps 6 decimals).
static std::string exact(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

std::optional<StateKey> parse_state_key(const std::string& key) {
  // "state." digits "." digits "." name, without exceptions on any input
  auto number = [&](size_t& pos, size_t& value) {
    size_t start = pos;
    value = 0;
    while (pos < key.size() && key[pos] >= '0' && key[pos] <= '9' && pos - start < 18)
      value = value * 10 + static_cast<size_t>(key[pos++] - '0');
    return pos > start && pos < key.size() && key[pos] == '.';
  };
  if (key.rfind("state.", 0) != 0) return std::nullopt;
  StateKey k;
  size_t pos = 6;
  if (!number(pos, k.group)) return std::nullopt;
  ++pos;
  if (!number(pos, k.index)) return std::nullopt;
  k.name = key.substr(pos + 1);
  if (k.name.empty()) return std::nullopt;
  return k;
}

Tensor& Optimizer::weights(size_t g, size_t i) {
  Tensor& p = groups_[g].params[i];
  if (!is_reduced_precision(p.dtype())) return p;
  auto& st = state(g, i);
  auto it = st.find("master");
  if (it == st.end()) it = st.emplace("master", p.detach().to(kFloat32)).first;
  return it->second;
}

Tensor Optimizer::gradient(size_t g, size_t i) const {
  const Tensor& p = groups_[g].params[i];
  return p.grad().to(compute_dtype(p.dtype()));
}

void Optimizer::publish(size_t g, size_t i) {
  Tensor& p = groups_[g].params[i];
  if (is_reduced_precision(p.dtype())) p.copy_(state(g, i).at("master"));
}

std::map<std::string, Tensor> Optimizer::initial_state_with_master(const Tensor& p) const {
  if (!is_reduced_precision(p.dtype())) return initial_state(p);
  Tensor master = p.detach().to(kFloat32);
  std::map<std::string, Tensor> st = initial_state(master);
  st.emplace("master", master);
  return st;
}

NamedTensors Optimizer::state_dict(std::map<std::string, std::string>* metadata) const {
  // Once a step has been taken, every parameter's state is written — a parameter that
  // has had no gradient yet with its initial state, where the optimizer has one — so
  // load_state_dict can tell a parameter not stepped yet from a damaged file.
  std::map<std::pair<size_t, size_t>, std::map<std::string, Tensor>> all = state_;
  if (steps_ > 0)
    for (size_t g = 0; g < groups_.size(); ++g)
      for (size_t i = 0; i < groups_[g].params.size(); ++i)
        if (!all.count({g, i})) {
          std::map<std::string, Tensor> initial = initial_state_with_master(groups_[g].params[i]);
          if (!initial.empty()) all[{g, i}] = std::move(initial);
        }
  NamedTensors out;
  for (auto& [key, buffers] : all)
    for (auto& [name, t] : buffers)
      out.emplace_back(
          "state." + std::to_string(key.first) + "." + std::to_string(key.second) + "." + name, t);
  if (metadata) {
    (*metadata)["optimizer"] = name();
    (*metadata)["steps"] = std::to_string(steps_);
    for (size_t g = 0; g < groups_.size(); ++g) {
      std::string prefix = "group." + std::to_string(g) + ".";
      (*metadata)[prefix + "lr"] = exact(groups_[g].lr);
      (*metadata)[prefix + "initial_lr"] = exact(groups_[g].initial_lr);
      (*metadata)[prefix + "weight_decay"] = exact(groups_[g].weight_decay);
      (*metadata)[prefix + "momentum"] = exact(groups_[g].momentum);
      (*metadata)["group." + std::to_string(g) + ".size"] =
          std::to_string(groups_[g].params.size());
    }
  }
  return out;
}

namespace {

constexpr double kMaxCount = 9007199254740992.0;  // 2^53: every whole number below is exact

// A checkpoint's number, strictly: the whole text one finite number in [0, max] (and
// whole, when `whole`), or an error naming the key and the text. Never an exception of
// std:: nor undefined behaviour on any input.
double metadata_number(const std::map<std::string, std::string>& metadata, const std::string& key,
                       bool whole, double max) {
  auto it = metadata.find(key);
  RG_CHECK(it != metadata.end(), "load_state_dict", "expected optimizer metadata \"", key,
           "\", got a checkpoint without it");
  const std::string& text = it->second;
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  const bool ok = error == std::errc() && end == text.data() + text.size() && std::isfinite(value) &&
                  value >= 0 && value <= max && (!whole || value == std::floor(value));
  RG_CHECK(ok, "load_state_dict", "expected optimizer metadata \"", key, "\" to be ",
           whole ? "a whole number" : "a finite number", " in [0, ",
           max == kMaxCount ? "2^53" : "1e300", "], got \"", text, "\"");
  return value;
}

// Checks a state buffer's values: all finite and, where the buffer cannot be negative,
// none below zero. Reports the first bad element and where it is.
void check_state_values(const std::string& key, const Tensor& t, bool non_negative) {
  if (t.numel() == 0) return;
  const Tensor values = t.to(kCPU).to(kFloat64).contiguous();
  const double* v = values.data_ptr<double>();
  for (int64_t e = 0; e < values.numel(); ++e)
    RG_CHECK(std::isfinite(v[e]) && (!non_negative || v[e] >= 0), "load_state_dict", "expected ",
             key, " to hold ", non_negative ? "finite values >= 0" : "finite values", ", got ", v[e],
             " at element ", e, " of ", values.numel(),
             " (a diverged run's checkpoint, or a damaged file)");
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

// Everything is read and checked before anything changes: a bad checkpoint leaves the
// optimizer as it was.
void Optimizer::load_state_dict(const NamedTensors& state,
                                const std::map<std::string, std::string>& metadata) {
  auto it = metadata.find("optimizer");
  RG_CHECK(it != metadata.end(), "load_state_dict",
           "expected optimizer metadata \"optimizer\", got a checkpoint without it");
  RG_CHECK(it->second == name(), "load_state_dict", "expected a ", name(),
           " checkpoint, got one of ", it->second);
  std::vector<ParamGroup> groups = groups_;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::string prefix = "group." + std::to_string(g) + ".";
    const double size = metadata_number(metadata, prefix + "size", true, kMaxCount);
    RG_CHECK(size == double(groups[g].params.size()), "load_state_dict", "expected group ", g,
             " with ", groups[g].params.size(), " parameters, got ", metadata.at(prefix + "size"));
    groups[g].lr = metadata_number(metadata, prefix + "lr", false, 1e300);
    groups[g].initial_lr = metadata_number(metadata, prefix + "initial_lr", false, 1e300);
    groups[g].weight_decay = metadata_number(metadata, prefix + "weight_decay", false, 1e300);
    // Absent from checkpoints written before cycle_momentum: then the options' value stays.
    if (metadata.count(prefix + "momentum")) {
      groups[g].momentum = metadata_number(metadata, prefix + "momentum", false, 1e300);
      RG_CHECK(groups[g].momentum < 1, "load_state_dict", "expected optimizer metadata \"",
               prefix, "momentum\" (SGD's momentum or Adam's beta1) in [0, 1), got \"",
               metadata.at(prefix + "momentum"), "\"");
    }
  }
  const auto steps = static_cast<int64_t>(metadata_number(metadata, "steps", true, kMaxCount));
  const std::vector<StateBuffer> buffers = state_buffers();
  std::vector<std::string> names;  // what one parameter's state holds
  for (const StateBuffer& b : buffers) names.push_back(b.name);
  std::map<std::pair<size_t, size_t>, std::map<std::string, Tensor>> loaded;
  for (auto& [key, t] : state) {
    std::optional<StateKey> parsed = parse_state_key(key);
    RG_CHECK(parsed.has_value(), "load_state_dict", "expected keys state.<group>.<index>.<name>, got ", key);
    const size_t g = parsed->group, i = parsed->index;
    RG_CHECK(g < groups.size() && i < groups[g].params.size(), "load_state_dict",
             "expected state for an existing parameter, got ", key);
    const Tensor& p = groups[g].params[i];
    const std::string& buffer = parsed->name;
    RG_CHECK(t.defined(), "load_state_dict", "expected a tensor for ", key, ", got an undefined one");
    const bool master = is_reduced_precision(p.dtype()) && buffer == "master";
    auto spec = std::find_if(buffers.begin(), buffers.end(),
                             [&](const StateBuffer& b) { return b.name == buffer; });
    RG_CHECK(master || spec != buffers.end(), "load_state_dict", "expected ", name(),
             " state buffers (", buffers.empty() ? std::string("none") : joined(names),
             is_reduced_precision(p.dtype()) ? ", master" : "", "), got ", key);
    if (buffer == "step") {  // a per-parameter counter: a float64 scalar kept on the CPU
      RG_CHECK(t.numel() == 1 && t.dtype() == kFloat64, "load_state_dict", "expected ", key,
               " to be a float64 scalar, got ", t.dtype(), " of shape ", shape_str(t.shape()));
      Tensor count = t.to(kCPU).reshape({}).clone();
      const double v = count.item();
      RG_CHECK(std::isfinite(v) && v >= 0 && v <= kMaxCount && v == std::floor(v), "load_state_dict",
               "expected ", key, " to be a whole number in [0, 2^53], got ", v);
      loaded[{g, i}][buffer] = count;
      continue;
    }
    // A buffer is its parameter's twin: the same shape and dtype (a converted one would
    // have been rounded, or was never this parameter's) — float32 for a 16-bit parameter,
    // whose state and master copy are float32.
    RG_CHECK(t.shape() == p.shape(), "load_state_dict", "expected ", key, " of shape ",
             shape_str(p.shape()), ", got ", shape_str(t.shape()));
    const DType want = compute_dtype(p.dtype());
    RG_CHECK(t.dtype() == want, "load_state_dict", "expected ", key, " as ", want,
             is_reduced_precision(p.dtype()) ? " (the float32 state of a 16-bit parameter)"
                                             : " (its parameter's dtype)",
             ", got ", t.dtype());
    check_state_values(key, t, !master && spec->non_negative);
    loaded[{g, i}][buffer] = t.to(p.device()).contiguous().clone();
  }
  // Each parameter's state is whole: every buffer or (not stepped yet) none.
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const std::string key = "state." + std::to_string(g) + "." + std::to_string(i);
      auto found = loaded.find({g, i});
      if (found == loaded.end()) {
        RG_CHECK((steps == 0 && loaded.empty()) ||
                     initial_state_with_master(groups[g].params[i]).empty(),
                 "load_state_dict", "expected state for every parameter (", joined(names),
                 ") in a checkpoint of ", steps, " steps",
                 loaded.empty() ? "" : " with other parameters' state", ", got none for ", key,
                 " (a damaged file, or one from another model)");
        continue;
      }
      // A 16-bit parameter's state adds its float32 master; with no optimizer buffers yet
      // (SGD before any momentum) the master is its whole state.
      std::vector<std::string> wanted = names;
      if (is_reduced_precision(groups[g].params[i].dtype())) {
        wanted.push_back("master");
        if (found->second.size() == 1 && found->second.count("master")) wanted = {"master"};
      }
      for (const std::string& n : wanted)
        RG_CHECK(found->second.count(n), "load_state_dict", "expected ", key, ".", n, " beside ",
                 key, ".", found->second.begin()->first, ", got a checkpoint without it");
    }
  groups_ = std::move(groups);
  steps_ = steps;
  state_ = std::move(loaded);
}

// ---------------------------------------------------------------- SGD

static GroupList one_group(std::vector<Tensor> params) { return {{std::move(params), {}}}; }

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : SGD(one_group(std::move(params)), o) {}

SGD::SGD(GroupList groups, SGDOptions o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay), options_(o) {
  RG_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD",
           "expected momentum > 0 and dampening 0 for nesterov, got momentum ", o.momentum,
           " and dampening ", o.dampening);
  for (ParamGroup& g : groups_) g.momentum = o.momentum;
}

// A group's momentum may start at 0 and be raised later (OneCycleLR's cycle_momentum), so
// the buffer is always a known one; a parameter that never ran with momentum has none.
std::vector<Optimizer::StateBuffer> SGD::state_buffers() const { return {{"momentum_buffer"}}; }

// torch.optim.SGD: g += wd·p; buf = μ·buf + (1-τ)·g (buf = g at first);
// g = nesterov ? g + μ·buf : buf; p -= lr·g.
void SGD::step() {
  trace::Span span("SGD.step", "optimizer");
  NoGradGuard no_grad;
  ++steps_;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& group = groups_[gi];
    for (size_t i = 0; i < group.params.size(); ++i) {
      if (!group.params[i].grad().defined()) continue;
      Tensor& p = weights(gi, i);  // the parameter, or its float32 master copy
      Tensor g = gradient(gi, i);
      if (group.weight_decay != 0) g = g + p.detach() * group.weight_decay;
      if (group.momentum != 0) {
        auto& st = state(gi, i);
        auto it = st.find("momentum_buffer");
        if (it == st.end()) {
          it = st.emplace("momentum_buffer", g.clone()).first;
        } else {
          it->second.mul_(group.momentum);
          it->second.add_(g, 1.0 - options_.dampening);
        }
        g = options_.nesterov ? g + it->second * group.momentum : it->second;
      }
      p.add_(g, -group.lr);
      publish(gi, i);
    }
  }
}

// ---------------------------------------------------------------- Adam / AdamW

Adam::Adam(std::vector<Tensor> params, AdamOptions o)
    : Adam(one_group(std::move(params)), o, false) {}
Adam::Adam(GroupList groups, AdamOptions o) : Adam(std::move(groups), o, false) {}

Adam::Adam(GroupList groups, AdamOptions o, bool decoupled)
    : Optimizer(std::move(groups), o.lr, o.weight_decay), options_(o), decoupled_(decoupled) {
  RG_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, name().c_str(),
           "expected betas in [0, 1), got ", o.beta1, " and ", o.beta2);
  RG_CHECK(o.eps >= 0, name().c_str(), "expected eps >= 0, got ", o.eps);
  for (ParamGroup& g : groups_) g.momentum = o.beta1;
}

std::vector<Optimizer::StateBuffer> Adam::state_buffers() const {
  std::vector<StateBuffer> buffers{{"exp_avg"}, {"exp_avg_sq", /*non_negative=*/true}, {"step"}};
  if (options_.amsgrad) buffers.push_back({"max_exp_avg_sq", /*non_negative=*/true});
  return buffers;
}

std::map<std::string, Tensor> Adam::initial_state(const Tensor& p) const {
  std::map<std::string, Tensor> st{{"exp_avg", zeros_like(p)},
                                   {"exp_avg_sq", zeros_like(p)},
                                   {"step", zeros({}, {.dtype = kFloat64})}};
  if (options_.amsgrad) st.emplace("max_exp_avg_sq", zeros_like(p));
  return st;
}

// torch's amsgrad step (_single_tensor_adam), which the fused kernel does not cover:
// the same moments, divided by the running maximum of exp_avg_sq.
static void amsgrad_step_(Tensor& p, Tensor g, std::map<std::string, Tensor>& st,
                          const AdamStep& h) {
  if (h.weight_decay != 0) {
    if (h.decoupled)
      p.mul_(1 - h.lr * h.weight_decay);
    else
      g = g + p * h.weight_decay;
  }
  Tensor& m = st["exp_avg"];
  Tensor& v = st["exp_avg_sq"];
  Tensor& v_max = st["max_exp_avg_sq"];
  m.mul_(h.beta1).add_(g, 1 - h.beta1);
  v.mul_(h.beta2).add_(g * g, 1 - h.beta2);
  v_max.copy_(maximum(v_max, v));
  const double t = static_cast<double>(h.step);
  const double step_size = h.lr / (1 - std::pow(h.beta1, t));
  const double bias_correction2_sqrt = std::sqrt(1 - std::pow(h.beta2, t));
  Tensor denom = sqrt(v_max) * (1 / bias_correction2_sqrt) + h.eps;
  p.add_(m / denom, -step_size);
}

void Adam::step() {
  trace::Span span(decoupled_ ? "AdamW.step" : "Adam.step", "optimizer");
  NoGradGuard no_grad;
  ++steps_;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& group = groups_[gi];
    AdamStep h{.lr = group.lr,
               .beta1 = group.momentum,
               .beta2 = options_.beta2,
               .eps = options_.eps,
               .weight_decay = group.weight_decay,
               .step = 1,
               .decoupled = decoupled_};
    for (size_t i = 0; i < group.params.size(); ++i) {
      if (!group.params[i].grad().defined()) continue;
      auto& st = state(gi, i);
      if (st.empty()) st = initial_state_with_master(group.params[i]);
      Tensor& p = weights(gi, i);  // the parameter, or its float32 master copy
      // Each parameter counts its own steps (it may have skipped some without a gradient).
      Tensor& count = st["step"];
      h.step = static_cast<int64_t>(count.item()) + 1;
      count.fill_(static_cast<double>(h.step));
      const Tensor g = options_.maximize ? -gradient(gi, i) : gradient(gi, i);
      if (options_.amsgrad)
        amsgrad_step_(p, g, st, h);
      else
        adam_step_(p, g, st["exp_avg"], st["exp_avg_sq"], h);
      publish(gi, i);
    }
  }
}

// AdamOptions and AdamWOptions are one template: the same fields in the same layout,
// only the defaults differ, so a bit copy converts every field (present and future).
static_assert(sizeof(AdamOptions) == sizeof(AdamWOptions));
AdamWOptions AdamW::as_adamw(const AdamOptions& o) { return std::bit_cast<AdamWOptions>(o); }

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : Adam(one_group(std::move(params)), std::bit_cast<AdamOptions>(o), true) {}
AdamW::AdamW(GroupList groups, AdamWOptions o)
    : Adam(std::move(groups), std::bit_cast<AdamOptions>(o), true) {}

// ---------------------------------------------------------------- clipping, checkpoints

double grad_norm_squared(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  double total = 0;
  for (const Tensor& p : params)
    if (p.grad().defined()) {
      Tensor g = p.grad().to(kFloat64);
      total += sum(g * g).item();
    }
  return total;
}

void scale_grads_to_norm(const std::vector<Tensor>& params, double norm, double max_norm) {
  NoGradGuard no_grad;
  const double scale = max_norm / (norm + 1e-6);
  if (scale >= 1) return;
  for (const Tensor& p : params)
    if (p.grad().defined()) {
      Tensor g = p.grad();
      g.mul_(scale);
    }
}

double grad_norm(const std::vector<Tensor>& params, double norm_type) {
  RG_CHECK(norm_type > 0 && !std::isnan(norm_type), "clip_grad_norm",
           "expected a norm_type p > 0 or INFINITY, got ", norm_type);
  if (norm_type == 2) return std::sqrt(grad_norm_squared(params));
  NoGradGuard no_grad;
  double total = 0;
  for (const Tensor& p : params)
    if (p.grad().defined() && p.grad().numel() > 0) {
      Tensor g = abs(p.grad().to(kFloat64));
      const double part = std::isinf(norm_type) ? amax(g).item()
                                                : sum(norm_type == 1 ? g : pow(g, norm_type)).item();
      if (std::isnan(part)) return part;
      total = std::isinf(norm_type) ? std::max(total, part) : total + part;
    }
  return std::isinf(norm_type) || norm_type == 1 ? total : std::pow(total, 1 / norm_type);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm,
                      ClipGradNormOptions options) {
  const double norm = grad_norm(params, options.norm_type);
  RG_CHECK(!options.error_if_nonfinite || std::isfinite(norm), "clip_grad_norm",
           "expected a finite total norm of order ", options.norm_type,
           " of the gradients, got ", norm,
           " (set error_if_nonfinite = false to scale the gradients by it anyway)");
  scale_grads_to_norm(params, norm, max_norm);
  return norm;
}

void save(const Optimizer& optimizer, const std::string& path) {
  std::map<std::string, std::string> metadata{{"format", "ringgrad"}};
  NamedTensors state = optimizer.state_dict(&metadata);
  save_safetensors(state, path, metadata);
}

void load(Optimizer& optimizer, const std::string& path) {
  std::map<std::string, std::string> metadata;
  NamedTensors state = load_safetensors(path, &metadata);
  try {
    optimizer.load_state_dict(state, metadata);
  } catch (const Error& e) {
    fail("optim::load", "'", path, "': ", e.what());  // which file, then what is wrong in it
  }
}

std::vector<std::pair<std::vector<Tensor>, GroupOptions>> weight_decay_groups(
    const NamedTensors& named_parameters, double weight_decay) {
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, p] : named_parameters) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  return {{decay, {.weight_decay = weight_decay}}, {no_decay, {.weight_decay = 0.0}}};
}

}  // namespace ringgrad::optim
