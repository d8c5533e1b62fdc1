// function.h — how an op records its backward (internal header for op authors).
//
//   Tensor out = <forward>;
//   autograd::record("mul", out, {a, b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
//     return autograd::Grads{g * b, g * a};
//   });
//
// record() does nothing when grad mode is off or no input requires grad. The
// closure may also take (grad, needs) where needs[i] says whether input i wants
// a gradient, to skip work (matmul skips a GEMM for an input that needs none).
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

void attach(Tensor& out, const char* name, const std::vector<const Tensor*>& inputs,
            FunctionNode::BackwardFn fn);

template <typename F>
void record(const char* name, Tensor& out, std::initializer_list<const Tensor*> inputs,
            F&& backward) {
  if (!is_grad_enabled() || !any_requires_grad(inputs)) return;
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
