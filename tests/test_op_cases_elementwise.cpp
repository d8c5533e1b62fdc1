// test_op_cases_elementwise.cpp — the op table's elementwise cases (op_cases.h):
// binary ops with and without broadcasting, scalar operators, pow, maximum/minimum,
// comparisons, unary ops, where/masked_fill, and non-contiguous leaves through them.
#include "op_cases.h"

namespace opcase {

std::vector<OpCase> elementwise_cases() {
  // Shared input makers: two (2,3) leaves plus a (2,3) one away from zero (a divisor).
  auto two_by_three = [](Env& e) {
    return V{e.leaf({2, 3}), e.leaf({2, 3}), e.away_from_zero({2, 3})};
  };
  auto col_row = [](Env& e) { return V{e.leaf({3, 1}), e.leaf({1, 4})}; };
  auto mat_vec = [](Env& e) { return V{e.leaf({2, 3}), e.leaf({3})}; };
  // The (3,1,5)·(4,1) -> (3,4,5) broadcast, both operands broadcasting.
  auto bcast = [](Env& e) { return V{e.leaf({3, 1, 5}), e.leaf({4, 1})}; };
  auto bcast_pos = [](Env& e) { return V{e.leaf({3, 1, 5}, 0.5, 2.0), e.leaf({4, 1}, 0.5, 2.0)}; };
  auto x23 = [](Env& e) { return V{e.leaf({2, 3})}; };
  auto pos23 = [](Env& e) { return V{e.leaf({2, 3}, 0.5, 2.0)}; };
  auto x35 = [](Env& e) { return V{e.leaf({3, 5}, -2.0, 2.0)}; };
  auto pos43 = [](Env& e) { return V{e.leaf({4, 3}, 0.3, 3.0)}; };
  auto nonzero34 = [](Env& e) { return V{e.away_from_zero({3, 4})}; };
  auto nonzero35 = [](Env& e) { return V{e.away_from_zero({3, 5})}; };
  // clamp's bounds are ±0.5: values at least 0.1 from both
  auto clamp_in = [](Env& e) {
    return V{e.leaf_of({-1.5, -0.9, -0.4, -0.1, 0.2, 0.35, 0.7, 1.2}, {2, 4})};
  };
  auto ties_free = [](Env& e) {
    rg::Tensor a = e.leaf({2, 3});
    return V{a, e.shifted_leaf(a)};
  };
  auto ties_free_bcast = [](Env& e) {
    return V{e.leaf_of({-1, 0, 1, 1, 0.6, -3}, {2, 3}), e.leaf_of({-0.5, 0.25, 2.0}, {3})};
  };
  // A transposed (3,4) leaf and a contiguous (3,4) one.
  auto strided = [](Env& e) { return V{e.transposed_leaf(3, 4), e.leaf({3, 4})}; };

  return {
      // ---- binary, same shape
      {"add:same-shape", two_by_three, [](const V& in) { return rg::add(in[0], in[1]); }},
      {"sub:same-shape", two_by_three, [](const V& in) { return rg::sub(in[0], in[1]); }},
      {"mul:same-shape", two_by_three, [](const V& in) { return rg::mul(in[0], in[1]); }},
      {"div:same-shape", two_by_three, [](const V& in) { return rg::div(in[0], in[2]); }},
      {"operators:(a+b)*a-b/d", two_by_three,
       [](const V& in) { return (in[0] + in[1]) * in[0] - in[1] / in[2]; }},

      // ---- binary, broadcasting
      {"add", bcast, [](const V& in) { return in[0] + in[1]; }},
      {"sub", bcast, [](const V& in) { return in[0] - in[1]; }},
      {"mul", bcast, [](const V& in) { return in[0] * in[1]; }},
      {"div", bcast_pos, [](const V& in) { return in[0] / in[1]; }},
      {"add:(3,1)+(1,4)", col_row, [](const V& in) { return in[0] + in[1]; }},
      {"sub:(3,1)-(1,4)", col_row, [](const V& in) { return in[0] - in[1]; }},
      {"mul:(3,1)*(1,4)", col_row, [](const V& in) { return in[0] * in[1]; }},
      {"div:(3,1)/(1,4)",
       [](Env& e) {
         return V{e.leaf({3, 1}), e.away_from_zero({1, 4})};
       },
       [](const V& in) { return in[0] / in[1]; }},
      {"mul:(2,3)*(3)", mat_vec, [](const V& in) { return in[0] * in[1]; }},
      {"add:(3)+(2,3)", mat_vec, [](const V& in) { return in[1] + in[0]; }},
      {"div:(2,3)/(3)",
       [](Env& e) {
         return V{e.leaf({2, 3}), e.away_from_zero({3})};
       },
       [](const V& in) { return in[0] / in[1]; }},
      {"mul:(2,1,3)*(4,1)",
       [](Env& e) {
         return V{e.leaf({2, 1, 3}), e.leaf({4, 1})};
       },
       [](const V& in) { return in[0] * in[1]; }},
      {"mul:(2,3)*0-dim",
       [](Env& e) {
         return V{e.leaf({2, 3}), e.leaf_of({0.7}, {})};
       },
       [](const V& in) { return in[0] * in[1]; }},

      // ---- scalar operators
      {"scalar:x+2", x23, [](const V& in) { return in[0] + 2.0; }},
      {"scalar:2+x", x23, [](const V& in) { return 2.0 + in[0]; }},
      {"scalar:x-2", x23, [](const V& in) { return in[0] - 2.0; }},
      {"scalar:2-x", x23, [](const V& in) { return 2.0 - in[0]; }},
      {"scalar:x*3", x23, [](const V& in) { return in[0] * 3.0; }},
      {"scalar:3*x", x23, [](const V& in) { return 3.0 * in[0]; }},
      {"scalar:x/3", x23, [](const V& in) { return in[0] / 3.0; }},
      {"scalar:3/p", pos23, [](const V& in) { return 3.0 / in[0]; }},
      {"scalar:-x", x23, [](const V& in) { return -in[0]; }},

      // ---- pow: positive bases, or integer exponents
      {"pow", bcast_pos, [](const V& in) { return rg::pow(in[0], in[1]); }},
      {"pow:tensor-tensor",
       [](Env& e) {
         return V{e.leaf({2, 3}, 0.5, 2.0), e.leaf({2, 3}, -1.0, 2.0)};
       },
       [](const V& in) { return rg::pow(in[0], in[1]); }},
      {"pow:broadcast-exponent",
       [](Env& e) {
         return V{e.leaf({2, 3}, 0.5, 2.0), e.leaf({3}, -1.0, 2.0)};
       },
       [](const V& in) { return rg::pow(in[0], in[1]); }},
      {"pow_scalar",
       [](Env& e) {
         return V{e.leaf({3, 5})};
       },
       [](const V& in) { return in[0].pow(3.0); }},
      {"pow_scalar:x^3", x23, [](const V& in) { return rg::pow(in[0], 3.0); }},
      {"pow_scalar:x^0.5", pos23, [](const V& in) { return in[0].pow(0.5); }},
      {"pow_scalar:x^-2", pos23, [](const V& in) { return rg::pow(in[0], -2.0); }},
      {"pow_scalar:x^2-negative-base", [](Env& e) { return V{e.leaf({4}, -2.0, -0.5)}; },
       [](const V& in) { return rg::pow(in[0], 2.0); }},

      // ---- maximum / minimum: random draws (ties have probability 0) or shifted copies
      {"maximum", bcast, [](const V& in) { return rg::maximum(in[0], in[1]); }},
      {"minimum", bcast, [](const V& in) { return rg::minimum(in[0], in[1]); }},
      {"maximum:same-shape", ties_free, [](const V& in) { return rg::maximum(in[0], in[1]); }},
      {"minimum:same-shape", ties_free, [](const V& in) { return rg::minimum(in[0], in[1]); }},
      {"maximum:broadcast", ties_free_bcast, [](const V& in) { return rg::maximum(in[0], in[1]); }},
      {"minimum:broadcast", ties_free_bcast, [](const V& in) { return rg::minimum(in[0], in[1]); }},

      // ---- comparisons: bool results, no gradient
      {"compare",
       bcast,
       [](const V& in) {
         rg::DType f = in[0].dtype();
         return (in[0] < in[1]).to(f) + (in[0] >= in[1]).to(f) * 2.0;
       },
       {.gradcheck = false}},

      // ---- unary
      {"neg", x35, [](const V& in) { return rg::neg(in[0]); }},
      {"exp", x35, [](const V& in) { return rg::exp(in[0]); }},
      {"log", pos43, [](const V& in) { return rg::log(in[0]); }},
      {"sqrt", pos43, [](const V& in) { return rg::sqrt(in[0]); }},
      {"rsqrt", pos43, [](const V& in) { return rg::rsqrt(in[0]); }},
      {"tanh", x35, [](const V& in) { return rg::tanh(in[0]); }},
      {"sigmoid", x35, [](const V& in) { return rg::sigmoid(in[0]); }},
      {"gelu", x35, [](const V& in) { return rg::gelu(in[0]); }},
      {"gelu_tanh", x35, [](const V& in) { return rg::gelu(in[0], rg::GeluApprox::Tanh); }},
      {"unary:members", x35,
       [](const V& in) { return in[0].exp() + in[0].tanh() * in[0].sigmoid(); }},
      {"unary:log-sqrt-members", pos43, [](const V& in) { return in[0].log() * in[0].sqrt(); }},
      {"transposed_exp",
       [](Env& e) {
         return V{e.leaf({5, 3})};
       },
       [](const V& in) { return rg::exp(in[0].t()); }},

      // ---- kinks: inputs away from them
      {"relu", nonzero35, [](const V& in) { return rg::relu(in[0]); }},
      {"relu:member", nonzero34, [](const V& in) { return in[0].relu(); }},
      {"abs", nonzero35, [](const V& in) { return rg::abs(in[0]); }},
      {"abs:member", nonzero34, [](const V& in) { return in[0].abs(); }},
      {"clamp",
       [](Env& e) {
         return V{e.leaf_avoiding({3, 5}, -1.0, 1.0, {-0.5, 0.5})};
       },
       [](const V& in) { return rg::clamp(in[0], -0.5, 0.5); }},
      {"clamp:member", clamp_in, [](const V& in) { return in[0].clamp(-0.5, 0.5); }},
      {"clamp:explicit-values", clamp_in, [](const V& in) { return rg::clamp(in[0], -0.5, 0.5); }},
      {"clamp_min", clamp_in, [](const V& in) { return rg::clamp_min(in[0], -0.5); }},
      {"clamp_max", clamp_in, [](const V& in) { return rg::clamp_max(in[0], 0.5); }},

      // ---- where / masked_fill: the masks are inputs, so they live on the Env's device
      {"where", nonzero35, [](const V& in) { return rg::where(in[0] > 0.0, in[0] * 2.0, -in[0]); }},
      {"where:broadcast",
       [](Env& e) {
         return V{e.mask({1, 0, 1}, {3, 1}), e.leaf({3, 4}), e.leaf({1, 4})};
       },
       [](const V& in) { return rg::where(in[0], in[1], in[2]); }},
      {"where:same-shape",
       [](Env& e) {
         return V{e.mask({1, 0, 0, 1, 1, 0}, {2, 3}), e.leaf({2, 3}), e.leaf({2, 3})};
       },
       [](const V& in) { return rg::where(in[0], in[1], in[2]); }},
      {"masked_fill", nonzero35,
       [](const V& in) { return rg::masked_fill(in[0], in[0] < 0.0, 0.25); }},
      {"masked_fill:broadcast-mask",
       [](Env& e) {
         return V{e.leaf({3, 4}), e.mask({0, 1, 0, 1}, {4})};
       },
       [](const V& in) { return rg::masked_fill(in[0], in[1], -5); }},

      // ---- non-contiguous leaves through elementwise ops
      {"noncontig:x^T*y+exp(x^T)",
       strided,
       [](const V& in) { return in[0] * in[1] + in[0].exp(); },
       {.non_contiguous = true}},
      {"noncontig:tanh(x^T)*sum(y)",
       strided,
       [](const V& in) { return rg::tanh(in[0]) * in[1].sum(0); },
       {.non_contiguous = true}},
      {"noncontig:stepped-slice-leaf",
       [](Env& e) {
         return V{Env::as_leaf(e.constant({3, 8}).slice(1, 1, 8, 2)), e.leaf({3, 4})};
       },
       [](const V& in) { return in[0] * in[0] * in[1]; },
       {.non_contiguous = true}},
  };
}

}  // namespace opcase
