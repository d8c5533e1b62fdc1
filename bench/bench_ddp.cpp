// bench_ddp.cpp — global samples/s of the mnist recipe under DDP, and the time lost waiting.
//
//   scripts/rgrun -n 1 build/bin/bench_ddp ; scripts/rgrun -n 2 build/bin/bench_ddp
//   (bench/compare_ddp.sh runs both, and PyTorch's DDP, in one go)
//
// Same model, per-rank batch 64, DistributedSampler, Adam 1e-3 as mnist_ddp; one
// epoch timed. Reports the share of step time that backward spent waiting for
// all-reduces to finish, i.e. the communication that overlap did not hide.
// Prints (rank 0): RESULT bench=ddp world=N samples_per_s=… comm_wait_share=…
#include <ringgrad/data/distributed_sampler.h>
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "../examples/simple_model.h"

namespace rg = ringgrad;

int main(int argc, char** argv) {
  rg::parallel::World world(argc, argv);
  CLI::App app{"Time one epoch of the mnist recipe under DDP"};
  std::string data_dir = rg::data::kDefaultMnistDir;
  int epochs = 1;
  app.add_option("--data", data_dir, "directory with the IDX files");
  app.add_option("--epochs", epochs, "epochs to time")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  return rg::parallel::main_guard(world, [&] {
    rg::manual_seed(0);
    rg::data::MNIST train(data_dir, rg::data::Split::Train);
    rg::data::DistributedSampler sampler(train.size(), world.size(), world.rank());
    rg::data::DataLoader loader(train, {.batch_size = 64, .sampler = &sampler});
    SimpleModel model;
    rg::parallel::DistributedDataParallel ddp(model, world.communicator());
    rg::optim::Adam opt(model.parameters(), {.lr = 1e-3});
    int64_t samples = 0;
    double seconds = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      sampler.set_epoch(epoch);
      world.communicator().barrier();  // start the clock together
      auto start = std::chrono::steady_clock::now();
      for (auto& [x, y] : loader) {
        opt.zero_grad();
        rg::nn::cross_entropy(ddp(x), y).backward();
        opt.step();
        samples += x.size(0) * world.size();
      }
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (world.is_main())
      std::printf(
          "RESULT bench=ddp world=%d threads_per_rank=%d samples_per_s=%.0f comm_wait_share=%.3f\n",
          world.size(), rg::get_num_threads(), static_cast<double>(samples) / seconds,
          ddp.comm_wait_seconds() / seconds);
    return 0;
  });
}
