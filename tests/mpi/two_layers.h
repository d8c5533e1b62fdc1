// two_layers.h — the model of the sharding contract tests (test_zero.cpp, test_fsdp.cpp):
// two Transformer encoder layers (post-norm, then pre-norm), 1,064 parameters — a count
// that 3 and 4 do not divide, so shards are uneven — the same weights on every rank.
#pragma once

#include <ringgrad/ringgrad.h>

#include <memory>

namespace mpi_test {

struct TwoLayers : ringgrad::nn::Module {
  ringgrad::nn::TransformerEncoderLayer first{
      8, 2, {.dim_feedforward = 12, .dropout = 0.0, .batch_first = true}};
  ringgrad::nn::TransformerEncoderLayer second{
      8, 2, {.dim_feedforward = 12, .dropout = 0.0, .batch_first = true, .norm_first = true}};
  TwoLayers() {
    register_module("first", first);
    register_module("second", second);
  }
  ringgrad::Tensor forward(const ringgrad::Tensor& x) override { return second(first(x)); }
};

inline std::unique_ptr<TwoLayers> make_two_layers(ringgrad::DType dtype) {
  ringgrad::manual_seed(5);  // the same weights everywhere
  auto m = std::make_unique<TwoLayers>();
  m->to(dtype);
  return m;
}

}  // namespace mpi_test
