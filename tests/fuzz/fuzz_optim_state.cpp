// fuzz_optim_state.cpp — libFuzzer harness for optimizer checkpoints (optim/optimizer.h:
// optim::load, which reads a safetensors file and calls Optimizer::load_state_dict).
//
// Each input is loaded into a fresh Adam and a fresh AdamW (optimizers.h). A file that
// loads is then used for one step, which must also work or throw a ringgrad::Error:
// state the loader accepted must not crash the optimizer later.
// Seeds: corpus/fuzz_optim_state/ (checkpoints written by optim::save in make_seeds.cpp).
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "optimizers.h"

namespace {

void load_and_step(ringgrad::optim::Optimizer& opt, const std::string& path) {
  fuzz::expect_clear_error([&] {
    ringgrad::optim::load(opt, path);
    fuzz::set_grads(opt);
    opt.step();
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::as_file(data, size);
  std::vector<ringgrad::Tensor> p = fuzz::parameters(), q = fuzz::parameters();
  ringgrad::optim::Adam adam = fuzz::adam(p);
  ringgrad::optim::AdamW adamw = fuzz::adamw(q);
  load_and_step(adam, path);
  load_and_step(adamw, path);
  return 0;
}
