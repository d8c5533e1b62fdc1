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
  for (const Tensor& x : inputs) {
    RG_CHECK(x.dtype() == kFloat64 && x.device().is_cpu(), "gradcheck",
             "expected float64 cpu inputs (finite differences need the precision), got ",
             x.describe());
    for (int64_t d = 0; d < x.dim(); ++d)
      RG_CHECK(x.stride(d) != 0 || x.size(d) == 1, "gradcheck",
               "expected inputs without broadcast (stride-0) dims, got ", x.describe());
  }
  Tensor probe = f(inputs);
  Generator gen(20260101);
  Tensor weights = randn(probe.shape(), {.dtype = probe.dtype()}, &gen);
  auto loss = [&] { return sum(mul(f(inputs), weights)); };

  // Analytic: one backward of L = Σ f(x)·w.
  for (Tensor x : inputs)
    if (x.requires_grad()) x.set_grad(Tensor());
  loss().backward();

  GradcheckResult result;
  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.requires_grad()) continue;
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
