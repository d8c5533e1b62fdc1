// checkpoint.cpp — activation recomputation: one graph node that stands for a region.
//
// Forward: run fn with gradients on, as usual, and note the first sequence number the
// region's nodes got. Walk the graph that fn built back from its output: every edge that
// leaves the region (to a node made before it, or to a leaf's AccumulateGrad) names a
// tensor fn read from outside. The output is then detached and given one node,
// CheckpointNode, with exactly those edges; the region's own nodes, and everything they
// saved, are freed with the graph.
// Backward (CheckpointNode::apply): put back the generator and autocast state of the
// forward, run fn again with gradients on, and backpropagate the output's gradient
// through this fresh graph down to the edges that leave it (autograd::run_backward_until)
// — without running them. Their gradients become the node's gradients, and the backward
// that called it delivers them: to the inputs' nodes and the parameters' AccumulateGrad,
// hooks and all.
#include "ringgrad/nn/checkpoint.h"

#include <optional>
#include <unordered_set>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/autograd/node.h"
#include "ringgrad/core/autocast.h"
#include "ringgrad/core/error.h"
#include "ringgrad/core/factory.h"

namespace ringgrad::nn {
namespace {

using autograd::Edge;
using autograd::Grads;
using autograd::Node;

bool is_accumulate(const Node& n) { return dynamic_cast<const autograd::AccumulateGrad*>(&n) != nullptr; }

// Whether a node lies outside the region whose nodes were numbered from `first` on. A
// reusable node (a weight's cast kept for the step) is outside even when the region made it:
// the recomputation reads the same cast, made before it.
bool outside(const Node& n, uint64_t first) { return is_accumulate(n) || n.reusable() || n.sequence_nr < first; }

// Every edge from the region's graph (under `out`) to a node outside it, each node once.
std::vector<Edge> edges_leaving(const Tensor& out, uint64_t first) {
  std::vector<Edge> leaving;
  std::unordered_set<const Node*> seen;
  std::vector<const Node*> stack{out.grad_fn().get()};
  seen.insert(stack.back());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node || !seen.insert(e.node.get()).second) continue;
      if (outside(*e.node, first))
        leaving.push_back(e);
      else
        stack.push_back(e.node.get());
    }
  }
  return leaving;
}

// The state a recomputation must see to compute the same numbers.
struct ReplayState {
  uint64_t seed = 0, offset = 0;  // the default generator's
  std::optional<DType> autocast_cpu, autocast_cuda;

  static ReplayState now() {
    Generator& g = default_generator();
    return {g.seed(), g.offset(), autocast_dtype(Device::cpu()), autocast_dtype(Device::cuda(0))};
  }
};

void set_generator(uint64_t seed, uint64_t offset) {
  Generator& g = default_generator();
  g.manual_seed(seed);
  g.advance(offset);
}

struct CheckpointNode : Node {
  CheckpointNode(CheckpointFn f, std::vector<Tensor> in, const Tensor& out, ReplayState s)
      : Node("checkpoint"), fn(std::move(f)), inputs(std::move(in)), shape(out.shape()),
        dtype(out.dtype()), state(s) {}

  Grads apply(Tensor grad) override {
    RG_CHECK(fn != nullptr, "checkpoint",
             "expected a graph with its recomputation, got one already freed by an earlier "
             "backward() through it: pass retain_graph=true to the first backward()");
    // Recompute under the forward's generator and autocast state, with gradients on
    // (backward itself runs with them off); the generator goes on from where it was after.
    const ReplayState after = ReplayState::now();
    set_generator(state.seed, state.offset);
    struct RestoreGenerator {
      ReplayState s;
      ~RestoreGenerator() { set_generator(s.seed, s.offset); }
    } restore{after};
    Tensor out;
    const uint64_t first = autograd::next_sequence_number();
    {
      struct GradOn {
        bool was = is_grad_enabled();
        GradOn() { set_grad_enabled(true); }
        ~GradOn() { set_grad_enabled(was); }
      } grad_on;
      autocast cpu(Device::cpu(), state.autocast_cpu.value_or(kBFloat16), state.autocast_cpu.has_value());
      autocast cuda(Device::cuda(0), state.autocast_cuda.value_or(kBFloat16), state.autocast_cuda.has_value());
      out = fn(inputs);
    }
    RG_CHECK(out.defined() && out.shape() == shape && out.dtype() == dtype, "checkpoint",
             "expected the recomputation to give what the forward gave, ", dtype, " of shape ",
             shape_str(shape), ", got ", out.defined() ? out.describe() : std::string("no tensor"),
             ": the checkpointed function must compute the same thing both times");
    Grads grads(next.size());
    if (!out.requires_grad()) return grads;  // nothing it read needs a gradient now
    std::unordered_map<Node*, Tensor> reached = autograd::run_backward_until(
        out, grad, [first](const Node& n) { return outside(n, first); });
    for (size_t i = 0; i < next.size(); ++i) {
      if (!next[i].node) continue;
      if (auto it = reached.find(next[i].node.get()); it != reached.end()) {
        grads[i] = std::move(it->second);
        reached.erase(it);
      }
    }
    RG_CHECK(reached.empty(), "checkpoint",
             "expected the recomputation to read the tensors the forward read, got ", reached.size(),
             " it did not read the first time (a tensor captured by reference and replaced in "
             "between?): the checkpointed function must compute the same thing both times");
    return grads;
  }
  void release() override {
    fn = nullptr;
    inputs.clear();
  }

  CheckpointFn fn;
  std::vector<Tensor> inputs;  // kept: the recomputation starts from them
  Shape shape;
  DType dtype;
  ReplayState state;
};

}  // namespace

Tensor checkpoint(CheckpointFn fn, std::vector<Tensor> inputs) {
  RG_CHECK(fn != nullptr, "checkpoint", "expected a function to run, got an empty one");
  if (!is_grad_enabled()) return fn(inputs);  // nothing will be saved anyway
  const ReplayState state = ReplayState::now();
  const uint64_t first = autograd::next_sequence_number();
  Tensor out = fn(inputs);
  RG_CHECK(out.defined(), "checkpoint", "expected the function to return a tensor, got none");
  // No graph of fn's own (it returned an input, a leaf, or nothing that needs a gradient):
  // nothing saved, nothing to free.
  if (!out.grad_fn() || outside(*out.grad_fn(), first)) return out;
  std::vector<Edge> leaving = edges_leaving(out, first);
  Tensor result = out.detach();
  auto node = std::make_shared<CheckpointNode>(std::move(fn), std::move(inputs), result, state);
  node->next = std::move(leaving);
  out = Tensor();  // the region's graph, and all it saved, goes here
  result.impl().grad_fn = std::move(node);
  result.impl().requires_grad = true;
  return result;
}

Tensor checkpoint(Module& module, const Tensor& x) {
  return checkpoint([&module](const std::vector<Tensor>& in) { return module(in[0]); }, {x});
}

}  // namespace ringgrad::nn
