// epoch_report.h — what a small training loop shows and logs, in one object: a progress
// bar on rank 0, the loss averaged over every rank (metrics.h), --log FILE.jsonl lines
// (metrics_log.h) and the samples per second. For the examples that teach an algorithm
// (ddp_from_scratch) and should not spend lines on reporting.
//
//   EpochReport report(comm, log_options, world.is_main(), recipe.batch_size * world.size());
//   report.begin_epoch(epoch, epochs, loader.size());
//   for (…) { …; report.step(loss.item()); }
//   report.end_epoch(epoch, accuracy(…), lr);     // prints "[Epoch 1] Loss: …  test acc …"
//   report.samples_per_second();
#pragma once

#include <ringgrad/parallel/communicator.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "metrics.h"
#include "metrics_log.h"
#include "progress_bar.h"

class EpochReport {
 public:
  EpochReport(ringgrad::parallel::Communicator& comm, const LogOptions& log, bool main,
              int64_t samples_per_step)
      : comm_(comm), options_(log), main_(main), per_step_(samples_per_step),
        log_(log.path, main), bar_(main) {}

  void begin_epoch(int epoch, int epochs, int64_t steps_per_epoch) {
    meter_.new_epoch();
    steps_per_epoch_ = steps_per_epoch, batch_ = 0;
    start_ = std::chrono::steady_clock::now();
    bar_.start("Epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs), steps_per_epoch,
               0, double(per_step_), "samples");
  }
  // After each step, on every rank (the log line it may write is a collective).
  void step(double loss, int epoch, double lr) {
    meter_.add(loss);
    samples_ += per_step_;
    ++steps_, ++batch_;
    if (options_.due(steps_) && batch_ < steps_per_epoch_) log_.write(line(epoch, lr));
    bar_.update(batch_);
  }
  void end_epoch(int epoch, double test_acc, double lr) {
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    bar_.close();
    MetricsLog::Line l = line(epoch, lr);
    l["accuracy"] = test_acc;
    log_.write(std::move(l));
    rate_.restart(double(samples_));
    if (main_)
      std::printf("[Epoch %d] Loss: %.4f  test acc %.4f\n", epoch + 1, meter_.epoch_mean(),
                  test_acc);
  }
  double samples_per_second() const { return seconds_ > 0 ? double(samples_) / seconds_ : 0.0; }
  int64_t steps() const { return steps_; }

 private:
  // The interval's line: the mean loss over every rank (a collective) and the speed.
  MetricsLog::Line line(int epoch, double lr) {
    bar_.set_loss(meter_.flush(&comm_));
    return MetricsLog::Line{{"step", steps_}, {"epoch", epoch + 1}, {"loss", meter_.last},
                            {"samples_per_s", std::round(rate_.rate(double(samples_)))},
                            {"lr", lr}};
  }

  ringgrad::parallel::Communicator& comm_;
  LogOptions options_;
  bool main_;
  int64_t per_step_, steps_per_epoch_ = 0, batch_ = 0, steps_ = 0, samples_ = 0;
  double seconds_ = 0;
  std::chrono::steady_clock::time_point start_;
  LossMeter meter_;
  MetricsLog log_;
  RateMeter rate_;
  ProgressBar bar_;
};
