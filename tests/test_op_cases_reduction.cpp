// test_op_cases_reduction.cpp — the op table's reductions (op_cases.h): sum and
// mean over any dims, amax/amin and max/min along a dim (random inputs: no ties),
// logsumexp, sum_to, and argmax/argmin (no gradient).
#include "op_cases.h"

namespace opcase {

std::vector<OpCase> reduction_cases() {
  auto x234 = [](Env& e) { return V{e.leaf({2, 3, 4})}; };
  auto x234_wide = [](Env& e) { return V{e.leaf({2, 3, 4}, -2.0, 2.0)}; };
  auto x345 = [](Env& e) { return V{e.leaf({3, 4, 5})}; };
  auto x37 = [](Env& e) { return V{e.leaf({3, 7})}; };

  return {
      // ---- sum and mean
      {"sum_all",
       [](Env& e) {
         return V{e.leaf({7, 9})};
       },
       [](const V& in) { return in[0].sum(); }},
      {"sum_dims", x345,
       [](const V& in) {
         return rg::sum(in[0], {0, 2}, true);
       }},
      {"mean", x345, [](const V& in) { return in[0].mean(1); }},
      {"sum:all", x234, [](const V& in) { return rg::sum(in[0]); }},
      {"sum:dim-1", x234, [](const V& in) { return rg::sum(in[0], {1}); }},
      {"sum:dims-0,2-keepdim", x234,
       [](const V& in) {
         return rg::sum(in[0], {0, 2}, true);
       }},
      {"sum:-1-member", x234, [](const V& in) { return in[0].sum(-1); }},
      {"mean:all", x234, [](const V& in) { return rg::mean(in[0]); }},
      {"mean:dim-2-keepdim", x234, [](const V& in) { return rg::mean(in[0], {2}, true); }},
      {"mean:dims-0,1", x234,
       [](const V& in) {
         return in[0].mean(rg::Dims{0, 1});
       }},
      {"sum:non-contiguous",
       [](Env& e) { return V{e.transposed_leaf(3, 4)}; },
       [](const V& in) { return in[0].sum(0); },
       {.non_contiguous = true}},

      // ---- amax / amin
      {"amax", x37, [](const V& in) { return rg::amax(in[0], {1}); }},
      {"amin", x37, [](const V& in) { return rg::amin(in[0], {0}); }},
      {"amax:all", x234, [](const V& in) { return rg::amax(in[0]); }},
      {"amax:dim-2", x234, [](const V& in) { return rg::amax(in[0], {2}); }},
      {"amax:dims-0,1-keepdim", x234,
       [](const V& in) {
         return rg::amax(in[0], {0, 1}, true);
       }},
      {"amin:all", x234, [](const V& in) { return rg::amin(in[0]); }},
      {"amin:dim-1", x234, [](const V& in) { return rg::amin(in[0], {1}); }},
      {"max:member", x234, [](const V& in) { return in[0].max(); }},
      {"min:member", x234, [](const V& in) { return in[0].min(); }},

      // ---- torch.max(x, dim) / torch.min(x, dim): values (gradient to the index) and
      // indices (compared as floats, no gradient)
      {"max:dim-values", x234, [](const V& in) { return rg::max(in[0], 0).values; }},
      {"max:dim-indices", x234,
       [](const V& in) { return rg::max(in[0], 2).indices.to(in[0].dtype()); },
       {.gradcheck = false}},
      {"min:member-keepdim-values", x234, [](const V& in) { return in[0].min(-1, true).values; }},
      {"min:dim-indices-keepdim", x234,
       [](const V& in) { return in[0].min(1, true).indices.to(in[0].dtype()); },
       {.gradcheck = false}},

      // ---- logsumexp
      {"logsumexp", x37, [](const V& in) { return rg::logsumexp(in[0], {-1}); }},
      {"logsumexp:dim-2", x234_wide, [](const V& in) { return rg::logsumexp(in[0], {2}); }},
      {"logsumexp:dim-0-keepdim", x234_wide,
       [](const V& in) { return rg::logsumexp(in[0], {0}, true); }},
      {"logsumexp:all", x234_wide,
       [](const V& in) {
         return rg::logsumexp(in[0], {0, 1, 2});
       }},
      {"logsumexp:member", x234_wide, [](const V& in) { return in[0].logsumexp(1); }},

      // ---- sum_to: the inverse of broadcasting
      {"sum_to:(3,1)", x234,
       [](const V& in) {
         return rg::sum_to(in[0], {3, 1});
       }},
      {"sum_to:(4)", x234, [](const V& in) { return rg::sum_to(in[0], {4}); }},
      {"sum_to:(2,1,4)", x234,
       [](const V& in) {
         return rg::sum_to(in[0], {2, 1, 4});
       }},
      {"sum_to:same", x234,
       [](const V& in) {
         return rg::sum_to(in[0], {2, 3, 4});
       }},

      // ---- argmax / argmin: int64 indices, compared as floats; no gradient
      {"argmax",
       [](Env& e) {
         return V{e.leaf({4, 9})};
       },
       [](const V& in) { return rg::argmax(in[0], 1).to(in[0].dtype()); },
       {.gradcheck = false}},
      {"argmin",
       [](Env& e) {
         return V{e.leaf({6, 4})};
       },
       [](const V& in) { return rg::argmin(in[0], 0).to(in[0].dtype()); },
       {.gradcheck = false}},

      // ---- long rows and tall columns: the GPU cuts r into pieces, one block
      // each, and merges the pieces (core/cuda/block_reduce.cuh)
      {"sum:long-row",
       [](Env& e) {
         return V{e.leaf({2, 300001})};
       },
       [](const V& in) { return rg::sum(in[0], {1}); },
       {.gradcheck = false}},
      {"sum:all-long", [](Env& e) { return V{e.leaf({600001})}; },
       [](const V& in) { return in[0].sum(); }, {.gradcheck = false}},
      {"sum:tall-columns", [](Env& e) { return V{e.leaf({50001, 3})}; },
       [](const V& in) { return rg::sum(in[0], {0}); }, {.gradcheck = false}},
      {"amax:tall-columns", [](Env& e) { return V{e.leaf({50001, 3})}; },
       [](const V& in) { return rg::amax(in[0], {0}); }, {.gradcheck = false}},
      {"logsumexp:long-row", [](Env& e) { return V{e.leaf({3, 200003}, -5.0, 5.0)}; },
       [](const V& in) { return rg::logsumexp(in[0], {1}); }, {.gradcheck = false}},
      // many ties over pieces: the first position must win, as in a scan
      {"argmax:long-row-ties",
       [](Env& e) {
         std::vector<double> v(2 * 100003);
         for (size_t i = 0; i < v.size(); ++i) v[i] = double((i * 7919) % 13);
         return V{e.constant_of(v, {2, 100003})};
       },
       [](const V& in) {
         return rg::stack({rg::argmax(in[0], 1), rg::argmin(in[0], 1)}).to(in[0].dtype());
       },
       {.gradcheck = false}},
      // bool sums count the true values, into int64
      {"sum:bool",
       [](Env& e) {
         return V{e.mask({1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1}, {3, 4})};
       },
       [](const V& in) {
         return rg::cat({rg::sum(in[0], {1}), rg::sum(in[0]).unsqueeze(0)}, 0).to(rg::kFloat32);
       },
       {.gradcheck = false}},
      // GPU only: 150M elements, more than one grid-stride pass (65535·8 blocks × 256)
      {"large:sum-150M",
       [](Env&) { return V{}; },
       [](const V&, const Env& env) {
         rg::Tensor x = rg::full({150'000'000}, 0.25, env.options());
         return rg::stack({x.sum(), rg::amax(x * 2.0 + 1.0, {0})});
       },
       {.gradcheck = false, .large = true}},
  };
}

}  // namespace opcase
