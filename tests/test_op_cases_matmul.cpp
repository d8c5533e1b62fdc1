// test_op_cases_matmul.cpp — the op table's matmul cases (op_cases.h): 1-D and 2-D
// forms, batched with broadcast batch dims, and transposed (non-contiguous)
// operands, both as leaves and as views taken inside the call; addmm, addmm_relu, addmm_gelu.
#include "op_cases.h"

namespace opcase {

std::vector<OpCase> matmul_cases() {
  auto mm = [](const V& in) { return rg::matmul(in[0], in[1]); };
  auto shapes = [](rg::Shape a, rg::Shape b) {
    return [a, b](Env& e) { return V{e.leaf(a), e.leaf(b)}; };
  };
  auto shapes3 = [](rg::Shape a, rg::Shape b, rg::Shape c) {
    return [a, b, c](Env& e) { return V{e.leaf(a), e.leaf(b), e.leaf(c)}; };
  };
  auto add_mm = [](const V& in) { return rg::addmm(in[0], in[1], in[2]); };
  auto add_mm_relu = [](const V& in) { return rg::addmm_relu(in[0], in[1], in[2]); };
  auto add_mm_gelu = [](const V& in) { return rg::addmm_gelu(in[0], in[1], in[2]); };

  return {
      {"matmul", shapes({5, 7}, {7, 3}), mm},
      {"matmul_t", shapes({5, 7}, {3, 7}),
       [](const V& in) { return rg::matmul(in[0], in[1].t()); }},
      {"matmul_batched", shapes({2, 1, 3, 4}, {5, 4, 2}), mm},
      {"matmul_vec", shapes({6, 4}, {4}), mm},

      // ---- 1-D and 2-D forms
      {"matmul:dot", shapes({3}, {3}), mm},
      {"matmul:mat-vec", shapes({2, 3}, {3}), mm},
      {"matmul:vec-mat", shapes({2}, {2, 3}), mm},
      {"matmul:mat-mat", shapes({2, 3}, {3, 4}), mm},
      {"matmul:member", shapes({2, 3}, {3, 4}), [](const V& in) { return in[0].matmul(in[1]); }},

      // ---- batched
      {"matmul:batched", shapes({2, 3, 4}, {2, 4, 2}), mm},
      {"matmul:batched@2-D", shapes({2, 3, 4}, {4, 2}), mm},
      {"matmul:2-D@batched", shapes({3, 4}, {2, 4, 2}), mm},
      {"matmul:batched@vec", shapes({2, 3, 4}, {4}), mm},
      {"matmul:vec@batched", shapes({3}, {2, 3, 4}), mm},
      {"matmul:(2,1,3,4)@(5,4,2)", shapes({2, 1, 3, 4}, {5, 4, 2}), mm},
      {"matmul:(1,3,2)@(2,1,2,3)", shapes({1, 3, 2}, {2, 1, 2, 3}), mm},

      // ---- transposed operands: strided leaves, then transposes inside the call
      {"matmul:At-leaf@B",
       [](Env& e) {
         return V{e.transposed_leaf(3, 4), e.leaf({4, 2})};
       },
       mm,
       {.non_contiguous = true}},
      {"matmul:A@Bt-leaf",
       [](Env& e) {
         return V{e.leaf({3, 4}), e.transposed_leaf(4, 2)};
       },
       mm,
       {.non_contiguous = true}},
      {"matmul:At@Bt-leaves",
       [](Env& e) {
         return V{e.transposed_leaf(3, 4), e.transposed_leaf(4, 2)};
       },
       mm,
       {.non_contiguous = true}},
      {"matmul:p.t()@q.t()", shapes({4, 3}, {2, 4}),
       [](const V& in) { return rg::matmul(in[0].t(), in[1].t()); }},
      // ---- what cuBLAS could get wrong: an empty inner dim, a batch stride of 0, float64, TF32
      {"matmul:k=0", shapes({3, 0}, {0, 4}), mm},  // all zeros; cuBLAS must not read C
      {"matmul:(7,3,4)@(4,5)", shapes({7, 3, 4}, {4, 5}), mm},  // B shared: batch stride 0
      {"matmul:float64", shapes({33, 65}, {65, 17}), mm,
       {.gradcheck = false, .tol = 1e-10, .dtypes = {rg::kFloat64}}},
      // TF32 tensor cores (10-bit mantissa inputs): close to float32, not equal.
      {"matmul:tf32", shapes({64, 128}, {128, 32}),
       [](const V& in) {
         rg::cuda::set_allow_tf32(true);
         rg::Tensor out = rg::matmul(in[0], in[1]);
         rg::cuda::set_allow_tf32(false);
         return out;
       },
       {.gradcheck = false, .tol = 2e-2}},
      {"matmul:batched-transpose", shapes({2, 4, 3}, {2, 2, 4}),
       [](const V& in) { return rg::matmul(in[0].transpose(-1, -2), in[1].transpose(1, 2)); }},

      // ---- addmm: a bias vector (inside the GEMM on the CPU), other inputs added after
      {"addmm:bias", shapes3({4}, {3, 5}, {5, 4}), add_mm},
      {"addmm:linear", shapes3({4}, {3, 5}, {4, 5}),  // x·Wᵀ + b, as nn::linear calls it
       [](const V& in) { return rg::addmm(in[0], in[1], in[2].t()); }},
      {"addmm:(1,4)-input", shapes3({1, 4}, {3, 5}, {5, 4}), add_mm},
      {"addmm:(3,1)-input", shapes3({3, 1}, {3, 5}, {5, 4}), add_mm},
      {"addmm:full-input", shapes3({3, 4}, {3, 5}, {5, 4}), add_mm},
      {"addmm:k=0", shapes3({4}, {3, 0}, {0, 4}), add_mm},  // the bias alone
      {"addmm:panels", shapes3({300}, {70, 40}, {40, 300}), add_mm,  // split over threads
       {.gradcheck = false}},
      {"addmm:float64", shapes3({17}, {33, 65}, {65, 17}), add_mm,
       {.gradcheck = false, .tol = 1e-10, .dtypes = {rg::kFloat64}}},

      // ---- addmm_relu: the relu inside the GEMM with a bias vector, after it otherwise
      {"addmm_relu:bias", shapes3({4}, {3, 5}, {5, 4}), add_mm_relu},
      {"addmm_relu:linear", shapes3({4}, {3, 5}, {4, 5}),
       [](const V& in) { return rg::addmm_relu(in[0], in[1], in[2].t()); }},
      {"addmm_relu:full-input", shapes3({3, 4}, {3, 5}, {5, 4}), add_mm_relu},
      {"addmm_relu:panels", shapes3({300}, {70, 40}, {40, 300}), add_mm_relu,
       {.gradcheck = false, .reduced_precision = false}},

      // ---- addmm_gelu: GELU inside the GEMM (the product kept for its backward)
      {"addmm_gelu:bias", shapes3({4}, {3, 5}, {5, 4}), add_mm_gelu},
      {"addmm_gelu:linear", shapes3({4}, {3, 5}, {4, 5}),
       [](const V& in) { return rg::addmm_gelu(in[0], in[1], in[2].t()); }},
      {"addmm_gelu:tanh", shapes3({4}, {3, 5}, {5, 4}),
       [](const V& in) { return rg::addmm_gelu(in[0], in[1], in[2], rg::GeluApprox::Tanh); }},
      {"addmm_gelu:full-input", shapes3({3, 4}, {3, 5}, {5, 4}), add_mm_gelu},
      {"addmm_gelu:panels", shapes3({300}, {70, 40}, {40, 300}), add_mm_gelu,
       {.gradcheck = false, .reduced_precision = false}},
  };
}

}  // namespace opcase
