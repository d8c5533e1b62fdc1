// test_norm.cpp — layer_norm against the plain formula (with and without weight
// and bias, over one or two trailing dims), and its errors. Its finite-difference
// gradients and CPU-vs-CUDA comparisons are cases of the op table
// (test_op_cases_nn.cpp, run by test_gradcheck.cpp and test_backends.cpp).
#include "test_helpers.h"

using test::check_close;
using test::error_of;

namespace {

rg::Tensor rand64(const rg::Shape& s) { return rg::uniform(s, -1, 1, {.dtype = rg::kFloat64}); }

}  // namespace

TEST_CASE("layer_norm: matches the formula, with and without weight and bias") {
  rg::Tensor x = rand64({4, 6}) * 3.0 + 5.0;
  rg::Tensor w = rand64({6}), b = rand64({6});
  rg::Tensor mean = x.mean(-1, true);
  rg::Tensor var = ((x - mean) * (x - mean)).mean(-1, true);
  rg::Tensor xhat = (x - mean) / rg::sqrt(var + 1e-5);
  check_close(rg::layer_norm(x, {6}, w, b), xhat * w + b, 1e-10);
  check_close(rg::layer_norm(x, {6}), xhat, 1e-10);
  // Over the last two dims: one mean per leading index.
  rg::Tensor x3 = rand64({2, 3, 4});
  rg::Tensor flat = rg::layer_norm(x3.reshape({2, 12}), {12});
  check_close(rg::layer_norm(x3, {3, 4}), flat.reshape({2, 3, 4}), 1e-10);
}

TEST_CASE("layer_norm: errors name the shapes") {
  rg::Tensor x = rg::zeros({2, 6});
  CHECK_CONTAINS(error_of([&] { rg::layer_norm(x, {5}); }),
                 "trailing dims are normalized_shape [5]");
  CHECK_CONTAINS(error_of([&] { rg::layer_norm(x, {6}, rg::ones({5})); }),
                 "expected weight of shape [6], got [5]");
}
