// module.h — nn::Module, the base of every layer and model.
//
// A Module owns named parameters (tensors that training updates), named
// buffers (tensors that belong to the model but are not trained) and named
// child modules, exactly like torch.nn.Module:
//
//   struct SimpleModel : rg::nn::Module {
//     rg::nn::Linear fc1{784, 256}, fc2{256, 10};
//     SimpleModel() { register_module("fc1", fc1); register_module("fc2", fc2); }
//     rg::Tensor forward(const rg::Tensor& x) override { return fc2(rg::relu(fc1(x.flatten(1)))); }
//   };
//
// Children registered by reference are members of their parent, so modules are
// neither copied nor moved (both are deleted). Moving a model to a device or
// dtype swaps each parameter's data in place: handles held elsewhere (by an
// optimizer, say) keep naming the same parameter, as in PyTorch.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ringgrad/core/safetensors.h"
#include "ringgrad/core/tensor.h"
#include "ringgrad/core/trace.h"

namespace ringgrad::nn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation, for modules of one input. Modules with other signatures
  // (attention, say) define their own forward overloads instead.
  virtual Tensor forward(const Tensor& x);
  // With tracing on (core/trace.h), a call is a "forward" slice named by name(),
  // and the forward hooks below run around it.
  Tensor operator()(const Tensor& x) {
    return trace::enabled() || has_hooks() ? call(x, [&] { return forward(x); }) : forward(x);
  }
  // The same for a forward of another signature: `body` computes the output from
  // `x` (the main input) and whatever else it captured, e.g. in an encoder stack
  //   x = layer->call(x, [&] { return layer->forward(x, masks); });
  // so hooks and traces see every layer however it is called.
  Tensor call(const Tensor& x, const std::function<Tensor()>& body);

  // ---- hooks around a call (PyTorch's register_forward_pre_hook / register_forward_hook) ----
  // pre(module, input) runs before forward; post(module, input, output) after it, and may
  // replace the output. They run for calls through operator() or call(), not for a
  // direct forward(). FullyShardedDataParallel gathers a unit's parameters in its pre
  // hook and frees them in its post hook.
  using ForwardPreHook = std::function<void(Module&, const Tensor& input)>;
  using ForwardHook = std::function<void(Module&, const Tensor& input, Tensor& output)>;
  void register_forward_pre_hook(ForwardPreHook hook) { pre_hooks_.push_back(std::move(hook)); }
  void register_forward_hook(ForwardHook hook) { post_hooks_.push_back(std::move(hook)); }
  bool has_hooks() const { return !pre_hooks_.empty() || !post_hooks_.empty(); }

  // ---- the parts of a module ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;  // "fc1.weight", …
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  std::vector<std::pair<std::string, Module*>> named_modules();  // self ("") and all below
  int64_t num_parameters() const;                                // total elements

  // ---- mode, placement, gradients ----
  virtual void train(bool on = true);  // recursive; Dropout and friends read is_training()
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void to(Device device);
  void to(DType dtype);  // floating parameters and buffers only
  void zero_grad();      // clears every parameter's .grad() (set to none, like PyTorch)

  // ---- state: parameters then buffers, by dotted name ----
  NamedTensors state_dict() const;
  // Copies values into this module's tensors. strict: every key must match a
  // parameter or buffer and every parameter/buffer must be given. Always: shapes
  // match; dtypes match, or a floating value goes into a wider floating tensor
  // (float32 into float64 is exact; float64 into float32, or bool/int64 into a
  // float tensor, would change the values and is refused); parameters' values are
  // finite (NaN/Inf: a diverged or damaged checkpoint). A mismatch throws naming the
  // key(s) and the values, and leaves the module unchanged.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // One-line description of this module (Linear: "Linear(in_features=784, …)").
  virtual std::string describe() const;
  std::string name() const;  // the class name, e.g. "Linear"

 protected:
  Tensor& register_parameter(std::string name, Tensor value, bool requires_grad = true);
  Tensor& register_buffer(std::string name, Tensor value);
  // A child that is a member of this module (lives as long as it does).
  template <typename M>
  M& register_module(std::string name, M& child) {
    add_child(std::move(name), &child, nullptr);
    return child;
  }
  // A child this module owns (Sequential, ModuleList-like containers).
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> child) {
    add_child(std::move(name), child.get(), child);
    return child;
  }

 private:
  struct Child {
    std::string name;
    Module* module;
    std::shared_ptr<Module> owned;  // null for members
  };
  void add_child(std::string name, Module* child, std::shared_ptr<Module> owned);
  void check_new_name(const std::string& name) const;

  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<Child> children_;
  std::vector<ForwardPreHook> pre_hooks_;
  std::vector<ForwardHook> post_hooks_;
  bool training_ = true;
};

// Prints the module tree, like print(model) in PyTorch.
std::ostream& operator<<(std::ostream& os, const Module& m);

// Checkpoints: the state_dict as a .safetensors file (written atomically). load's
// errors name the file, then the key and what is wrong with it.
void save(const Module& module, const std::string& path);
void load(Module& module, const std::string& path, bool strict = true);

}  // namespace ringgrad::nn
