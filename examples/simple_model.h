// simple_model.h — the article's SimpleModel and the MNIST recipe its examples share.
//
// examples/mnist_mlp.cpp (one process), ddp_from_scratch.cpp and mnist_ddp.cpp (N
// ranks), and bench/bench_mlp.cpp, bench_ddp.cpp train exactly this network; the
// three examples take the same recipe options with the same defaults (Adam lr 1e-3,
// batch 64, 5 epochs, seed 0) and measure test accuracy the same way, so their
// RESULT lines compare like for like.
#pragma once

#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "metrics.h"

struct SimpleModel : ringgrad::nn::Module {
  ringgrad::nn::Linear fc1{784, 256}, fc2{256, 10};
  SimpleModel() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  // x (B, 28, 28) -> logits (B, 10)
  ringgrad::Tensor forward(const ringgrad::Tensor& x) override {
    // MNIST's loader takes images of any size; fc1 would take any 784 pixels (14×56
    // too) and train on scrambled rows without a word, so the shape is checked here.
    RG_CHECK(x.dim() == 3 && x.size(1) == 28 && x.size(2) == 28, "SimpleModel",
             "expected 28×28 images, x of shape [B, 28, 28], got shape ", ringgrad::shape_str(x.shape()),
             " (--data must hold MNIST-format images of 28×28 pixels)");
    return fc2(ringgrad::relu(fc1(x.flatten(1))));
  }
};

// --grad-accum N (mnist_mlp, mnist_ddp): each step takes --batch-size × N samples (the batch
// that --batch-size N·B takes) in micro-batches of --batch-size, calling
// body(x_k, y_k, weight_k, last) for each: weight_k is the micro-batch's share of the
// batch's samples, so Σ weight_k · loss_k is the whole batch's mean loss and the gradients
// of the weighted losses add up to its gradient (an epoch's short last batch too).
// `last` says which backward should communicate (DDP's no_sync() around the others).
template <typename Body>
void for_each_micro_batch(const ringgrad::Tensor& x, const ringgrad::Tensor& y, int64_t size, Body&& body) {
  const int64_t rows = x.size(0);
  for (int64_t first = 0; first < rows; first += size) {
    const int64_t n = std::min(size, rows - first);
    body(x.narrow(0, first, n), y.narrow(0, first, n), double(n) / double(rows), first + n >= rows);
  }
}

// The training recipe, and its command-line options (--data --epochs --batch-size --lr --seed).
struct MnistRecipe {
  std::string data_dir = ringgrad::data::kDefaultMnistDir;
  int epochs = 5;
  int64_t batch_size = 64;
  double lr = 1e-3;
  uint64_t seed = 0;

  void add_options(CLI::App& app, const char* batch_help = "samples per step") {
    app.add_option("--data", data_dir, "directory with the IDX files (.gz or raw)");
    app.add_option("--epochs", epochs, "passes over the training set")->check(CLI::PositiveNumber);
    app.add_option("--batch-size", batch_size, batch_help)->check(CLI::PositiveNumber);
    app.add_option("--lr", lr, "Adam learning rate")->check(CLI::PositiveNumber);
    app.add_option("--seed", seed, "seed for initialisation and shuffling");
  }
};

// Fraction of `data` that the model classifies correctly (no gradients, eval mode). With a
// communicator of N ranks each rank evaluates every N-th batch and the counts are summed
// (a collective: every rank calls it); the batches are the ones one process makes, so the
// result is the one-process accuracy exactly (examples/metrics.h).
inline double accuracy(ringgrad::nn::Module& model, const ringgrad::data::Dataset& data,
                       ringgrad::Device device = ringgrad::kCPU,
                       ringgrad::parallel::Communicator* comm = nullptr, int64_t batch = 1000) {
  ringgrad::NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  for (const std::vector<int64_t>& indices : eval_shard(data.size(), batch, comm)) {
    auto [x, y] = data.get_batch(indices);
    correct += (model(x.to(device)).argmax(1) == y.to(device)).sum().item<int64_t>();
  }
  model.train();
  return sum_over_ranks(comm, static_cast<double>(correct)) / static_cast<double>(data.size());
}
