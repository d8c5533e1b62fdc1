// split_backward.h — a backward in two parts: the inputs' gradients now, the weights' later.
//
//   rg::Tensor x = received.detach().requires_grad_(true);   // a pipeline stage's input
//   rg::Tensor y = stage(x);
//   rg::autograd::DeferredBackward w = rg::autograd::backward_inputs_first(y, dy, {x});
//   send(x.grad());        // B: only the ops on the paths from y to x ran
//   ...                    // other work (the next micro-batch's forward)
//   w.run();               // W: every other gradient — the weights' — accumulates now
//
// A zero-bubble pipeline (ZB-H1) splits each backward this way: the previous stage waits
// for B's input gradient, while W can wait and fill the time the stage would idle. B runs
// every node that lies on a path from the root to one of `inputs`, asking each only for
// the gradients of the inputs on such paths (Node::apply_some: a linear layer computes
// dX = dY·W and not dW = dYᵀ·X); each such node that also has inputs off those paths is
// kept, with the gradient it received, for W. W runs those nodes again for the rest, then
// every node below them, as backward() would. The same nodes run with the same gradients
// as in one backward, and a gradient's contributions are added in the same order, so B
// then W gives backward()'s gradients exactly. Leaves' hooks (DDP's all-reduce) fire in W,
// when a parameter's gradient is final; hooks queued with queue_callback run at the end
// of the part that queued them.
//
// Memory: until W runs, the kept nodes hold their saved tensors and the output gradient
// each received (for a linear layer: its input and dY, what dW needs). A DeferredBackward
// destroyed without run() computes nothing more: those gradients are never made.
#pragma once

#include <memory>
#include <vector>

#include "ringgrad/autograd/node.h"

namespace ringgrad::autograd {

class DeferredBackward {
 public:
  DeferredBackward() = default;
  DeferredBackward(DeferredBackward&&) noexcept = default;
  DeferredBackward& operator=(DeferredBackward&&) noexcept = default;
  DeferredBackward(const DeferredBackward&) = delete;
  DeferredBackward& operator=(const DeferredBackward&) = delete;

  // W: the gradients B left, accumulated into the leaves' .grad. Once; then empty().
  void run();
  bool empty() const { return items_.empty() && delivered_.empty(); }
  // Nodes waiting to run their deferred part.
  size_t size() const { return items_.size(); }

  struct Item {
    std::shared_ptr<Node> node;
    Tensor grad;              // the gradient of the node's output, complete
    std::vector<bool> needs;  // the inputs W computes (those B did not)
  };
  struct Delivered {  // a gradient B made for a node of W's (from a node that ran whole)
    std::shared_ptr<Node> node;
    Tensor grad;
  };

 private:
  friend DeferredBackward backward_inputs_first(const Tensor&, const Tensor&,
                                                const std::vector<Tensor>&);
  std::vector<Item> items_;
  std::vector<Delivered> delivered_;
};

// B: the gradients of `inputs` (leaves that require grad) from `root`, accumulated into
// their .grad now; everything else deferred to the returned object's run(). `grad` as in
// Tensor::backward (undefined: root must be a scalar, the gradient 1). The graph is freed
// as it goes (no retain_graph).
DeferredBackward backward_inputs_first(const Tensor& root, const Tensor& grad,
                                       const std::vector<Tensor>& inputs);

}  // namespace ringgrad::autograd
