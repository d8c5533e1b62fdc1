// optimizers.h — the optimizers fuzz_optim_state.cpp loads checkpoints into, and
// make_seeds.cpp saves its seed checkpoints from: the same parameters, so the seeds load.
//
// Two float32 parameters, a weight {3, 2} and a bias {2}, under Adam (one group) and
// AdamW (two groups: the weight decays, the bias does not), so a file can mismatch in
// optimizer, group count, group size, key and shape.
#pragma once

#include <ringgrad/optim/optimizer.h>
#include <ringgrad/core/factory.h>

#include <vector>

namespace fuzz {

inline std::vector<ringgrad::Tensor> parameters() {
  return {ringgrad::full({3, 2}, 0.5, {.requires_grad = true}),
          ringgrad::full({2}, -0.25, {.requires_grad = true})};
}

inline ringgrad::optim::Adam adam(const std::vector<ringgrad::Tensor>& p) {
  return ringgrad::optim::Adam(p, {.lr = 1e-3});
}

inline ringgrad::optim::AdamW adamw(const std::vector<ringgrad::Tensor>& p) {
  return ringgrad::optim::AdamW({{{p[0]}, {.weight_decay = 0.1}}, {{p[1]}, {.weight_decay = 0.0}}},
                                {.lr = 1e-3});
}

// Gives every parameter a gradient, for a step.
inline void set_grads(ringgrad::optim::Optimizer& opt) {
  for (auto& group : opt.param_groups())
    for (ringgrad::Tensor& p : group.params) p.set_grad(ringgrad::full_like(p, 0.5));
}

}  // namespace fuzz
