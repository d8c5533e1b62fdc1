// engine.cpp — reverse-mode backward over the recorded graph.
//
// 1. Count, for every node reachable from the root, how many edges lead into it.
// 2. Start with the root's gradient; repeatedly run the ready node with the
//    highest sequence number (the most recently recorded op first, leaves'
//    AccumulateGrad nodes and reusable casts before anything else), adding each gradient it
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
#include <unordered_set>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/autograd/node.h"
#include "ringgrad/autograd/split_backward.h"
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

// Adds to deps, for every node below those on the stack, how many edges lead into it
// (each node walked once: `seen` holds the nodes already on their way).
void count_below(std::vector<Node*> stack, std::unordered_set<Node*>& seen,
                 std::unordered_map<Node*, int>& deps, const std::function<bool(const Node&)>* stop) {
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      ++deps[e.node.get()];
      if (seen.insert(e.node.get()).second) {
        if (stop && (*stop)(*e.node)) continue;  // counted, but not walked past
        stack.push_back(e.node.get());
      }
    }
  }
}

std::unordered_map<Node*, int> count_dependencies(const std::shared_ptr<Node>& root,
                                                 const std::function<bool(const Node&)>* stop) {
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen{root.get()};
  count_below({root.get()}, seen, deps, stop);
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

using Ready = std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, LaterFirst>;
using Masks = std::unordered_map<Node*, std::vector<bool>>;

// What a split backward's first part (B) needs: the nodes on a path to an input, and
// what it leaves for later.
struct Split {
  std::unordered_set<Node*> needed;
  std::vector<DeferredBackward::Item>* deferred;
  std::vector<DeferredBackward::Delivered>* delivered;
};

// One run over part of the graph: nodes become ready when every edge into them that this
// run follows has delivered. `split`: B (only needed nodes, asked only for needed
// inputs; the rest of each kept in split->deferred). `masks`: W (the kept nodes, asked
// only for the inputs B left). Neither: backward() (with `stop`: run_backward_until).
void drain(Ready& ready, std::unordered_map<Node*, Tensor>& buffers,
           std::unordered_map<Node*, int>& deps, bool retain_graph,
           const std::function<bool(const Node&)>* stop,
           std::unordered_map<Node*, Tensor>* captured, Split* split, const Masks* masks) {
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
    // Which inputs this run asks the node for (empty: all of them).
    std::vector<bool> mask;
    bool keep = false;  // part of it waits for W: its saved tensors stay
    const bool whole = split && !node->splits();  // B runs it whole, hands W its share
    if (split && !whole) {
      mask.resize(node->next.size());
      std::vector<bool> rest(node->next.size());
      bool any_rest = false;
      for (size_t i = 0; i < node->next.size(); ++i) {
        Node* n = node->next[i].node.get();
        mask[i] = n && split->needed.count(n);
        rest[i] = n && !mask[i];
        any_rest = any_rest || rest[i];
      }
      if (any_rest && g.defined()) {
        split->deferred->push_back({node, g, std::move(rest)});
        keep = true;
      }
    } else if (masks) {
      if (auto it = masks->find(node.get()); it != masks->end()) mask = it->second;
    }
    // A node that received no gradient at all (every path into it was cut) is
    // skipped, but still releases its children's dependency counts.
    Grads grads;
    {
      trace::Span span(node->name, "backward");
      // A one-input node whose input already has a partial sum may add into it.
      auto sum = node->next.size() == 1 && node->next[0].node && (mask.empty() || mask[0])
                     ? buffers.find(node->next[0].node.get())
                     : buffers.end();
      const bool added = g.defined() && sum != buffers.end() && owned_alone(sum->second) &&
                         node->add_into(g, sum->second);
      if (!added) {  // (added: it is in the sum already, nothing to hand on)
        if (!g.defined())
          grads = Grads(node->next.size());
        else if (mask.empty())
          grads = node->apply(std::move(g));
        else
          grads = node->apply_some(std::move(g), mask);
      }
      if (!retain_graph && !keep) node->release();
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const std::shared_ptr<Node>& next = node->next[i].node;
      if (!next) continue;
      if (whole && !split->needed.count(next.get())) {  // W's node: the gradient waits for it
        if (i < grads.size() && grads[i].defined()) {
          check_gradient(*node, i, grads[i]);
          split->delivered->push_back({next, std::move(grads[i])});
        }
        continue;
      }
      if (!mask.empty() && !mask[i]) continue;  // not this run's edge
      if (i < grads.size() && grads[i].defined()) {
        check_gradient(*node, i, grads[i]);
        accumulate(buffers[next.get()], std::move(grads[i]));
      }
      if (--deps[next.get()] == 0) ready.push(next);
    }
  }
}

// The gradient backward starts from: `gradient`, or 1 for a scalar root.
Tensor initial_gradient(const Tensor& root, const Tensor& gradient) {
  RG_CHECK(root.requires_grad(), "backward", "expected a tensor that requires grad, got ",
           root.describe(),
           " with no graph (did an input have requires_grad=true? was it made under NoGradGuard?)");
  if (gradient.defined()) {
    RG_CHECK(gradient.shape() == root.shape(), "backward", "expected a gradient of shape ",
             shape_str(root.shape()), ", got ", shape_str(gradient.shape()));
    RG_CHECK(gradient.dtype() == root.dtype() && gradient.device() == root.device(), "backward",
             "expected a gradient of ", root.dtype(), " on ", root.device(), ", got ",
             gradient.describe());
    return gradient.detach();
  }
  RG_CHECK(root.numel() == 1, "backward",
           "expected a scalar output (or an explicit gradient), got shape ",
           shape_str(root.shape()), ": call backward(gradient) or reduce it first, e.g. .sum()");
  return ones_like(root);
}

// Hooks' queue_callback()s during one part of a backward, run at its end (they may
// queue more); the queue of a backward this one runs inside is restored after.
struct CallbackScope {
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* outer = pending_callbacks;
  CallbackScope() { pending_callbacks = &callbacks; }
  ~CallbackScope() { pending_callbacks = outer; }
  void run() {
    for (size_t i = 0; i < callbacks.size(); ++i) callbacks[i]();
  }
};

// The pass itself. With `stop`, a node for which stop(node) holds is not run: the
// gradient that reaches it is kept in `captured` instead, and the walk does not go past
// it (how checkpoint's recomputation hands the gradients for the tensors it read from
// outside back to the backward that called it).
void backward_pass(const Tensor& root, const Tensor& gradient, bool retain_graph,
                   const std::function<bool(const Node&)>* stop,
                   std::unordered_map<Node*, Tensor>* captured) {
  Tensor grad = initial_gradient(root, gradient);
  // One slice for the whole pass, the hooks' callbacks included (DDP waits there).
  trace::Span pass("backward", "backward");
  NoGradGuard no_grad;  // backward computes plain numbers; it records nothing
  CallbackScope scope;
  std::shared_ptr<Node> start = gradient_edge(root).node;
  if (stop && (*stop)(*start)) {  // the root itself lies on the boundary: nothing to run
    (*captured)[start.get()] = grad;
    return;
  }
  std::unordered_map<Node*, int> deps = count_dependencies(start, stop);
  std::unordered_map<Node*, Tensor> buffers;
  Ready ready;
  buffers[start.get()] = grad;
  ready.push(start);
  drain(ready, buffers, deps, retain_graph, stop, captured, nullptr, nullptr);
  // Every node has run: now the callbacks hooks queued.
  scope.run();
}

// The nodes reachable from `start` that lie on a path to one of `targets`.
std::unordered_set<Node*> on_paths_to(Node* start, const std::unordered_set<Node*>& targets) {
  std::vector<Node*> order;  // children before parents
  std::unordered_set<Node*> visited{start};
  std::vector<std::pair<Node*, size_t>> stack{{start, 0}};
  while (!stack.empty()) {
    Node* n = stack.back().first;
    size_t i = stack.back().second++;
    if (i < n->next.size()) {
      Node* c = n->next[i].node.get();
      if (c && visited.insert(c).second) stack.push_back({c, 0});
    } else {
      order.push_back(n);
      stack.pop_back();
    }
  }
  std::unordered_set<Node*> needed;
  for (Node* n : order) {
    bool on = targets.count(n) > 0;
    for (const Edge& e : n->next) on = on || (e.node && needed.count(e.node.get()));
    if (on) needed.insert(n);
  }
  return needed;
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

DeferredBackward backward_inputs_first(const Tensor& root, const Tensor& gradient,
                                       const std::vector<Tensor>& inputs) {
  Tensor grad = initial_gradient(root, gradient);
  std::unordered_set<Node*> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    RG_CHECK(x.defined() && x.requires_grad() && !x.impl().grad_fn, "backward_inputs_first",
             "expected inputs that are leaves requiring grad (what a pipeline stage received, "
             "with requires_grad_(true)), got input ", i, ": ",
             x.defined() ? x.describe() + (x.impl().grad_fn ? " made by an op" : "") : "none");
    targets.insert(gradient_edge(x).node.get());
  }
  DeferredBackward later;
  trace::Span pass("backward (inputs)", "backward");
  NoGradGuard no_grad;
  CallbackScope scope;
  std::shared_ptr<Node> start = gradient_edge(root).node;
  Split split{on_paths_to(start.get(), targets), &later.items_, &later.delivered_};
  if (!split.needed.count(start.get())) {  // no input below the root: all of it is W's
    std::vector<bool> all(start->next.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = start->next[i].node != nullptr;
    later.items_.push_back({start, grad, std::move(all)});
    return later;
  }
  std::unordered_map<Node*, int> deps;
  for (Node* n : split.needed)
    for (const Edge& e : n->next)
      if (e.node && split.needed.count(e.node.get())) ++deps[e.node.get()];
  std::unordered_map<Node*, Tensor> buffers;
  Ready ready;
  buffers[start.get()] = grad;
  ready.push(start);
  drain(ready, buffers, deps, /*retain_graph=*/false, nullptr, nullptr, &split, nullptr);
  scope.run();
  return later;
}

void DeferredBackward::run() {
  if (empty()) return;
  std::vector<Item> items = std::move(items_);
  std::vector<Delivered> delivered = std::move(delivered_);
  items_.clear();
  delivered_.clear();
  trace::Span pass("backward (weights)", "backward");
  NoGradGuard no_grad;
  CallbackScope scope;
  // Dependencies: the kept nodes' remaining edges, and every edge below them (no node
  // below a kept node's remaining edges lies on a path to an input).
  Masks masks;
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, Tensor> buffers;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  Ready ready;
  for (Item& item : items) {
    for (size_t i = 0; i < item.node->next.size(); ++i) {
      Node* c = item.node->next[i].node.get();
      if (!c || !item.needs[i]) continue;
      ++deps[c];
      if (seen.insert(c).second) stack.push_back(c);
    }
    masks[item.node.get()] = std::move(item.needs);
    buffers[item.node.get()] = std::move(item.grad);
    ready.push(std::move(item.node));
  }
  for (const Delivered& d : delivered)
    if (seen.insert(d.node.get()).second) stack.push_back(d.node.get());
  count_below(std::move(stack), seen, deps, nullptr);
  // What B delivered is there from the start; a node nothing in W feeds is ready at once.
  for (Delivered& d : delivered) {
    Node* n = d.node.get();
    accumulate(buffers[n], std::move(d.grad));
    if (deps[n] == 0) {
      deps[n] = -1;  // pushed once
      ready.push(std::move(d.node));
    }
  }
  drain(ready, buffers, deps, /*retain_graph=*/false, nullptr, nullptr, nullptr, &masks);
  scope.run();
}

}  // namespace ringgrad::autograd
