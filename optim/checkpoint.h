// checkpoint.h — a training run's checkpoint: one file, written as one piece.
//
//   rg::Checkpoint ckpt = rg::capture(model, opt, &schedule, &scaler);  // weights, Adam state,
//                                                     // lr schedule, the GradScaler (fp16 runs)
//   ckpt.progress = {.step = step, .epoch = epoch, .batch = batch};
//   ckpt.world_size = world.size();
//   ckpt.generators["default"] = rg::default_generator();        // dropout, init
//   rg::save_checkpoint(ckpt, "run.ckpt");
//   ...
//   rg::Checkpoint ckpt = rg::load_checkpoint("run.ckpt");
//   rg::restore(ckpt, model, opt, &schedule, &scaler);            // and the default generator
//   for (epoch = ckpt.progress.epoch; ...) for (batch : loader.starting_at(ckpt.progress.batch))
//   ...
//
// What PyTorch users write as torch.save({"model": …, "optimizer": …, "epoch": …}, path).
// Everything a run needs to continue exactly where it was lies in one safetensors file:
//
//   tensors   "model.<key>"  the model's state_dict      "optim.<key>"  the optimizer's
//   metadata  format=ringgrad-checkpoint, version=1
//             step, epoch, batch                          where the run was (TrainProgress)
//             world_size                                  how many ranks wrote it
//             rng.<name>.seed, rng.<name>.offset          each named Generator's state
//             optim.<key>                                 the optimizer's metadata (lr, steps…)
//             schedule.<key>                              the LR schedule's state_dict (if any):
//                                                         steps, and e.g. ReduceLROnPlateau's best
//             grad_scaler.<key>                           an enabled GradScaler's state_dict (fp16
//                                                         runs): scale, _growth_tracker,
//                                                         growth_factor, backoff_factor,
//                                                         growth_interval; none when the scaler is
//                                                         disabled or not given
//             run.<key>                                   what defines the run (batch size, seed…)
//
// One file, renamed into place only once it is whole on disk (save_safetensors), so a
// crash or kill -9 at any moment leaves either the previous checkpoint or the new one —
// never a model from one step beside an optimizer from another, which two files renamed
// one after the other can. (Several files — each rank's pieces, not gathered — need a
// manifest written last: sharded_checkpoint.h, the same metadata beside the pieces.)
// A killed save leaves PATH.tmp.<pid>; the next save or load of PATH removes those whose
// process is gone (remove_stale_temporaries).
//
// Loading checks what it reads: the format and version, every number in the metadata
// (parsed strictly; errors name the file, the key and the value), and that the model and
// optimizer parts are both there. restore() checks that the checkpoint fits the run it is
// restored into (names, shapes and dtypes of the model; the optimizer's groups), and
// check_run() that the run's defining settings are the ones it was saved with.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <string>
#include <thread>

#include "ringgrad/core/factory.h"
#include "ringgrad/core/safetensors.h"
#include "ringgrad/nn/module.h"
#include "ringgrad/optim/grad_scaler.h"
#include "ringgrad/optim/optimizer.h"
#include "ringgrad/optim/schedule.h"

namespace ringgrad {

// Where a training loop was when it saved: resume at `step` (optimizer steps taken in
// all), in epoch `epoch`, after its first `batch` batches (0: the epoch's start).
struct TrainProgress {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const TrainProgress&) const = default;
};

struct Checkpoint {
  NamedTensors model;                                    // model.state_dict()
  NamedTensors optimizer;                                // optimizer.state_dict(&optimizer_meta)
  std::map<std::string, std::string> optimizer_meta;
  int64_t schedule_steps = -1;                           // Schedule::steps(); -1: no schedule
  std::map<std::string, std::string> schedule;           // Schedule::state_dict() (its "steps"
                                                         // is schedule_steps, which wins)
  std::map<std::string, std::string> grad_scaler;        // GradScaler::state_dict() of an
                                                         // enabled scaler; empty: none
  TrainProgress progress;
  int world_size = 1;
  std::map<std::string, Generator> generators;           // by name: "default", "data", …
  std::map<std::string, std::string> run;                // the run's defining settings
  std::string source;                                    // the file it was loaded from (errors)
};

// The model's, optimizer's and (when given) the schedule's state, the GradScaler's (when
// given and enabled: a disabled one, as under fp32/bf16, adds nothing, so those files
// stay as they were) and the default generator's under "default". The caller fills in
// progress, world_size and run. For sharded strategies, gather the whole states first
// (FSDP's full_state_dict, ZeRO's consolidate_state_dict) and fill model/optimizer directly.
Checkpoint capture(const nn::Module& model, const optim::Optimizer& optimizer,
                   const optim::Schedule* schedule = nullptr,
                   const optim::GradScaler* scaler = nullptr);

// Writes `checkpoint` to `path` as one file, atomically (see above). A path that names a
// directory (ends in '/' or is one: sharded_checkpoint.h's names_directory) gets the sharded
// form instead, every tensor whole as one rank's pieces (save_sharded_checkpoint).
void save_checkpoint(const Checkpoint& checkpoint, const std::string& path);

// Reads and checks a checkpoint file; errors name the file, the key and the value. A
// directory is read as a sharded checkpoint, every tensor put together whole
// (load_sharded_as_checkpoint).
Checkpoint load_checkpoint(const std::string& path);

// The metadata part alone, both ways (the sharded form, sharded_checkpoint.h, keeps the same
// map in its manifest): everything but the tensors as strings, and back, checked as
// load_checkpoint checks it (errors name `source`).
std::map<std::string, std::string> checkpoint_metadata(const Checkpoint& checkpoint);
Checkpoint checkpoint_from_metadata(const std::map<std::string, std::string>& metadata,
                                    const std::string& source);

// Writes checkpoints on a background thread while training goes on (torch.distributed.
// checkpoint's async_save):
//   rg::AsyncCheckpointWriter writer;
//   writer.save(std::move(ckpt), "run.ckpt");   // copies the tensors now, writes them later
//   ... training goes on ...
//   writer.wait();                              // the write done (or its error thrown)
// save() first waits for the save still in flight (one at a time) and throws its error,
// then copies every tensor to host memory that nothing else holds (a state_dict's tensors
// are the live parameters and moments, which the next step changes) and starts the write.
// The write is save_checkpoint's, renamed into place when whole (a directory: its manifest,
// last): a kill during it leaves the previous checkpoint. The copy costs host memory the size
// of the checkpoint until the write is done. The destructor waits too (an error then is
// printed, not thrown).
class AsyncCheckpointWriter {
 public:
  AsyncCheckpointWriter() = default;
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;
  ~AsyncCheckpointWriter();
  void save(Checkpoint checkpoint, const std::string& path);
  void wait();
  bool in_flight() const { return thread_.joinable(); }  // a save started and not yet waited for

 private:
  std::thread thread_;
  std::exception_ptr error_;  // the last write's, set by its thread
  std::string path_;          // the last write's
};

// Puts a checkpoint's state back: the model's (strict: every name, shape and dtype),
// the optimizer's, the schedule's (when given: its load_state_dict, from schedule.<key>;
// a checkpoint with only schedule.steps, as older ones are, restores a step-driven
// schedule's position), the GradScaler's (when given and enabled: the checkpoint must hold
// grad_scaler.<key>; a disabled scaler, or none, ignores what is there) and the default
// generator's. An error names the file and what does not fit. Each load checks
// everything before it changes anything, the GradScaler's state first (loaded into a copy,
// put in place last) and then the model's: a checkpoint with a damaged or missing scaler
// state, or of another model, changes nothing; one whose optimizer state does not fit
// leaves the model restored and the optimizer (and scaler) as they were.
void restore(const Checkpoint& checkpoint, nn::Module& model, optim::Optimizer& optimizer,
             optim::Schedule* schedule = nullptr, optim::GradScaler* scaler = nullptr);

// The GradScaler's part of restore() alone, for programs that load the model and optimizer
// themselves (examples/gpt.cpp, whose strategies shard them): an enabled scaler loads
// checkpoint.grad_scaler (an error naming the file when there is none or it does not fit;
// the scaler unchanged then); a disabled one ignores it.
void restore_grad_scaler(const Checkpoint& checkpoint, optim::GradScaler& scaler);

// Errors unless the checkpoint was written by `world_size` ranks with these settings
// (each key of `run`; keys the checkpoint lacks are errors too), naming the first
// that differs with both values: resuming under other settings would be another run.
void check_run(const Checkpoint& checkpoint, int world_size,
               const std::map<std::string, std::string>& run);

// Removes PATH.tmp.<pid> files left by saves that were killed (their process is gone
// from this host). Returns how many it removed. Called by save_checkpoint and
// load_checkpoint; a program may call it at start-up.
int remove_stale_temporaries(const std::string& path);

}  // namespace ringgrad
