// node.cpp — graph nodes: closures recorded by ops, and gradient accumulation into leaves.
#include "ringgrad/autograd/node.h"

#include <atomic>
#include <limits>

#include "ringgrad/autograd/function.h"
#include "ringgrad/core/op_utils.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::autograd {

static std::atomic<uint64_t> next_sequence_nr{0};

Node::Node(const char* name_) : name(name_), sequence_nr(next_sequence_nr.fetch_add(1)) {}

uint64_t next_sequence_number() { return next_sequence_nr.load(); }

// Dropping the last reference to a chain of N nodes would otherwise recurse N
// deep (each node's edges release the next node) and overflow the stack for
// graphs of a few hundred thousand ops. Nodes about to die hand their edges to
// this loop instead.
Node::~Node() {
  std::vector<std::shared_ptr<Node>> pending;
  for (Edge& e : next)
    if (e.node) pending.push_back(std::move(e.node));
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    if (n.use_count() == 1)
      for (Edge& e : n->next)
        if (e.node) pending.push_back(std::move(e.node));
  }  // n goes here, its edges already emptied
}

bool Node::add_into(const Tensor&, Tensor&) { return false; }

Grads ViewScatterNode::apply(Tensor grad) {
  Tensor source = zeros(next[0].shape, detail::options_of(grad));
  view(source).copy_(grad);
  return {source};
}

bool ViewScatterNode::add_into(const Tensor& grad, Tensor& sum) {
  view(sum).add_(grad);
  return true;
}

Grads Node::apply_some(Tensor grad, const std::vector<bool>&) { return apply(std::move(grad)); }

Grads FunctionNode::apply(Tensor grad) { return apply_some(std::move(grad), std::vector<bool>(next.size(), true)); }

Grads FunctionNode::apply_some(Tensor grad, const std::vector<bool>& wanted) {
  RG_CHECK(backward != nullptr, "backward",
           "expected a graph with its saved tensors, got one already freed by an earlier "
           "backward() through '",
           name, "': pass retain_graph=true to the first backward()");
  RG_ASSERT(wanted.size() == next.size());
  std::vector<bool> needs(next.size());
  for (size_t i = 0; i < next.size(); ++i) needs[i] = wanted[i] && next[i].node != nullptr;
  Grads grads = backward(grad, needs);
  RG_ASSERT(grads.size() == next.size());
  return grads;
}

// Runs as soon as it is ready (highest priority), so a leaf's hooks fire as early as possible.
AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf_)
    : Node("AccumulateGrad"), leaf(leaf_) {
  sequence_nr = std::numeric_limits<uint64_t>::max();
}

Grads AccumulateGrad::apply(Tensor grad) {
  std::shared_ptr<TensorImpl> impl = leaf.lock();
  if (!impl) return {};
  RG_ASSERT(grad.shape() == impl->shape);
  if (impl->grad) {
    impl->grad = add(Tensor(impl->grad), grad).impl_ptr();
  } else {
    // Keep the gradient only if nothing else can see it; otherwise own a copy,
    // so a later in-place update of .grad never changes another tensor.
    bool exclusive = grad.impl_ptr().use_count() == 1 && grad.storage().use_count() == 1 &&
                     grad.is_contiguous() && grad.offset() == 0;
    impl->grad = (exclusive ? grad : grad.clone()).impl_ptr();
  }
  Tensor leaf_tensor(impl);
  for (auto& hook : impl->post_accumulate_grad_hooks) hook(leaf_tensor);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};  // an optional input that was not given (a bias)
  TensorImpl& impl = t.impl();
  if (impl.grad_fn) return {impl.grad_fn, t.shape(), t.dtype(), t.device()};
  if (!impl.requires_grad) return {};
  std::shared_ptr<Node> acc = impl.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl.grad_accumulator = acc;
  }
  return {acc, t.shape(), t.dtype(), t.device()};
}

namespace {
void attach_node(Tensor& out, std::shared_ptr<Node> node, const std::vector<const Tensor*>& inputs) {
  node->next.reserve(inputs.size());
  for (const Tensor* t : inputs) node->next.push_back(gradient_edge(*t));
  out.impl().grad_fn = std::move(node);
  out.impl().requires_grad = true;
}
}  // namespace

void attach(Tensor& out, const char* name, const std::vector<const Tensor*>& inputs,
            FunctionNode::BackwardFn fn) {
  attach_node(out, std::make_shared<FunctionNode>(name, std::move(fn)), inputs);
}

namespace {
// A FunctionNode that a backward does not release (its closure keeps no tensors). It runs
// as soon as its gradient is complete, as AccumulateGrad does (the largest sequence numbers):
// a backward after the one that made it would otherwise, finding it older than all its own
// nodes, leave it (and a weight's gradient, and the hooks that wait for it) to the end.
struct ReusableNode : FunctionNode {
  ReusableNode(const char* name, BackwardFn fn) : FunctionNode(name, std::move(fn)) {
    sequence_nr = std::numeric_limits<uint64_t>::max() - 1;
  }
  void release() override {}
  bool reusable() const override { return true; }
};
}  // namespace

void record_reusable(const char* name, Tensor& out, const Tensor& input,
                     std::function<Tensor(const Tensor& grad)> backward) {
  if (!needs_grad({&input})) return;
  auto fn = [backward = std::move(backward)](const Tensor& g, const std::vector<bool>&) {
    return Grads{backward(g)};
  };
  attach_node(out, std::make_shared<ReusableNode>(name, std::move(fn)), {&input});
}

void record_view_backward(const char* name, Tensor& out, const Tensor& input,
                          ViewScatterNode::ViewFn view) {
  if (!needs_grad({&input})) return;
  attach_node(out, std::make_shared<ViewScatterNode>(name, std::move(view)), {&input});
}

}  // namespace ringgrad::autograd
