// checkpoint.h — activation recomputation (torch.utils.checkpoint, non-reentrant).
//
//   rg::Tensor y = rg::nn::checkpoint(block, x);          // a module: block(x), recomputed
//   rg::Tensor y = rg::nn::checkpoint([&](const std::vector<rg::Tensor>& in) {
//     return mlp(norm(in[0]));                            // any function of tensors
//   }, {x});
//
// Training keeps every tensor a backward will need: a GPT block at context T saves about
// 16·B·T·E numbers, so at long contexts the activations outgrow the weights many times
// over. checkpoint() trades compute for that memory. It runs fn as usual, keeps its
// output and inputs, and lets go of everything fn saved in between. When backward
// reaches the output it runs fn again (with gradients on), backpropagates through that
// fresh graph, and hands on the gradients for every tensor fn read from outside: the
// inputs, the parameters, anything captured. So one block's activations are alive at a
// time, at the cost of one more forward per checkpointed block (about a third more
// compute when every block is checkpointed).
//
// Same numbers, not just the same maths: the recomputation replays the default
// generator's state (dropout draws the same masks) and the autocast state of the
// forward, and runs the same kernels, so every gradient is bit-identical to the run
// without checkpointing (tests/test_checkpoint_recompute.cpp). The parameters'
// gradients arrive through the ordinary backward (non-reentrant, as PyTorch's default):
// their hooks, and so DDP's all-reduce, ZeRO's and FSDP's reduce-scatter, fire as usual,
// once per parameter and backward. Nesting works (an inner checkpoint recomputes inside
// the outer one's recomputation), and so does a module checkpointed twice in one forward
// (its gradients add up as without checkpointing).
//
// The contract fn must keep: computing the same thing twice. It must read the same
// tensors and not change them in between (no in-place update of an input or a parameter
// before backward), or the recomputation is refused when it can tell (another shape, a
// tensor read the first time but not the second) and is wrong when it cannot.
// Under FSDP, checkpoint inside a unit (the block's body), not around the unit's call:
// the unit's parameters are gathered for backward before the recomputation reads them,
// as with PyTorch's checkpoint wrapper under FSDP.
#pragma once

#include <functional>
#include <vector>

#include "ringgrad/core/tensor.h"
#include "ringgrad/nn/module.h"

namespace ringgrad::nn {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// fn(inputs), whose intermediate tensors are recomputed in backward instead of kept.
// With grad mode off, or nothing requiring grad, simply fn(inputs).
Tensor checkpoint(CheckpointFn fn, std::vector<Tensor> inputs);
// module(x) the same way (through module's call: its hooks and trace slice run both times).
Tensor checkpoint(Module& module, const Tensor& x);

}  // namespace ringgrad::nn
