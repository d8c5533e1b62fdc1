// checkpointing.h — the examples' --save, --save-every, --save-async, --resume, --max-steps
// and --auto-resume.
//
//   Checkpointing ckpt;                    // before parsing: registers the four options
//   ckpt.add_options(app);
//   ...
//   rg::TrainProgress at = ckpt.resume(model, opt, world_size, run_settings);  // {0,0,0} if none
//   for (epoch = at.epoch; ...) for (batch : loader.starting_at(...)) {
//     ...one step...
//     if (ckpt.should_stop(step)) break;   // --max-steps
//     if (ckpt.due(step)) save(...)        // every --save-every steps
//   }
//
// A checkpoint is one file (optim/checkpoint.h): model, optimizer, schedule, generators,
// fp16's GradScaler (scale and growth tracker), and where the run was — its step, epoch and the batches of that epoch already taken —
// so `--resume` continues exactly where the save was made: a run killed at any moment and
// resumed from its last checkpoint ends with the same bits as one never interrupted
// (tests/check_resume.sh does exactly that with kill -9). The settings that define the
// run (batch size, learning rate, seed, …) are saved with it and must match on resume.
#pragma once

#include <ringgrad/optim/grad_scaler.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

struct Checkpointing {
  std::string save_path, resume_path;
  int64_t save_every = 0;  // steps between saves; 0: only at the end
  int64_t max_steps = 0;   // stop after this many steps in all; 0: no limit
  bool auto_resume = false;  // resume from --save's file when it exists (a restarted job)
  bool save_async = false;   // write on a background thread (AsyncCheckpointWriter)

  void add_options(CLI::App& app) {
    app.add_option("--save", save_path,
                   "write a checkpoint (model, optimizer, progress) to PATH at the end: one file, or "
                   "a directory of each rank's pieces when PATH ends in '/' or is a directory");
    app.add_option("--save-every", save_every, "also every N steps (with --save)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--resume", resume_path, "continue exactly where the checkpoint at PATH left off");
    app.add_option("--max-steps", max_steps, "stop after this many steps in all (0: no limit)")
        ->check(CLI::NonNegativeNumber);
    app.add_flag("--save-async", save_async,
                 "write each checkpoint on a background thread while training goes on (the state "
                 "copied to host memory first)");
    app.add_flag("--auto-resume", auto_resume,
                 "continue from --save's PATH when it holds a checkpoint, else start afresh (a job "
                 "that scripts/rgrun --max-restarts starts again after a failure)");
  }

  // Errors that a long run would otherwise meet only at its first save. Then, under
  // --auto-resume, the checkpoint to continue from: --save's file once a save has been
  // made (every rank looks; they share the file system, and nothing writes it yet).
  void check() {
    RG_CHECK(save_every == 0 || !save_path.empty(), "--save-every",
             "expected --save PATH to say where to write");
    RG_CHECK(!save_async || !save_path.empty(), "--save-async", "expected --save PATH to say where to write");
    RG_CHECK(!auto_resume || (!save_path.empty() && resume_path.empty()), "--auto-resume",
             "expected --save PATH (the file to continue from) and no --resume");
    // (a directory: once a save has committed its manifest)
    if (auto_resume && (sharded() ? ringgrad::is_sharded_checkpoint(save_path) : std::filesystem::exists(save_path)))
      resume_path = save_path;
  }

  // --save names a directory of shards (optim/sharded_checkpoint.h): it ends in '/' or is one.
  bool sharded() const { return ringgrad::names_directory(save_path); }

  // Where a run is after `step` steps, `batch` of them in epoch `epoch` (of `per_epoch`
  // batches): a finished epoch is recorded as the next one's start.
  static ringgrad::TrainProgress progress(int64_t step, int64_t epoch, int64_t batch,
                                          int64_t per_epoch) {
    if (batch >= per_epoch) return {.step = step, .epoch = epoch + 1, .batch = 0};
    return {.step = step, .epoch = epoch, .batch = batch};
  }

  bool should_stop(int64_t step) const { return max_steps > 0 && step >= max_steps; }
  bool due(int64_t step) const { return !save_path.empty() && save_every > 0 && step % save_every == 0; }

  // Reads --resume's checkpoint (when given), checks it belongs to this run (the world
  // size and every setting in `run`), and restores model, optimizer, schedule, the
  // GradScaler (when given and enabled: fp16) and the default generator. Returns where to
  // continue; {0, 0, 0} without --resume.
  ringgrad::TrainProgress resume(ringgrad::nn::Module& model, ringgrad::optim::Optimizer& opt,
                                 int world_size, const std::map<std::string, std::string>& run,
                                 ringgrad::optim::LRSchedule* schedule = nullptr,
                                 ringgrad::Checkpoint* loaded = nullptr,
                                 ringgrad::optim::GradScaler* scaler = nullptr) const {
    if (resume_path.empty()) return {};
    ringgrad::Checkpoint c = ringgrad::load_checkpoint(resume_path);  // a file or a directory
    ringgrad::check_run(c, world_size, run);
    ringgrad::restore(c, model, opt, schedule, scaler);
    if (loaded) *loaded = c;
    return c.progress;
  }

  // Writes the checkpoint (call it on the rank that writes: rank 0). A disabled scaler
  // (fp32, bf16) adds nothing to it.
  void save(const ringgrad::nn::Module& model, const ringgrad::optim::Optimizer& opt,
            ringgrad::TrainProgress at, int world_size,
            const std::map<std::string, std::string>& run,
            const ringgrad::optim::LRSchedule* schedule = nullptr,
            const std::map<std::string, ringgrad::Generator>& generators = {},
            const ringgrad::optim::GradScaler* scaler = nullptr) const {
    ringgrad::Checkpoint c = ringgrad::capture(model, opt, schedule, scaler);
    c.progress = at;
    c.world_size = world_size;
    c.run = run;
    for (const auto& [name, g] : generators) c.generators[name] = g;
    write(std::move(c));
  }

  // Writes a checkpoint the program put together itself to --save's PATH: at once, or under
  // --save-async copied and handed to the background writer (which first waits for the save
  // still in flight).
  void write(ringgrad::Checkpoint c) const {
    if (save_async)
      writer_->save(std::move(c), save_path);
    else
      ringgrad::save_checkpoint(c, save_path);  // (a directory: one rank's pieces, every tensor whole)
  }
  // The last save on disk (--save-async: waits for it; its error is thrown here).
  void finish() const { writer_->wait(); }

 private:
  std::shared_ptr<ringgrad::AsyncCheckpointWriter> writer_ = std::make_shared<ringgrad::AsyncCheckpointWriter>();
};
