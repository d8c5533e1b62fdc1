// bench_mlp.cpp — samples/s and peak memory of one epoch of the mnist_mlp recipe.
//
// Same model, optimizer, batch size and data as examples/mnist_mlp.cpp (and as
// bench/torch_mlp.py in PyTorch); only the training loop is timed.
//
//   build/bin/bench_mlp [--threads N] [--epochs 1] [--data DIR]
// Prints: RESULT bench=mlp threads=N samples_per_s=… peak_rss_mb=…
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include <ringgrad/ringgrad.h>

#include "../examples/simple_model.h"

namespace rg = ringgrad;

int main(int argc, char** argv) {
  CLI::App app{"Time one epoch of the mnist_mlp recipe"};
  int threads = 1, epochs = 1;
  std::string data_dir = rg::data::kDefaultMnistDir;
  app.add_option("--threads", threads, "CPU threads")->check(CLI::PositiveNumber);
  app.add_option("--epochs", epochs, "epochs to time")->check(CLI::PositiveNumber);
  app.add_option("--data", data_dir, "directory with the IDX files");
  CLI11_PARSE(app, argc, argv);

  rg::set_num_threads(threads);
  rg::manual_seed(0);
  rg::data::MNIST train(data_dir, rg::data::Split::Train);
  rg::data::DataLoader loader(train, {.batch_size = 64, .shuffle = true});
  SimpleModel model;
  rg::optim::Adam opt(model.parameters(), {.lr = 1e-3});

  int64_t samples = 0;
  double seconds = 0, last_loss = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    loader.set_epoch(epoch);
    auto start = std::chrono::steady_clock::now();
    for (auto& [x, y] : loader) {
      opt.zero_grad();
      rg::Tensor loss = rg::nn::cross_entropy(model(x), y);
      loss.backward();
      opt.step();
      samples += x.size(0);
      last_loss = loss.item();
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("RESULT bench=mlp threads=%d samples_per_s=%.0f peak_rss_mb=%.0f last_loss=%.4f\n",
              threads, static_cast<double>(samples) / seconds,
              static_cast<double>(usage.ru_maxrss) / 1024.0, last_loss);
  return 0;
}
