// test_optim.cpp — SGD, Adam and AdamW stepped on a tiny quadratic and compared
// with PyTorch's documented algorithms re-implemented here in double precision;
// parameter groups, skipped parameters, amsgrad/maximize, LR schedules, gradient
// clipping, and one small end-to-end training run. (Saving and loading the optimizer's
// state: test_optim_state.cpp.)
#include <doctest/doctest.h>
#include <ringgrad/ringgrad.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "optim_quadratic.h"
#include "test_helpers.h"

namespace rg = ringgrad;
namespace optim = ringgrad::optim;
namespace fs = std::filesystem;
using test::check_close;
using test::error_of;
using test::f64;
using test::leaf_of;
using test::values;
using Vec = std::vector<double>;
using optim_test::group;
using optim_test::kInit1;
using optim_test::kInit2;
using optim_test::quad_grad;
using optim_test::set_quad_grad;
using GroupList = std::vector<std::pair<std::vector<rg::Tensor>, optim::GroupOptions>>;

namespace {


// torch.optim.SGD, per element (buf empty until the first step).
struct SgdRef {
  optim::SGDOptions o;
  Vec p, buf;
};

// torch.optim.Adam / AdamW, per element.
struct AdamRef {
  optim::AdamOptions o;
  bool decoupled;
  Vec p, m, v;
  int t = 0;
  void step(double lr, double wd, size_t offset) {
    Vec g = quad_grad(p, offset);
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double gi = g[i];
      if (decoupled)
        p[i] -= lr * wd * p[i];
      else
        gi += wd * p[i];
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * gi;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * gi * gi;
      double m_hat = m[i] / (1 - std::pow(o.beta1, t));
      double v_hat = v[i] / (1 - std::pow(o.beta2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
};

// One torch.optim.SGD step: d = g + wd·p; buf = d at first, else μ·buf + (1−τ)·d;
// d = nesterov ? d + μ·buf : buf; p -= lr·d.
void sgd_ref_step(SgdRef& r, double lr, double wd, size_t offset) {
  bool first = r.buf.empty();
  if (first) r.buf.assign(r.p.size(), 0.0);
  Vec g = quad_grad(r.p, offset);
  for (size_t i = 0; i < r.p.size(); ++i) {
    double d = g[i] + wd * r.p[i];
    if (r.o.momentum != 0) {
      r.buf[i] = first ? d : r.o.momentum * r.buf[i] + (1 - r.o.dampening) * d;
      d = r.o.nesterov ? d + r.o.momentum * r.buf[i] : r.buf[i];
    }
    r.p[i] -= lr * d;
  }
}

// Steps `opt` over two parameters on the quadratic, `refs` alongside, comparing each step.
template <typename Opt, typename StepRef>
void compare_steps(Opt& opt, rg::Tensor& p1, rg::Tensor& p2, StepRef step_ref, int steps = 5) {
  for (int s = 0; s < steps; ++s) {
    set_quad_grad(p1, 0);
    set_quad_grad(p2, 3);
    opt.step();
    auto [want1, want2] = step_ref();
    CAPTURE(s);
    check_close(p1, want1, 1e-9);
    check_close(p2, want2, 1e-9);
  }
  CHECK(opt.steps() == steps);
}

void check_sgd(optim::SGDOptions o) {
  rg::Tensor p1 = leaf_of(kInit1, {3}), p2 = leaf_of(kInit2, {2});
  optim::SGD opt({p1, p2}, o);
  SgdRef r1{o, kInit1, {}}, r2{o, kInit2, {}};
  compare_steps(opt, p1, p2, [&] {
    sgd_ref_step(r1, o.lr, o.weight_decay, 0);
    sgd_ref_step(r2, o.lr, o.weight_decay, 3);
    return std::pair{r1.p, r2.p};
  });
}

template <typename Opt>
void check_adam(optim::AdamOptions o, bool decoupled) {
  rg::Tensor p1 = leaf_of(kInit1, {3}), p2 = leaf_of(kInit2, {2});
  Opt opt({p1, p2}, o);
  AdamRef r1{o, decoupled, kInit1, {}, {}}, r2{o, decoupled, kInit2, {}, {}};
  compare_steps(opt, p1, p2, [&] {
    r1.step(o.lr, o.weight_decay, 0);
    r2.step(o.lr, o.weight_decay, 3);
    return std::pair{r1.p, r2.p};
  });
}

}  // namespace

// ---------------------------------------------------------------- SGD

TEST_CASE("optim: SGD matches torch.optim.SGD") {
  SUBCASE("plain") { check_sgd({.lr = 0.1}); }
  SUBCASE("momentum and dampening") { check_sgd({.lr = 0.05, .momentum = 0.9, .dampening = 0.3}); }
  SUBCASE("nesterov") { check_sgd({.lr = 0.05, .momentum = 0.8, .nesterov = true}); }
  SUBCASE("weight decay") { check_sgd({.lr = 0.1, .weight_decay = 0.2}); }
  SUBCASE("weight decay with momentum") {
    check_sgd({.lr = 0.1, .momentum = 0.5, .weight_decay = 0.05});
  }
  CHECK_CONTAINS(error_of([] { optim::SGD bad({leaf_of({1}, {1})}, {.nesterov = true}); }),
                 "nesterov");
}

// ---------------------------------------------------------------- Adam / AdamW

TEST_CASE("optim: Adam matches torch.optim.Adam, bias correction included") {
  SUBCASE("defaults but lr") { check_adam<optim::Adam>({.lr = 0.1}, false); }
  SUBCASE("betas and a large eps (where eps sits matters)") {
    check_adam<optim::Adam>({.lr = 0.05, .beta1 = 0.8, .beta2 = 0.9, .eps = 0.1}, false);
  }
  SUBCASE("weight decay is L2 added to the gradient") {
    check_adam<optim::Adam>({.lr = 0.1, .weight_decay = 0.3}, false);
  }
  rg::Tensor p = leaf_of({1}, {1});
  optim::Adam a({p});
  CHECK(a.name() == "Adam");
  CHECK_CONTAINS(error_of([&] { optim::Adam bad({p}, {.beta1 = 1.0}); }), "betas");
}

TEST_CASE("optim: AdamW decays the weights decoupled from the gradient") {
  SUBCASE("explicit weight decay") {
    check_adam<optim::AdamW>({.lr = 0.1, .weight_decay = 0.3}, true);
  }
  SUBCASE("AdamW's default weight decay is 0.01") {
    rg::Tensor p = leaf_of({1}, {1});
    optim::AdamW opt({p});
    CHECK(opt.param_groups()[0].weight_decay == 0.01);
    CHECK(opt.name() == "AdamW");
    check_adam<optim::AdamW>({.lr = 0.1, .weight_decay = 0.01}, true);
  }
  SUBCASE("the decay uses the step's lr") {
    // With g = 0 from the start m = v = 0, so the update is the decay alone: p ← p·(1 − lr·wd).
    rg::Tensor p = leaf_of({2.0, -4.0}, {2});
    optim::AdamW opt({p}, {.lr = 0.1, .weight_decay = 0.5});
    for (int s = 0; s < 3; ++s) {
      p.set_grad(f64({0.0, 0.0}));
      opt.step();
    }
    check_close(p, {2.0 * std::pow(0.95, 3), -4.0 * std::pow(0.95, 3)}, 1e-12);
  }
}

// ---------------------------------------------------------------- groups, skipping, zero_grad

TEST_CASE("optim: parameter groups carry their own lr and weight decay") {
  rg::Tensor p1 = leaf_of(kInit1, {3}), p2 = leaf_of(kInit2, {2});
  GroupList groups{{{p1}, group(0.5, {})}, {{p2}, group({}, 0.2)}};
  optim::SGD opt(groups, {.lr = 0.1, .weight_decay = 0.0});
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.param_groups()[0].lr == 0.5);
  CHECK(opt.param_groups()[0].weight_decay == 0.0);
  CHECK(opt.param_groups()[1].lr == 0.1);
  CHECK(opt.param_groups()[1].weight_decay == 0.2);
  CHECK(opt.param_groups()[0].initial_lr == 0.5);
  SgdRef r1{{}, kInit1, {}}, r2{{}, kInit2, {}};
  compare_steps(opt, p1, p2, [&] {
    sgd_ref_step(r1, 0.5, 0.0, 0);
    sgd_ref_step(r2, 0.1, 0.2, 3);
    return std::pair{r1.p, r2.p};
  });

  rg::Tensor q1 = leaf_of(kInit1, {3}), q2 = leaf_of(kInit2, {2});
  GroupList agroups{{{q1}, group(0.05, 0.0)}, {{q2}, group({}, {})}};
  optim::AdamW adamw(agroups, {.lr = 0.1, .weight_decay = 0.4});
  AdamRef a1{{}, true, kInit1, {}, {}}, a2{{}, true, kInit2, {}, {}};
  compare_steps(adamw, q1, q2, [&] {
    a1.step(0.05, 0.0, 0);
    a2.step(0.1, 0.4, 3);
    return std::pair{a1.p, a2.p};
  });
}

TEST_CASE("optim: a parameter without a gradient is skipped and gets no state") {
  rg::Tensor p1 = leaf_of(kInit1, {3}), p2 = leaf_of(kInit2, {2});
  optim::Adam adam({p1, p2}, {.lr = 0.1});
  set_quad_grad(p1);
  adam.step();
  CHECK(values(p1) != kInit1);
  CHECK(values(p2) == kInit2);
  // A checkpoint writes its state as the initial one (zero moments, step 0: the same as
  // none), so that every parameter's state is in the file once a step has been taken.
  std::map<std::string, std::string> meta;
  for (auto& [key, t] : adam.state_dict(&meta)) {
    if (key.rfind("state.0.1.", 0) == 0) CHECK_MESSAGE(values(t) == Vec(t.numel(), 0.0), key);
  }
  // Its own step count starts when it first gets a gradient (bias correction of step 1).
  set_quad_grad(p1);
  set_quad_grad(p2, 3);
  adam.step();
  AdamRef r2{{}, false, kInit2, {}, {}};
  r2.step(0.1, 0.0, 3);
  check_close(p2, r2.p, 1e-9);

  rg::Tensor q1 = leaf_of(kInit1, {3}), q2 = leaf_of(kInit2, {2});
  optim::SGD sgd({q1, q2}, {.lr = 0.1, .momentum = 0.9});
  set_quad_grad(q2, 3);
  sgd.step();
  CHECK(values(q1) == kInit1);
  for (auto& [key, t] : sgd.state_dict(nullptr))
    CHECK_MESSAGE(key.rfind("state.0.1.", 0) == 0, key);
}

TEST_CASE("optim: zero_grad clears the gradients") {
  rg::Tensor p1 = leaf_of(kInit1, {3}), p2 = leaf_of(kInit2, {2});
  optim::SGD opt({p1, p2});
  set_quad_grad(p1);
  set_quad_grad(p2);
  opt.zero_grad();
  CHECK_FALSE(p1.grad().defined());
  CHECK_FALSE(p2.grad().defined());
  opt.step();  // nothing to do
  CHECK(values(p1) == kInit1);
}

// ---------------------------------------------------------------- amsgrad, maximize

// Golden values: PyTorch 2.15.0, float64, p = [1, -2, 0.5, 3] after 6 steps on quad_grad:
//
//   import torch
//   torch.set_default_dtype(torch.float64)
//   def grad(p):  # quad_grad above: a_i (p_i - c_i)
//       i = torch.arange(p.numel(), dtype=torch.float64)
//       return (0.5 + 0.7 * (i % 4)) * (p.detach() - (0.3 * i - 0.5))
//   def run(name, cls, steps=6, **kw):
//       p = torch.tensor([1.0, -2.0, 0.5, 3.0], requires_grad=True)
//       o = cls([p], **kw)
//       for _ in range(steps):
//           p.grad = grad(p); o.step()
//       print(name, p.tolist(), {k: v.tolist() for k, v in o.state[p].items()})
//   from torch.optim import Adam, AdamW
//   run("adam_amsgrad", Adam, lr=0.1, betas=(0.9, 0.5), amsgrad=True)
//   run("adam_plain_same", Adam, lr=0.1, betas=(0.9, 0.5))
//   run("adam_amsgrad_maximize_wd", Adam, lr=0.1, betas=(0.9, 0.5), amsgrad=True, maximize=True,
//       weight_decay=0.1)
//   run("adam_maximize_wd", Adam, lr=0.1, maximize=True, weight_decay=0.1)
//   run("adamw_amsgrad_wd", AdamW, lr=0.1, betas=(0.9, 0.5), amsgrad=True, weight_decay=0.1)
//   run("adamw_maximize", AdamW, lr=0.1, maximize=True, weight_decay=0.1)
namespace {
// p = [1, -2, 0.5, 3] after six steps of make(p) on quad_grad; `state`: its state_dict.
template <typename Make>
rg::Tensor six_steps(Make make, std::map<std::string, rg::Tensor>* state = nullptr) {
  rg::Tensor p = leaf_of({1.0, -2.0, 0.5, 3.0}, {4});
  auto opt = make(p);
  for (int s = 0; s < 6; ++s) {
    set_quad_grad(p);
    opt.step();
  }
  if (state)
    for (auto& [k, t] : opt.state_dict(nullptr)) (*state)[k] = t;
  return p;
}
}  // namespace

TEST_CASE("optim: Adam and AdamW amsgrad and maximize match PyTorch") {
  std::map<std::string, rg::Tensor> by_name;
  check_close(six_steps([](rg::Tensor p) { return optim::Adam({p}, {.lr = 0.1, .beta2 = 0.5, .amsgrad = true}); }, &by_name),
              {0.40091794148564935, -1.3979658362403842, 0.015226552187752783, 2.3937007381079765}, 1e-12);
  // amsgrad changes the result: without it, torch gives
  check_close(six_steps([](rg::Tensor p) { return optim::Adam({p}, {.lr = 0.1, .beta2 = 0.5}); }),
              {0.3723347920791036, -1.3777964819089128, -0.12350388291520263, 2.3854550965716936}, 1e-12);
  // the state holds max_exp_avg_sq (torch's name), here above exp_avg_sq
  REQUIRE(by_name.count("state.0.0.max_exp_avg_sq"));
  check_close(by_name["state.0.0.max_exp_avg_sq"],
              {0.40376210533531987, 3.46502069474279, 0.30685000142499996, 35.73479498302287}, 1e-12);
  check_close(by_name["state.0.0.exp_avg_sq"],
              {0.29410813983339973, 2.7446351396448736, 0.03586948205951856, 31.891307400962308}, 1e-12);

  check_close(six_steps([](rg::Tensor p) { return optim::Adam({p}, {.lr = 0.1, .beta2 = 0.5, .weight_decay = 0.1, .amsgrad = true, .maximize = true}); }),
              {1.5822154785326423, -2.583575416005063, 1.0486020017784936, 3.588190876457899}, 1e-12);
  check_close(six_steps([](rg::Tensor p) { return optim::Adam({p}, {.lr = 0.1, .weight_decay = 0.1, .maximize = true}); }),
              {1.60296802335242, -2.6028115731639097, 1.1021819455177246, 3.6021878572616437}, 1e-12);
  check_close(six_steps([](rg::Tensor p) { return optim::AdamW({p}, {.lr = 0.1, .beta2 = 0.5, .weight_decay = 0.1, .amsgrad = true}); }),
              {0.35865480419188916, -1.2983206682020947, 0.0067310231004517815, 2.235548524055674}, 1e-12);
  check_close(six_steps([](rg::Tensor p) { return optim::AdamW({p}, {.lr = 0.1, .weight_decay = 0.1, .maximize = true}); }),
              {1.5295459390533457, -2.470522715848478, 1.058491344913272, 3.4112517537158875}, 1e-12);
}

TEST_CASE("optim: amsgrad's max_exp_avg_sq is saved, loaded and required, and a resume equals the straight run") {
  auto make = [](rg::Tensor p) { return optim::AdamW({p}, {.lr = 0.1, .beta2 = 0.5, .amsgrad = true}); };
  rg::Tensor a = leaf_of({1.0, -2.0, 0.5}, {3}), b = leaf_of({1.0, -2.0, 0.5}, {3});
  optim::AdamW straight = make(a), first = make(b);
  for (int s = 0; s < 3; ++s) {
    set_quad_grad(a);
    straight.step();
    set_quad_grad(b);
    first.step();
  }
  std::map<std::string, std::string> meta;
  rg::NamedTensors state = first.state_dict(&meta);
  CHECK(state.size() == 4);  // exp_avg, exp_avg_sq, max_exp_avg_sq, step
  rg::Tensor c = leaf_of(values(b), {3});
  optim::AdamW resumed = make(c);
  resumed.load_state_dict(state, meta);
  for (int s = 0; s < 3; ++s) {
    set_quad_grad(a);
    straight.step();
    set_quad_grad(c);
    resumed.step();
  }
  CHECK(values(a) == values(c));

  // A checkpoint without it (plain AdamW) does not load into amsgrad, nor the reverse.
  rg::NamedTensors without;
  for (auto& [k, t] : state)
    if (k.find("max_exp_avg_sq") == std::string::npos) without.emplace_back(k, t);
  CHECK_CONTAINS(error_of([&] { resumed.load_state_dict(without, meta); }),
                 "expected state.0.0.max_exp_avg_sq beside state.0.0.exp_avg");
  optim::AdamW plain({c}, {.lr = 0.1});
  CHECK_CONTAINS(error_of([&] { plain.load_state_dict(state, meta); }), "got state.0.0.max_exp_avg_sq");
}

// ---------------------------------------------------------------- schedules

TEST_CASE("optim: StepLR multiplies by gamma every step_size steps") {
  rg::Tensor p = leaf_of({1}, {1}), q = leaf_of({1}, {1});
  GroupList groups{{{p}, group({}, {})}, {{q}, group(0.4, {})}};
  optim::SGD opt(groups, {.lr = 0.2});
  optim::StepLR sched(opt, /*step_size=*/2, /*gamma=*/0.5);
  Vec want{1, 1, 0.5, 0.5, 0.25, 0.25, 0.125};
  for (size_t s = 0; s < want.size(); ++s) CHECK(sched.factor(static_cast<int64_t>(s)) == want[s]);
  CHECK(opt.param_groups()[0].lr == 0.2);
  for (int64_t s = 1; s <= 6; ++s) {
    sched.step();
    CHECK(sched.steps() == s);
    CHECK(opt.param_groups()[0].lr == doctest::Approx(0.2 * want[s]).epsilon(1e-12));
    CHECK(opt.param_groups()[1].lr == doctest::Approx(0.4 * want[s]).epsilon(1e-12));
  }
  CHECK_CONTAINS(error_of([&] { optim::StepLR bad(opt, 0); }), "step_size");
}

TEST_CASE("optim: WarmupCosine warms up linearly then follows a cosine to min_factor") {
  rg::Tensor p = leaf_of({1}, {1});
  optim::Adam opt({p}, {.lr = 0.2});
  optim::WarmupCosine sched(opt, {.warmup_steps = 4, .total_steps = 12, .min_factor = 0.1});
  CHECK(opt.param_groups()[0].lr == 0.0);  // step 0 of the warmup
  CHECK(sched.factor(0) == 0.0);
  for (int64_t s = 1; s <= 16; ++s) {
    sched.step();
    double want;
    if (s < 4)
      want = static_cast<double>(s) / 4;
    else if (s >= 12)
      want = 0.1;
    else
      want = 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * static_cast<double>(s - 4) / 8));
    CAPTURE(s);
    CHECK(sched.factor(s) == doctest::Approx(want).epsilon(1e-12));
    CHECK(opt.param_groups()[0].lr == doctest::Approx(0.2 * want).epsilon(1e-12));
  }
  CHECK(sched.factor(4) == doctest::Approx(1.0).epsilon(1e-15));   // initial lr at warmup end
  CHECK(sched.factor(8) == doctest::Approx(0.55).epsilon(1e-12));  // halfway down the cosine
  CHECK(sched.factor(12) == doctest::Approx(0.1).epsilon(1e-12));
  CHECK(sched.factor(1000) == doctest::Approx(0.1).epsilon(1e-12));
  CHECK(opt.param_groups()[0].initial_lr == 0.2);

  optim::Adam opt2({p}, {.lr = 0.2});
  optim::WarmupCosine no_warmup(opt2, {.warmup_steps = 0, .total_steps = 10});
  CHECK(opt2.param_groups()[0].lr == 0.2);
  CHECK(no_warmup.factor(0) == 1.0);
  CHECK(no_warmup.factor(10) == doctest::Approx(0.0));
  CHECK_CONTAINS(
      error_of([&] { optim::WarmupCosine bad(opt2, {.warmup_steps = 5, .total_steps = 5}); }),
      "warmup_steps");
}

// ---------------------------------------------------------------- clipping

TEST_CASE("optim: clip_grad_norm returns the norm before clipping and scales to max_norm") {
  rg::Tensor p1 = leaf_of({0, 0}, {2}), p2 = leaf_of({0}, {1}), p3 = leaf_of({0}, {1});
  p1.set_grad(f64({3, 4}));
  p2.set_grad(f64({12}));  // p3 has no gradient and is ignored
  double norm = optim::clip_grad_norm({p1, p2, p3}, 6.5);
  CHECK(norm == doctest::Approx(13.0).epsilon(1e-12));
  Vec g1 = values(p1.grad()), g2 = values(p2.grad());
  double after = std::sqrt(g1[0] * g1[0] + g1[1] * g1[1] + g2[0] * g2[0]);
  CHECK(after == doctest::Approx(6.5).epsilon(1e-6));
  CHECK(g1[1] / g1[0] == doctest::Approx(4.0 / 3.0).epsilon(1e-12));  // direction kept
  CHECK_FALSE(p3.grad().defined());

  // Under the limit: nothing changes.
  p1.set_grad(f64({0.3, 0.4}));
  CHECK(optim::clip_grad_norm({p1}, 1.0) == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(values(p1.grad()) == Vec{0.3, 0.4});

  // float32 gradients too.
  rg::Tensor w = rg::zeros({4});
  w.requires_grad_();
  w.set_grad(test::f32({1, 1, 1, 1}));
  CHECK(optim::clip_grad_norm({w}, 1.0) == doctest::Approx(2.0).epsilon(1e-7));
  check_close(w.grad(), {0.5, 0.5, 0.5, 0.5}, 1e-6);
}

// Golden values: PyTorch 2.15.0, float64 (c has no gradient):
//
//   import torch
//   torch.set_default_dtype(torch.float64)
//   def run(norm_type, max_norm=5.0):
//       a = torch.zeros(3, requires_grad=True); b = torch.zeros(2, requires_grad=True)
//       c = torch.zeros(1, requires_grad=True)
//       a.grad = torch.tensor([3.0, -4.0, 0.5]); b.grad = torch.tensor([12.0, -1.0])
//       n = torch.nn.utils.clip_grad_norm_([a, b, c], max_norm, norm_type=norm_type)
//       print(norm_type, repr(n.item()), a.grad.tolist(), b.grad.tolist())
//   for t in [2.0, float("inf"), 1.0, 3.0, 0.5]: run(t)
//   run(3.0, max_norm=100.0)
//   a = torch.zeros(2, requires_grad=True); a.grad = torch.tensor([1.0, float("nan")])
//   torch.nn.utils.clip_grad_norm_([a], 1.0, error_if_nonfinite=True)  # RuntimeError: The total
//       # norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be clipped...
//   torch.nn.utils.clip_grad_norm_([a], 1.0)     # nan; a.grad [nan, nan]
//   a.grad = torch.tensor([1.0, float("inf")])
//   torch.nn.utils.clip_grad_norm_([a], 1.0, norm_type=float("inf"))  # inf; a.grad [0.0, nan]
TEST_CASE("optim: clip_grad_norm with norm_type inf, 1, 3, 0.5 and error_if_nonfinite matches PyTorch") {
  struct Case {
    double norm_type, max_norm, norm;
    Vec a, b;
  };
  const std::vector<Case> cases{
      {2.0, 5.0, 13.047988350699889, {1.1496024097533009, -1.5328032130044011, 0.19160040162555014},
       {4.598409639013203, -0.3832008032511003}},
      {INFINITY, 5.0, 12.0, {1.249999895833342, -1.6666665277777895, 0.20833331597222368},
       {4.999999583333368, -0.41666663194444736}},
      {1.0, 5.0, 20.5, {0.7317072813801325, -0.9756097085068434, 0.12195121356335542},
       {2.92682912552053, -0.24390242712671084}},
      {3.0, 5.0, 12.209571007815727, {1.2285442921666734, -1.638059056222231, 0.20475738202777888},
       {4.9141771686666935, -0.40951476405555776}},
      {0.5, 5.0, 79.26802445170858, {0.18923140717234407, -0.25230854289645877, 0.031538567862057346},
       {0.7569256286893763, -0.06307713572411469}},
      {3.0, 100.0, 12.209571007815727, {3.0, -4.0, 0.5}, {12.0, -1.0}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.norm_type);
    rg::Tensor a = leaf_of({0, 0, 0}, {3}), b = leaf_of({0, 0}, {2}), none = leaf_of({0}, {1});
    a.set_grad(f64({3.0, -4.0, 0.5}));
    b.set_grad(f64({12.0, -1.0}));
    const double norm = optim::clip_grad_norm({a, b, none}, c.max_norm, {.norm_type = c.norm_type});
    CHECK(norm == doctest::Approx(c.norm).epsilon(1e-14));
    check_close(a.grad(), c.a, 1e-14);
    check_close(b.grad(), c.b, 1e-14);
    CHECK_FALSE(none.grad().defined());
  }
  rg::Tensor a = leaf_of({0, 0}, {2});
  a.set_grad(f64({1.0, NAN}));
  CHECK_CONTAINS(error_of([&] { optim::clip_grad_norm({a}, 1.0, {.error_if_nonfinite = true}); }),
                 "expected a finite total norm of order 2 of the gradients, got nan");
  CHECK(std::isnan(values(a.grad())[0]) == false);  // the error changed nothing
  CHECK(std::isnan(optim::clip_grad_norm({a}, 1.0)));
  CHECK(std::isnan(values(a.grad())[0]));  // torch: [nan, nan]
  a.set_grad(f64({1.0, INFINITY}));
  CHECK(optim::clip_grad_norm({a}, 1.0, {.norm_type = INFINITY}) == INFINITY);
  CHECK(values(a.grad())[0] == 0.0);  // torch: [0.0, nan]
  CHECK(std::isnan(values(a.grad())[1]));
  a.set_grad(f64({1.0, INFINITY}));
  CHECK_CONTAINS(error_of([&] {
                   optim::clip_grad_norm({a}, 1.0, {.norm_type = 1, .error_if_nonfinite = true});
                 }),
                 "of order 1 of the gradients, got inf");
  CHECK_CONTAINS(error_of([&] { optim::clip_grad_norm({a}, 1.0, {.norm_type = 0}); }),
                 "expected a norm_type p > 0 or INFINITY, got 0");
  CHECK_CONTAINS(error_of([&] { optim::grad_norm({a}, -INFINITY); }), "got -inf");
}

// ---------------------------------------------------------------- end to end

namespace {
struct Mlp : rg::nn::Module {
  rg::nn::Linear fc1{2, 16}, fc2{16, 2};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  rg::Tensor forward(const rg::Tensor& x) override { return fc2(rg::relu(fc1(x))); }
};
}  // namespace

TEST_CASE("optim: a 2-layer MLP learns XOR-like blobs with Adam") {
  // Four Gaussian blobs at (±1, ±1); the label is 1 where x·y > 0. Not linearly separable.
  rg::manual_seed(21);
  std::mt19937 gen(21);
  std::normal_distribution<float> noise(0.0f, 0.25f);
  const int n = 256;
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int i = 0; i < n; ++i) {
    float cx = (i & 1) ? 1.0f : -1.0f, cy = (i & 2) ? 1.0f : -1.0f;
    xs.push_back(cx + noise(gen));
    xs.push_back(cy + noise(gen));
    ys.push_back(cx * cy > 0 ? 1 : 0);
  }
  rg::Tensor x = test::f32(xs, {n, 2}), y = test::i64(ys);
  Mlp model;
  optim::Adam opt(model.parameters(), {.lr = 0.02});
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    rg::Tensor loss = rg::nn::cross_entropy(model.forward(x), y);
    loss.backward();
    opt.step();
    if (step == 0) first_loss = loss.item();
    last_loss = loss.item();
  }
  std::vector<int64_t> pred;
  {
    rg::NoGradGuard ng;
    pred = model.forward(x).argmax(1).tolist<int64_t>();
  }
  int correct = 0;
  for (int i = 0; i < n; ++i) correct += pred[i] == ys[i];
  double acc = static_cast<double>(correct) / n;
  CHECK_MESSAGE(acc > 0.95, "accuracy " << acc << ", loss " << first_loss << " -> " << last_loss);
  CHECK(last_loss < first_loss);
}
