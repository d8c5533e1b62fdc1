// op_cases.h — the one table of op cases that every per-op test harness loops over.
//
// An OpCase is a name, a function that makes its inputs for an Env (a dtype and a
// device), the call, and flags. Two harnesses run the whole table:
//
//   test_gradcheck.cpp   every case with .gradcheck: float64 on the CPU, analytic
//                        gradients against central finite differences (rg::gradcheck)
//   test_backends.cpp    every case on the CPU twice (determinism), then the same
//                        inputs on each CUDA device: outputs and input gradients
//                        compared with the CPU
//
// The entries live in test_op_cases_*.cpp, one function per area. Hand-checked
// values stay in test_ops.cpp; the table only says "this call, on these inputs".
//
// Every tensor a case uses is made by its inputs function through the Env, so it
// is created in the Env's dtype (floats) and on the Env's device: on a CUDA pass
// the indices, masks and constants are on the GPU too, not silently on the CPU.
// Float inputs made with Env::leaf are the leaves that get gradients; index
// tensors, masks and Env::constant tensors get none. A call that makes tensors
// itself (arange, full, random) passes env.options() so that they are made on
// the Env's device as well.
//
// Inputs avoid the points where an op is not differentiable (relu/abs away from
// 0, clamp away from its bounds, maximum/minimum away from ties, log/sqrt/div/pow
// on positive values), so that every case is valid for the gradcheck and for a
// float32 comparison alike. Random draws are float64 on the CPU from a generator
// seeded by the case's name, then converted: every Env sees the same numbers.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_helpers.h"

namespace opcase {

using V = std::vector<rg::Tensor>;

// Where a case runs: the dtype its float inputs get, and the device every input lives on.
struct Env {
  rg::DType dtype = rg::kFloat64;
  rg::Device device = rg::kCPU;
  rg::Generator gen{0};  // draws the random inputs (seeded per case by the harness)
  // Float inputs are rounded through this dtype first (float64: no rounding): the reduced-
  // precision harness runs float32 on exactly the values a bfloat16 run sees.
  rg::DType round_through = rg::kFloat64;

  // For factories inside a call (arange, full, randn): the Env's dtype and device.
  rg::TensorOptions options() const { return {.dtype = dtype, .device = device}; }

  // ---- float inputs without gradient (constants: additive masks, fixed data)

  // Uniform in [lo, hi), drawn in float64 on the CPU, then converted and moved.
  rg::Tensor constant(const rg::Shape& shape, double lo = -1.0, double hi = 1.0) {
    return place(rg::uniform(shape, lo, hi, {.dtype = rg::kFloat64}, &gen));
  }
  rg::Tensor constant_of(const std::vector<double>& values, const rg::Shape& shape) const {
    return place(rg::from_vector<double>(values, shape, {.dtype = rg::kFloat64}));
  }

  // ---- float leaves that get gradients

  rg::Tensor leaf(const rg::Shape& shape, double lo = -1.0, double hi = 1.0) {
    return as_leaf(constant(shape, lo, hi));
  }
  rg::Tensor leaf_of(const std::vector<double>& values, const rg::Shape& shape) const {
    return as_leaf(constant_of(values, shape));
  }
  // |value| in [margin, margin + 1): away from 0, where relu and abs have their kink.
  rg::Tensor away_from_zero(const rg::Shape& shape, double margin = 0.2) {
    std::vector<double> v = draw(shape, -1, 1);
    for (double& x : v) x = x < 0 ? x - margin : x + margin;
    return leaf_of(v, shape);
  }
  // Uniform in [lo, hi) but at least `margin` from each of `points` (clamp's bounds).
  rg::Tensor leaf_avoiding(const rg::Shape& shape, double lo, double hi,
                           const std::vector<double>& points, double margin = 0.05) {
    std::vector<double> v = draw(shape, lo, hi);
    for (double& x : v)
      for (double p : points)
        if (std::abs(x - p) < margin) x = x < p ? p - margin : p + margin;
    return leaf_of(v, shape);
  }
  // The (rows, cols) transpose of a contiguous (cols, rows) draw: a non-contiguous leaf.
  rg::Tensor transposed_leaf(int64_t rows, int64_t cols, double lo = -1.0, double hi = 1.0) {
    return as_leaf(constant({cols, rows}, lo, hi).t());
  }
  // Same shape and values as `a` ± 0.3 (alternating): a new leaf with no ties with `a`.
  rg::Tensor shifted_leaf(const rg::Tensor& a) const {
    std::vector<double> v = a.tolist<double>();
    for (size_t i = 0; i < v.size(); ++i) v[i] += (i % 2 ? 0.3 : -0.3);
    return leaf_of(v, a.shape());
  }
  // A view of a fresh draw (transposed, sliced) made into a leaf: t must be gradient-free.
  static rg::Tensor as_leaf(rg::Tensor t) { return t.requires_grad_(); }

  // ---- non-float inputs (never get gradients)

  rg::Tensor index(const std::vector<int64_t>& values, const rg::Shape& shape = {}) const {
    return rg::from_vector<int64_t>(values, shape, {.dtype = rg::kInt64, .device = device});
  }
  // A bool mask from 0/1 values.
  rg::Tensor mask(const std::vector<int64_t>& values, const rg::Shape& shape = {}) const {
    return rg::from_vector<int64_t>(values, shape, {.dtype = rg::kBool, .device = device});
  }

 private:
  std::vector<double> draw(const rg::Shape& shape, double lo, double hi) {
    return rg::uniform(shape, lo, hi, {.dtype = rg::kFloat64}, &gen).tolist<double>();
  }
  rg::Tensor place(const rg::Tensor& cpu64) const {
    return cpu64.to(round_through).to(dtype).to(device);
  }
};

struct Flags {
  // Gradchecked in float64 (false: no gradient to check, e.g. argmax, random
  // factories, in-place updates; or too large for finite differences).
  bool gradcheck = true;
  // Some input is a non-contiguous view: the harnesses check that it still is on
  // every Env (a case meant to test strided reads must not quietly lose them).
  bool non_contiguous = false;
  // Backends: outputs and gradients within rtol = atol = tol of the CPU's.
  double tol = 1e-4;
  // Backends: the dtypes the comparison runs in (the gradcheck is always float64).
  std::vector<rg::DType> dtypes = {rg::kFloat32};
  rg::GradcheckOptions grad = {};  // the gradcheck's eps and tolerances
  // Sized for a GPU (hundreds of millions of elements): the backends harness runs
  // it only where a CUDA device is present (the CPU reference once), and it is
  // never gradchecked. Such a case makes its big tensors inside the call, with
  // env.options(), and returns something small enough to compare.
  bool large = false;
  // Also compared in bfloat16 and float16 (test_reduced_precision; test_backends' 16-bit
  // dtypes). false where a cut follows a rounding inside the op: addmm_relu's relu cuts at
  // 0 a sum rounded to 16 bits, and among thousands of outputs some lie within a rounding
  // of 0, where the 16-bit and float32 runs then disagree on the gradient's mask.
  bool reduced_precision = true;
};

struct OpCase {
  using Inputs = std::function<V(Env&)>;
  using Call = std::function<rg::Tensor(const V&, const Env&)>;

  std::string name;  // unique in the table, no spaces: "op" or "op:variant"
  std::string area;  // set by all_op_cases(): "elementwise", "reduction", ...
  Inputs inputs;
  Call call;
  Flags flags;

  // The call is f(in) or, when it makes tensors itself, f(in, env).
  template <typename F>
  OpCase(std::string n, Inputs make, F f, Flags fl = {})
      : name(std::move(n)),
        inputs(std::move(make)),
        call(wrap(std::move(f))),
        flags(std::move(fl)) {}

 private:
  template <typename F>
  static Call wrap(F f) {
    if constexpr (std::is_invocable_v<F, const V&, const Env&>)
      return Call(std::move(f));
    else
      return [f = std::move(f)](const V& in, const Env&) { return f(in); };
  }
};

// The areas, each defined in its own test_op_cases_<area>.cpp.
std::vector<OpCase> elementwise_cases();  // binary, scalar, unary, where / masked_fill
std::vector<OpCase> reduction_cases();    // sum, mean, amax/amin, logsumexp, sum_to, arg*
std::vector<OpCase> matmul_cases();
std::vector<OpCase> shape_cases();  // views, index ops, cat/stack/split, factories
std::vector<OpCase> nn_cases();     // softmax, layer_norm, attention, losses, linear

// Every area's cases, with .area filled in (test_op_cases_table.cpp).
const std::vector<OpCase>& all_op_cases();
// The areas in table order.
const std::vector<std::string>& op_case_areas();

// A seed from the case's name (FNV-1a): adding a case does not change another's inputs.
uint64_t seed_of(const std::string& name);

// The Env a case runs in: `dtype` on `device`, its generator seeded from the name,
// so that c.inputs(env) draws the same numbers for every dtype and device.
Env env_for(const OpCase& c, rg::DType dtype, rg::Device device);

// "" when the inputs are as the case says (all on `device`, the ones that get
// gradients are leaves, at least one where gradchecked, a non-contiguous one
// where flagged); else what is wrong, for the failure message.
std::string check_inputs(const OpCase& c, const V& inputs, rg::Device device);

// A short description of the inputs for failure messages: "[2, 3] float64 cpu, [4] int64 cpu".
std::string describe_inputs(const V& inputs);

}  // namespace opcase
