// module.cpp — parameters, buffers, children, state dicts and checkpoints.
#include "ringgrad/nn/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <typeinfo>

#include "ringgrad/autograd/grad_mode.h"

namespace ringgrad::nn {

Tensor Module::forward(const Tensor&) {
  fail("forward", "expected ", name(),
       " to implement forward(x), got the base Module's (override it, or call the module's own "
       "forward overload)");
}

Tensor Module::call(const Tensor& x, const std::function<Tensor()>& body) {
  for (auto& hook : pre_hooks_) hook(*this, x);
  Tensor out;
  if (trace::enabled()) {
    trace::Span span(name(), "forward");
    out = body();
  } else {
    out = body();
  }
  for (auto& hook : post_hooks_) hook(*this, x, out);
  return out;
}

// ---------------------------------------------------------------- registration

void Module::check_new_name(const std::string& name) const {
  RG_CHECK(!name.empty() && name.find('.') == std::string::npos, "register",
           "expected a non-empty name without '.', got \"", name, "\"");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  bool child = std::any_of(children_.begin(), children_.end(),
                           [&](const Child& c) { return c.name == name; });
  RG_CHECK(!taken(parameters_) && !taken(buffers_) && !child, "register", "expected a new name in ",
           this->name(), ", got \"", name, "\" twice");
}

Tensor& Module::register_parameter(std::string name, Tensor value, bool requires_grad) {
  check_new_name(name);
  RG_CHECK(value.defined() && value.is_leaf(), "register_parameter",
           "expected a leaf tensor for \"", name, "\", got ",
           value.defined() ? "the result of an op (use .detach())" : "an undefined tensor");
  value.requires_grad_(requires_grad);
  parameters_.emplace_back(std::move(name), value);
  return parameters_.back().second;
}

Tensor& Module::register_buffer(std::string name, Tensor value) {
  check_new_name(name);
  buffers_.emplace_back(std::move(name), value);
  return buffers_.back().second;
}

void Module::add_child(std::string name, Module* child, std::shared_ptr<Module> owned) {
  check_new_name(name);
  RG_CHECK(child != nullptr && child != this, "register_module", "expected another module for \"",
           name, "\", got ", child ? "itself" : "null");
  children_.push_back({std::move(name), child, std::move(owned)});
}

// ---------------------------------------------------------------- traversal

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out(parameters_.begin(), parameters_.end());
  if (recurse)
    for (const Child& c : children_)
      for (auto& [n, t] : c.module->named_parameters(true)) out.emplace_back(c.name + "." + n, t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out(buffers_.begin(), buffers_.end());
  if (recurse)
    for (const Child& c : children_)
      for (auto& [n, t] : c.module->named_buffers(true)) out.emplace_back(c.name + "." + n, t);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (const Child& c : children_) out.emplace_back(c.name, c.module);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (const Child& c : children_)
    for (auto& [n, m] : c.module->named_modules())
      out.emplace_back(n.empty() ? c.name : c.name + "." + n, m);
  return out;
}

// ---------------------------------------------------------------- mode, placement, grads

void Module::train(bool on) {
  training_ = on;
  for (const Child& c : children_) c.module->train(on);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [n, p] : named_parameters()) {
    p.set_data(p.detach().to(device));
    if (p.grad().defined()) p.set_grad(p.grad().to(device));
  }
  for (auto& [n, b] : named_buffers()) b.set_data(b.to(device));
}

void Module::to(DType dtype) {
  RG_CHECK(is_floating(dtype), "Module::to", "expected a floating dtype, got ", dtype);
  NoGradGuard no_grad;
  for (auto& [n, p] : named_parameters()) {
    if (!is_floating(p.dtype())) continue;
    p.set_data(p.detach().to(dtype));
    if (p.grad().defined()) p.set_grad(p.grad().to(dtype));
  }
  for (auto& [n, b] : named_buffers())
    if (is_floating(b.dtype())) b.set_data(b.to(dtype));
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.set_grad(Tensor());
}

// ---------------------------------------------------------------- state

namespace {

// A checkpoint's tensor goes into a module's tensor of the same dtype, or of a wider
// floating one (float32 into float64: exact, how a float64 copy of a model starts from a
// float32 checkpoint). Anything else would change the values silently: float64 into
// float32 rounds them, bool or int64 into a floating tensor is not a weight at all.
void check_loadable_dtype(const std::string& key, DType own, DType given) {
  const bool widening = is_floating(own) && is_floating(given) && element_size(given) < element_size(own);
  RG_CHECK(given == own || widening, "load_state_dict", "expected ", key, " as ", own,
           " (the module's dtype), got ", given,
           "; convert the module (module.to(dtype)) or the checkpoint to match");
}

// A NaN or an infinity in a weight is a diverged run's checkpoint or a damaged file:
// training from it gives NaN at the first step, far from the cause.
void check_finite(const std::string& key, const Tensor& value) {
  if (!is_floating(value.dtype()) || value.numel() == 0) return;
  const Tensor values = value.detach().to(kCPU).to(kFloat64).contiguous();
  const double* v = values.data_ptr<double>();
  for (int64_t i = 0; i < values.numel(); ++i)
    RG_CHECK(std::isfinite(v[i]), "load_state_dict", "expected finite values in ", key, ", got ",
             v[i], " at element ", i, " of ", values.numel(),
             " (a diverged run's checkpoint, or a damaged file)");
}

}  // namespace

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& entry : named_buffers()) out.push_back(entry);
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors own = state_dict();
  std::map<std::string, Tensor> given(state.begin(), state.end());
  std::vector<std::string> missing, unexpected;
  std::set<std::string> known;
  for (auto& [n, t] : own) {
    known.insert(n);
    if (!given.count(n)) missing.push_back(n);
  }
  for (auto& [n, t] : state)
    if (!known.count(n)) unexpected.push_back(n);
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& n : v) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  RG_CHECK(!strict || (missing.empty() && unexpected.empty()), "load_state_dict",
           "expected exactly the keys of ", name(), ", got ",
           missing.empty() ? "" : "missing: " + list(missing),
           missing.empty() || unexpected.empty() ? "" : "; ",
           unexpected.empty() ? "" : "unexpected: " + list(unexpected));
  NoGradGuard no_grad;
  // Every tensor is checked before the first is copied: a bad state dict leaves the
  // module as it was.
  std::set<std::string> parameters;
  for (auto& [n, p] : named_parameters()) parameters.insert(n);
  for (auto& [n, t] : own) {
    auto it = given.find(n);
    if (it == given.end()) continue;
    const Tensor& value = it->second;
    RG_CHECK(value.defined(), "load_state_dict", "expected a tensor for ", n, ", got an undefined one");
    RG_CHECK(value.shape() == t.shape(), "load_state_dict", "expected ", n, " of shape ",
             shape_str(t.shape()), ", got ", shape_str(value.shape()));
    check_loadable_dtype(n, t.dtype(), value.dtype());
    if (parameters.count(n)) check_finite(n, value);
  }
  for (auto& [n, t] : own) {
    auto it = given.find(n);
    if (it != given.end()) t.copy_(it->second);
  }
}

// ---------------------------------------------------------------- printing, checkpoints

std::string Module::name() const {
  int status = 0;
  const char* mangled = typeid(*this).name();
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string full = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  size_t colon = full.rfind("::");
  return colon == std::string::npos ? full : full.substr(colon + 2);
}

std::string Module::describe() const { return name() + "()"; }

static void print_tree(std::ostream& os, const Module& m, int indent) {
  auto children = m.named_children();
  if (children.empty()) {
    os << m.describe();
    return;
  }
  os << m.name() << "(\n";
  for (auto& [n, child] : children) {
    os << std::string(indent + 2, ' ') << "(" << n << "): ";
    print_tree(os, *child, indent + 2);
    os << "\n";
  }
  os << std::string(indent, ' ') << ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  print_tree(os, m, 0);
  return os;
}

void save(const Module& module, const std::string& path) {
  save_safetensors(module.state_dict(), path, {{"format", "ringgrad"}, {"module", module.name()}});
}

void load(Module& module, const std::string& path, bool strict) {
  NamedTensors state = load_safetensors(path);  // its errors name the file already
  try {
    module.load_state_dict(state, strict);
  } catch (const Error& e) {
    fail("nn::load", "'", path, "': ", e.what());  // which file, then what is wrong in it
  }
}

}  // namespace ringgrad::nn
