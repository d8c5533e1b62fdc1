// test_grad_scaler.cpp — optim::GradScaler (dynamic loss scaling) against torch.amp.GradScaler:
// the scale's sequence, the skipped steps and the final parameters of a run with inf and
// NaN gradients; a float16 model whose scaled loss overflows and recovers; state_dict;
// the errors; the `agree` hook distributed training uses.
//
// Golden values: PyTorch 2.15.0, torch.amp.GradScaler("cpu", init_scale=2**10,
// growth_interval=3) and SGD(lr=0.1) on two float32 parameters, 14 steps. Each row below
// is {scale before the step, stepped, scale after update(), growth tracker after update()}:
//
//   import torch, math
//   w = torch.tensor([0.5, -1.25, 2.0], requires_grad=True)
//   b = torch.tensor([0.75, -0.5], requires_grad=True)
//   opt = torch.optim.SGD([w, b], lr=0.1)
//   scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)
//   inf, nan = math.inf, math.nan
//   steps = [  # coefficients of w and of b (None: b unused, no grad), an injected grad entry
//       ([0.3, -0.7, 1.1], [0.2, 0.4], None),
//       ([1.5, 0.25, -0.5], [-0.3, 0.9], None),
//       ([0.1, 0.2, 0.3], None, ("w", 1, inf)),
//       ([-0.6, 0.8, 0.05], [0.7, -0.1], None),
//       ([0.9, -0.4, 0.6], [0.1, 0.1], ("b", 0, nan)),
//       ([0.2, 0.2, -0.2], [0.3, 0.6], None),
//       ([0.4, -0.9, 0.7], None, None),
//       ([-0.3, 0.5, 0.1], [0.2, -0.8], None),
//       ([1e36, 0.1, 0.1], [0.1, 0.1], None),          # scale·1e36 overflows float32 for real
//       ([0.05, -0.15, 0.25], [0.35, -0.45], ("w", 2, -inf)),
//       ([0.6, 0.6, -0.3], [-0.2, 0.5], None),         # then update(1000.0)
//       ([-0.7, 0.1, 0.9], [0.4, 0.3], None),
//       ([0.25, 0.5, -0.75], [0.6, -0.2], None),
//       ([0.1, -0.1, 0.2], [0.3, 0.3], None)]
//   rows = []
//   for cw, cb, inject in steps:
//       opt.zero_grad()
//       loss = (w * torch.tensor(cw)).sum()
//       if cb is not None: loss = loss + (b * torch.tensor(cb)).sum()
//       before = scaler.get_scale()
//       scaler.scale(loss).backward()
//       if inject is not None:
//           name, i, v = inject
//           with torch.no_grad(): (w if name == "w" else b).grad[i] = v
//       scaler.step(opt)
//       found = sum(v.item() for v in
//                   scaler._per_optimizer_states[id(opt)]["found_inf_per_device"].values())
//       if len(rows) == 10: scaler.update(1000.0)  # not a power of two: unscaling rounds
//       else: scaler.update()
//       rows.append((before, int(found == 0), scaler.get_scale(), scaler._get_growth_tracker()))
//   for r in rows: print("{%r, %d, %r, %d}," % r)
//   print([float.hex(x) for x in w.tolist()], [float.hex(x) for x in b.tolist()])
//   print(scaler.state_dict())
#include <doctest/doctest.h>
#include <ringgrad/optim/grad_scaler.h>
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "test_helpers.h"

namespace rg = ringgrad;
namespace optim = ringgrad::optim;
using test::error_of;

namespace {

rg::Tensor param(const std::vector<float>& v, rg::DType dtype = rg::kFloat32) {
  return test::f32(v).to(dtype).requires_grad_();
}

// Sets one element of p's gradient (as torch's `p.grad[i] = v` under no_grad).
void set_grad_element(const rg::Tensor& p, int64_t i, double v) {
  rg::NoGradGuard no_grad;
  p.grad().narrow(0, i, 1).fill_(v);
}

struct GoldenStep {
  std::vector<float> cw, cb;  // cb empty: b is not in the loss (no gradient)
  char inject = 0;            // 'w' or 'b': set grad[index] = value after backward
  int64_t index = 0;
  double value = 0;
};

struct GoldenRow {
  double scale_before;
  bool stepped;
  double scale_after;
  int64_t tracker;
};

}  // namespace

TEST_CASE("grad_scaler: scales, skipped steps and parameters follow torch.amp.GradScaler") {
  const double inf = INFINITY, nan = NAN;
  const std::vector<GoldenStep> steps = {
      {{0.3f, -0.7f, 1.1f}, {0.2f, 0.4f}},
      {{1.5f, 0.25f, -0.5f}, {-0.3f, 0.9f}},
      {{0.1f, 0.2f, 0.3f}, {}, 'w', 1, inf},
      {{-0.6f, 0.8f, 0.05f}, {0.7f, -0.1f}},
      {{0.9f, -0.4f, 0.6f}, {0.1f, 0.1f}, 'b', 0, nan},
      {{0.2f, 0.2f, -0.2f}, {0.3f, 0.6f}},
      {{0.4f, -0.9f, 0.7f}, {}},
      {{-0.3f, 0.5f, 0.1f}, {0.2f, -0.8f}},
      {{1e36f, 0.1f, 0.1f}, {0.1f, 0.1f}},
      {{0.05f, -0.15f, 0.25f}, {0.35f, -0.45f}, 'w', 2, -inf},
      {{0.6f, 0.6f, -0.3f}, {-0.2f, 0.5f}},
      {{-0.7f, 0.1f, 0.9f}, {0.4f, 0.3f}},
      {{0.25f, 0.5f, -0.75f}, {0.6f, -0.2f}},
      {{0.1f, -0.1f, 0.2f}, {0.3f, 0.3f}},
  };
  const std::vector<GoldenRow> torch_rows = {
      {1024.0, 1, 1024.0, 1}, {1024.0, 1, 1024.0, 2}, {1024.0, 0, 512.0, 0},
      {512.0, 1, 512.0, 1},   {512.0, 0, 256.0, 0},   {256.0, 1, 256.0, 1},
      {256.0, 1, 256.0, 2},   {256.0, 1, 512.0, 0},   {512.0, 0, 256.0, 0},
      {256.0, 0, 128.0, 0},   {128.0, 1, 1000.0, 0},  {1000.0, 1, 1000.0, 1},
      {1000.0, 1, 1000.0, 2}, {1000.0, 1, 2000.0, 0},
  };
  const std::vector<float> torch_w = {0x1.4ccccc0p-2f, -0x1.5ffffe0p+0f, 0x1.deb8500p+0f};
  const std::vector<float> torch_b = {0x1.0f5c280p-1f, -0x1.6147b20p-1f};

  rg::Tensor w = param({0.5f, -1.25f, 2.0f}), b = param({0.75f, -0.5f});
  optim::SGD opt({w, b}, {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  CHECK(scaler.get_growth_factor() == 2.0);
  CHECK(scaler.get_backoff_factor() == 0.5);

  for (size_t k = 0; k < steps.size(); ++k) {
    CAPTURE(k);
    const GoldenStep& s = steps[k];
    opt.zero_grad();
    rg::Tensor loss = (w * test::f32(s.cw)).sum();
    if (!s.cb.empty()) loss = loss + (b * test::f32(s.cb)).sum();
    const double before = scaler.get_scale();
    scaler.scale(loss).backward();
    if (s.inject) set_grad_element(s.inject == 'w' ? w : b, s.index, s.value);
    const bool stepped = scaler.step(opt);
    if (k == 10)
      scaler.update(1000.0);
    else
      scaler.update();
    CHECK(before == torch_rows[k].scale_before);
    CHECK(stepped == torch_rows[k].stepped);
    CHECK(scaler.get_scale() == torch_rows[k].scale_after);
    CHECK(scaler.get_growth_tracker() == torch_rows[k].tracker);
  }
  // Within a float32 ulp or so: SGD's p − lr·g rounds differently from torch's CPU kernel
  // (a fused multiply-add) in the last bit on some steps.
  const std::vector<float> got_w = w.tolist<float>(), got_b = b.tolist<float>();
  for (size_t i = 0; i < 3; ++i) CHECK(got_w[i] == doctest::Approx(torch_w[i]).epsilon(2e-7));
  for (size_t i = 0; i < 2; ++i) CHECK(got_b[i] == doctest::Approx(torch_b[i]).epsilon(2e-7));
  // {'scale': 2000.0, 'growth_factor': 2.0, 'backoff_factor': 0.5, 'growth_interval': 3,
  //  '_growth_tracker': 0}
  const std::map<std::string, std::string> want = {{"scale", "2000"},
                                                   {"growth_factor", "2"},
                                                   {"backoff_factor", "0.5"},
                                                   {"growth_interval", "3"},
                                                   {"_growth_tracker", "0"}};
  CHECK(scaler.state_dict() == want);
}

TEST_CASE("grad_scaler: unscale_ divides float32 and float16 gradients and finds inf in either") {
  rg::Tensor a = param({1.0f, -2.0f}), h = param({0.5f, 4.0f}, rg::kFloat16);
  optim::SGD opt({a, h}, {.lr = 0.5});
  optim::GradScaler scaler({.init_scale = 256.0});
  CHECK(scaler.get_scale() == 256.0);
  CHECK(scaler.get_growth_interval() == 2000);

  // loss = sum(a·[1, 3]) + sum(h·[2, -1]): gradients [1, 3] and [2, -1], times 256
  rg::Tensor loss = (a * test::f32({1, 3})).sum() +
                    (h * test::f32({2, -1}).to(rg::kFloat16)).sum().to(rg::kFloat32);
  scaler.scale(loss).backward();
  CHECK(a.grad().tolist<double>() == std::vector<double>{256, 768});
  CHECK(h.grad().dtype() == rg::kFloat16);
  CHECK(h.grad().tolist<double>() == std::vector<double>{512, -256});
  scaler.unscale_(opt);
  CHECK(a.grad().tolist<double>() == std::vector<double>{1, 3});
  CHECK(h.grad().tolist<double>() == std::vector<double>{2, -1});
  CHECK(scaler.step(opt));  // unscaled once only, then stepped
  CHECK(a.tolist<double>() == std::vector<double>{0.5, -3.5});
  CHECK(h.tolist<double>() == std::vector<double>{-0.5, 4.5});
  scaler.update();
  CHECK(scaler.get_growth_tracker() == 1);

  // An inf in the float16 gradient alone: nothing steps, both gradients are still unscaled
  opt.zero_grad();
  scaler.scale((a * test::f32({1, 1})).sum() +
               (h * test::f32({1, 1}).to(rg::kFloat16)).sum().to(rg::kFloat32))
      .backward();
  set_grad_element(h, 1, INFINITY);
  CHECK_FALSE(scaler.step(opt));
  CHECK(a.tolist<double>() == std::vector<double>{0.5, -3.5});
  CHECK(h.tolist<double>() == std::vector<double>{-0.5, 4.5});
  CHECK(a.grad().tolist<double>() == std::vector<double>{1, 1});
  scaler.update();
  CHECK(scaler.get_scale() == 128.0);
  CHECK(scaler.get_growth_tracker() == 0);
}

TEST_CASE("grad_scaler: a float16 loss that overflows is skipped, the scale backs off, training recovers") {
  // Linear regression in float16: y = x·w_true, w (4, 1) float16, SGD keeps a float32 master.
  const rg::Tensor x = rg::from_vector<float>({1.0f, 0.5f, -1.0f, 2.0f,  -0.5f, 1.5f, 1.0f, 0.0f,
                                               2.0f, -1.0f, 0.5f, 1.0f,  0.0f, 1.0f, -1.5f, 0.5f,
                                               1.5f, 0.0f, 1.0f, -1.0f, -1.0f, 2.0f, 0.5f, 1.5f},
                                              {6, 4}, {.dtype = rg::kFloat32})
                           .to(rg::kFloat16);
  const rg::Tensor w_true = test::f32({1.5f, -2.0f, 1.0f, 0.5f}, {4, 1}).to(rg::kFloat16);
  const rg::Tensor y = x.matmul(w_true);
  rg::Tensor w = rg::zeros({4, 1}, {.dtype = rg::kFloat16}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.05});
  optim::GradScaler scaler({.growth_interval = 10});  // init_scale 65536
  CHECK(scaler.get_scale() == 65536.0);

  auto loss_of = [&] { return (x.matmul(w) - y).pow(2).mean(); };
  const double first_loss = loss_of().item();
  REQUIRE(first_loss > 1.0);  // so that loss · 65536 > 65504, float16's largest

  int skipped = 0, stepped = 0;
  double last_loss = first_loss;
  for (int it = 0; it < 80; ++it) {
    opt.zero_grad();
    rg::Tensor loss = loss_of();
    CHECK(loss.dtype() == rg::kFloat16);
    rg::Tensor scaled = scaler.scale(loss);
    CHECK(scaled.dtype() == rg::kFloat16);
    if (it == 0) CHECK(std::isinf(scaled.item()));  // the scaled loss overflows float16
    scaled.backward();
    const double scale = scaler.get_scale();
    const bool did_step = scaler.step(opt);
    scaler.update();
    if (it == 0) {
      CHECK_FALSE(did_step);  // an inf gradient: skipped, and the scale backs off
      CHECK(scaler.get_scale() == 32768.0);
      CHECK(w.tolist<double>() == std::vector<double>{0, 0, 0, 0});
    }
    if (did_step) {
      ++stepped;
      CHECK(scaler.get_scale() >= scale);  // grew or stayed
    } else {
      ++skipped;
      CHECK(scaler.get_scale() == scale / 2);
    }
    last_loss = loss.item();
  }
  CHECK(skipped >= 1);
  CHECK(stepped >= 60);  // it recovers: most steps go through
  for (double v : w.tolist<double>()) CHECK(std::isfinite(v));
  CHECK(last_loss < first_loss * 1e-2);
  test::check_close(w, {1.5, -2.0, 1.0, 0.5}, 0.05);
}

TEST_CASE("grad_scaler: state_dict round trip, and load_state_dict's errors name key and value") {
  rg::Tensor p = param({1.0f, 2.0f});
  optim::SGD opt({p}, {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 8.0, .growth_factor = 3.0, .backoff_factor = 0.25,
                            .growth_interval = 4});
  auto one_step = [&](optim::GradScaler& s, bool overflow) {
    opt.zero_grad();
    s.scale((p * p).sum()).backward();
    if (overflow) set_grad_element(p, 0, NAN);
    s.step(opt);
    s.update();
  };
  for (bool overflow : {false, false, true, false, false, false, false, false})
    one_step(scaler, overflow);  // 8 → back off 2 → grow (after 4) 6, tracker 1
  CHECK(scaler.get_scale() == 6.0);
  CHECK(scaler.get_growth_tracker() == 1);
  const std::map<std::string, std::string> state = scaler.state_dict();
  CHECK(state == std::map<std::string, std::string>{{"scale", "6"},
                                                    {"growth_factor", "3"},
                                                    {"backoff_factor", "0.25"},
                                                    {"growth_interval", "4"},
                                                    {"_growth_tracker", "1"}});

  optim::GradScaler loaded;  // torch's defaults, replaced by the state's values
  loaded.load_state_dict(state);
  CHECK(loaded.state_dict() == state);
  CHECK(loaded.get_growth_factor() == 3.0);
  CHECK(loaded.get_backoff_factor() == 0.25);
  CHECK(loaded.get_growth_interval() == 4);
  for (int i = 0; i < 3; ++i) one_step(loaded, false);
  CHECK(loaded.get_scale() == 18.0);  // the fourth success in a row grows it
  CHECK(loaded.get_growth_tracker() == 0);

  // A disabled scaler writes nothing and loads nothing, as torch's does.
  optim::GradScaler off({.enabled = false});
  CHECK(off.state_dict().empty());
  off.load_state_dict({{"scale", "garbage"}});
  CHECK(off.get_scale() == 1.0);

  auto with = [&](const std::string& key, std::optional<std::string> value) {
    std::map<std::string, std::string> s = state;
    if (value)
      s[key] = *value;
    else
      s.erase(key);
    return s;
  };
  auto load_error = [&](const std::map<std::string, std::string>& s) {
    optim::GradScaler target;
    std::string message = error_of([&] { target.load_state_dict(s); });
    CHECK(target.get_scale() == 65536.0);  // nothing changed
    CHECK(target.get_growth_interval() == 2000);
    return message;
  };
  CHECK_CONTAINS(load_error({}), "[GradScaler] expected a state_dict with scale");
  CHECK_CONTAINS(load_error({}), "got an empty one");
  CHECK_CONTAINS(load_error(with("scale", std::nullopt)),
                 "[GradScaler] expected the state_dict key \"scale\", got a state_dict without it");
  CHECK_CONTAINS(load_error(with("_growth_tracker", std::nullopt)), "\"_growth_tracker\"");
  CHECK_CONTAINS(load_error(with("growth_tracker", "1")),
                 "got \"growth_tracker\" = \"1\"");
  CHECK_CONTAINS(load_error(with("scale", "abc")),
                 "[GradScaler] expected \"scale\" to be a finite number, got \"abc\"");
  CHECK_CONTAINS(load_error(with("scale", "6x")), "got \"6x\"");
  CHECK_CONTAINS(load_error(with("scale", "")), "got \"\"");
  CHECK_CONTAINS(load_error(with("scale", "inf")), "got \"inf\"");
  CHECK_CONTAINS(load_error(with("scale", "nan")), "got \"nan\"");
  CHECK_CONTAINS(load_error(with("scale", "-2")),
                 "[GradScaler] expected \"scale\" to be finite and > 0 as a float32, got \"-2\"");
  CHECK_CONTAINS(load_error(with("scale", "0")), "got \"0\"");
  CHECK_CONTAINS(load_error(with("scale", "1e39")), "got \"1e39\"");  // inf as float32
  CHECK_CONTAINS(load_error(with("growth_factor", "1")),
                 "[GradScaler] expected \"growth_factor\" > 1, got \"1\"");
  CHECK_CONTAINS(load_error(with("backoff_factor", "1.5")),
                 "[GradScaler] expected \"backoff_factor\" in (0, 1), got \"1.5\"");
  CHECK_CONTAINS(load_error(with("backoff_factor", "0")), "got \"0\"");
  CHECK_CONTAINS(load_error(with("growth_interval", "2.5")),
                 "[GradScaler] expected \"growth_interval\" to be a whole number in [1, 2^31 - 1], "
                 "got \"2.5\"");
  CHECK_CONTAINS(load_error(with("growth_interval", "0")), "got \"0\"");
  CHECK_CONTAINS(load_error(with("_growth_tracker", "4")),
                 "[GradScaler] expected \"_growth_tracker\" to be a whole number in "
                 "[0, growth_interval = 4), got \"4\"");
  CHECK_CONTAINS(load_error(with("_growth_tracker", "-1")), "got \"-1\"");
  CHECK_CONTAINS(load_error(with("_growth_tracker", "0.5")), "got \"0.5\"");
}

TEST_CASE("grad_scaler: options and call order are checked as torch does") {
  CHECK_CONTAINS(error_of([] { optim::GradScaler s({.init_scale = 0}); }),
                 "[GradScaler] expected init_scale to be finite and > 0 as a float32, got 0");
  CHECK_CONTAINS(error_of([] { optim::GradScaler s({.init_scale = INFINITY}); }), "got inf");
  CHECK_CONTAINS(error_of([] { optim::GradScaler s({.growth_factor = 1.0}); }),
                 "[GradScaler] expected growth_factor > 1 and finite, got 1");
  CHECK_CONTAINS(error_of([] { optim::GradScaler s({.backoff_factor = 1.0}); }),
                 "[GradScaler] expected backoff_factor in (0, 1), got 1");
  CHECK_CONTAINS(error_of([] { optim::GradScaler s({.backoff_factor = NAN}); }), "got nan");
  CHECK_CONTAINS(error_of([] { optim::GradScaler s({.growth_interval = 0}); }),
                 "[GradScaler] expected growth_interval in [1, 2^31 - 1], got 0");
  optim::GradScaler checked;
  CHECK_CONTAINS(error_of([&] { checked.set_growth_factor(0.5); }), "got 0.5");
  CHECK_CONTAINS(error_of([&] { checked.update(-1.0); }),
                 "[GradScaler] expected update(new_scale)'s new_scale to be finite and > 0");
  CHECK_CONTAINS(error_of([&] { checked.scale(test::i64({1, 2})); }),
                 "[GradScaler] expected a floating-point loss in scale(), got Tensor[2] int64");

  rg::Tensor p = param({1.0f, 2.0f});
  optim::SGD opt({p}, {.lr = 0.1});
  optim::GradScaler scaler;
  auto backward = [&] {
    opt.zero_grad();
    scaler.scale((p * p).sum()).backward();
  };
  // no gradient at all: step has no inf check to go on (torch: an AssertionError)
  CHECK_CONTAINS(error_of([&] { scaler.step(opt); }),
                 "[GradScaler] expected at least one gradient among the optimizer's parameters");
  scaler.update(65536.0);  // forget that optimizer's unscale_
  CHECK_CONTAINS(error_of([&] { scaler.update(); }),
                 "[GradScaler] expected step() or unscale_() on an optimizer with gradients "
                 "before update()");
  backward();
  scaler.unscale_(opt);
  CHECK_CONTAINS(error_of([&] { scaler.unscale_(opt); }),
                 "[GradScaler] expected one unscale_() per optimizer between update()s, got a "
                 "second unscale_()");
  CHECK(scaler.step(opt));
  CHECK_CONTAINS(error_of([&] { scaler.step(opt); }),
                 "[GradScaler] expected one step() per optimizer between update()s");
  CHECK_CONTAINS(error_of([&] { scaler.unscale_(opt); }),
                 "[GradScaler] expected unscale_() before step(), got unscale_() after step()");
  scaler.update();
  backward();  // a new iteration starts clean
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(scaler.get_growth_tracker() == 2);
}

TEST_CASE("grad_scaler: a disabled scaler passes the loss through and always steps") {
  rg::Tensor p = param({1.0f, 2.0f});
  optim::SGD opt({p}, {.lr = 0.5});
  optim::GradScaler scaler({.enabled = false});
  CHECK_FALSE(scaler.is_enabled());
  CHECK(scaler.get_scale() == 1.0);
  rg::Tensor loss = (p * p).sum();
  rg::Tensor scaled = scaler.scale(loss);
  CHECK(scaled.impl_ptr() == loss.impl_ptr());
  scaled.backward();
  set_grad_element(p, 0, INFINITY);  // not looked at
  scaler.unscale_(opt);              // nothing to do
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(std::isinf(p.tolist<double>()[0]));
  CHECK(p.tolist<double>()[1] == 0.0);  // 2 − 0.5·4
}

TEST_CASE("grad_scaler: the agree hook decides for every rank") {
  rg::Tensor p = param({1.0f, -1.0f});
  optim::SGD opt({p}, {.lr = 0.1});
  std::vector<bool> asked;
  // As if another rank had found an inf: this rank's gradients are finite, yet it skips.
  optim::GradScaler scaler({.init_scale = 16.0, .agree = [&](bool here) {
                              asked.push_back(here);
                              return true;
                            }});
  opt.zero_grad();
  scaler.scale((p * p).sum()).backward();
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(asked == std::vector<bool>{false});  // called once, with this rank's answer
  CHECK(p.tolist<double>() == std::vector<double>{1, -1});
  CHECK(scaler.get_scale() == 8.0);

  // An identity agree changes nothing; one that says "no inf" makes a NaN rank step —
  // the hook's answer is the one the scaler goes by.
  std::vector<bool> asked2;
  optim::GradScaler trusting({.init_scale = 16.0, .agree = [&](bool here) {
                                asked2.push_back(here);
                                return false;
                              }});
  opt.zero_grad();
  trusting.scale((p * p).sum()).backward();
  set_grad_element(p, 1, NAN);
  trusting.unscale_(opt);
  CHECK(trusting.step(opt));  // unscale_ done already: agree is not asked twice
  trusting.update();
  CHECK(asked2 == std::vector<bool>{true});
  CHECK(trusting.get_scale() == 16.0);
  CHECK(trusting.get_growth_tracker() == 1);
}
