// fuzz_checkpoint.cpp — libFuzzer harness for training checkpoints (optim/checkpoint.h:
// load_checkpoint, check_run and restore, as the examples' --resume calls them).
//
// Each input is read as a checkpoint, checked against a run of one rank, and restored into
// a fresh Linear(2, 3) with Adam and a StepLR schedule; a file that restores is then used for
// one step, which must also work or throw a ringgrad::Error: state the loader accepted
// must not crash training later.
// Seeds: corpus/fuzz_checkpoint/ (checkpoints written by save_checkpoint in make_seeds.cpp).
#include <ringgrad/nn/layers.h>
#include <ringgrad/optim/checkpoint.h>

#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "optimizers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::as_file(data, size);
  ringgrad::nn::Linear model(2, 3);
  ringgrad::optim::Adam opt(model.parameters(), {.lr = 1e-3});
  ringgrad::optim::StepLR schedule(opt, 10);
  fuzz::expect_clear_error([&] {
    ringgrad::Checkpoint c = ringgrad::load_checkpoint(path);
    ringgrad::check_run(c, 1, {});
    ringgrad::restore(c, model, opt, &schedule);
    fuzz::set_grads(opt);
    opt.step();
    schedule.step();
  });
  return 0;
}
