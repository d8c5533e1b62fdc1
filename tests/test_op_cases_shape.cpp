// test_op_cases_shape.cpp — the op table's shape and index cases (op_cases.h):
// index_select, gather, index_add, scatter_add (int64 indices as inputs, repeated
// indices so that gradients add), cat/stack, split/chunk, the views (reshape,
// transpose, slice, expand ...), contiguous/clone, the host-device transfer, and
// the factories (arange, full, random) made on the Env's device.
#include "op_cases.h"

namespace opcase {

std::vector<OpCase> shape_cases() {
  auto x52 = [](Env& e) { return V{e.leaf({5, 2})}; };
  auto x232 = [](Env& e) { return V{e.leaf({2, 3, 2})}; };
  auto x234 = [](Env& e) { return V{e.leaf({2, 3, 4})}; };
  auto x45 = [](Env& e) { return V{e.leaf({4, 5})}; };
  auto x31 = [](Env& e) { return V{e.leaf({3, 1})}; };
  auto a23_b13 = [](Env& e) { return V{e.leaf({2, 3}), e.leaf({1, 3})}; };
  auto a23_d23 = [](Env& e) { return V{e.leaf({2, 3}), e.leaf({2, 3})}; };
  auto t34 = [](Env& e) { return V{e.transposed_leaf(3, 4)}; };
  const Flags strided{.non_contiguous = true};

  return {
      // ---- a big tensor: a >64 KiB CPU tensor (130·131 float32) reaches the device through
      // the pinned staging buffer, and its gradient (as big) comes back: both exact. Not
      // gradchecked: it tests the transfer; x·1's gradient is checked by the scalar cases.
      {"to_device_staged",
       [](Env& e) {
         return V{e.leaf({130, 131})};
       },
       [](const V& in) { return in[0] * 1.0; },
       {.gradcheck = false, .tol = 0.0}},

      // ---- index_select / gather: repeated indices, so gradients add
      {"index_select",
       [](Env& e) {
         return V{e.leaf({3, 5}), e.index({2, 0, 2, 1})};
       },
       [](const V& in) { return rg::index_select(in[0], 0, in[1]); }},
      {"index_select:dim-0",
       [](Env& e) {
         return V{e.leaf({4, 3}), e.index({3, 0, 3, 1})};
       },
       [](const V& in) { return rg::index_select(in[0], 0, in[1]); }},
      {"index_select:dim-1",
       [](Env& e) {
         return V{e.leaf({4, 3}), e.index({2, 2, 0})};
       },
       [](const V& in) { return rg::index_select(in[0], 1, in[1]); }},
      {"index_select:non-contiguous",
       [](Env& e) {
         return V{e.transposed_leaf(3, 4), e.index({2, 2, 0})};
       },
       [](const V& in) { return rg::index_select(in[0], 0, in[1]); }, strided},
      {"gather",
       [](Env& e) {
         return V{e.leaf({2, 3}), e.index({0, 2, 1, 1, 0, 2}, {2, 3})};
       },
       [](const V& in) { return rg::gather(in[0], 1, in[1]); }},
      {"gather:dim-1",
       [](Env& e) {
         return V{e.leaf({2, 3}), e.index({2, 0, 2, 1, 1, 1}, {2, 3})};
       },
       [](const V& in) { return rg::gather(in[0], 1, in[1]); }},
      {"gather:dim-0",
       [](Env& e) {
         return V{e.leaf({2, 3}), e.index({1, 0, 1, 1, 1, 0}, {2, 3})};
       },
       [](const V& in) { return rg::gather(in[0], 0, in[1]); }},
      {"gather:one-per-row",
       [](Env& e) {
         return V{e.leaf({4, 3}), e.index({0, 2, 2, 1}, {4, 1})};
       },
       [](const V& in) { return rg::gather(in[0], 1, in[1]); }},
      // an index smaller than x outside dim (torch allows index.size(d) <= x.size(d)):
      // only x[:2, :, :2] is read, and only it gets gradient
      {"gather:smaller-index",
       [](Env& e) {
         return V{e.leaf({3, 4, 3}), e.index({3, 0, 1, 1, 2, 2, 0, 3, 3, 3, 1, 0}, {2, 3, 2})};
       },
       [](const V& in) { return rg::gather(in[0], 1, in[1]); }},
      {"gather:smaller-index-dim-0",
       [](Env& e) {
         return V{e.leaf({3, 4}), e.index({2, 0, 2, 1, 0, 0}, {3, 2})};
       },
       [](const V& in) { return rg::gather(in[0], 0, in[1]); }},
      {"gather:smaller-index-non-contiguous",
       [](Env& e) {
         return V{e.transposed_leaf(3, 4), e.index({1, 2, 2, 0}, {2, 2})};
       },
       [](const V& in) { return rg::gather(in[0], 1, in[1]); }, strided},

      // ---- index_add / scatter_add: gradients for both x and src
      {"index_add",
       [](Env& e) {
         return V{e.leaf({4, 3}), e.leaf({2, 3}), e.index({3, 3})};
       },
       [](const V& in) { return rg::index_add(in[0], 0, in[2], in[1]); }},
      {"index_add:dim-0",
       [](Env& e) {
         return V{e.leaf({4, 2}), e.leaf({3, 2}), e.index({0, 2, 0})};
       },
       [](const V& in) { return rg::index_add(in[0], 0, in[2], in[1]); }},
      {"index_add:dim-1",
       [](Env& e) {
         return V{e.leaf({2, 3}), e.leaf({2, 2}), e.index({2, 2})};
       },
       [](const V& in) { return rg::index_add(in[0], 1, in[2], in[1]); }},
      {"scatter_add",
       [](Env& e) {
         return V{e.leaf({2, 4}), e.leaf({2, 3}), e.index({0, 3, 3, 1, 1, 2}, {2, 3})};
       },
       [](const V& in) { return rg::scatter_add(in[0], 1, in[2], in[1]); }},
      {"scatter_add:dim-1",
       [](Env& e) {
         return V{e.leaf({2, 3}), e.leaf({2, 4}), e.index({0, 1, 0, 2, 2, 2, 1, 0}, {2, 4})};
       },
       [](const V& in) { return rg::scatter_add(in[0], 1, in[2], in[1]); }},
      {"scatter_add:dim-0",
       [](Env& e) {
         return V{e.leaf({3, 2}), e.leaf({2, 2}), e.index({2, 0, 2, 2}, {2, 2})};
       },
       [](const V& in) { return rg::scatter_add(in[0], 0, in[2], in[1]); }},
      {"scatter_add:smaller-index",
       [](Env& e) {
         return V{e.leaf({3, 4, 3}), e.leaf({2, 2, 2}), e.index({3, 0, 1, 1, 0, 3, 3, 3}, {2, 2, 2})};
       },
       [](const V& in) { return rg::scatter_add(in[0], 1, in[2], in[1]); }},

      // int64 data: 64-bit atomics on the GPU
      {"index_add:int64",
       [](Env& e) {
         return V{e.index({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}), e.index({10, 20, 30, 40}, {2, 2}),
                  e.index({3, 3})};
       },
       [](const V& in) { return rg::index_add(in[0], 0, in[2], in[1]).to(rg::kFloat64); },
       {.gradcheck = false}},
      {"scatter_add:int64",
       [](Env& e) {
         return V{e.index({1, 2, 3, 4, 5, 6}, {2, 3}), e.index({7, 8, 9, 10}, {2, 2}),
                  e.index({2, 2, 0, 2}, {2, 2})};
       },
       [](const V& in) { return rg::scatter_add(in[0], 1, in[2], in[1]).to(rg::kFloat64); },
       {.gradcheck = false}},

      // ---- cat / stack
      {"cat_stack",
       [](Env& e) {
         return V{e.leaf({2, 3}), e.leaf({4, 3})};
       },
       [](const V& in) {
         return rg::cat({in[0], in[1], in[0]}, 0) + rg::stack({in[0], in[0]}, 1).sum(1).sum();
       }},
      {"cat:dim-0", a23_b13,
       [](const V& in) {
         return rg::cat({in[0], in[1]}, 0);
       }},
      {"cat:dim-1",
       [](Env& e) {
         return V{e.leaf({2, 3}), e.leaf({2, 2})};
       },
       [](const V& in) {
         return rg::cat({in[0], in[1], in[0]}, 1);
       }},
      {"cat:non-contiguous",
       [](Env& e) {
         return V{e.transposed_leaf(2, 3), e.leaf({2, 3})};
       },
       [](const V& in) {
         return rg::cat({in[0], in[1]}, 0);
       },
       strided},
      {"stack:dim-0", a23_d23,
       [](const V& in) {
         return rg::stack({in[0], in[1]});
       }},
      {"stack:dim--1", a23_d23,
       [](const V& in) {
         return rg::stack({in[0], in[1], in[0]}, -1);
       }},

      // ---- split / chunk
      {"split_chunk",
       [](Env& e) {
         return V{e.leaf({3, 6})};
       },
       [](const V& in) { return rg::split(in[0], 2, 1)[1] * rg::chunk(in[0], 3, 1)[0]; }},
      {"split:int", x52,
       [](const V& in) {
         auto p = rg::split(in[0], 2);
         return rg::cat({p[2], p[0] * 2.0, p[1] * 3.0});
       }},
      {"split:sizes-dim-1", x52,
       [](const V& in) {
         auto p = rg::split(in[0], std::vector<int64_t>{1, 1}, 1);
         return p[0] * p[1];
       }},
      {"split:one-piece-used", x52, [](const V& in) { return rg::split(in[0], 2)[1]; }},
      {"chunk", x52,
       [](const V& in) {
         auto c = rg::chunk(in[0], 3);
         return rg::cat({c[1], c[2].exp(), c[0]});
       }},
      {"chunk:dim-1", x52, [](const V& in) { return rg::chunk(in[0], 2, 1)[0]; }},

      // ---- views
      {"views",
       [](Env& e) {
         return V{e.leaf({2, 3, 4})};
       },
       [](const V& in) {
         return in[0]
             .permute({2, 0, 1})
             .slice(0, 1, 4, 2)
             .reshape({-1})
             .unsqueeze(0)
             .expand({3, -1});
       }},
      {"reshape", x232,
       [](const V& in) {
         return in[0].reshape({3, 4}) * 2.0;
       }},
      {"reshape:-1", x232,
       [](const V& in) {
         return in[0].reshape({-1, 2});
       }},
      {"view", x232,
       [](const V& in) {
         return in[0].view({6, 2});
       }},
      {"flatten", x232, [](const V& in) { return in[0].flatten(); }},
      {"flatten:1", x232, [](const V& in) { return in[0].flatten(1); }},
      {"reshape:non-contiguous", t34, [](const V& in) { return in[0].reshape({12}); }, strided},
      {"transpose", x234, [](const V& in) { return in[0].transpose(0, 2); }},
      {"permute", x234,
       [](const V& in) {
         return in[0].permute({1, 2, 0});
       }},
      {"t",
       [](Env& e) {
         return V{e.leaf({3, 2})};
       },
       [](const V& in) { return in[0].t(); }},
      {"permute:then-exp", x234,
       [](const V& in) {
         return in[0].permute({2, 0, 1}).exp();
       }},
      {"slice", x45, [](const V& in) { return in[0].slice(1, 1, 4); }},
      {"slice:step", x45, [](const V& in) { return in[0].slice(1, 0, 5, 2); }},
      {"slice:step-dim-0", x45, [](const V& in) { return in[0].slice(0, 1, 4, 2) * 3.0; }},
      {"narrow", x45, [](const V& in) { return in[0].narrow(0, 1, 2); }},
      {"select", x45, [](const V& in) { return in[0].select(1, 3); }},
      {"operator[]", x45, [](const V& in) { return in[0][2]; }},
      {"slice:overlapping", x45,
       [](const V& in) { return in[0].slice(1, 0, 3) * in[0].slice(1, 2, 5); }},
      {"unsqueeze", x31, [](const V& in) { return in[0].unsqueeze(0); }},
      {"squeeze", x31, [](const V& in) { return in[0].squeeze(1); }},
      {"expand", x31,
       [](const V& in) {
         return in[0].expand({3, 4});
       }},
      {"expand:new-dim", x31,
       [](const V& in) {
         return in[0].expand({2, 3, 4});
       }},
      {"expand:then-mul",
       [](Env& e) {
         return V{e.leaf({3, 1}), e.leaf({3, 4})};
       },
       [](const V& in) {
         return in[0].expand({3, 4}) * in[1];
       }},

      // ---- contiguous / clone
      {"contiguous:of-non-contiguous", t34, [](const V& in) { return in[0].contiguous(); },
       strided},
      {"contiguous:of-contiguous",
       [](Env& e) {
         return V{e.leaf({2, 3})};
       },
       [](const V& in) { return in[0].contiguous(); }},
      {"clone",
       [](Env& e) {
         return V{e.leaf({2, 3})};
       },
       [](const V& in) { return in[0].clone() * in[0]; }},
      {"clone:non-contiguous", t34, [](const V& in) { return in[0].clone(); }, strided},

      // ---- factories inside the call: made with env.options(), so on the Env's device
      {"arange_fill",
       [](Env&) { return V{}; },
       [](const V&, const Env& env) {
         return rg::arange(-3, 5, 0.5, env.options()) + rg::full({16}, 2.5, env.options()) +
                rg::ones({16}, env.options());
       },
       {.gradcheck = false}},
      // Philox counters: one seed gives the same numbers on every device.
      {"random_same_numbers",
       [](Env&) { return V{}; },
       [](const V&, const Env& env) {
         rg::Generator g(42);
         return rg::randn({3, 50}, env.options(), &g) + rg::rand({3, 50}, env.options(), &g);
       },
       {.gradcheck = false}},
  };
}

}  // namespace opcase
