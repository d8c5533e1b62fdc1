// gradcheck.cpp — analytic gradients against central finite differences.
#include "ringgrad/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"

namespace ringgrad {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, GradcheckOptions options) {
  // Only the inputs that require grad are perturbed, so only they need float64 on
  // the CPU; the others (int64 indices, bool masks, constants) pass through as they are.
  bool any_grad = false;
  for (const Tensor& x : inputs) {
    if (!x.defined() || !x.requires_grad()) continue;
    any_grad = true;
    RG_CHECK(x.dtype() == kFloat64 && x.device().is_cpu(), "gradcheck",
             "expected float64 cpu inputs (finite differences need the precision), got ",
             x.describe());
    for (int64_t d = 0; d < x.dim() && x.numel() > 0; ++d)  // (an empty tensor's strides may be 0)
      RG_CHECK(x.stride(d) != 0 || x.size(d) == 1, "gradcheck",
               "expected inputs without broadcast (stride-0) dims, got ", x.describe());
  }
  GradcheckResult result;
  if (!any_grad) {  // nothing to differentiate with respect to: nothing can be wrong
    result.message = "no input requires grad";
    return result;
  }
  Tensor probe = f(inputs);
  Generator gen(20260101);
  Tensor weights = randn(probe.shape(), {.dtype = probe.dtype(), .device = probe.device()}, &gen);
  auto loss = [&] { return sum(mul(f(inputs), weights)); };

  // Analytic: one backward of L = Σ f(x)·w. An output that does not depend on any
  // input through autograd has analytic gradient 0 (the comparison then says so).
  for (Tensor x : inputs)
    if (x.defined() && x.requires_grad()) x.set_grad(Tensor());
  Tensor l = loss();
  if (l.requires_grad()) l.backward();

  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    // Constants are not perturbed; an empty input has no element to perturb.
    if (!x.defined() || !x.requires_grad() || x.numel() == 0) continue;
    Tensor analytic = x.grad().defined() ? x.grad().contiguous() : zeros_like(x);
    const double* ana = analytic.data_ptr<double>();
    double* base = x.data_ptr<double>();
    Shape idx(x.dim(), 0);
    for (int64_t flat = 0; flat < x.numel(); ++flat) {
      int64_t off = 0;
      for (int64_t d = 0; d < x.dim(); ++d) off += idx[d] * x.stride(d);
      double saved = base[off];
      base[off] = saved + options.eps;
      double plus = loss().item();
      base[off] = saved - options.eps;
      double minus = loss().item();
      base[off] = saved;
      double numeric = (plus - minus) / (2 * options.eps);
      double err = std::abs(numeric - ana[flat]);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (result.ok && !(err <= options.atol + options.rtol * std::abs(numeric))) {
        result.ok = false;
        std::ostringstream os;
        os << "gradient mismatch for input " << i << " (" << x.describe() << ") at element "
           << shape_str(idx) << ": analytic " << ana[flat] << ", numeric " << numeric;
        result.message = os.str();
      }
      for (int64_t d = x.dim() - 1; d >= 0; --d) {
        if (++idx[d] < x.size(d)) break;
        idx[d] = 0;
      }
    }
  }
  return result;
}

}  // namespace ringgrad
