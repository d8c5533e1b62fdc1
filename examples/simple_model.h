// simple_model.h — the article's SimpleModel, shared by examples/mnist_mlp.cpp
// and bench/bench_mlp.cpp so both train exactly the same network.
#pragma once

#include <ringgrad/ringgrad.h>

struct SimpleModel : ringgrad::nn::Module {
  ringgrad::nn::Linear fc1{784, 256}, fc2{256, 10};
  SimpleModel() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  // x (B, 28, 28) -> logits (B, 10)
  ringgrad::Tensor forward(const ringgrad::Tensor& x) override {
    return fc2(ringgrad::relu(fc1(x.flatten(1))));
  }
};
