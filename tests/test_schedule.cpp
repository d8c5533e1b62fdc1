// test_schedule.cpp — torch.optim.lr_scheduler's LambdaLR, LinearLR, CosineAnnealingLR,
// OneCycleLR, SequentialLR and ReduceLROnPlateau against the lrs PyTorch computes, and
// their state: a run checkpointed mid-schedule and resumed equals the straight one.
//
// Golden values: PyTorch 2.15.0 (float64), SGD with two groups, lr 0.1 and 0.05,
// each row the groups' lrs after construction (row 0) and after each step():
//
//   import torch
//   from torch.optim import SGD
//   from torch.optim.lr_scheduler import *
//   torch.set_default_dtype(torch.float64)
//   def opt2():
//       return SGD([{"params": [torch.zeros(1, requires_grad=True)]},
//                   {"params": [torch.zeros(1, requires_grad=True)], "lr": 0.05}], lr=0.1)
//   def run(name, make, n):
//       o = opt2(); s = make(o)
//       rows = [[g["lr"] for g in o.param_groups]]
//       for _ in range(n):
//           o.step(); s.step(); rows.append([g["lr"] for g in o.param_groups])
//       print(name, "=", "{" + ", ".join("{%r, %r}" % tuple(r) for r in rows) + "}")
//   run("lambda", lambda o: LambdaLR(o, lambda e: 0.95 ** e if e < 5 else 0.5), 8)
//   run("linear", lambda o: LinearLR(o, start_factor=0.25, end_factor=0.75, total_iters=4), 7)
//   run("linear_default", lambda o: LinearLR(o), 7)
//   run("cosine", lambda o: CosineAnnealingLR(o, T_max=6, eta_min=0.001), 14)
//   run("onecycle", lambda o: OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=10), 10)
//   run("onecycle3", lambda o: OneCycleLR(o, max_lr=1.0, total_steps=10, pct_start=0.4,
//       anneal_strategy="linear", three_phase=True, div_factor=10.0, final_div_factor=100.0), 10)
//   run("onecycle_epochs", lambda o: OneCycleLR(o, max_lr=0.4, epochs=3, steps_per_epoch=3,
//                                               pct_start=0.25), 9)
//   run("sequential", lambda o: SequentialLR(o, [LinearLR(o, start_factor=0.1, total_iters=3),
//       CosineAnnealingLR(o, T_max=5, eta_min=0.01), LambdaLR(o, lambda e: 0.5 ** e)],
//       milestones=[3, 7]), 11)
//   # cycle_momentum: SGD's group momentum (from 0: SGD gains momentum) and Adam's beta1,
//   # and the parameters those momenta moved (rows: the momenta after each step)
//   a = torch.tensor([1.0, -2.0], requires_grad=True); b = torch.tensor([0.5], requires_grad=True)
//   o = SGD([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.1)
//   s = OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=6, base_momentum=0.8, max_momentum=[0.9, 0.95])
//   for _ in range(6):
//       o.zero_grad(); ((a * a).sum() + (b * b * b).sum()).backward(); o.step(); s.step()
//   p = torch.tensor([1.0, -2.0, 3.0], requires_grad=True); o = Adam([p], lr=0.01)
//   s = OneCycleLR(o, max_lr=0.1, total_steps=10, three_phase=True, anneal_strategy="linear")
//   for _ in range(10):
//       o.zero_grad(); (p * p * torch.tensor([1.0, 2.0, 0.5])).sum().backward(); o.step(); s.step()
//   o = opt2(); s = OneCycleLR(o, max_lr=1.0, total_steps=3)
//   for _ in range(4): o.step(); s.step()   # ValueError: Tried to step 4 times. ...
//   def plateau(name, metrics, **kw):      # rows: lr0, lr1, num_bad_epochs, cooldown_counter, best
//       o = opt2(); s = ReduceLROnPlateau(o, **kw)
//       rows = []
//       for m in metrics:
//           s.step(m)
//           rows.append([g["lr"] for g in o.param_groups] + [s.num_bad_epochs, s.cooldown_counter,
//           s.best])
//       print(name, "=", "{" + ", ".join("{%r, %r, %d, %d, %r}" % tuple(r) for r in rows) + "}")
//   M = [1.0, 0.95, 0.96, 0.97, 0.5, 0.49, 0.495, 0.6, 0.7, 0.8, 0.9, 1.0, 0.2, 0.3, 0.3, 0.3]
//   plateau("plateau_min_rel", M, patience=2, cooldown=1, threshold=0.05)
//   plateau("plateau_min_abs", M, patience=1, threshold=0.02, threshold_mode="abs", factor=0.5,
//           min_lr=[0.02, 0.03])
//   plateau("plateau_max_rel", M, mode="max", patience=0, cooldown=2, factor=0.3)
//   plateau("plateau_max_abs", M, mode="max", patience=1, threshold=0.1, threshold_mode="abs",
//           eps=0.02, factor=0.5)
//   plateau("plateau_default", [1.0] * 25)
#include <doctest/doctest.h>
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "test_helpers.h"

namespace rg = ringgrad;
namespace optim = ringgrad::optim;
using test::error_of;
using Rows = std::vector<std::vector<double>>;
using GroupList = std::vector<std::pair<std::vector<rg::Tensor>, optim::GroupOptions>>;

namespace {

// torch's SGD above: two groups, lr 0.1 and 0.05.
struct TwoGroups {
  rg::Tensor a = test::leaf_of({0}, {1}), b = test::leaf_of({0}, {1});
  optim::SGD opt{GroupList{{{a}, {}}, {{b}, {.lr = 0.05}}}, {.lr = 0.1}};
};

bool close(double got, double want) {
  return std::abs(got - want) <= 1e-13 + 1e-12 * std::abs(want);
}

// Row 0 after construction, row s after s steps.
void check_rows(optim::LRSchedule& sched, optim::Optimizer& opt, const Rows& want) {
  for (size_t s = 0; s < want.size(); ++s) {
    if (s > 0) sched.step();
    CAPTURE(s);
    CHECK(sched.steps() == static_cast<int64_t>(s));
    for (size_t g = 0; g < 2; ++g) {
      CAPTURE(g);
      const double got = opt.param_groups()[g].lr;
      CHECK_MESSAGE(close(got, want[s][g]), "got " << got << ", want " << want[s][g]);
    }
  }
}

}  // namespace

TEST_CASE("schedule: LambdaLR, LinearLR and CosineAnnealingLR follow torch's lrs") {
  SUBCASE("LambdaLR") {
    TwoGroups t;
    optim::LambdaLR s(t.opt, [](int64_t e) { return e < 5 ? std::pow(0.95, double(e)) : 0.5; });
    check_rows(s, t.opt,
               {{0.1, 0.05},
                {0.095, 0.0475},
                {0.09025, 0.045125},
                {0.0857375, 0.04286875},
                {0.081450625, 0.0407253125},
                {0.05, 0.025},
                {0.05, 0.025},
                {0.05, 0.025},
                {0.05, 0.025}});
    CHECK_CONTAINS(
        error_of([&] { optim::LambdaLR bad(t.opt, std::vector<optim::LambdaLR::Lambda>(1)); }),
        "expected 2 lr_lambdas (one per group), got 1");
  }
  SUBCASE("LambdaLR per group") {
    TwoGroups t;
    optim::LambdaLR s(t.opt,
                      {[](int64_t e) { return 1.0 + double(e); }, [](int64_t) { return 2.0; }});
    check_rows(s, t.opt, {{0.1, 0.1}, {0.2, 0.1}, {0.30000000000000004, 0.1}});
  }
  SUBCASE("LinearLR") {
    TwoGroups t;
    optim::LinearLR s(t.opt, {.start_factor = 0.25, .end_factor = 0.75, .total_iters = 4});
    check_rows(s, t.opt,
               {{0.025, 0.0125},
                {0.037500000000000006, 0.018750000000000003},
                {0.05, 0.025},
                {0.0625, 0.03125},
                {0.075, 0.0375},
                {0.075, 0.0375},
                {0.075, 0.0375},
                {0.075, 0.0375}});
  }
  SUBCASE("LinearLR defaults") {
    TwoGroups t;
    optim::LinearLR s(t.opt);
    check_rows(s, t.opt,
               {{0.03333333333333333, 0.016666666666666666},
                {0.04666666666666667, 0.023333333333333334},
                {0.060000000000000005, 0.030000000000000002},
                {0.07333333333333335, 0.036666666666666674},
                {0.08666666666666668, 0.04333333333333334},
                {0.1, 0.05},
                {0.1, 0.05},
                {0.1, 0.05}});
    CHECK_CONTAINS(error_of([&] { optim::LinearLR bad(t.opt, {.start_factor = 0}); }),
                   "expected start_factor in (0, 1] and end_factor in [0, 1], got 0 and 1");
  }
  SUBCASE("CosineAnnealingLR, past T_max too") {
    TwoGroups t;
    optim::CosineAnnealingLR s(t.opt, /*T_max=*/6, /*eta_min=*/0.001);
    check_rows(s, t.opt,
               {{0.1, 0.05},
                {0.09336825748732973, 0.046717622392718754},
                {0.07525000000000001, 0.037750000000000006},
                {0.0505, 0.025500000000000002},
                {0.025750000000000012, 0.013250000000000005},
                {0.007631742512670284, 0.004282377607281252},
                {0.001, 0.001},
                {0.007631742512670284, 0.004282377607281252},
                {0.025750000000000002, 0.013250000000000001},
                {0.05050000000000004, 0.02550000000000002},
                {0.07525000000000008, 0.03775000000000004},
                {0.0933682574873298, 0.04671762239271879},
                {0.1000000000000001, 0.05000000000000005},
                {0.09336825748732981, 0.046717622392718795},
                {0.07525000000000011, 0.037750000000000054}});
    CHECK_CONTAINS(error_of([&] { optim::CosineAnnealingLR bad(t.opt, 0); }),
                   "expected T_max > 0, got 0");
  }
}

TEST_CASE("schedule: OneCycleLR's phases follow torch's lrs") {
  SUBCASE("two phases, cos, a max_lr per group") {
    TwoGroups t;
    optim::OneCycleLR s(t.opt, {.max_lr = {1.0, 0.5}, .total_steps = 10});
    check_rows(s, t.opt,
               {{0.040000000000000036, 0.020000000000000018},
                {0.52, 0.26},
                {1.0, 0.5},
                {0.9504846320134737, 0.47524231600673683},
                {0.8117456539497631, 0.40587282697488153},
                {0.6112620219362893, 0.30563101096814466},
                {0.38874197806371075, 0.19437098903185537},
                {0.18825834605023697, 0.09412917302511849},
                {0.049519367986526286, 0.024759683993263143},
                {4e-06, 2e-06},
                {0.04951936798652623, 0.024759683993263115}});
    CHECK(t.opt.param_groups()[0].initial_lr == doctest::Approx(0.04));  // torch sets initial_lr
    // torch: ValueError "Tried to step 11 times. The specified number of total steps is 10"
    CHECK_CONTAINS(error_of([&] { s.step(); }),
                   "Tried to step 11 times. The specified number of total steps is 10");
    CHECK(s.steps() == 10);
  }
  SUBCASE("three phases, linear") {
    TwoGroups t;
    optim::OneCycleLR s(t.opt, {.max_lr = {1.0},
                                .total_steps = 10,
                                .pct_start = 0.4,
                                .cos = false,
                                .div_factor = 10,
                                .final_div_factor = 100,
                                .three_phase = true});
    check_rows(s, t.opt,
               {{0.1, 0.1},
                {0.4, 0.4},
                {0.7, 0.7},
                {1.0, 1.0},
                {0.7, 0.7},
                {0.4, 0.4},
                {0.09999999999999998, 0.09999999999999998},
                {0.067, 0.067},
                {0.034, 0.034},
                {0.0010000000000000009, 0.0010000000000000009},
                {-0.032, -0.032}});
  }
  SUBCASE("epochs and steps_per_epoch") {
    TwoGroups t;
    optim::OneCycleLR s(t.opt,
                        {.max_lr = {0.4}, .epochs = 3, .steps_per_epoch = 3, .pct_start = 0.25});
    CHECK(s.total_steps() == 9);
    check_rows(s, t.opt,
               {{0.016000000000000014, 0.016000000000000014},
                {0.3633312629199899, 0.3633312629199899},
                {0.3879385724030851, 0.3879385724030851},
                {0.33724857858043644, 0.33724857858043644},
                {0.2573612170996319, 0.2573612170996319},
                {0.16527130338515608, 0.16527130338515608},
                {0.08056955938631619, 0.08056955938631619},
                {0.021274986841429828, 0.021274986841429828},
                {1.6e-06, 1.6e-06},
                {0.021274986841429807, 0.021274986841429807}});
  }
  SUBCASE("errors") {
    TwoGroups t;
    CHECK_CONTAINS(error_of([&] { optim::OneCycleLR bad(t.opt, {.max_lr = {1.0}}); }),
                   "expected total_steps > 0, or epochs > 0 and steps_per_epoch > 0");
    CHECK_CONTAINS(error_of([&] {
                     optim::OneCycleLR bad(t.opt, {.max_lr = {1, 2, 3}, .total_steps = 5});
                   }),
                   "expected one max_lr or one per group (2), got 3");
  }
}

TEST_CASE("schedule: OneCycleLR's cycle_momentum moves SGD's momentum and Adam's beta1 as torch") {
  SUBCASE("SGD, built without momentum, per-group max_momentum") {
    rg::Tensor a = test::leaf_of({1.0, -2.0}, {2}), b = test::leaf_of({0.5}, {1});
    optim::SGD opt{GroupList{{{a}, {}}, {{b}, {.lr = 0.05}}}, {.lr = 0.1}};
    optim::OneCycleLR s(opt, {.max_lr = {1.0, 0.5},
                              .total_steps = 6,
                              .base_momentum = {0.8},
                              .max_momentum = {0.9, 0.95}});
    const Rows want = {{0.9, 0.95},
                       {0.8005584586887436, 0.8008376880331154},
                       {0.8188255099070634, 0.828238264860595},
                       {0.8537365046793213, 0.8806047570189818},
                       {0.8866525935914913, 0.9299788903872369},
                       {0.9, 0.95},
                       {0.8866525935914913, 0.9299788903872369}};
    for (size_t step = 0; step < want.size(); ++step) {
      if (step > 0) {
        opt.zero_grad();
        ((a * a).sum() + (b * b * b).sum()).backward();
        opt.step();
        s.step();
      }
      CAPTURE(step);
      CHECK(close(opt.param_groups()[0].momentum, want[step][0]));
      CHECK(close(opt.param_groups()[1].momentum, want[step][1]));
    }
    test::check_close(a.detach(), {0.9861435248199382, -1.9722870496398763}, 1e-13);
    test::check_close(b.detach(), {-1.5607385191184446}, 1e-13);
  }
  SUBCASE("Adam's beta1, three phases, linear") {
    rg::Tensor p = test::leaf_of({1.0, -2.0, 3.0}, {3});
    rg::Tensor c = test::f64({1.0, 2.0, 0.5}, {3});
    optim::Adam opt({p}, {.lr = 0.01});
    optim::OneCycleLR s(opt, {.max_lr = {0.1}, .total_steps = 10, .cos = false, .three_phase = true});
    const std::vector<double> want = {0.95, 0.8999999999999999, 0.85, 0.8999999999999999, 0.95,
                                      0.95, 0.95, 0.95, 0.95, 0.95, 0.95};
    for (size_t step = 0; step < want.size(); ++step) {
      if (step > 0) {
        opt.zero_grad();
        (p * p * c).sum().backward();
        opt.step();
        s.step();
      }
      CAPTURE(step);
      CHECK(close(opt.param_groups()[0].momentum, want[step]));
    }
    test::check_close(p.detach(), {0.8160872031486959, -1.8153873694847873, 2.8151721974373594},
                      1e-13);
    // Off: the momentum stays as the optimizer set it.
    optim::Adam still({p}, {.lr = 0.01, .beta1 = 0.7});
    optim::OneCycleLR off(still, {.max_lr = {0.1}, .total_steps = 10, .cycle_momentum = false});
    off.step();
    CHECK(still.param_groups()[0].momentum == 0.7);
    CHECK_CONTAINS(error_of([&] {
                     optim::OneCycleLR bad(opt, {.max_lr = {0.1}, .total_steps = 5,
                                                 .max_momentum = {1.5}});
                   }),
                   "expected base_momentum and max_momentum in [0, 1), got 0.85 and 1.5");
  }
}

TEST_CASE("schedule: SequentialLR restarts each schedule at its milestone, as torch's does") {
  TwoGroups t;
  optim::LinearLR warm(t.opt, {.start_factor = 0.1, .total_iters = 3});
  optim::CosineAnnealingLR cosine(t.opt, 5, 0.01);
  optim::LambdaLR halve(t.opt, [](int64_t e) { return std::pow(0.5, double(e)); });
  optim::SequentialLR s(t.opt, {&warm, &cosine, &halve}, {3, 7});
  check_rows(s, t.opt,
             {{0.010000000000000002, 0.005000000000000001},
              {0.04, 0.02},
              {0.07, 0.035},
              {0.1, 0.05},
              {0.09140576474687263, 0.04618033988749895},
              {0.06890576474687263, 0.03618033988749895},
              {0.04109423525312736, 0.02381966011250105},
              {0.1, 0.05},
              {0.05, 0.025},
              {0.025, 0.0125},
              {0.0125, 0.00625},
              {0.00625, 0.003125}});
  CHECK_CONTAINS(error_of([&] {
                   optim::SequentialLR bad(t.opt, {&warm, &cosine}, {});
                 }),
                 "expected one milestone fewer than schedules, got 2 schedules and 0 milestones");
  TwoGroups other;
  CHECK_CONTAINS(error_of([&] { optim::SequentialLR bad(other.opt, {&warm}, {}); }),
                 "expected schedules of this optimizer");
}

namespace {

const std::vector<double> kMetrics{1.0, 0.95, 0.96, 0.97, 0.5, 0.49, 0.495, 0.6,
                                   0.7, 0.8,  0.9,  1.0,  0.2, 0.3,  0.3,   0.3};

// Rows: lr of group 0 and 1, num_bad_epochs, cooldown_counter, best — after each step.
void check_plateau(optim::ReduceLROnPlateauOptions o, const std::vector<double>& metrics,
                   const Rows& want) {
  TwoGroups t;
  optim::ReduceLROnPlateau s(t.opt, o);
  REQUIRE(metrics.size() == want.size());
  for (size_t i = 0; i < metrics.size(); ++i) {
    s.step(metrics[i]);
    CAPTURE(i);
    CHECK(s.steps() == static_cast<int64_t>(i + 1));
    CHECK(close(t.opt.param_groups()[0].lr, want[i][0]));
    CHECK(close(t.opt.param_groups()[1].lr, want[i][1]));
    CHECK(s.num_bad_epochs() == want[i][2]);
    CHECK(s.cooldown_counter() == want[i][3]);
    CHECK(s.best() == want[i][4]);
  }
}

}  // namespace

TEST_CASE("schedule: ReduceLROnPlateau's patience, cooldown and threshold modes follow torch") {
  SUBCASE("min, rel, patience 2, cooldown 1") {
    check_plateau({.patience = 2, .threshold = 0.05, .cooldown = 1}, kMetrics,
                  {{0.1, 0.05, 0, 0, 1.0},
                   {0.1, 0.05, 1, 0, 1.0},
                   {0.1, 0.05, 2, 0, 1.0},
                   {0.010000000000000002, 0.005000000000000001, 0, 1, 1.0},
                   {0.010000000000000002, 0.005000000000000001, 0, 0, 0.5},
                   {0.010000000000000002, 0.005000000000000001, 1, 0, 0.5},
                   {0.010000000000000002, 0.005000000000000001, 2, 0, 0.5},
                   {0.0010000000000000002, 0.0005000000000000001, 0, 1, 0.5},
                   {0.0010000000000000002, 0.0005000000000000001, 0, 0, 0.5},
                   {0.0010000000000000002, 0.0005000000000000001, 1, 0, 0.5},
                   {0.0010000000000000002, 0.0005000000000000001, 2, 0, 0.5},
                   {0.00010000000000000003, 5.0000000000000016e-05, 0, 1, 0.5},
                   {0.00010000000000000003, 5.0000000000000016e-05, 0, 0, 0.2},
                   {0.00010000000000000003, 5.0000000000000016e-05, 1, 0, 0.2},
                   {0.00010000000000000003, 5.0000000000000016e-05, 2, 0, 0.2},
                   {1.0000000000000004e-05, 5.000000000000002e-06, 0, 1, 0.2}});
  }
  SUBCASE("min, abs, a min_lr per group") {
    check_plateau({.factor = 0.5,
                   .patience = 1,
                   .threshold = 0.02,
                   .relative = false,
                   .min_lr = {0.02, 0.03}},
                  kMetrics,
                  {{0.1, 0.05, 0, 0, 1.0},
                   {0.1, 0.05, 0, 0, 0.95},
                   {0.1, 0.05, 1, 0, 0.95},
                   {0.05, 0.03, 0, 0, 0.95},
                   {0.05, 0.03, 0, 0, 0.5},
                   {0.05, 0.03, 1, 0, 0.5},
                   {0.025, 0.03, 0, 0, 0.5},
                   {0.025, 0.03, 1, 0, 0.5},
                   {0.02, 0.03, 0, 0, 0.5},
                   {0.02, 0.03, 1, 0, 0.5},
                   {0.02, 0.03, 0, 0, 0.5},
                   {0.02, 0.03, 1, 0, 0.5},
                   {0.02, 0.03, 0, 0, 0.2},
                   {0.02, 0.03, 1, 0, 0.2},
                   {0.02, 0.03, 0, 0, 0.2},
                   {0.02, 0.03, 1, 0, 0.2}});
  }
  SUBCASE("max, rel, patience 0, cooldown 2") {
    check_plateau({.max = true, .factor = 0.3, .patience = 0, .cooldown = 2}, kMetrics,
                  {{0.1, 0.05, 0, 0, 1.0},
                   {0.03, 0.015, 0, 2, 1.0},
                   {0.03, 0.015, 0, 1, 1.0},
                   {0.03, 0.015, 0, 0, 1.0},
                   {0.009, 0.0045, 0, 2, 1.0},
                   {0.009, 0.0045, 0, 1, 1.0},
                   {0.009, 0.0045, 0, 0, 1.0},
                   {0.0026999999999999997, 0.0013499999999999999, 0, 2, 1.0},
                   {0.0026999999999999997, 0.0013499999999999999, 0, 1, 1.0},
                   {0.0026999999999999997, 0.0013499999999999999, 0, 0, 1.0},
                   {0.0008099999999999998, 0.0004049999999999999, 0, 2, 1.0},
                   {0.0008099999999999998, 0.0004049999999999999, 0, 1, 1.0},
                   {0.0008099999999999998, 0.0004049999999999999, 0, 0, 1.0},
                   {0.00024299999999999994, 0.00012149999999999997, 0, 2, 1.0},
                   {0.00024299999999999994, 0.00012149999999999997, 0, 1, 1.0},
                   {0.00024299999999999994, 0.00012149999999999997, 0, 0, 1.0}});
  }
  SUBCASE("max, abs, eps stops reductions smaller than it") {
    Rows want{{0.1, 0.05, 0, 0, 1.0},
              {0.1, 0.05, 1, 0, 1.0},
              {0.05, 0.025, 0, 0, 1.0},
              {0.05, 0.025, 1, 0, 1.0}};
    for (int i = 0; i < 6; ++i) {
      want.push_back({0.025, 0.025, 0, 0, 1.0});
      want.push_back({0.025, 0.025, 1, 0, 1.0});
    }
    check_plateau({.max = true,
                   .factor = 0.5,
                   .patience = 1,
                   .threshold = 0.1,
                   .relative = false,
                   .eps = 0.02},
                  kMetrics, want);
  }
  SUBCASE("defaults: patience 10, factor 0.1") {
    Rows want;
    for (int i = 0; i < 25; ++i) {
      const double lr = i < 11 ? 0.1 : i < 22 ? 0.010000000000000002 : 0.0010000000000000002;
      want.push_back({lr, lr / 2, double(i < 11 ? i : i < 22 ? i - 11 : i - 22), 0, 1.0});
    }
    check_plateau({}, std::vector<double>(25, 1.0), want);
  }
  SUBCASE("errors") {
    TwoGroups t;
    CHECK_CONTAINS(error_of([&] { optim::ReduceLROnPlateau bad(t.opt, {.factor = 1.0}); }),
                   "expected a factor in [0, 1), got 1");
    CHECK_CONTAINS(error_of([&] {
                     optim::ReduceLROnPlateau bad(t.opt, {.min_lr = {1, 2, 3}});
                   }),
                   "expected 2 min_lrs (or one for all), got 3");
  }
}

// ---------------------------------------------------------------- state: resume = straight

namespace {

struct Net : rg::nn::Module {
  rg::nn::Linear fc{3, 2};
  Net() { register_module("fc", fc); }
  rg::Tensor forward(const rg::Tensor& x) { return fc(x); }
};

// One Adam step on a fixed regression batch drawn from `data`; returns the loss.
double train_step(Net& net, optim::Optimizer& opt, rg::Generator& data) {
  rg::Tensor x = rg::randn({4, 3}, {}, &data), y = rg::randn({4, 2}, {}, &data);
  opt.zero_grad();
  rg::Tensor loss = rg::nn::mse_loss(net.forward(x), y);
  loss.backward();
  opt.step();
  return loss.item();
}

bool same_bits(const rg::NamedTensors& a, const rg::NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const rg::Tensor x = a[i].second.contiguous(), y = b[i].second.contiguous();
    if (a[i].first != b[i].first || x.shape() != y.shape() ||
        std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0)
      return false;
  }
  return true;
}

// A schedule over `opt` built by `make`, stepped by `advance` (step() or step(metric)).
using Make = std::function<std::unique_ptr<optim::Schedule>(optim::Optimizer&)>;
using Advance = std::function<void(optim::Schedule&, double loss)>;

// Runs `total` steps straight, and `at` steps, a checkpoint file, fresh objects restored
// from it, then the rest: the model, the optimizer and the lrs must be equal, bit for bit.
void check_resume(const Make& make, const Advance& advance, int at, int total) {
  test::TempDir dir;
  const std::string path = dir / "run.ckpt";
  auto lrs = [](optim::Optimizer& o) { return std::vector<double>{o.param_groups()[0].lr}; };

  rg::manual_seed(5);
  Net straight;
  optim::Adam opt(straight.parameters(), {.lr = 0.05});
  std::unique_ptr<optim::Schedule> sched = make(opt);
  rg::Generator data(7);
  std::vector<std::vector<double>> want;
  for (int i = 0; i < total; ++i) {
    advance(*sched, train_step(straight, opt, data));
    want.push_back(lrs(opt));
  }
  {
    rg::manual_seed(5);
    Net first;
    optim::Adam opt1(first.parameters(), {.lr = 0.05});
    std::unique_ptr<optim::Schedule> sched1 = make(opt1);
    rg::Generator data1(7);
    for (int i = 0; i < at; ++i) advance(*sched1, train_step(first, opt1, data1));
    rg::Checkpoint c = rg::capture(first, opt1, sched1.get());
    c.generators["data"] = data1;
    rg::save_checkpoint(c, path);
  }
  rg::manual_seed(99);
  Net second;
  optim::Adam opt2(second.parameters(), {.lr = 0.05});
  std::unique_ptr<optim::Schedule> sched2 = make(opt2);
  rg::Checkpoint c = rg::load_checkpoint(path);
  rg::restore(c, second, opt2, sched2.get());
  CHECK(sched2->steps() == at);
  CHECK(sched2->state_dict() == c.schedule);
  rg::Generator data2 = c.generators.at("data");
  for (int i = at; i < total; ++i) {
    advance(*sched2, train_step(second, opt2, data2));
    CAPTURE(i);
    CHECK(lrs(opt2) == want[static_cast<size_t>(i)]);
  }
  CHECK(same_bits(straight.state_dict(), second.state_dict()));
  CHECK(sched2->state_dict() == sched->state_dict());
  CHECK(want[static_cast<size_t>(at) - 1] != want.back());  // the lr moved after the checkpoint
}

void step_it(optim::Schedule& s, double) { dynamic_cast<optim::LRSchedule&>(s).step(); }

}  // namespace

TEST_CASE("schedule: a run checkpointed mid-schedule and resumed equals the straight run") {
  SUBCASE("OneCycleLR") {
    check_resume(
        [](optim::Optimizer& o) -> std::unique_ptr<optim::Schedule> {
          return std::make_unique<optim::OneCycleLR>(
              o, optim::OneCycleLROptions{.max_lr = {0.1}, .total_steps = 12});
        },
        step_it, 5, 12);
  }
  SUBCASE("SequentialLR of LinearLR and CosineAnnealingLR") {
    // The sub-schedules outlive the SequentialLR: keep them beside it.
    struct Seq : optim::SequentialLR {
      std::unique_ptr<optim::LinearLR> warm;
      std::unique_ptr<optim::CosineAnnealingLR> cosine;
      Seq(optim::Optimizer& o, std::unique_ptr<optim::LinearLR> w,
          std::unique_ptr<optim::CosineAnnealingLR> c)
          : optim::SequentialLR(o, {w.get(), c.get()}, {4}),
            warm(std::move(w)),
            cosine(std::move(c)) {}
    };
    check_resume(
        [](optim::Optimizer& o) -> std::unique_ptr<optim::Schedule> {
          return std::make_unique<Seq>(
              o,
              std::make_unique<optim::LinearLR>(
                  o, optim::LinearLROptions{.start_factor = 0.2, .total_iters = 4}),
              std::make_unique<optim::CosineAnnealingLR>(o, 6));
        },
        step_it, 6, 10);
  }
  SUBCASE("ReduceLROnPlateau, driven by the loss, mid-cooldown") {
    // Noisy "metrics" (the loss with a penalty that grows) so that it reduces and cools down.
    Advance advance = [](optim::Schedule& s, double loss) {
      dynamic_cast<optim::ReduceLROnPlateau&>(s).step(loss + 0.1 * double(s.steps() % 4));
    };
    check_resume(
        [](optim::Optimizer& o) -> std::unique_ptr<optim::Schedule> {
          return std::make_unique<optim::ReduceLROnPlateau>(
              o, optim::ReduceLROnPlateauOptions{.patience = 1, .cooldown = 2});
        },
        advance, 7, 14);
  }
}

TEST_CASE(
    "schedule: state_dicts load strictly, and old checkpoints with schedule.steps only still "
    "restore") {
  TwoGroups t;
  optim::ReduceLROnPlateau plateau(t.opt, {.patience = 0});
  plateau.step(1.0);
  plateau.step(2.0);
  std::map<std::string, std::string> state = plateau.state_dict();
  CHECK(state == std::map<std::string, std::string>{{"name", "ReduceLROnPlateau"},
                                                    {"steps", "2"},
                                                    {"best", "1"},
                                                    {"num_bad_epochs", "0"},
                                                    {"cooldown_counter", "0"}});
  optim::ReduceLROnPlateau fresh(t.opt);
  CHECK(fresh.state_dict().at("best") == "inf");  // torch's mode_worse; it loads back
  fresh.load_state_dict(fresh.state_dict());
  CHECK(std::isinf(fresh.best()));
  auto with = [&](const std::string& key, const std::string& value) {
    std::map<std::string, std::string> s = state;
    s[key] = value;
    return s;
  };
  CHECK_CONTAINS(error_of([&] { fresh.load_state_dict(with("num_bad_epochs", "1.5")); }),
                 "expected the schedule's state \"num_bad_epochs\" to be a whole number in [0, "
                 "2^53], got \"1.5\"");
  CHECK_CONTAINS(error_of([&] { fresh.load_state_dict(with("best", "nan")); }),
                 "expected the schedule's state \"best\" to be a number, got \"nan\"");
  CHECK_CONTAINS(error_of([&] { fresh.load_state_dict(with("best", "1x")); }), "got \"1x\"");
  CHECK_CONTAINS(error_of([&] { fresh.load_state_dict(with("name", "StepLR")); }),
                 "expected the state of a ReduceLROnPlateau schedule, got one of StepLR");
  CHECK_CONTAINS(error_of([&] { fresh.load_state_dict(with("extra", "1")); }),
                 "got \"extra\" = \"1\"");
  std::map<std::string, std::string> no_best = state;
  no_best.erase("best");
  CHECK_CONTAINS(error_of([&] { fresh.load_state_dict(no_best); }),
                 "expected the schedule's state \"best\", got a checkpoint without it");
  CHECK(fresh.steps() == 0);  // nothing changed by the failed loads
  fresh.load_state_dict(state);
  CHECK(fresh.best() == 1.0);
  CHECK(fresh.steps() == 2);

  // A step-driven schedule from {"steps"} alone: what checkpoints before schedule.<key> held.
  optim::CosineAnnealingLR cosine(t.opt, 6);
  cosine.load_state_dict({{"steps", "3"}});
  CHECK(cosine.steps() == 3);
  CHECK(close(t.opt.param_groups()[0].lr, 0.05));
  CHECK_CONTAINS(
      error_of([&] {
        cosine.load_state_dict({{"steps", "-1"}});
      }),
      "expected the schedule's state \"steps\" to be a whole number in [0, 2^53], got \"-1\"");
  optim::OneCycleLR one(t.opt, {.max_lr = {1.0}, .total_steps = 4});
  CHECK_CONTAINS(error_of([&] { one.load_state_dict({{"steps", "5"}}); }), "Tried to step 5 times");
}
