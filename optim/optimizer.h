// optimizer.h — optimizers: SGD, Adam, AdamW, with PyTorch's formulas and API.
//
//   rg::optim::Adam opt(model.parameters(), {.lr = 1e-3});
//   opt.zero_grad(); loss.backward(); opt.step();
//
// Parameter groups carry their own learning rate and weight decay:
//   rg::optim::AdamW opt({{decay_params, {.weight_decay = 0.1}},
//                         {no_decay_params, {.weight_decay = 0.0}}}, {.lr = 3e-4});
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ringgrad/core/safetensors.h"
#include "ringgrad/core/tensor.h"

namespace ringgrad::optim {

// Per-group overrides; unset fields take the optimizer's defaults.
struct GroupOptions {
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
};

struct ParamGroup {
  std::vector<Tensor> params;
  double lr = 0;
  double weight_decay = 0;
  double initial_lr = 0;  // what schedules scale from
  // SGD's momentum or Adam's beta1 (torch's group["momentum"] / group["betas"][0]); set
  // from the options, moved by OneCycleLR's cycle_momentum.
  double momentum = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter that has a gradient (others are skipped).
  virtual void step() = 0;
  // Clears the gradients (to none, PyTorch's default set_to_none=True).
  void zero_grad();

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  int64_t steps() const { return steps_; }

  // State for resuming: per-parameter buffers as "state.<group>.<index>.<name>"
  // plus the step count and each group's lr / weight decay in `metadata`.
  NamedTensors state_dict(std::map<std::string, std::string>* metadata) const;
  // Checks everything before it changes anything (a bad checkpoint leaves the optimizer
  // as it was), and throws naming the key and the value when:
  //  - metadata is missing or not a number in range (lr, weight decay >= 0 and finite);
  //  - a parameter's state is not exactly the buffers state_buffers() names (one
  //    missing, say exp_avg_sq or step beside an exp_avg, or one unknown);
  //  - a buffer's dtype or shape is not its parameter's (a step: a float64 scalar, a
  //    whole number), or its values are not finite, or negative where they cannot be;
  //  - (Adam, AdamW) a parameter has no state while the checkpoint has taken steps or
  //    others have state: their state_dict writes every parameter's state once a step
  //    has been taken, so a missing one is a damaged file, not a fresh parameter.
  //    (SGD's momentum buffer has no such "not stepped yet" value, so a parameter
  //    without one is taken as never having had a gradient.)
  void load_state_dict(const NamedTensors& state,
                       const std::map<std::string, std::string>& metadata);
  virtual std::string name() const = 0;

  // The buffers a parameter's state holds once it has been stepped ("step", where
  // there is one, is the parameter's own step counter: a float64 scalar).
  struct StateBuffer {
    std::string name;
    bool non_negative = false;  // e.g. Adam's running mean of squared gradients
  };
  virtual std::vector<StateBuffer> state_buffers() const = 0;

 protected:
  Optimizer(std::vector<std::pair<std::vector<Tensor>, GroupOptions>> groups, double lr,
            double weight_decay);
  // Per-parameter buffers, created on first use: state(g, i)["exp_avg"].
  std::map<std::string, Tensor>& state(size_t group, size_t index);
  // The state of a parameter not stepped yet, for optimizers where that state is the
  // same as none (Adam: zero moments, step 0); empty where there is no such value (SGD's
  // momentum buffer starts as the first gradient). When it is not empty, state_dict
  // writes it for each parameter without state once a step has been taken.
  virtual std::map<std::string, Tensor> initial_state(const Tensor&) const { return {}; }

  // Master weights. A bfloat16 or float16 parameter is updated through a float32 copy
  // kept in its state as "master" (its moments are float32 too): an update smaller than
  // the parameter's last bit still accumulates there, and the parameter gets the copy
  // rounded once per step. float32/float64 parameters are updated in place.
  //   Tensor& w = weights(g, i);          // the parameter, or its float32 master
  //   Tensor grad = gradient(g, i);       // p.grad() in w's dtype
  //   ... update w ...;  publish(g, i);   // p = w rounded (nothing to do for float32)
  Tensor& weights(size_t group, size_t index);
  Tensor gradient(size_t group, size_t index) const;
  void publish(size_t group, size_t index);
  // initial_state for p (in its master's dtype) plus the master itself for a 16-bit p.
  std::map<std::string, Tensor> initial_state_with_master(const Tensor& p) const;

  std::vector<ParamGroup> groups_;
  std::map<std::pair<size_t, size_t>, std::map<std::string, Tensor>> state_;
  int64_t steps_ = 0;
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  SGD(std::vector<std::pair<std::vector<Tensor>, GroupOptions>> groups, SGDOptions options = {});
  void step() override;
  std::string name() const override { return "SGD"; }
  std::vector<StateBuffer> state_buffers() const override;

 private:
  SGDOptions options_;
};

// Adam's and AdamW's options: one list of fields, each optimizer with PyTorch's
// defaults (weight_decay 0 for Adam, 0.01 for AdamW), so AdamW(params, {.lr = 3e-4})
// decays by 0.01 as torch.optim.AdamW(params, lr=3e-4) does.
enum class AdamVariant { Adam, AdamW };
template <AdamVariant V>
struct AdamOptionsOf {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  // Adam: L2 added to the gradient; AdamW: decoupled decay
  double weight_decay = V == AdamVariant::AdamW ? 0.01 : 0.0;
  // torch's amsgrad: divide by the running maximum of exp_avg_sq (kept in the state as
  // max_exp_avg_sq, saved and loaded with it) instead of exp_avg_sq itself.
  bool amsgrad = false;
  bool maximize = false;  // torch's maximize: step up the gradient (g = -grad)
};
using AdamOptions = AdamOptionsOf<AdamVariant::Adam>;
using AdamWOptions = AdamOptionsOf<AdamVariant::AdamW>;

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  Adam(std::vector<std::pair<std::vector<Tensor>, GroupOptions>> groups, AdamOptions options = {});
  void step() override;
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  std::vector<StateBuffer> state_buffers() const override;

 protected:
  Adam(std::vector<std::pair<std::vector<Tensor>, GroupOptions>> groups, AdamOptions options,
       bool decoupled);
  std::map<std::string, Tensor> initial_state(const Tensor& p) const override;

 private:
  AdamOptions options_;
  bool decoupled_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter): p -= lr·wd·p each step.
// PyTorch's default weight_decay for AdamW is 0.01 (AdamWOptions' default).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  AdamW(std::vector<std::pair<std::vector<Tensor>, GroupOptions>> groups,
        AdamWOptions options = {});
  // An AdamOptions struct (code written before AdamWOptions) is taken as written: its
  // weight_decay default is Adam's 0. (A template, so that {.lr = …} means AdamWOptions.)
  template <AdamVariant V>
    requires(V == AdamVariant::Adam)
  AdamW(std::vector<Tensor> params, const AdamOptionsOf<V>& options)
      : AdamW(std::move(params), as_adamw(options)) {}
  template <AdamVariant V>
    requires(V == AdamVariant::Adam)
  AdamW(std::vector<std::pair<std::vector<Tensor>, GroupOptions>> groups,
        const AdamOptionsOf<V>& options)
      : AdamW(std::move(groups), as_adamw(options)) {}

 private:
  static AdamWOptions as_adamw(const AdamOptions& options);  // the same fields, as given
};

// Two groups for AdamW, the usual transformer recipe: weight matrices (and other
// parameters of 2+ dims: embeddings) decay by weight_decay; biases and norm weights
// (1-D) do not. Pass model.named_parameters().
std::vector<std::pair<std::vector<Tensor>, GroupOptions>> weight_decay_groups(
    const NamedTensors& named_parameters, double weight_decay);

// A state_dict key "state.<group>.<index>.<name>" taken apart, or nullopt when it
// is not one (sharded optimizers re-number keys between their form and the plain one).
struct StateKey {
  size_t group = 0, index = 0;
  std::string name;
};
std::optional<StateKey> parse_state_key(const std::string& key);

struct ClipGradNormOptions {
  double norm_type = 2;             // any p > 0, or INFINITY (the largest |g|)
  bool error_if_nonfinite = false;  // throw when the total norm is nan or inf
};

// Scales all gradients so their global norm (of order norm_type, over all gradients
// as one vector) is at most max_norm; returns the norm before clipping
// (torch.nn.utils.clip_grad_norm_). A nan or inf norm, without error_if_nonfinite,
// scales by max_norm / (norm + 1e-6) anyway, as torch does (nan or 0 gradients).
// For the 2-norm it is the two steps below, which sharded training (parallel/zero.h)
// runs with a sum across ranks in between.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm,
                      ClipGradNormOptions options = {});
// The global norm of order norm_type (p > 0 or INFINITY) of the gradients, in float64.
double grad_norm(const std::vector<Tensor>& params, double norm_type = 2);
// The sum of the squared gradients' elements, in float64 (parameters without one: 0).
double grad_norm_squared(const std::vector<Tensor>& params);
// Every gradient times max_norm / (norm + 1e-6), when that is below 1.
void scale_grads_to_norm(const std::vector<Tensor>& params, double norm, double max_norm);

// Checkpoints: the optimizer's state as a .safetensors file (written atomically).
void save(const Optimizer& optimizer, const std::string& path);
void load(Optimizer& optimizer, const std::string& path);

}  // namespace ringgrad::optim
