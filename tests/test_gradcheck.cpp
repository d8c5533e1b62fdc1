// test_gradcheck.cpp — every differentiable case of the op table (op_cases.h),
// checked against central finite differences in float64 on the CPU
// (rg::gradcheck) on tiny shapes; one TEST_CASE per area. Also rg::gradcheck's
// own checks: it catches a wrong gradient, and takes index, mask and empty inputs.
//
// The table's inputs avoid the points where an op is not differentiable (relu/abs
// away from 0, clamp away from its bounds, maximum/minimum away from ties,
// log/sqrt/div/pow on positive values).
#include <exception>

#include "op_cases.h"
#include "test_helpers.h"

using test::grad_ok;
using test::i64;
using test::leaf;
using V = std::vector<rg::Tensor>;

namespace {

// Gradchecks every case of `area` that has .gradcheck; a failure names the case.
// Returns how many were checked.
int gradcheck_area(const std::string& area) {
  int checked = 0;
  for (const opcase::OpCase& c : opcase::all_op_cases()) {
    if (c.area != area || !c.flags.gradcheck) continue;
    ++checked;
    try {
      opcase::Env env = opcase::env_for(c, rg::kFloat64, rg::kCPU);
      V inputs = c.inputs(env);
      std::string problem = opcase::check_inputs(c, inputs, rg::kCPU);
      if (!problem.empty()) {
        FAIL_CHECK(c.name << ": " << problem);
        continue;
      }
      rg::GradcheckResult r =
          rg::gradcheck([&](const V& in) { return c.call(in, env); }, inputs, c.flags.grad);
      CHECK_MESSAGE(r.ok, c.name << ": " << r.message << " (max_abs_error " << r.max_abs_error
                                 << "; inputs " << opcase::describe_inputs(inputs) << ")");
    } catch (const std::exception& e) {
      FAIL_CHECK(c.name << " threw: " << std::string(e.what()));
    }
  }
  return checked;
}

}  // namespace

// ---------------------------------------------------------------- rg::gradcheck itself

TEST_CASE("gradcheck: passes a correct gradient and catches a wrong one") {
  rg::manual_seed(100);
  rg::Tensor x = leaf({3, 2});
  grad_ok("x*x", [](const V& in) { return in[0] * in[0]; }, {x});
  // x * detach(x) has analytic gradient x but true derivative 2x
  rg::GradcheckResult r = rg::gradcheck([](const V& in) { return in[0] * in[0].detach(); }, {x});
  CHECK_FALSE(r.ok);
  CHECK(r.max_abs_error > 1e-3);
  CHECK_FALSE(r.message.empty());
}

TEST_CASE("gradcheck: index, mask and empty inputs pass through; float32 leaves are refused") {
  rg::manual_seed(101);
  rg::Tensor x = leaf({4, 3});
  rg::Tensor idx = i64({3, 0, 3});
  rg::Tensor mask = rg::from_vector<int64_t>({1, 0, 1}, {3}, {.dtype = rg::kBool});
  grad_ok("index_select + masked_fill",
          [](const V& in) {
            return rg::masked_fill(rg::index_select(in[0], 0, in[1]), in[2].unsqueeze(1), 0.5);
          },
          {x, idx, mask});
  // A leaf with no elements: nothing to perturb, still fine.
  rg::Tensor empty = leaf({0, 3});
  grad_ok("empty leaf", [](const V& in) { return rg::cat({in[0], in[1]}, 0) * 2.0; }, {empty, x});
  // No input that requires grad (a forward-only case): ok, and it says why.
  rg::GradcheckResult none = rg::gradcheck([](const V& in) { return in[0] * 2.0; },
                                           {rg::ones({2}, {.dtype = rg::kFloat64})});
  CHECK(none.ok);
  CHECK_CONTAINS(none.message, "no input requires grad");
  rg::GradcheckResult nothing = rg::gradcheck([](const V&) { return rg::ones({2}); }, {});
  CHECK(nothing.ok);
  // A float32 leaf is still refused: finite differences need float64.
  rg::Tensor x32 = rg::ones({2}, {.dtype = rg::kFloat32, .requires_grad = true});
  CHECK_CONTAINS(test::error_of([&] { rg::gradcheck([](const V& in) { return in[0]; }, {x32}); }),
                 "expected float64 cpu inputs");
}

// ---------------------------------------------------------------- the op table, by area

TEST_CASE("gradcheck: elementwise ops of the op table") {
  CHECK(gradcheck_area("elementwise") > 0);
}
TEST_CASE("gradcheck: reductions of the op table") { CHECK(gradcheck_area("reduction") > 0); }
TEST_CASE("gradcheck: matmul cases of the op table") { CHECK(gradcheck_area("matmul") > 0); }
TEST_CASE("gradcheck: shape and index ops of the op table") { CHECK(gradcheck_area("shape") > 0); }
TEST_CASE("gradcheck: nn ops of the op table") { CHECK(gradcheck_area("nn") > 0); }

TEST_CASE("gradcheck: the op table has every old gradcheck case") {
  int flagged = 0;
  for (const opcase::OpCase& c : opcase::all_op_cases()) flagged += c.flags.gradcheck;
  // 151 single-op checks of the old per-op list here, 19 from test_attention and test_nn,
  // 2 composites, and the backends' differentiable cases (212 when the table was made).
  CHECK(flagged >= 200);
}
