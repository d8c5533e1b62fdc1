// metrics_log.h — the examples' --log FILE.jsonl and --log-every N: one JSON line per
// log interval, for a program (scripts/plot, pandas, jq) to read while or after a run.
//
//   LogOptions log_options{.every = 50};
//   log_options.add_options(app);                 // --log, --log-every
//   MetricsLog log(log_options.path, world.is_main(), /*append=*/resuming);
//   ...
//   if (log_options.due(step)) log.write({{"step", step}, {"loss", loss}, …});
//
// A line, its fields in the order the program gives them (those that do not apply are
// left out), elapsed_s last:
//   {"step":469,"epoch":1,"loss":0.4482,"samples_per_s":102773.0,"lr":0.001,
//    "accuracy":0.8457,"elapsed_s":0.752}
// step: optimizer steps taken so far; epoch: the epoch it is in (from 1); loss: the mean
// training loss over the interval's steps and over every rank (examples/metrics.h);
// accuracy (or val_loss, …) only where the program evaluated; samples_per_s or
// tokens_per_s: over the interval, all ranks together; lr: the learning rate of the last
// step; elapsed_s: wall-clock seconds since the log was opened. Only rank 0 writes
// (`writer`); each line is flushed as it is written, so a run that crashes keeps every
// line before the crash. A new run truncates the file, a resumed run (--resume) appends.
#pragma once

#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

// --log FILE.jsonl and --log-every N (steps; the default is each program's own).
struct LogOptions {
  std::string path;
  int64_t every = 50;

  void add_options(CLI::App& app, const char* every_help = "steps per --log line") {
    app.add_option("--log", path, "write training metrics to FILE.jsonl, one JSON line per log interval");
    app.add_option("--log-every", every, every_help)->check(CLI::NonNegativeNumber);
  }
  bool due(int64_t step) const { return every > 0 && step % every == 0; }
};

class MetricsLog {
 public:
  using Line = nlohmann::ordered_json;  // fields in the order they are given

  // Opens `path` on the rank that writes (`writer`); no file elsewhere or with an empty path.
  MetricsLog(const std::string& path, bool writer, bool append = false)
      : start_(std::chrono::steady_clock::now()) {
    if (path.empty() || !writer) return;
    file_.reset(std::fopen(path.c_str(), append ? "a" : "w"));
    RG_CHECK(file_ != nullptr, "--log", "cannot open '", path, "' for writing");
  }

  bool enabled() const { return file_ != nullptr; }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  // One line: `line`'s fields, then elapsed_s; flushed at once.
  void write(Line line) {
    if (!enabled()) return;
    line["elapsed_s"] = std::round(elapsed() * 1000) / 1000;
    const std::string text = line.dump() + "\n";
    std::fputs(text.c_str(), file_.get());
    std::fflush(file_.get());
  }

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> file_;
  std::chrono::steady_clock::time_point start_;
};

// A rate (things per second) over an interval: call rate(things so far) at each log line.
class RateMeter {
 public:
  double rate(double total) {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - since_).count();
    const double r = seconds > 0 ? (total - at_) / seconds : 0.0;
    since_ = now, at_ = total;
    return r;
  }
  void restart(double total) { since_ = std::chrono::steady_clock::now(), at_ = total; }

 private:
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
  double at_ = 0;
};
