// node.h — the autograd graph.
//
// Every op that has an input requiring grad gives its output a Node: the op's
// name, one Edge per input (to the node that made that input, or to the leaf's
// AccumulateGrad), and a backward closure that maps the output's gradient to
// one gradient per input. Ops build nodes with autograd::record (function.h),
// right after their forward computation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "ringgrad/core/tensor.h"

namespace ringgrad::autograd {

using Grads = std::vector<Tensor>;  // one entry per input; undefined = no gradient

struct Node;

// An op's input, as the graph remembers it: where its gradient goes, and the
// shape, dtype and device that gradient must have (the input's, recorded with
// the op). The engine checks every gradient a node returns against them, so a
// wrong backward is named where it happens, not three ops later.
struct Edge {
  std::shared_ptr<Node> node;  // null: that input needs no gradient
  Shape shape;
  DType dtype = DType::Float32;
  Device device;
};

struct Node {
  explicit Node(const char* name);
  virtual ~Node();  // frees long chains iteratively, not by recursion

  const char* name;
  uint64_t sequence_nr;  // creation order; backward runs the newest ready node first
  std::vector<Edge> next;

  // grad: gradient w.r.t. this node's output. Returns one gradient per `next` edge.
  virtual Grads apply(Tensor grad) = 0;
  // apply() for some inputs only: needs[i] false means input i's gradient is not wanted
  // now (the engine drops it if it comes back anyway). The default runs apply(); a node
  // that can skip the work (a GEMM per input) overrides it. The split backward
  // (split_backward.h) computes input and weight gradients in two calls of it.
  virtual Grads apply_some(Tensor grad, const std::vector<bool>& needs);
  // Whether apply_some computes only what it is asked for, so that a node run in two
  // calls does each input's work once. A node that does not (checkpoint's recomputation
  // accumulates into leaves as it goes) runs whole in a split backward's first part.
  virtual bool splits() const { return false; }
  // For a node with one input: add its gradient for that input into `sum`, the input's
  // gradient so far (contiguous, owned by the engine alone), in place, where that costs
  // less than apply() and an add. False: not done (the engine calls apply()).
  virtual bool add_into(const Tensor& grad, Tensor& sum);
  // Drop saved tensors after backward (unless retain_graph).
  virtual void release() = 0;
  // Whether it outlives a backward, for several to run it (record_reusable, function.h:
  // autocast_weight_cache's casts). Checkpointing counts it outside every region, made
  // before or inside one.
  virtual bool reusable() const { return false; }
};

// A node whose backward is a closure (what autograd::record makes).
struct FunctionNode : Node {
  using BackwardFn = std::function<Grads(const Tensor& grad, const std::vector<bool>& needs)>;
  FunctionNode(const char* name, BackwardFn fn) : Node(name), backward(std::move(fn)) {}
  Grads apply(Tensor grad) override;
  Grads apply_some(Tensor grad, const std::vector<bool>& needs) override;
  bool splits() const override { return true; }
  void release() override { backward = nullptr; }
  BackwardFn backward;
};

// The backward of a view that picks out part of its input (slice, select): the input's
// gradient is zeros but at the view's place, which holds the view's gradient. `view`
// takes any tensor of the input's shape to the same view of it. Its add_into adds
// straight into the view's place of the sum: Q, K and V sliced from one fused projection
// cost one zero-filled buffer and two strided adds, not three buffers and two whole adds.
struct ViewScatterNode : Node {
  using ViewFn = std::function<Tensor(const Tensor&)>;
  ViewScatterNode(const char* name, ViewFn view) : Node(name), view(std::move(view)) {}
  Grads apply(Tensor grad) override;
  bool add_into(const Tensor& grad, Tensor& sum) override;
  void release() override {}
  ViewFn view;
};

// The sink for a leaf's gradient: adds it into leaf.grad, then runs the leaf's
// post-accumulate hooks (data parallelism hangs its all-reduce there).
struct AccumulateGrad : Node {
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  Grads apply(Tensor grad) override;
  void release() override {}
  std::weak_ptr<TensorImpl> leaf;
};

// The edge that a tensor contributes as an op input (null if it needs no grad).
Edge gradient_edge(const Tensor& t);

// Run backward from `root` with initial gradient `grad` (engine.cpp).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// A backward from `root` that stops at a boundary: a node for which stop(node) holds is
// not run and not walked past; the gradient that reached it is returned, by node (a node
// no gradient reached is absent). Leaves' gradients are not accumulated unless their
// AccumulateGrad lies inside the boundary. Checkpointing's recomputation runs on it
// (nn/checkpoint.h); like torch.autograd.grad, but by node.
std::unordered_map<Node*, Tensor> run_backward_until(const Tensor& root, const Tensor& grad,
                                                     const std::function<bool(const Node&)>& stop);

// The sequence number the next node made will get: every node made from now on has one
// at least as large (AccumulateGrad's excepted: theirs is the largest of all).
uint64_t next_sequence_number();

// From inside a backward (a gradient hook, say): run fn once that backward has
// finished with every node — how data parallelism waits for its last
// all-reduce before backward() returns (PyTorch's queue_callback).
void queue_callback(std::function<void()> fn);

}  // namespace ringgrad::autograd
