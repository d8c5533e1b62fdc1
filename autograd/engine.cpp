// engine.cpp — reverse-mode backward over the recorded graph.
//
// 1. Count, for every node reachable from the root, how many edges lead into it.
// 2. Start with the root's gradient; repeatedly run the ready node with the
//    highest sequence number (the most recently recorded op first, leaves'
//    AccumulateGrad nodes before anything else), adding each gradient it
//    returns into its target's buffer. A node is ready when every edge into it
//    has delivered, so its buffer holds its complete gradient.
// 3. Unless retain_graph, each node drops its saved tensors right after it ran:
//    activations are freed while backward is still going.
// 4. Sums are formed in place where the engine alone holds the partial sum (a
//    contiguous tensor no one else sees): two consumers of one tensor cost one
//    buffer, not a fresh one per add. A one-input node may add straight into its
//    input's sum (Node::add_into: a slice adds into its place only).
// 5. Every gradient a node returns is checked against the shape, dtype and
//    device its input had when the op was recorded (PyTorch's validate_outputs).
// With tracing on (core/trace.h), the whole pass is one "backward" slice and
// each node that runs is a slice inside it, named by its op ("matmul", …).
#include <functional>
#include <queue>
#include <unordered_map>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/autograd/node.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"
#include "ringgrad/core/trace.h"

namespace ringgrad::autograd {
namespace {

struct LaterFirst {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr < b->sequence_nr;
  }
};

std::unordered_map<Node*, int> count_dependencies(const std::shared_ptr<Node>& root,
                                                 const std::function<bool(const Node&)>* stop) {
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{root.get()};
  std::unordered_map<Node*, bool> seen{{root.get(), true}};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      ++deps[e.node.get()];
      if (!seen[e.node.get()]) {
        seen[e.node.get()] = true;
        if (stop && (*stop)(*e.node)) continue;  // counted, but not walked past
        stack.push_back(e.node.get());
      }
    }
  }
  return deps;
}

// A node's gradient for input i must look like that input did when the op ran.
void check_gradient(const Node& node, size_t i, const Tensor& g) {
  const Edge& e = node.next[i];
  RG_CHECK(g.shape() == e.shape, "backward", "'", node.name, "' returned a gradient of shape ",
           shape_str(g.shape()), " for input ", i, " of shape ", shape_str(e.shape));
  RG_CHECK(g.dtype() == e.dtype, "backward", "'", node.name, "' returned a gradient of dtype ",
           g.dtype(), " for input ", i, " of dtype ", e.dtype);
  RG_CHECK(g.device() == e.device, "backward", "'", node.name, "' returned a gradient on ",
           g.device(), " for input ", i, " on ", e.device);
}

// Callbacks queued by hooks during the backward running on this thread.
thread_local std::vector<std::function<void()>>* pending_callbacks = nullptr;

// Whether the engine may add into t in place: nothing else holds it or its storage,
// and its elements do not overlap (an expanded gradient shares one element among many).
bool owned_alone(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1 && t.is_contiguous();
}

// sum += g, in place where sum is the engine's alone.
void accumulate(Tensor& sum, Tensor g) {
  if (!sum.defined())
    sum = std::move(g);
  else if (owned_alone(sum))
    sum.add_(g);
  else
    sum = add(sum, g);
}

}  // namespace

void queue_callback(std::function<void()> fn) {
  RG_CHECK(pending_callbacks != nullptr, "queue_callback",
           "expected to be called during backward (from a gradient hook), got a call outside it");
  pending_callbacks->push_back(std::move(fn));
}

namespace {

// The pass itself. With `stop`, a node for which stop(node) holds is not run: the
// gradient that reaches it is kept in `captured` instead, and the walk does not go past
// it (how checkpoint's recomputation hands the gradients for the tensors it read from
// outside back to the backward that called it).
void backward_pass(const Tensor& root, const Tensor& gradient, bool retain_graph,
                   const std::function<bool(const Node&)>* stop,
                   std::unordered_map<Node*, Tensor>* captured) {
  RG_CHECK(root.requires_grad(), "backward", "expected a tensor that requires grad, got ",
           root.describe(),
           " with no graph (did an input have requires_grad=true? was it made under NoGradGuard?)");
  Tensor grad;
  if (gradient.defined()) {
    RG_CHECK(gradient.shape() == root.shape(), "backward", "expected a gradient of shape ",
             shape_str(root.shape()), ", got ", shape_str(gradient.shape()));
    RG_CHECK(gradient.dtype() == root.dtype() && gradient.device() == root.device(), "backward",
             "expected a gradient of ", root.dtype(), " on ", root.device(), ", got ",
             gradient.describe());
    grad = gradient.detach();
  } else {
    RG_CHECK(root.numel() == 1, "backward",
             "expected a scalar output (or an explicit gradient), got shape ",
             shape_str(root.shape()), ": call backward(gradient) or reduce it first, e.g. .sum()");
    grad = ones_like(root);
  }

  // One slice for the whole pass, the hooks' callbacks included (DDP waits there).
  trace::Span pass("backward", "backward");
  NoGradGuard no_grad;  // backward computes plain numbers; it records nothing
  std::vector<std::function<void()>> callbacks;
  auto* outer_callbacks = pending_callbacks;  // a hook may itself call backward
  pending_callbacks = &callbacks;
  struct Restore {
    std::vector<std::function<void()>>* saved;
    ~Restore() { pending_callbacks = saved; }
  } restore{outer_callbacks};
  std::shared_ptr<Node> start = gradient_edge(root).node;
  if (stop && (*stop)(*start)) {  // the root itself lies on the boundary: nothing to run
    (*captured)[start.get()] = grad;
    return;
  }
  std::unordered_map<Node*, int> deps = count_dependencies(start, stop);
  std::unordered_map<Node*, Tensor> buffers;
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, LaterFirst> ready;
  buffers[start.get()] = grad;
  ready.push(start);

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    Tensor g;
    if (auto it = buffers.find(node.get()); it != buffers.end()) {
      g = std::move(it->second);
      buffers.erase(it);
    }
    if (stop && (*stop)(*node)) {  // a boundary: keep its gradient, run nothing
      if (g.defined()) (*captured)[node.get()] = std::move(g);
      continue;
    }
    // A node that received no gradient at all (every path into it was cut) is
    // skipped, but still releases its children's dependency counts.
    Grads grads;
    {
      trace::Span span(node->name, "backward");
      // A one-input node whose input already has a partial sum may add into it.
      auto sum = node->next.size() == 1 && node->next[0].node
                     ? buffers.find(node->next[0].node.get())
                     : buffers.end();
      const bool added = g.defined() && sum != buffers.end() && owned_alone(sum->second) &&
                         node->add_into(g, sum->second);
      if (!added) grads = g.defined() ? node->apply(std::move(g)) : Grads(node->next.size());
      if (!retain_graph) node->release();
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const std::shared_ptr<Node>& next = node->next[i].node;
      if (!next) continue;
      if (i < grads.size() && grads[i].defined()) {
        check_gradient(*node, i, grads[i]);
        accumulate(buffers[next.get()], std::move(grads[i]));
      }
      if (--deps[next.get()] == 0) ready.push(next);
    }
  }
  // Every node has run: now the callbacks hooks queued (they may queue more).
  for (size_t i = 0; i < callbacks.size(); ++i) callbacks[i]();
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  backward_pass(root, gradient, retain_graph, nullptr, nullptr);
}

std::unordered_map<Node*, Tensor> run_backward_until(const Tensor& root, const Tensor& gradient,
                                                     const std::function<bool(const Node&)>& stop) {
  std::unordered_map<Node*, Tensor> captured;
  backward_pass(root, gradient, /*retain_graph=*/false, &stop, &captured);
  return captured;
}

}  // namespace ringgrad::autograd
