// function.h — how an op records its backward (internal header for op authors).
//
//   Tensor out = <forward>;
//   if (autograd::needs_grad({&a, &b}))
//     autograd::record("mul", out, {&a, &b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
//       return autograd::Grads{g * b, g * a};
//     });
//
// needs_grad() is false when grad mode is off or no input requires grad; the
// check comes first so that an op run without autograd saves nothing (not even
// the closure's captures). The closure may also take (grad, needs) where needs[i] says whether
// input i wants a gradient, to skip work (matmul skips a GEMM for an input that needs none).
// Capture inputs with .detach(): the closure then holds the data, not the graph.
#pragma once

#include <initializer_list>
#include <type_traits>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/autograd/node.h"

namespace ringgrad::autograd {

inline bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

// Whether an op on these inputs must record its backward.
inline bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  return is_grad_enabled() && any_requires_grad(inputs);
}

void attach(Tensor& out, const char* name, const std::vector<const Tensor*>& inputs,
            FunctionNode::BackwardFn fn);

// For a view that picks out part of its input (slice, select): `view` takes a tensor of
// the input's shape to the same view of it; the backward is ViewScatterNode's (node.h).
void record_view_backward(const char* name, Tensor& out, const Tensor& input,
                          ViewScatterNode::ViewFn view);

// Like record, for one input and a backward that keeps no tensors: the node is never
// released after a backward, so `out` may feed several backward passes, each running it
// (autocast_weight_cache: one 16-bit copy of a weight for a step's micro-batches).
void record_reusable(const char* name, Tensor& out, const Tensor& input,
                     std::function<Tensor(const Tensor& grad)> backward);

template <typename F>
void record(const char* name, Tensor& out, std::initializer_list<const Tensor*> inputs,
            F&& backward) {
  if (!needs_grad(inputs)) return;
  std::vector<const Tensor*> in(inputs);
  if constexpr (std::is_invocable_v<F, const Tensor&, const std::vector<bool>&>) {
    attach(out, name, in, std::forward<F>(backward));
  } else {
    attach(out, name, in,
           [fn = std::forward<F>(backward)](const Tensor& g, const std::vector<bool>&) {
             return fn(g);
           });
  }
}

}  // namespace ringgrad::autograd
