// test_optim_state.cpp — the optimizer's state saved and loaded: a resumed run equals an
// uninterrupted one, and every kind of damaged or mismatched state (bad metadata, missing,
// non-finite or mis-typed buffers, bad hyperparameters) is a clear error that leaves the
// optimizer as it was. (Stepping: test_optim.cpp; whole checkpoints: test_checkpoint.cpp.)
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
using test::TempDir;
using Vec = std::vector<double>;
using optim_test::group;
using optim_test::kInit1;
using optim_test::kInit2;
using optim_test::quad_grad;
using optim_test::set_quad_grad;
using GroupList = std::vector<std::pair<std::vector<rg::Tensor>, optim::GroupOptions>>;

// ---------------------------------------------------------------- checkpoints

TEST_CASE("optim: resuming from a checkpoint equals an uninterrupted run") {
  TempDir dir;
  auto run = [&](auto make_opt, const std::string& file) {
    // Uninterrupted: 5 steps.
    rg::Tensor full1 = leaf_of(kInit1, {3}), full2 = leaf_of(kInit2, {2});
    auto full = make_opt(std::vector<rg::Tensor>{full1, full2});
    for (int s = 0; s < 5; ++s) {
      set_quad_grad(full1, 0);
      set_quad_grad(full2, 3);
      full.step();
    }
    // 2 steps, save, fresh optimizer + parameters, load, 3 more.
    rg::Tensor a1 = leaf_of(kInit1, {3}), a2 = leaf_of(kInit2, {2});
    auto first = make_opt(std::vector<rg::Tensor>{a1, a2});
    for (int s = 0; s < 2; ++s) {
      set_quad_grad(a1, 0);
      set_quad_grad(a2, 3);
      first.step();
    }
    std::map<std::string, std::string> meta;
    rg::NamedTensors in_memory = first.state_dict(&meta);
    optim::save(first, dir.file(file));
    for (bool from_file : {false, true}) {
      CAPTURE(from_file);
      rg::Tensor b1 = leaf_of(values(a1), {3}), b2 = leaf_of(values(a2), {2});
      auto resumed = make_opt(std::vector<rg::Tensor>{b1, b2});
      resumed.param_groups()[0].lr = 123.0;  // the checkpoint's lr wins
      if (from_file)
        optim::load(resumed, dir.file(file));
      else
        resumed.load_state_dict(in_memory, meta);
      CHECK(resumed.steps() == 2);
      CHECK(resumed.param_groups()[0].lr == full.param_groups()[0].lr);
      for (int s = 0; s < 3; ++s) {
        set_quad_grad(b1, 0);
        set_quad_grad(b2, 3);
        resumed.step();
      }
      CHECK(resumed.steps() == 5);
      CHECK(values(b1) == values(full1));
      CHECK(values(b2) == values(full2));
    }
  };
  SUBCASE("SGD with momentum") {
    run(
        [](std::vector<rg::Tensor> ps) {
          return optim::SGD(std::move(ps), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
        },
        "sgd.safetensors");
  }
  SUBCASE("Adam") {
    run([](std::vector<rg::Tensor> ps) { return optim::Adam(std::move(ps), {.lr = 0.1}); },
        "adam.safetensors");
  }
  SUBCASE("AdamW") {
    run(
        [](std::vector<rg::Tensor> ps) {
          return optim::AdamW(std::move(ps), {.lr = 0.01, .weight_decay = 0.1});
        },
        "adamw.safetensors");
  }
}

TEST_CASE("optim: a checkpoint keeps each group's lr and weight decay exactly") {
  // A scheduled lr is not a short decimal; the resumed optimizer must use the same one.
  rg::Tensor p = leaf_of(kInit1, {3});
  optim::Adam opt({p}, {.lr = 3e-4, .weight_decay = 1e-7});
  optim::WarmupCosine sched(opt, {.warmup_steps = 3, .total_steps = 100});
  for (int s = 0; s < 7; ++s) sched.step();
  double lr = opt.param_groups()[0].lr;
  std::map<std::string, std::string> meta;
  rg::NamedTensors state = opt.state_dict(&meta);
  rg::Tensor q = leaf_of(kInit1, {3});
  optim::Adam other({q});
  other.load_state_dict(state, meta);
  CHECK(other.param_groups()[0].lr == lr);
  CHECK(other.param_groups()[0].weight_decay == 1e-7);
}

TEST_CASE("optim: loading a checkpoint of another optimizer or group size is an error") {
  rg::Tensor p1 = leaf_of(kInit1, {3}), p2 = leaf_of(kInit2, {2});
  optim::SGD sgd({p1, p2}, {.lr = 0.1, .momentum = 0.9});
  set_quad_grad(p1);
  set_quad_grad(p2);
  sgd.step();
  std::map<std::string, std::string> meta;
  rg::NamedTensors state = sgd.state_dict(&meta);

  optim::Adam adam({p1, p2});
  std::string msg = error_of([&] { adam.load_state_dict(state, meta); });
  CHECK_CONTAINS(msg, "Adam");
  CHECK_CONTAINS(msg, "SGD");

  optim::SGD smaller({p1}, {.lr = 0.1, .momentum = 0.9});
  msg = error_of([&] { smaller.load_state_dict(state, meta); });
  CHECK_CONTAINS(msg, "group 0");
  CHECK_CONTAINS(msg, "1 parameters");
  CHECK_CONTAINS(msg, "2");

  TempDir dir;
  optim::save(sgd, dir.file("sgd.safetensors"));
  CHECK_CONTAINS(error_of([&] { optim::load(adam, dir.file("sgd.safetensors")); }), "SGD");
  CHECK_CONTAINS(error_of([&] { adam.load_state_dict(state, {}); }), "metadata");
}

TEST_CASE("optim: a damaged checkpoint is a clear error, and the optimizer stays as it was") {
  rg::Tensor p1 = leaf_of(kInit1, {3}), p2 = leaf_of(kInit2, {2});
  optim::AdamW adamw({p1, p2}, {.lr = 0.1});
  set_quad_grad(p1);
  set_quad_grad(p2);
  adamw.step();
  std::map<std::string, std::string> meta;
  const rg::NamedTensors state = adamw.state_dict(&meta);
  // Each damage: its key and value named, no std:: exception, nothing changed.
  auto damaged = [&](const std::string& key, const std::string& value) {
    std::map<std::string, std::string> bad = meta;
    bad[key] = value;
    return error_of([&] { adamw.load_state_dict(state, bad); });
  };
  CHECK_CONTAINS(damaged("steps", "abc"), "expected optimizer metadata \"steps\" to be a whole number");
  CHECK_CONTAINS(damaged("steps", "abc"), "in [0, 2^53], got \"abc\"");
  CHECK_CONTAINS(damaged("steps", "nan"), "got \"nan\"");
  CHECK_CONTAINS(damaged("steps", "1e300"), "got \"1e300\"");
  CHECK_CONTAINS(damaged("steps", "-1"), "got \"-1\"");
  CHECK_CONTAINS(damaged("steps", "3.5"), "got \"3.5\"");
  CHECK_CONTAINS(damaged("group.0.lr", "fast"), "\"group.0.lr\" to be a finite number");
  CHECK_CONTAINS(damaged("group.0.weight_decay", "inf"), "\"group.0.weight_decay\"");
  CHECK_CONTAINS(damaged("group.0.momentum", "0.9x"), "\"group.0.momentum\" to be a finite number");
  CHECK_CONTAINS(damaged("group.0.momentum", "1"),
                 "\"group.0.momentum\" (SGD's momentum or Adam's beta1) in [0, 1), got \"1\"");
  CHECK_CONTAINS(damaged("group.0.size", "12345678901234567890123"), "\"group.0.size\"");
  CHECK_CONTAINS(damaged("group.0.size", "2x"), "got \"2x\"");
  CHECK(adamw.steps() == 1);
  CHECK(adamw.param_groups()[0].lr == 0.1);

  rg::NamedTensors bad_key = state;
  bad_key.emplace_back("state.x.0.exp_avg", rg::zeros({3}));
  CHECK_CONTAINS(error_of([&] { adamw.load_state_dict(bad_key, meta); }),
                 "expected keys state.<group>.<index>.<name>, got state.x.0.exp_avg");
  for (double step : {std::nan(""), 1e300, -2.0, 0.5}) {
    rg::NamedTensors bad_step = state;
    for (auto& [key, t] : bad_step)
      if (key.ends_with(".step")) t = rg::full({}, step, {.dtype = rg::kFloat64});
    CHECK_CONTAINS(error_of([&] { adamw.load_state_dict(bad_step, meta); }),
                   "to be a whole number in [0, 2^53]");
  }
  CHECK(adamw.steps() == 1);

  // From a file: the file is named, then what is wrong in it.
  TempDir dir;
  std::map<std::string, std::string> bad = meta;
  bad["steps"] = "abc";
  rg::save_safetensors(state, dir.file("bad.safetensors"), bad);
  const std::string msg = error_of([&] { optim::load(adamw, dir.file("bad.safetensors")); });
  CHECK_CONTAINS(msg, "bad.safetensors");
  CHECK_CONTAINS(msg, "\"steps\"");
}

namespace {

// An AdamW over two float64 parameters after one step, and its checkpoint.
struct SteppedAdamW {
  rg::Tensor p1 = leaf_of(kInit1, {3}), p2 = leaf_of(kInit2, {2});
  optim::AdamW adamw{std::vector<rg::Tensor>{p1, p2}, {.lr = 0.1}};
  std::map<std::string, std::string> meta;
  rg::NamedTensors state;
  SteppedAdamW() {
    set_quad_grad(p1);
    set_quad_grad(p2, 3);
    adamw.step();
    state = adamw.state_dict(&meta);
  }
  // The checkpoint with `key` replaced by `value` (an undefined value: removed).
  rg::NamedTensors with(const std::string& key, const rg::Tensor& value) const {
    rg::NamedTensors out;
    for (const auto& [k, t] : state)
      if (k != key) out.emplace_back(k, t);
      else if (value.defined()) out.emplace_back(k, value);
    return out;
  }
  rg::NamedTensors without_prefix(const std::string& prefix) const {
    rg::NamedTensors out;
    for (const auto& [k, t] : state)
      if (!k.starts_with(prefix)) out.emplace_back(k, t);
    return out;
  }
  std::string load_error(const rg::NamedTensors& s) { return error_of([&] { adamw.load_state_dict(s, meta); }); }
  // The optimizer as it was after its one step.
  void check_unchanged() const {
    std::map<std::string, std::string> now_meta;
    rg::NamedTensors now = adamw.state_dict(&now_meta);
    CHECK(now_meta == meta);
    REQUIRE(now.size() == state.size());
    for (size_t k = 0; k < now.size(); ++k) {
      CHECK(now[k].first == state[k].first);
      CHECK(values(now[k].second) == values(state[k].second));
    }
  }
};

}  // namespace

TEST_CASE("optim: state buffers are checked on load: finite, non-negative, dtype as saved") {
  SteppedAdamW s;
  const std::string avg = "state.0.1.exp_avg", sq = "state.0.1.exp_avg_sq";
  // NaN / Inf moments, a negative mean of squares: the key, the value and where it is.
  std::string msg = s.load_error(s.with(avg, f64({0.5, NAN})));
  CHECK_CONTAINS(msg, "[load_state_dict] expected state.0.1.exp_avg to hold finite values, got nan at element 1 of 2");
  CHECK_CONTAINS(s.load_error(s.with(avg, f64({INFINITY, 0}))), "got inf at element 0");
  CHECK_CONTAINS(s.load_error(s.with(sq, f64({0.5, -1}))),
                 "expected state.0.1.exp_avg_sq to hold finite values >= 0, got -1 at element 1 of 2");
  CHECK_CONTAINS(s.load_error(s.with(sq, f64({NAN, 1}))), "exp_avg_sq to hold finite values >= 0, got nan");
  // Dtypes as saved: the parameter's, never converted.
  for (rg::DType dtype : {rg::kFloat32, rg::kInt64, rg::kBool}) {
    CAPTURE(dtype);
    CHECK_CONTAINS(s.load_error(s.with(avg, rg::zeros({2}, {.dtype = dtype}))),
                   "expected state.0.1.exp_avg as float64 (its parameter's dtype), got " +
                       std::string(rg::dtype_name(dtype)));
  }
  CHECK_CONTAINS(s.load_error(s.with("state.0.1.step", rg::full({}, 1, {.dtype = rg::kInt64}))),
                 "expected state.0.1.step to be a float64 scalar, got int64");
  CHECK_CONTAINS(s.load_error(s.with(avg, rg::zeros({3}, {.dtype = rg::kFloat64}))), "of shape [2], got [3]");
  // A buffer AdamW does not have.
  rg::NamedTensors extra = s.state;
  extra.emplace_back("state.0.0.momentum_buffer", rg::zeros({3}, {.dtype = rg::kFloat64}));
  CHECK_CONTAINS(s.load_error(extra),
                 "expected AdamW state buffers (exp_avg, exp_avg_sq, step), got state.0.0.momentum_buffer");
  // lr and weight decay from the metadata: finite and >= 0.
  for (const char* lr : {"-0.1", "nan", "inf"}) {
    std::map<std::string, std::string> bad = s.meta;
    bad["group.0.lr"] = lr;
    CHECK_CONTAINS(error_of([&] { s.adamw.load_state_dict(s.state, bad); }),
                   "\"group.0.lr\" to be a finite number in [0, 1e300], got \"" + std::string(lr));
  }
  s.check_unchanged();

  // SGD's momentum buffer, too; and from a file, the file is named.
  rg::Tensor p = leaf_of(kInit1, {3});
  optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9});
  set_quad_grad(p);
  sgd.step();
  std::map<std::string, std::string> meta;
  rg::NamedTensors state = sgd.state_dict(&meta);
  REQUIRE(state.size() == 1);
  state[0].second = f64({1, NAN, 2});
  TempDir dir;
  rg::save_safetensors(state, dir.file("sgd.safetensors"), meta);
  msg = error_of([&] { optim::load(sgd, dir.file("sgd.safetensors")); });
  CHECK_CONTAINS(msg, "sgd.safetensors");
  CHECK_CONTAINS(msg, "expected state.0.0.momentum_buffer to hold finite values, got nan at element 1");
}

TEST_CASE("optim: a parameter's state missing in part or whole is an error at load, naming the key") {
  SteppedAdamW s;
  // Without exp_avg_sq (or step) the load used to pass and opt.step() fail with
  // "[tensor] expected a defined tensor", naming neither file nor key.
  std::string msg = s.load_error(s.with("state.0.1.exp_avg_sq", rg::Tensor()));
  CHECK_CONTAINS(msg, "expected state.0.1.exp_avg_sq beside state.0.1.exp_avg, got a checkpoint without it");
  CHECK_CONTAINS(s.load_error(s.with("state.0.0.step", rg::Tensor())), "expected state.0.0.step beside");
  // A parameter's whole state gone: it would restart at zero moments.
  msg = s.load_error(s.without_prefix("state.0.1."));
  CHECK_CONTAINS(msg, "expected state for every parameter");
  CHECK_CONTAINS(msg, "in a checkpoint of 1 steps with other parameters' state, got none for state.0.1");
  // Every state gone from a checkpoint that has taken steps.
  CHECK_CONTAINS(s.load_error(s.without_prefix("state.")), "got none for state.0.0");
  s.check_unchanged();
  // The same from a file: named.
  TempDir dir;
  rg::save_safetensors(s.without_prefix("state.0.1."), dir.file("part.safetensors"), s.meta);
  msg = error_of([&] { optim::load(s.adamw, dir.file("part.safetensors")); });
  CHECK_CONTAINS(msg, "part.safetensors");
  CHECK_CONTAINS(msg, "got none for state.0.1");
  s.check_unchanged();
}

TEST_CASE("optim: a parameter that never had a gradient still saves and resumes exactly") {
  // Adam writes such a parameter's initial state (zero moments, step 0), so a checkpoint
  // holds every parameter's state and the rule above has no exception to make.
  rg::Tensor a1 = leaf_of(kInit1, {3}), a2 = leaf_of(kInit2, {2});
  optim::Adam first({a1, a2}, {.lr = 0.1});
  rg::Tensor full1 = leaf_of(kInit1, {3}), full2 = leaf_of(kInit2, {2});
  optim::Adam full({full1, full2}, {.lr = 0.1});
  for (int s = 0; s < 2; ++s) {
    set_quad_grad(a1);
    first.step();
    set_quad_grad(full1);
    full.step();
  }
  std::map<std::string, std::string> meta;
  rg::NamedTensors state = first.state_dict(&meta);
  std::map<std::string, std::vector<double>> by_key;
  for (auto& [k, t] : state) by_key[k] = values(t);
  CHECK(by_key.at("state.0.1.exp_avg") == Vec{0, 0});
  CHECK(by_key.at("state.0.1.step") == Vec{0});
  rg::Tensor b1 = leaf_of(values(a1), {3}), b2 = leaf_of(values(a2), {2});
  optim::Adam resumed({b1, b2}, {.lr = 0.1});
  resumed.load_state_dict(state, meta);
  for (int s = 0; s < 3; ++s) {
    set_quad_grad(b1);
    set_quad_grad(b2, 3);
    resumed.step();
    set_quad_grad(full1);
    set_quad_grad(full2, 3);
    full.step();
  }
  CHECK(values(b1) == values(full1));
  CHECK(values(b2) == values(full2));
  // SGD's momentum buffer starts as the first gradient: no such initial state, so a
  // parameter without one loads as never stepped.
  rg::Tensor c1 = leaf_of(kInit1, {3}), c2 = leaf_of(kInit2, {2});
  optim::SGD sgd({c1, c2}, {.lr = 0.1, .momentum = 0.9});
  set_quad_grad(c1);
  sgd.step();
  state = sgd.state_dict(&meta);
  CHECK(state.size() == 1);
  optim::SGD sgd2({c1, c2}, {.lr = 0.1, .momentum = 0.9});
  sgd2.load_state_dict(state, meta);
  CHECK(sgd2.steps() == 1);
}

TEST_CASE("optim: hyperparameters out of range are refused at construction") {
  rg::Tensor p = leaf_of(kInit1, {3});
  CHECK_CONTAINS(error_of([&] { optim::Adam({p}, {.lr = NAN}); }), "expected a finite lr >= 0, got nan");
  CHECK_CONTAINS(error_of([&] { optim::Adam({p}, {.lr = INFINITY}); }), "got inf");
  CHECK_CONTAINS(error_of([&] { optim::AdamW({p}, {.weight_decay = -0.1}); }),
                 "expected a finite weight_decay >= 0, got -0.1");
  CHECK_CONTAINS(error_of([&] { optim::SGD({p}, {.weight_decay = NAN}); }), "weight_decay >= 0, got nan");
  GroupList groups{{{p}, group(-1.0, {})}};
  CHECK_CONTAINS(error_of([&] { optim::Adam(groups, {}); }), "expected group 0 with a finite lr >= 0");
  CHECK_CONTAINS(error_of([&] { optim::Adam({p}, {.beta1 = 1.0}); }), "betas in [0, 1)");
  CHECK_CONTAINS(error_of([&] { optim::Adam({p}, {.eps = -1e-8}); }), "eps >= 0");
}

