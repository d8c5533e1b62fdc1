// test_checkpoint.cpp — a training checkpoint as one file: a resumed run equals the
// straight one bit for bit, mismatches and damage are clear errors, and the temporary
// files of killed saves are cleaned up. (The examples' kill -9 and resume runs are
// tests/check_resume.sh.)
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <ringgrad/ringgrad.h>

#include "test_helpers.h"

using test::contains;
using test::error_of;

namespace {

// A small model with dropout, so the generator's state matters to the result.
struct Net : rg::nn::Module {
  rg::nn::Linear fc1{4, 8}, fc2{8, 3};
  rg::nn::Dropout drop{0.3};
  Net() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("drop", drop);
  }
  rg::Tensor forward(const rg::Tensor& x) { return fc2(drop(rg::relu(fc1(x)))); }
};

// One step of a fixed regression, the batch drawn from `data` (its own generator).
void train_step(Net& net, rg::optim::Optimizer& opt, rg::optim::LRSchedule& schedule,
                rg::Generator& data) {
  rg::Tensor x = rg::randn({5, 4}, {}, &data);
  rg::Tensor y = rg::randn({5, 3}, {}, &data);
  opt.zero_grad();
  rg::Tensor loss = rg::nn::mse_loss(net.forward(x), y);
  loss.backward();
  opt.step();
  schedule.step();
}

bool same_bits(const rg::NamedTensors& a, const rg::NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const rg::Tensor x = a[i].second.contiguous(), y = b[i].second.contiguous();
    if (a[i].first != b[i].first || x.shape() != y.shape() || x.dtype() != y.dtype() ||
        std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0)
      return false;
  }
  return true;
}

}  // namespace

TEST_CASE("checkpoint: a run saved, restored into fresh objects and continued equals the straight run") {
  test::TempDir dir;
  const std::string path = dir / "run.ckpt";
  auto make = [](Net& net) {
    return rg::optim::AdamW(net.parameters(), {.lr = 1e-2, .weight_decay = 0.01});
  };

  // Straight: 10 steps.
  rg::manual_seed(3);
  Net straight;
  rg::optim::AdamW opt = make(straight);
  rg::optim::WarmupCosine schedule(opt, {.warmup_steps = 3, .total_steps = 10});
  rg::Generator data(11);
  for (int i = 0; i < 10; ++i) train_step(straight, opt, schedule, data);

  // Interrupted: 4 steps, save, then everything new (another seed on purpose), restore, 6 more.
  rg::manual_seed(3);
  {
    Net first;
    rg::optim::AdamW opt1 = make(first);
    rg::optim::WarmupCosine schedule1(opt1, {.warmup_steps = 3, .total_steps = 10});
    rg::Generator data1(11);
    for (int i = 0; i < 4; ++i) train_step(first, opt1, schedule1, data1);
    rg::Checkpoint ckpt = rg::capture(first, opt1, &schedule1);
    ckpt.progress = {.step = 4, .epoch = 0, .batch = 4};
    ckpt.generators["data"] = data1;
    ckpt.run = {{"batch_size", "5"}};
    rg::save_checkpoint(ckpt, path);
  }
  rg::manual_seed(99);
  Net second;
  rg::optim::AdamW opt2 = make(second);
  rg::optim::WarmupCosine schedule2(opt2, {.warmup_steps = 3, .total_steps = 10});
  rg::Checkpoint ckpt = rg::load_checkpoint(path);
  CHECK(ckpt.progress == rg::TrainProgress{.step = 4, .epoch = 0, .batch = 4});
  CHECK(ckpt.world_size == 1);
  CHECK(ckpt.source == path);
  rg::restore(ckpt, second, opt2, &schedule2);
  rg::check_run(ckpt, 1, {{"batch_size", "5"}});
  rg::Generator data2 = ckpt.generators.at("data");
  CHECK(opt2.steps() == 4);
  CHECK(schedule2.steps() == 4);
  for (int i = 0; i < 6; ++i) train_step(second, opt2, schedule2, data2);

  CHECK(same_bits(straight.state_dict(), second.state_dict()));
  CHECK(same_bits(opt.state_dict(nullptr), opt2.state_dict(nullptr)));
  CHECK(opt.param_groups()[0].lr == opt2.param_groups()[0].lr);
  CHECK(rg::default_generator().offset() > 0);
}

TEST_CASE("checkpoint: a run with other settings or another world size is refused, naming both values") {
  test::TempDir dir;
  rg::manual_seed(0);
  Net net;
  rg::optim::Adam opt(net.parameters(), {.lr = 1e-3});
  rg::Checkpoint ckpt = rg::capture(net, opt);
  ckpt.world_size = 2;
  ckpt.run = {{"batch_size", "64"}, {"seed", "0"}};
  rg::save_checkpoint(ckpt, dir / "a.ckpt");
  rg::Checkpoint back = rg::load_checkpoint(dir / "a.ckpt");
  rg::check_run(back, 2, {{"batch_size", "64"}, {"seed", "0"}});
  std::string e = error_of([&] { rg::check_run(back, 2, {{"batch_size", "32"}}); });
  CHECK(contains(e, "batch_size = 64"));
  CHECK(contains(e, "batch_size = 32"));
  CHECK(contains(e, dir / "a.ckpt"));
  e = error_of([&] { rg::check_run(back, 4, {}); });
  CHECK(contains(e, "written by 2 rank(s); this run has 4"));
  e = error_of([&] { rg::check_run(back, 2, {{"lr", "0.1"}}); });
  CHECK(contains(e, "expected setting 'lr'"));

  // A model of another shape: the error names the file and the key.
  struct Other : rg::nn::Module {
    rg::nn::Linear fc1{4, 9};
    Other() { register_module("fc1", fc1); }
  } other;
  rg::optim::Adam other_opt(other.parameters(), {.lr = 1e-3});
  e = error_of([&] { rg::restore(back, other, other_opt); });
  CHECK(contains(e, dir / "a.ckpt"));
  CHECK(contains(e, "does not fit"));
  // A schedule asked for, none saved.
  rg::optim::StepLR sched(opt, 10);
  e = error_of([&] { rg::restore(back, net, opt, &sched); });
  CHECK(contains(e, "schedule.steps"));
}

TEST_CASE("checkpoint: damaged or foreign files are clear errors naming the file, key and value") {
  test::TempDir dir;
  rg::manual_seed(0);
  Net net;
  rg::optim::Adam opt(net.parameters(), {.lr = 1e-3});
  const rg::Checkpoint good = rg::capture(net, opt);

  // Rewrites the good checkpoint's file with one metadata entry changed (or removed).
  auto with_meta = [&](const std::string& key, const char* value) {
    std::map<std::string, std::string> meta;
    rg::save_checkpoint(good, dir / "src.ckpt");
    rg::NamedTensors t = rg::load_safetensors(dir / "src.ckpt", &meta);
    if (value) meta[key] = value; else meta.erase(key);
    rg::save_safetensors(t, dir / "bad.ckpt", meta);
    return error_of([&] { rg::load_checkpoint(dir / "bad.ckpt"); });
  };
  for (auto [key, value, expect] : std::initializer_list<std::tuple<const char*, const char*, const char*>>{
           {"step", "abc", "expected step to be an integer"},
           {"step", "-3", "got '-3'"},
           {"epoch", "1e300", "got '1e300'"},
           {"batch", "99999999999999999999999", "got '99999999999999999999999'"},
           {"world_size", "0", "expected world_size to be an integer in [1, "},
           {"rng.default.offset", "nan", "rng.default.offset"},
           {"schedule.steps", "x", "schedule.steps"},
           {"version", "7", "expected version 1, got '7'"},
           {"format", "ringgrad", "expected format 'ringgrad-checkpoint'"},
       }) {
    CAPTURE(key);
    std::string e = with_meta(key, value);
    CHECK(contains(e, dir / "bad.ckpt"));
    CHECK(contains(e, expect));
  }
  CHECK(contains(with_meta("step", nullptr), "expected metadata key 'step'"));
  CHECK(contains(with_meta("rng.default.seed", nullptr), "expected metadata key 'rng.default.seed'"));

  // A model-only file (nn::save) is not a checkpoint.
  rg::nn::save(net, dir / "model.safetensors");
  CHECK(contains(error_of([&] { rg::load_checkpoint(dir / "model.safetensors"); }),
                 "a model-only file loads with nn::load"));
  // Tensors that are neither model.* nor optim.*
  std::map<std::string, std::string> meta;
  rg::save_checkpoint(good, dir / "src.ckpt");
  rg::NamedTensors t = rg::load_safetensors(dir / "src.ckpt", &meta);
  t.emplace_back("stray", rg::zeros({1}));
  rg::save_safetensors(t, dir / "stray.ckpt", meta);
  CHECK(contains(error_of([&] { rg::load_checkpoint(dir / "stray.ckpt"); }), "got 'stray'"));
  // A truncated file
  {
    std::ifstream in(dir / "src.ckpt", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir / "cut.ckpt", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  CHECK(contains(error_of([&] { rg::load_checkpoint(dir / "cut.ckpt"); }), dir / "cut.ckpt"));
}

TEST_CASE("checkpoint: the temporary files of killed saves are removed, a live writer's are kept") {
  test::TempDir dir;
  const std::string path = dir / "run.ckpt";
  // pid 0 and an out-of-range pid stand for processes that are gone; our own pid is alive.
  std::ofstream(path + ".tmp.2147483646") << "left by a kill";
  std::ofstream(path + ".tmp.999999999") << "left by a kill";
  std::ofstream(path + ".tmp." + std::to_string(::getpid())) << "a save in progress";
  std::ofstream(path + ".tmp.notapid") << "someone else's";
  std::ofstream(dir / "other.ckpt.tmp.999999999") << "another checkpoint's";
  CHECK(rg::remove_stale_temporaries(path) == 2);
  CHECK(!std::filesystem::exists(path + ".tmp.999999999"));
  CHECK(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
  CHECK(std::filesystem::exists(path + ".tmp.notapid"));
  CHECK(std::filesystem::exists(dir / "other.ckpt.tmp.999999999"));
}

TEST_CASE("checkpoint: a schedule's whole state is kept as schedule.<key>, and files with schedule.steps only still restore") {
  test::TempDir dir;
  rg::manual_seed(0);
  Net net;
  rg::optim::Adam opt(net.parameters(), {.lr = 0.1});
  // ReduceLROnPlateau's state is more than a step count.
  rg::optim::ReduceLROnPlateau plateau(opt, {.patience = 0, .cooldown = 3});
  for (double metric : {1.0, 0.5, 0.7}) plateau.step(metric);
  REQUIRE(plateau.cooldown_counter() == 3);
  rg::save_checkpoint(rg::capture(net, opt, &plateau), dir / "plateau.ckpt");
  rg::Checkpoint back = rg::load_checkpoint(dir / "plateau.ckpt");
  CHECK(back.schedule_steps == 3);
  CHECK(back.schedule.at("best") == "0.5");
  rg::optim::Adam opt2(net.parameters(), {.lr = 0.1});
  rg::optim::ReduceLROnPlateau plateau2(opt2, {.patience = 0, .cooldown = 3});
  rg::restore(back, net, opt2, &plateau2);
  CHECK(plateau2.state_dict() == plateau.state_dict());
  CHECK(opt2.param_groups()[0].lr == opt.param_groups()[0].lr);  // the lr is the optimizer's
  // Another kind of schedule: the error names the file and both kinds.
  rg::optim::StepLR step_lr(opt2, 10);
  std::string e = error_of([&] { rg::restore(back, net, opt2, &step_lr); });
  CHECK(contains(e, dir / "plateau.ckpt"));
  CHECK(contains(e, "the schedule's state does not fit"));
  CHECK(contains(e, "\"best\""));

  // What older checkpoints (and examples/gpt.cpp) write: schedule_steps alone.
  rg::Checkpoint old = rg::capture(net, opt);
  old.schedule_steps = 4;
  rg::save_checkpoint(old, dir / "old.ckpt");
  back = rg::load_checkpoint(dir / "old.ckpt");
  CHECK(back.schedule == std::map<std::string, std::string>{{"steps", "4"}});
  rg::optim::WarmupCosine cosine(opt2, {.warmup_steps = 2, .total_steps = 10});
  rg::restore(back, net, opt2, &cosine);
  CHECK(cosine.steps() == 4);
  CHECK(opt2.param_groups()[0].lr == 0.1 * cosine.factor(4));
  // …but not into a ReduceLROnPlateau, whose state it lacks.
  e = error_of([&] { rg::restore(back, net, opt2, &plateau2); });
  CHECK(contains(e, "expected the schedule's state \"best\", got a checkpoint without it"));

  // A damaged value: the key and the value are named.
  rg::Checkpoint bad = rg::capture(net, opt, &plateau);
  bad.schedule["num_bad_epochs"] = "two";
  rg::save_checkpoint(bad, dir / "bad.ckpt");
  back = rg::load_checkpoint(dir / "bad.ckpt");
  e = error_of([&] { rg::restore(back, net, opt2, &plateau2); });
  CHECK(contains(e, "\"num_bad_epochs\" to be a whole number in [0, 2^53], got \"two\""));
}

TEST_CASE("checkpoint: fp16's GradScaler state is kept as grad_scaler.<key>; missing or damaged state is a clear error that changes nothing") {
  test::TempDir dir;
  rg::manual_seed(0);
  Net net;
  rg::optim::Adam opt(net.parameters(), {.lr = 1e-2});
  // Move the scale and the growth tracker away from a fresh scaler's: two steps that do
  // not overflow (tracker 2 of 5), then a scale set by hand.
  rg::optim::GradScaler scaler({.init_scale = 256.0, .growth_interval = 5});
  rg::Generator data(5);
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    rg::Tensor loss = rg::nn::mse_loss(net.forward(rg::randn({5, 4}, {}, &data)),
                                       rg::randn({5, 3}, {}, &data));
    scaler.scale(loss).backward();
    CHECK(scaler.step(opt));
    scaler.update();
  }
  scaler.update(1024.0);
  scaler.set_growth_factor(3.0);
  REQUIRE(scaler.get_growth_tracker() == 2);
  rg::save_checkpoint(rg::capture(net, opt, nullptr, &scaler), dir / "fp16.ckpt");
  rg::Checkpoint back = rg::load_checkpoint(dir / "fp16.ckpt");
  CHECK(back.grad_scaler == scaler.state_dict());
  std::map<std::string, std::string> meta;
  rg::load_safetensors(dir / "fp16.ckpt", &meta);
  CHECK(meta.at("grad_scaler.scale") == "1024");
  CHECK(meta.at("grad_scaler._growth_tracker") == "2");

  // Restored into fresh objects: the same state, so the run continues exactly.
  rg::manual_seed(1);
  Net net2;
  rg::optim::Adam opt2(net2.parameters(), {.lr = 1e-2});
  rg::optim::GradScaler fresh;
  rg::restore(back, net2, opt2, nullptr, &fresh);
  CHECK(fresh.state_dict() == scaler.state_dict());
  CHECK(fresh.get_scale() == 1024.0);
  CHECK(fresh.get_growth_tracker() == 2);
  CHECK(fresh.get_growth_interval() == 5);
  CHECK(fresh.get_growth_factor() == 3.0);
  // The same through restore_grad_scaler alone (examples/gpt.cpp).
  rg::optim::GradScaler alone;
  rg::restore_grad_scaler(back, alone);
  CHECK(alone.state_dict() == scaler.state_dict());

  // A disabled scaler (fp32, bf16) writes nothing, so those files stay as they were, and
  // ignores a state that is there.
  rg::optim::GradScaler disabled({.enabled = false});
  rg::save_checkpoint(rg::capture(net, opt, nullptr, &disabled), dir / "fp32.ckpt");
  meta.clear();
  rg::load_safetensors(dir / "fp32.ckpt", &meta);
  for (const auto& [key, value] : meta) CHECK_MESSAGE(key.rfind("grad_scaler.", 0) != 0, key);
  rg::Checkpoint fp32 = rg::load_checkpoint(dir / "fp32.ckpt");
  CHECK(fp32.grad_scaler.empty());
  rg::restore(back, net2, opt2, nullptr, &disabled);
  rg::restore(fp32, net2, opt2, nullptr, &disabled);
  rg::restore(fp32, net2, opt2);
  CHECK(disabled.state_dict().empty());

  // Everything restore may change, to check that a refused restore changes nothing.
  rg::manual_seed(2);
  Net net3;
  rg::optim::Adam opt3(net3.parameters(), {.lr = 1e-2});
  rg::optim::GradScaler scaler3({.init_scale = 8.0});
  const rg::NamedTensors model_before = net3.state_dict();
  std::map<std::string, std::string> opt_meta_before;
  const rg::NamedTensors opt_before = opt3.state_dict(&opt_meta_before);
  const auto scaler_before = scaler3.state_dict();
  const uint64_t offset_before = rg::default_generator().offset();
  auto unchanged = [&] {
    std::map<std::string, std::string> opt_meta;
    const rg::NamedTensors opt_now = opt3.state_dict(&opt_meta);
    return same_bits(net3.state_dict(), model_before) && same_bits(opt_now, opt_before) &&
           opt_meta == opt_meta_before && scaler3.state_dict() == scaler_before &&
           rg::default_generator().offset() == offset_before;
  };

  // An enabled scaler and a checkpoint without its state (written under fp32 or bf16).
  std::string e = error_of([&] { rg::restore(fp32, net3, opt3, nullptr, &scaler3); });
  CHECK(contains(e, dir / "fp32.ckpt"));
  CHECK(contains(e, "expected the GradScaler's state (grad_scaler.<key>), found none"));
  CHECK(unchanged());
  e = error_of([&] { rg::restore_grad_scaler(fp32, scaler3); });
  CHECK(contains(e, "expected the GradScaler's state (grad_scaler.<key>), found none"));
  CHECK(unchanged());

  // A damaged value: loads (the text is parsed by the scaler), then restore names the
  // file, the key and the value, and changes nothing.
  for (auto [key, value, expect] : std::initializer_list<std::tuple<const char*, const char*, const char*>>{
           {"grad_scaler.scale", "abc", "expected \"scale\" to be a finite number, got \"abc\""},
           {"grad_scaler.scale", "inf", "expected \"scale\" to be a finite number, got \"inf\""},
           {"grad_scaler.scale", "-2", "got \"-2\""},
           {"grad_scaler._growth_tracker", "5", "got \"5\""},
           {"grad_scaler.growth_factor", "1", "got \"1\""},
           {"grad_scaler.loss_scale", "2", "got \"loss_scale\" = \"2\""},
       }) {
    CAPTURE(key);
    meta.clear();
    rg::NamedTensors t = rg::load_safetensors(dir / "fp16.ckpt", &meta);
    meta[key] = value;
    rg::save_safetensors(t, dir / "bad.ckpt", meta);
    rg::Checkpoint bad = rg::load_checkpoint(dir / "bad.ckpt");
    e = error_of([&] { rg::restore(bad, net3, opt3, nullptr, &scaler3); });
    CHECK(contains(e, dir / "bad.ckpt"));
    CHECK(contains(e, "the GradScaler's state does not fit"));
    CHECK(contains(e, "grad_scaler.<key>"));
    CHECK(contains(e, expect));
    CHECK(unchanged());
  }
}

TEST_CASE("checkpoint: an asynchronous save writes the state as it was when save() returned") {
  test::TempDir dir;
  rg::manual_seed(5);
  Net net;
  rg::optim::AdamW opt(net.parameters(), {.lr = 1e-2});
  rg::optim::WarmupCosine schedule(opt, {.warmup_steps = 1, .total_steps = 10});
  rg::Generator data(7);
  for (int i = 0; i < 2; ++i) train_step(net, opt, schedule, data);
  const rg::NamedTensors model_then = rg::capture(net, opt).model, optim_then = rg::capture(net, opt).optimizer;
  std::vector<rg::NamedTensors> copies;  // capture() gives the live tensors: copy them to compare
  for (const rg::NamedTensors* part : {&model_then, &optim_then}) {
    rg::NamedTensors copy;
    for (const auto& [name, t] : *part) copy.emplace_back(name, t.detach().clone());
    copies.push_back(copy);
  }
  rg::AsyncCheckpointWriter writer;
  rg::Checkpoint ckpt = rg::capture(net, opt, &schedule);
  ckpt.progress = {.step = 2};
  writer.save(std::move(ckpt), dir / "a.ckpt");
  // Training goes on at once: the parameters and moments change under the write.
  for (int i = 0; i < 3; ++i) train_step(net, opt, schedule, data);
  CHECK(!same_bits(net.state_dict(), copies[0]));
  writer.wait();
  CHECK(!writer.in_flight());
  const rg::Checkpoint back = rg::load_checkpoint(dir / "a.ckpt");
  CHECK(back.progress.step == 2);
  CHECK(same_bits(back.model, copies[0]));
  CHECK(same_bits(back.optimizer, copies[1]));
  // The next save waits for the one in flight; both files whole.
  rg::Checkpoint again = rg::capture(net, opt, &schedule);
  again.progress = {.step = 5};
  writer.save(std::move(again), dir / "b.ckpt");
  writer.save(rg::capture(net, opt, &schedule), dir / "c.ckpt");
  writer.wait();
  CHECK(rg::load_checkpoint(dir / "b.ckpt").progress.step == 5);
  CHECK(same_bits(rg::load_checkpoint(dir / "c.ckpt").model, net.state_dict()));
}

TEST_CASE("checkpoint: an asynchronous save's error is thrown by the next wait(), naming the file") {
  test::TempDir dir;
  Net net;
  rg::optim::SGD opt(net.parameters(), {.lr = 0.1});
  rg::AsyncCheckpointWriter writer;
  const std::string bad = dir / "no-such-folder/run.ckpt";
  writer.save(rg::capture(net, opt), bad);
  const std::string error = error_of([&] { writer.wait(); });
  CHECK(contains(error, "the background save of '" + bad + "' failed"));
  writer.wait();  // reported once
  writer.save(rg::capture(net, opt), dir / "ok.ckpt");  // and the writer still works
  writer.wait();
  CHECK(std::filesystem::exists(dir / "ok.ckpt"));
}
