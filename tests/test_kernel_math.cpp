// test_kernel_math.cpp — the scalar math the kernels share (core/kernel_math.h),
// checked on the host: the CUDA kernels run the same functions.
#include <ringgrad/core/kernel_math.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "test_helpers.h"

TEST_CASE("math::exp_vec: within about 2 ulp of exp, exact at the ends") {
  // The vectorisable exp the attention row passes use (kernel_math.h), checked here
  // because the CUDA kernels run the same function.
  float worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    float x = -87.0f + 175.0f * float(i) / 200000.0f;
    float want = std::exp(x), got = ringgrad::math::exp_vec(x);
    worst = std::max(worst, std::abs(got - want) / want);
  }
  CHECK(worst < 3e-7f);  // measured 2.53e-7: about 2 ulp
  CHECK(ringgrad::math::exp_vec(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(ringgrad::math::exp_vec(-100.0f) == 0.0f);
  CHECK(ringgrad::math::exp_vec(0.0f) == 1.0f);
  CHECK(std::isinf(ringgrad::math::exp_vec(100.0f)));
  CHECK(ringgrad::math::exp_vec(1.0) == std::exp(1.0));  // double: the library's exp
}
