// mnist_ddp.cpp — the article's DDP program: the MLP trained data-parallel over N ranks.
//
//   scripts/rgrun -n 2 build/bin/mnist_ddp            (or plainly: a world of one)
//
// Every rank holds the whole model and a 1/N shard of each epoch's data
// (DistributedSampler, reshuffled by set_epoch); DistributedDataParallel
// averages the gradients across ranks during backward, so every rank takes the
// same Adam step. Per-rank batch 64, Adam lr 1e-3, 5 epochs; rank 0 prints.
// Ends with: RESULT example=mnist_ddp world=N test_acc=… samples_per_s=… (global)
#include <ringgrad/data/distributed_sampler.h>
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "simple_model.h"

namespace rg = ringgrad;

int main(int argc, char** argv) {
  rg::parallel::World world(argc, argv);
  CLI::App app{"Train the article's MLP data-parallel (run under scripts/rgrun -n N)"};
  std::string data_dir = rg::data::kDefaultMnistDir, device_name = "auto";
  int epochs = 5;
  int64_t batch_size = 64;
  double lr = 1e-3;
  uint64_t seed = 0;
  app.add_option("--data", data_dir, "directory with the IDX files (.gz or raw)");
  app.add_option("--epochs", epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "samples per step on each rank")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "Adam learning rate")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed for initialisation and shuffling");
  app.add_option("--device", device_name,
                 "cpu, cuda or auto (cuda:<local rank> when GPUs are present)");
  CLI11_PARSE(app, argc, argv);

  return rg::parallel::main_guard(world, [&] {
    rg::Device device = device_name == "auto" ? world.device() : rg::Device::resolve(device_name);
    rg::manual_seed(seed);
    rg::data::MNIST train(data_dir, rg::data::Split::Train);
    rg::data::MNIST test(data_dir, rg::data::Split::Test);
    rg::data::DistributedSampler sampler(train.size(), world.size(), world.rank(), {.seed = seed});
    rg::data::DataLoader loader(train, {.batch_size = batch_size, .sampler = &sampler});

    SimpleModel model;
    model.to(device);
    rg::parallel::DistributedDataParallel ddp(model, world.communicator());
    rg::optim::Adam opt(model.parameters(), {.lr = lr});
    if (world.is_main())
      std::printf("world %d, per-rank batch %lld (global %lld), %lld steps per epoch, device %s\n",
                  world.size(), static_cast<long long>(batch_size),
                  static_cast<long long>(batch_size * world.size()),
                  static_cast<long long>(loader.size()), device.str().c_str());

    double seconds = 0, test_acc = 0;
    int64_t samples = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      sampler.set_epoch(epoch);  // a new shuffle each epoch, the same on every rank
      auto start = std::chrono::steady_clock::now();
      float last = 0;
      for (auto& [x, y] : loader) {
        opt.zero_grad();
        rg::Tensor loss = rg::nn::cross_entropy(ddp(x.to(device)), y.to(device));
        loss.backward();  // buckets are all-reduced while this runs
        opt.step();
        last = static_cast<float>(loss.item());
        samples += x.size(0) * world.size();
      }
      rg::cuda::synchronize();
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // Every rank has the same weights: rank 0 evaluates for everyone.
      if (world.is_main()) {
        rg::NoGradGuard no_grad;
        model.eval();
        rg::data::DataLoader test_loader(test, {.batch_size = 1000});
        int64_t correct = 0;
        for (auto& [x, y] : test_loader)
          correct += (model(x.to(device)).argmax(1) == y.to(device)).sum().item<int64_t>();
        model.train();
        test_acc = static_cast<double>(correct) / static_cast<double>(test.size());
        std::printf("[Epoch %d] Loss: %.4f  test acc %.4f\n", epoch + 1, last, test_acc);
      }
    }
    if (world.is_main())
      std::printf("RESULT example=mnist_ddp world=%d test_acc=%.4f samples_per_s=%.0f\n",
                  world.size(), test_acc, static_cast<double>(samples) / seconds);
    return 0;
  });
}
