// optim_quadratic.h — the quadratic the optimizer tests step on, shared by test_optim.cpp and
// test_optim_state.cpp (and the golden-value scripts in their comments).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include <ringgrad/ringgrad.h>

#include "test_helpers.h"

namespace optim_test {

using Vec = std::vector<double>;

// Gradient of the quadratic Σ ½·a_i·(p_i − c_i)²: a_i·(p_i − c_i), with per-element
// a and c (offset distinguishes parameters).
inline Vec quad_grad(const Vec& p, size_t offset = 0) {
  Vec g(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    double a = 0.5 + 0.7 * static_cast<double>((i + offset) % 4);
    double c = 0.3 * static_cast<double>(i + offset) - 0.5;
    g[i] = a * (p[i] - c);
  }
  return g;
}

inline void set_quad_grad(ringgrad::Tensor& p, size_t offset = 0) {
  p.set_grad(test::f64(quad_grad(test::values(p), offset), p.shape()));
}

inline ringgrad::optim::GroupOptions group(std::optional<double> lr, std::optional<double> weight_decay) {
  return {.lr = lr, .weight_decay = weight_decay};
}

inline const Vec kInit1{1.0, -2.0, 0.5};
inline const Vec kInit2{0.25, -0.75};

}  // namespace optim_test
