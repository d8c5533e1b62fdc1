// gradcheck.h — checking a backward against finite differences.
//
//   auto x = rg::randn({3, 4}, {.dtype = rg::kFloat64, .requires_grad = true});
//   auto r = rg::gradcheck([](const auto& in) { return rg::tanh(in[0]); }, {x});
//   CHECK_MESSAGE(r.ok, r.message);
//
// f's output is reduced to a scalar L = sum(f(x) * w) with fixed random weights w;
// the analytic dL/dx from backward must match the central difference
// (L(x + eps) - L(x - eps)) / 2eps for every element of every input that requires
// grad. Those inputs must be float64 on the CPU; they may be non-contiguous views.
// Inputs that need no gradient (int64 indices, bool masks, constants) may have any
// dtype and device: f gets them unchanged. With no input requiring grad there is
// nothing to check: the result is ok, its message "no input requires grad".
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ringgrad/core/tensor.h"

namespace ringgrad {

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // the first mismatch, naming input, element and both values
};

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace ringgrad
