// checkpoint.cpp — one file per checkpoint: prefixes, metadata, strict parsing.
#include "ringgrad/optim/checkpoint.h"

#include <signal.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <system_error>
#include <utility>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/optim/sharded_checkpoint.h"

namespace ringgrad {

namespace {

constexpr const char* kFormat = "ringgrad-checkpoint";
constexpr const char* kVersion = "1";
constexpr const char* kModel = "model.";
constexpr const char* kOptim = "optim.";
constexpr const char* kRun = "run.";
constexpr const char* kSchedule = "schedule.";
constexpr const char* kGradScaler = "grad_scaler.";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// An integer in [low, high] from a metadata value: all of it a number, nothing else.
int64_t parse_int(const std::string& path, const std::string& key, const std::string& text,
                  int64_t low, int64_t high) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  RG_CHECK(ec == std::errc() && end == text.data() + text.size() && value >= low && value <= high,
           "load_checkpoint", "'", path, "': expected ", key, " to be an integer in [", low, ", ",
           high, "], got '", text, "'");
  return value;
}

uint64_t parse_u64(const std::string& path, const std::string& key, const std::string& text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  RG_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(),
           "load_checkpoint", "'", path, "': expected ", key,
           " to be an unsigned 64-bit integer, got '", text, "'");
  return value;
}

const std::string& required(const std::map<std::string, std::string>& meta,
                            const std::string& path, const std::string& key) {
  auto it = meta.find(key);
  RG_CHECK(it != meta.end(), "load_checkpoint", "'", path, "': expected metadata key '", key,
           "' (is it a ringgrad checkpoint? write one with save_checkpoint)");
  return it->second;
}

bool process_alive(long pid) {
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// Where errors say the checkpoint came from.
std::string where_of(const Checkpoint& c) {
  return c.source.empty() ? std::string("checkpoint") : "'" + c.source + "'";
}

// `scaler` with the checkpoint's GradScaler state loaded, checked in full; `scaler` itself
// is not touched, so a state that does not fit changes nothing.
optim::GradScaler loaded_grad_scaler(const Checkpoint& c, const optim::GradScaler& scaler) {
  const std::string where = where_of(c);
  RG_CHECK(!c.grad_scaler.empty(), "restore", where,
           ": expected the GradScaler's state (grad_scaler.<key>), found none (saved by a run "
           "without fp16's GradScaler? resume it under the same --precision)");
  optim::GradScaler copy = scaler;
  try {
    copy.load_state_dict(c.grad_scaler);
  } catch (const Error& e) {
    fail("restore", where, ": the GradScaler's state does not fit: ", e.what(),
         " (its grad_scaler.<key> metadata)");
  }
  return copy;
}

}  // namespace

Checkpoint capture(const nn::Module& model, const optim::Optimizer& optimizer,
                   const optim::Schedule* schedule, const optim::GradScaler* scaler) {
  Checkpoint c;
  c.model = model.state_dict();
  c.optimizer = optimizer.state_dict(&c.optimizer_meta);
  c.schedule_steps = schedule ? schedule->steps() : -1;
  if (schedule) c.schedule = schedule->state_dict();
  if (scaler && scaler->is_enabled()) c.grad_scaler = scaler->state_dict();
  c.generators["default"] = default_generator();
  return c;
}

int remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  int removed = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!starts_with(name, prefix)) continue;
    // The writer's pid follows the prefix: a save in progress (alive) is left alone.
    const std::string digits = name.substr(prefix.size());
    long pid = 0;
    auto [end_ptr, err] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (err != std::errc() || end_ptr != digits.data() + digits.size()) continue;  // not ours
    if (process_alive(pid)) continue;
    std::error_code remove_error;
    if (fs::remove(it->path(), remove_error)) ++removed;
  }
  return removed;
}

std::map<std::string, std::string> checkpoint_metadata(const Checkpoint& c) {
  std::map<std::string, std::string> meta{
      {"format", kFormat},
      {"version", kVersion},
      {"step", std::to_string(c.progress.step)},
      {"epoch", std::to_string(c.progress.epoch)},
      {"batch", std::to_string(c.progress.batch)},
      {"world_size", std::to_string(c.world_size)},
  };
  for (const auto& [key, value] : c.schedule) meta[kSchedule + key] = value;
  for (const auto& [key, value] : c.grad_scaler) meta[kGradScaler + key] = value;
  if (c.schedule_steps >= 0) meta["schedule.steps"] = std::to_string(c.schedule_steps);
  for (const auto& [key, value] : c.optimizer_meta) meta[kOptim + key] = value;
  for (const auto& [key, value] : c.run) meta[kRun + key] = value;
  for (const auto& [name, g] : c.generators) {
    meta["rng." + name + ".seed"] = std::to_string(g.seed());
    meta["rng." + name + ".offset"] = std::to_string(g.offset());
  }
  return meta;
}

void save_checkpoint(const Checkpoint& c, const std::string& path) {
  if (names_directory(path)) return save_sharded_checkpoint(c, path);  // one rank's pieces
  remove_stale_temporaries(path);
  NamedTensors tensors;
  tensors.reserve(c.model.size() + c.optimizer.size());
  for (const auto& [key, t] : c.model) tensors.emplace_back(kModel + key, t);
  for (const auto& [key, t] : c.optimizer) tensors.emplace_back(kOptim + key, t);
  save_safetensors(tensors, path, checkpoint_metadata(c));
}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
}

void AsyncCheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
  if (std::exception_ptr e = std::exchange(error_, nullptr)) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& failed) {
      RG_CHECK(false, "AsyncCheckpointWriter", "the background save of '", path_, "' failed: ", failed.what());
    }
  }
}

void AsyncCheckpointWriter::save(Checkpoint c, const std::string& path) {
  wait();
  {
    NoGradGuard no_grad;
    for (NamedTensors* part : {&c.model, &c.optimizer})
      for (auto& [name, t] : *part) t = t.device().is_cpu() ? t.detach().clone() : t.detach().to(kCPU);
  }
  path_ = path;
  thread_ = std::thread([this, c = std::move(c), path] {
    try {
      save_checkpoint(c, path);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

Checkpoint checkpoint_from_metadata(const std::map<std::string, std::string>& meta,
                                    const std::string& path) {
  const std::string& format = required(meta, path, "format");
  RG_CHECK(format == kFormat, "load_checkpoint", "'", path, "': expected format '", kFormat,
           "', got '", format,
           "' (a model-only file loads with nn::load; a checkpoint is written by save_checkpoint)");
  const std::string& version = required(meta, path, "version");
  RG_CHECK(version == kVersion, "load_checkpoint", "'", path, "': expected version ", kVersion,
           ", got '", version, "' (written by another version of ringgrad)");

  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Checkpoint c;
  c.source = path;
  c.progress.step = parse_int(path, "step", required(meta, path, "step"), 0, kMax);
  c.progress.epoch = parse_int(path, "epoch", required(meta, path, "epoch"), 0, kMax);
  c.progress.batch = parse_int(path, "batch", required(meta, path, "batch"), 0, kMax);
  c.world_size = static_cast<int>(
      parse_int(path, "world_size", required(meta, path, "world_size"), 1, 1 << 24));
  if (auto it = meta.find("schedule.steps"); it != meta.end())
    c.schedule_steps = parse_int(path, "schedule.steps", it->second, 0, kMax);

  for (const auto& [key, value] : meta) {
    if (starts_with(key, kOptim)) {
      c.optimizer_meta[key.substr(6)] = value;
    } else if (starts_with(key, kRun)) {
      c.run[key.substr(4)] = value;
    } else if (starts_with(key, kSchedule)) {
      // parsed strictly by the schedule's load_state_dict (restore), steps here too
      c.schedule[key.substr(9)] = value;
    } else if (starts_with(key, kGradScaler)) {
      // parsed strictly by GradScaler::load_state_dict (restore)
      c.grad_scaler[key.substr(12)] = value;
    } else if (starts_with(key, "rng.")) {
      // rng.<name>.seed / rng.<name>.offset; the name may itself contain dots
      const size_t dot = key.rfind('.');
      const std::string name = key.substr(4, dot - 4), field = key.substr(dot + 1);
      RG_CHECK(dot > 4 && (field == "seed" || field == "offset"), "load_checkpoint", "'", path,
               "': expected rng.<name>.seed or rng.<name>.offset, got key '", key, "'");
      Generator& g = c.generators[name];
      const uint64_t v = parse_u64(path, key, value);
      if (field == "seed") {
        const uint64_t offset = g.offset();
        g = Generator(v);
        g.advance(offset);
      } else {
        g = Generator(g.seed());
        g.advance(v);
      }
    }
  }
  for (const auto& [name, g] : c.generators)
    for (const char* field : {".seed", ".offset"})
      required(meta, path, "rng." + name + field);
  RG_CHECK(!c.optimizer_meta.empty(), "load_checkpoint", "'", path,
           "': expected the optimizer's state (optim.<key> metadata), found none");
  return c;
}

Checkpoint load_checkpoint(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return load_sharded_as_checkpoint(path);
  remove_stale_temporaries(path);
  std::map<std::string, std::string> meta;
  NamedTensors tensors = load_safetensors(path, &meta);
  Checkpoint c = checkpoint_from_metadata(meta, path);
  for (auto& [key, t] : tensors) {
    if (starts_with(key, kModel)) {
      c.model.emplace_back(key.substr(6), std::move(t));
    } else if (starts_with(key, kOptim)) {
      c.optimizer.emplace_back(key.substr(6), std::move(t));
    } else {
      fail("load_checkpoint", "'", path, "': expected tensors named model.<key> or optim.<key>, got '",
           key, "'");
    }
  }
  RG_CHECK(!c.model.empty(), "load_checkpoint", "'", path,
           "': expected the model's tensors (model.<key>), found none");
  return c;
}

void restore_grad_scaler(const Checkpoint& c, optim::GradScaler& scaler) {
  if (!scaler.is_enabled()) return;  // fp32/bf16: nothing to restore (as torch's ignores it)
  scaler = loaded_grad_scaler(c, scaler);
}

void restore(const Checkpoint& c, nn::Module& model, optim::Optimizer& optimizer,
             optim::Schedule* schedule, optim::GradScaler* scaler) {
  const std::string where = where_of(c);
  // The GradScaler's state is checked first, loaded into a copy that is put in place last:
  // a missing or damaged one changes nothing.
  std::optional<optim::GradScaler> scaler_state;
  if (scaler && scaler->is_enabled()) scaler_state = loaded_grad_scaler(c, *scaler);
  // Both loads check everything before they change anything: the model first, so that a
  // checkpoint of another model changes nothing at all.
  try {
    model.load_state_dict(c.model, /*strict=*/true);
  } catch (const Error& e) {
    fail("restore", where, ": the model's state does not fit: ", e.what());
  }
  try {
    optimizer.load_state_dict(c.optimizer, c.optimizer_meta);
  } catch (const Error& e) {
    fail("restore", where, ": the optimizer's state does not fit: ", e.what());
  }
  if (schedule) {
    RG_CHECK(c.schedule_steps >= 0, "restore", where,
             ": expected a learning-rate schedule's state (schedule.steps), found none");
    std::map<std::string, std::string> state = c.schedule;
    state["steps"] = std::to_string(c.schedule_steps);
    try {
      schedule->load_state_dict(state);
    } catch (const Error& e) {
      fail("restore", where, ": the schedule's state does not fit: ", e.what());
    }
  }
  if (scaler_state) *scaler = std::move(*scaler_state);
  if (auto it = c.generators.find("default"); it != c.generators.end())
    default_generator() = it->second;
}

void check_run(const Checkpoint& c, int world_size,
               const std::map<std::string, std::string>& run) {
  const std::string where = where_of(c);
  RG_CHECK(c.world_size == world_size, "resume", where, " was written by ", c.world_size,
           " rank(s); this run has ", world_size,
           " (an exact resume needs the same world: start it with ", c.world_size, " rank(s))");
  for (const auto& [key, value] : run) {
    auto it = c.run.find(key);
    RG_CHECK(it != c.run.end(), "resume", where, ": expected setting '", key,
             "' in the checkpoint, found none (saved by another program?)");
    RG_CHECK(it->second == value, "resume", where, " was saved with ", key, " = ", it->second,
             ", this run has ", key, " = ", value,
             ": resume with the same setting (another value would be another run)");
  }
}

}  // namespace ringgrad
