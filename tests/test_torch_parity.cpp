// test_torch_parity.cpp — where ringgrad once differed from PyTorch 2.x (issue 16,
// "Differences to fix" 1–6), checked against golden values from torch 2.15.0 in float64:
// pow's gradient where the exponent is 0, clamp's gradient at a bound, torch.max(x, dim)'s
// (values, indices) form, gather with an index smaller than the input, Embedding's
// padding row, and AdamW's default weight decay.
//
// The golden values come from this script (torch 2.15.0+cu132, CPU, float64); each
// case below quotes the lines it uses. `show` prints a tensor flattened, row-major.
//
//   import torch, math
//   t = torch.float64
//   def show(name, v): print(name, v.detach().reshape(-1).tolist())
//   # 1. pow
//   x = torch.tensor([0.0, 2.0, -1.5], dtype=t, requires_grad=True)
//   torch.pow(x, 0.0).backward(torch.tensor([0.5, 0.75, 1.0], dtype=t)); show("pow0.grad", x.grad)
//   a = torch.tensor([0.0, 0.0, 2.0, 0.0, 1.5, 0.0], dtype=t, requires_grad=True)
//   b = torch.tensor([0.0, 1.0, 0.0, 2.0, 0.5, 0.5], dtype=t, requires_grad=True)
//   y = torch.pow(a, b); show("powt.out", y)
//   y.backward(torch.tensor([0.5, 0.75, 1.0, 1.25, 1.5, 1.75], dtype=t))
//   show("powt.da", a.grad); show("powt.db", b.grad)
//   a = torch.tensor([0.0], dtype=t, requires_grad=True); b = torch.tensor([-1.0], dtype=t, requires_grad=True)
//   y = torch.pow(a, b); y.backward(torch.ones_like(y))
//   show("pow_neg.out", y); show("pow_neg.da", a.grad); show("pow_neg.db", b.grad)
//   # 2. clamp
//   x = torch.tensor([-1.0, 0.0, 0.5, 1.0, 2.0, math.inf], dtype=t, requires_grad=True)
//   for name, f in [("clamp", lambda x: torch.clamp(x, 0.0, 1.0)),
//                   ("clamp_min", lambda x: torch.clamp_min(x, 0.0)),
//                   ("clamp_max", lambda x: torch.clamp_max(x, 1.0)), ("relu", torch.relu)]:
//       x.grad = None; f(x).sum().backward(); show(name + ".grad", x.grad)
//   # 3. max/min along a dim
//   v = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [math.nan, 1.0, math.nan, 5.0]],
//                    dtype=t, requires_grad=True)
//   g3 = torch.tensor([1.0, 2.0, 3.0], dtype=t)
//   r = v.max(1); show("max1.values", r.values); show("max1.indices", r.indices)
//   r.values.backward(g3); show("max1.grad", v.grad); v.grad = None
//   r = v.min(1); show("min1.values", r.values); show("min1.indices", r.indices)
//   r.values.backward(g3); show("min1.grad", v.grad); v.grad = None
//   r = torch.max(v, 0, keepdim=True); show("max0k.values", r.values); show("max0k.indices", r.indices)
//   r.values.backward(torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=t)); show("max0k.grad", v.grad)
//   v.grad = None; torch.amax(v[:2], 1).backward(g3[:2]); show("amax1.grad", v.grad)
//   # 4. gather / scatter_add with an index smaller than the input outside dim
//   x = (torch.arange(36, dtype=t) * 0.5 - 3).reshape(3, 4, 3).requires_grad_()
//   idx = torch.tensor([3, 0, 1, 1, 2, 2, 0, 3, 3, 3, 1, 0]).reshape(2, 3, 2)
//   y = torch.gather(x, 1, idx); show("gather.out", y)
//   y.backward(torch.arange(12, dtype=t).reshape(2, 3, 2) + 1); show("gather.grad", x.grad)
//   base = torch.zeros(3, 4, 3, dtype=t, requires_grad=True)
//   src = (torch.arange(8, dtype=t) + 1).reshape(2, 2, 2).requires_grad_()
//   sidx = torch.tensor([3, 0, 1, 1, 0, 3, 3, 3]).reshape(2, 2, 2)
//   y = torch.scatter_add(base, 1, sidx, src); show("scatter_add.out", y)
//   y.backward((torch.arange(36, dtype=t) * 0.25).reshape(3, 4, 3))
//   show("scatter_add.dbase", base.grad); show("scatter_add.dsrc", src.grad)
//   # 5. Embedding with padding_idx and a non-zero stored padding row
//   emb = torch.nn.Embedding(5, 3, padding_idx=1).double()
//   emb.load_state_dict({"weight": (torch.arange(15, dtype=t) * 0.1 - 0.7).reshape(5, 3)})
//   out = emb(torch.tensor([[1, 3], [1, 4]])); show("emb.out", out)
//   out.backward((torch.arange(12, dtype=t) + 1).reshape(2, 2, 3)); show("emb.grad", emb.weight.grad)
//   # 6. AdamW(params, lr=0.1): weight_decay 0.01 by default
//   p = torch.tensor([1.0, -2.0, 0.5], dtype=t, requires_grad=True)
//   opt = torch.optim.AdamW([p], lr=0.1); print(opt.param_groups[0]["weight_decay"])
//   for step in range(3):
//       opt.zero_grad()
//       ((p - 0.5) ** 2 * torch.tensor([1.0, 2.0, 3.0], dtype=t)).sum().backward(); opt.step()
//       show(f"adamw.p{step+1}", p)
#include <cmath>
#include <limits>

#include "test_helpers.h"

using test::f64;
using test::grad_ok;
using test::i64;
using V = std::vector<rg::Tensor>;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Every element against torch's: NaN matches NaN, ±inf matches itself, finite values
// within tol·(1 + |want|).
void check_torch(const rg::Tensor& t, const std::vector<double>& want, double tol = 1e-15) {
  REQUIRE(t.defined());
  std::vector<double> got = t.tolist<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    bool same = std::isnan(want[i])   ? std::isnan(got[i])
                : std::isinf(want[i]) ? got[i] == want[i]
                                      : std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    CHECK_MESSAGE(same, "element " << i << ": got " << got[i] << ", torch " << want[i]);
  }
}

rg::Tensor leaf64(const std::vector<double>& v, const rg::Shape& shape) {
  return f64(v, shape).requires_grad_();
}

// i·scale + offset for i = 0 … numel−1, shaped (torch.arange(n) * scale + offset).
rg::Tensor ramp(const rg::Shape& shape, double scale, double offset) {
  std::vector<double> v(size_t(rg::numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i) * scale + offset;
  return f64(v, shape);
}

}  // namespace

TEST_CASE("torch parity: pow's gradient is 0 wherever the exponent is 0") {
  // pow0.grad: [0, 0, 0] (before: NaN at x = 0, from 0·0^(−1))
  rg::Tensor x = leaf64({0.0, 2.0, -1.5}, {3});
  rg::pow(x, 0.0).backward(f64({0.5, 0.75, 1.0}));
  check_torch(x.grad(), {0.0, 0.0, 0.0});

  rg::Tensor a = leaf64({0.0, 0.0, 2.0, 0.0, 1.5, 0.0}, {6});
  rg::Tensor b = leaf64({0.0, 1.0, 0.0, 2.0, 0.5, 0.5}, {6});
  rg::Tensor y = rg::pow(a, b);
  check_torch(y, {1.0, 0.0, 1.0, 0.0, 1.224744871391589, 0.0});
  y.backward(f64({0.5, 0.75, 1.0, 1.25, 1.5, 1.75}));
  check_torch(a.grad(), {0.0, 0.75, 0.0, 0.0, 0.6123724356957945, kInf});
  check_torch(b.grad(), {0.0, 0.0, 0.6931471805599453, 0.0, 0.7448869675255658, 0.0});

  // base 0, exponent < 0: torch's exponent gradient is inf·log(0) = −inf (before: 0)
  rg::Tensor a0 = leaf64({0.0}, {1}), bn = leaf64({-1.0}, {1});
  rg::Tensor yn = rg::pow(a0, bn);
  check_torch(yn, {kInf});
  yn.backward(f64({1.0}));
  check_torch(a0.grad(), {-kInf});
  check_torch(bn.grad(), {-kInf});

  // float64 gradchecks through the points that were NaN: x^0 at 0, and the base's
  // gradient of a^b at a = 0, b = 0 (the exponent held fixed: 0^b has no derivative in b
  // from both sides at 0)
  grad_ok("pow(x, 0) at 0", [](const V& in) { return rg::pow(in[0], 0.0); },
          {leaf64({0.0, 0.7, -1.3}, {3})});
  rg::Tensor exps = f64({0.0, 2.0, 0.0, 1.5}, {4});
  grad_ok("pow(a, b) over a, b = 0 at a = 0",
          [exps](const V& in) { return rg::pow(in[0], exps); },
          {leaf64({0.0, 0.6, 1.2, 0.9}, {4})});
}

TEST_CASE("torch parity: clamp's gradient is 0 at a bound, as relu's at 0") {
  // x = [-1, 0, 0.5, 1, 2, inf]; torch 2.15: clamp.grad [0, 0, 1, 0, 0, 0],
  // clamp_min.grad [0, 0, 1, 1, 1, 1], clamp_max.grad [1, 1, 1, 0, 0, 0],
  // relu.grad [0, 0, 1, 1, 1, 1] (before: 1 at each bound)
  const std::vector<double> xs{-1.0, 0.0, 0.5, 1.0, 2.0, kInf};
  auto grad_of = [&](auto f) {
    rg::Tensor x = leaf64(xs, {6});
    f(x).sum().backward();
    return x.grad();
  };
  check_torch(grad_of([](const rg::Tensor& x) { return rg::clamp(x, 0.0, 1.0); }),
              {0.0, 0.0, 1.0, 0.0, 0.0, 0.0});
  check_torch(grad_of([](const rg::Tensor& x) { return x.clamp(0.0, 1.0); }),
              {0.0, 0.0, 1.0, 0.0, 0.0, 0.0});
  check_torch(grad_of([](const rg::Tensor& x) { return rg::clamp_min(x, 0.0); }),
              {0.0, 0.0, 1.0, 1.0, 1.0, 1.0});
  check_torch(grad_of([](const rg::Tensor& x) { return rg::clamp_max(x, 1.0); }),
              {1.0, 1.0, 1.0, 0.0, 0.0, 0.0});
  check_torch(grad_of([](const rg::Tensor& x) { return rg::relu(x); }),
              {0.0, 0.0, 1.0, 1.0, 1.0, 1.0});
  // NaN passes no gradient (torch: NaN > min is false)
  rg::Tensor nan = leaf64({kNaN, kNaN}, {2});
  rg::cat({rg::clamp_min(nan.slice(0, 0, 1), 0.0), rg::clamp(nan.slice(0, 1, 2), 0.0, 1.0)})
      .sum()
      .backward();
  check_torch(nan.grad(), {0.0, 0.0});
  // Off the bounds clamp is differentiable: float64 gradchecks on both sides of each bound
  grad_ok("clamp off its bounds", [](const V& in) { return rg::clamp(in[0], 0.0, 1.0); },
          {leaf64({-0.5, 0.2, 0.8, 1.4}, {4})});
  grad_ok("clamp_min off its bound", [](const V& in) { return rg::clamp_min(in[0], 0.0); },
          {leaf64({-0.5, 0.2, 1.4}, {3})});
  grad_ok("clamp_max off its bound", [](const V& in) { return rg::clamp_max(in[0], 1.0); },
          {leaf64({-0.5, 0.8, 1.4}, {3})});
}

TEST_CASE("torch parity: max/min along a dim give (values, indices), the gradient to the index") {
  // v = [[1, 3, 3, 0], [2, 2, 2, 2], [nan, 1, nan, 5]]
  auto v_leaf = [] {
    return leaf64({1.0, 3.0, 3.0, 0.0, 2.0, 2.0, 2.0, 2.0, kNaN, 1.0, kNaN, 5.0}, {3, 4});
  };
  SUBCASE("max(1): the first of tied maxima, the first NaN") {
    rg::Tensor v = v_leaf();
    auto [values, indices] = v.max(1);
    check_torch(values, {3.0, 2.0, kNaN});  // max1.values
    CHECK(indices.dtype() == rg::kInt64);
    CHECK(indices.tolist<int64_t>() == std::vector<int64_t>{1, 0, 0});  // max1.indices
    values.backward(f64({1.0, 2.0, 3.0}));
    check_torch(v.grad(), {0.0, 1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0});
  }
  SUBCASE("min(1)") {
    rg::Tensor v = v_leaf();
    rg::ValuesIndices r = rg::min(v, 1);
    check_torch(r.values, {0.0, 2.0, kNaN});
    CHECK(r.indices.tolist<int64_t>() == std::vector<int64_t>{3, 0, 0});
    r.values.backward(f64({1.0, 2.0, 3.0}));
    check_torch(v.grad(), {0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0});
  }
  SUBCASE("max(0, keepdim)") {
    rg::Tensor v = v_leaf();
    rg::ValuesIndices r = rg::max(v, 0, /*keepdim=*/true);
    CHECK_SHAPE(r.values, {1, 4});
    CHECK_SHAPE(r.indices, {1, 4});
    check_torch(r.values, {kNaN, 3.0, kNaN, 5.0});
    CHECK(r.indices.tolist<int64_t>() == std::vector<int64_t>{2, 0, 2, 2});
    r.values.backward(f64({1.0, 2.0, 3.0, 4.0}, {1, 4}));
    check_torch(v.grad(), {0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 3.0, 4.0});
  }
  SUBCASE("amax keeps its even split among ties") {
    rg::Tensor v = v_leaf();
    rg::amax(v.slice(0, 0, 2), {1}).backward(f64({1.0, 2.0}));
    check_torch(v.grad(), {0.0, 0.5, 0.5, 0.0, 0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0});
  }
  SUBCASE("0-d input, errors") {
    rg::ValuesIndices r = rg::max(rg::full({}, 5.0, {.dtype = rg::kFloat64}), 0);
    CHECK(r.values.dim() == 0);
    CHECK(r.values.item() == 5.0);
    CHECK(r.indices.item() == 0);
    CHECK_CONTAINS(test::error_of([] { rg::max(rg::zeros({2, 0}), 1); }), "non-empty");
    CHECK_CONTAINS(test::error_of([] { rg::min(rg::zeros({2, 3}), 2); }), "dim");
  }
  // float64 gradchecks (no ties: the gradient is then the derivative)
  grad_ok("max(x, 1).values", [](const V& in) { return rg::max(in[0], 1).values; },
          {leaf64({0.1, 0.9, -0.3, 0.4, -0.8, 0.2}, {2, 3})});
  grad_ok("min(x, 0, keepdim).values",
          [](const V& in) { return in[0].min(0, true).values; },
          {leaf64({0.1, 0.9, -0.3, 0.4, -0.8, 0.2}, {2, 3})});
}

TEST_CASE("torch parity: gather and scatter_add take an index smaller than the input") {
  // x = arange(36)·0.5 − 3, (3, 4, 3); the index (2, 3, 2) along dim 1 reads x[:2, :, :2]
  rg::Tensor x = ramp({3, 4, 3}, 0.5, -3.0).requires_grad_();
  rg::Tensor idx = i64({3, 0, 1, 1, 2, 2, 0, 3, 3, 3, 1, 0}, {2, 3, 2});
  rg::Tensor y = rg::gather(x, 1, idx);
  CHECK_SHAPE(y, {2, 3, 2});
  check_torch(y, {1.5, -2.5, -1.5, -1.0, 0.0, 0.5, 3.0, 8.0, 7.5, 8.0, 4.5, 3.5});  // gather.out
  y.backward(ramp({2, 3, 2}, 1.0, 1.0));
  check_torch(x.grad(), {0.0, 2.0, 0.0, 3.0, 4.0,  0.0, 5.0, 6.0, 0.0, 1.0, 0.0, 0.0,
                         7.0, 12.0, 0.0, 11.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0, 18.0, 0.0,
                         0.0, 0.0, 0.0, 0.0, 0.0,  0.0, 0.0, 0.0, 0.0, 0.0, 0.0,  0.0});

  rg::Tensor base = rg::zeros({3, 4, 3}, {.dtype = rg::kFloat64, .requires_grad = true});
  rg::Tensor src = ramp({2, 2, 2}, 1.0, 1.0).requires_grad_();
  rg::Tensor sidx = i64({3, 0, 1, 1, 0, 3, 3, 3}, {2, 2, 2});
  rg::Tensor s = rg::scatter_add(base, 1, sidx, src);
  check_torch(s, {0.0, 2.0, 0.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0, 1.0,  0.0, 0.0,
                  5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0, 14.0, 0.0,
                  0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,  0.0, 0.0});  // scatter_add.out
  s.backward(ramp({3, 4, 3}, 0.25, 0.0));
  check_torch(base.grad(), ramp({3, 4, 3}, 0.25, 0.0).tolist<double>());
  check_torch(src.grad(), {2.25, 0.25, 0.75, 1.0, 3.0, 5.5, 5.25, 5.5});

  // Still refused: an index larger than the input outside dim, or of another rank
  CHECK_CONTAINS(test::error_of([&] { rg::gather(x, 1, i64({0, 0, 0, 0}, {4, 1, 1})); }),
                 "expected an index with the input's rank and at most its size on every dim but "
                 "dim 1, got [4, 1, 1] for input [3, 4, 3]");
  CHECK_CONTAINS(test::error_of([&] { rg::gather(x, 1, i64({0, 0}, {2, 1})); }), "got [2, 1]");
  // float64 gradchecks of both (the op table also has them on every backend)
  grad_ok("gather, smaller index", [idx](const V& in) { return rg::gather(in[0], 1, idx); },
          {ramp({3, 4, 3}, 0.1, -1.0).requires_grad_()});
  grad_ok("scatter_add, smaller index",
          [sidx](const V& in) { return rg::scatter_add(in[0], 1, sidx, in[1]); },
          {ramp({3, 4, 3}, 0.1, -1.0).requires_grad_(), ramp({2, 2, 2}, 0.3, 0.2).requires_grad_()});
}

TEST_CASE("torch parity: Embedding returns the stored padding row and gives it no gradient") {
  rg::nn::Embedding emb(5, 3, /*padding_idx=*/1);
  emb.to(rg::kFloat64);
  emb.load_state_dict({{"weight", ramp({5, 3}, 0.1, -0.7)}});  // a non-zero padding row
  rg::Tensor out = emb(i64({1, 3, 1, 4}, {2, 2}));
  // emb.out (before: zeros where the index is 1)
  check_torch(out, {-0.3999999999999999, -0.29999999999999993, -0.19999999999999996,
                    0.20000000000000007, 0.30000000000000004, 0.40000000000000013,
                    -0.3999999999999999, -0.29999999999999993, -0.19999999999999996,
                    0.5000000000000002, 0.6000000000000001, 0.7000000000000002});
  out.backward(ramp({2, 2, 3}, 1.0, 1.0));
  check_torch(emb.weight.grad(),
              {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0, 5.0, 6.0, 10.0, 11.0, 12.0});
  // A fresh Embedding still starts with a zero padding row (torch's init).
  rg::nn::Embedding fresh(4, 2, /*padding_idx=*/-1);
  test::check_close(fresh.weight[3], {0.0, 0.0}, 0);
}

TEST_CASE("torch parity: AdamW(params, {.lr}) decays by AdamW's default 0.01") {
  rg::Tensor p = leaf64({1.0, -2.0, 0.5}, {3});
  rg::optim::AdamW opt({p}, {.lr = 0.1});  // torch.optim.AdamW([p], lr=0.1)
  CHECK(opt.param_groups()[0].weight_decay == 0.01);
  const std::vector<std::vector<double>> torch_p = {
      {0.899000001, -1.8980000001, 0.4995},  // adamw.p1 .. p3
      {0.7993083033773353, -1.7962322174525622, 0.5734138316565967},
      {0.7022582873540917, -1.6947909632997784, 0.5093521007928673}};
  rg::Tensor w = f64({1.0, 2.0, 3.0});
  for (const auto& want : torch_p) {
    opt.zero_grad();
    rg::sum(rg::pow(p - 0.5, 2.0) * w).backward();
    opt.step();
    check_torch(p, want, 1e-14);
  }
  // The options struct of each optimizer has its own defaults; AdamOptions passed to
  // AdamW is taken as written (code from before AdamWOptions keeps its meaning).
  CHECK(rg::optim::AdamWOptions{}.weight_decay == 0.01);
  CHECK(rg::optim::AdamOptions{}.weight_decay == 0.0);
  rg::optim::Adam adam({p}, {.lr = 0.1});
  CHECK(adam.param_groups()[0].weight_decay == 0.0);
  rg::optim::AdamW as_written({p}, rg::optim::AdamOptions{.lr = 0.1});
  CHECK(as_written.param_groups()[0].weight_decay == 0.0);
  using Groups = std::vector<std::pair<std::vector<rg::Tensor>, rg::optim::GroupOptions>>;
  rg::optim::AdamW groups(Groups{{{p}, {}}}, {.lr = 0.1, .beta2 = 0.99});
  CHECK(groups.param_groups()[0].weight_decay == 0.01);
}
