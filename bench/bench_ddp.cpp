// bench_ddp.cpp — global samples/s of the mnist recipe under DDP, and the time lost waiting.
//
//   scripts/rgrun -n 1 build/bin/bench_ddp ; scripts/rgrun -n 2 build/bin/bench_ddp
//   (bench/compare_ddp.sh runs both, and PyTorch's DDP, in one go)
//
// Same model, per-rank batch 64, DistributedSampler, Adam 1e-3 as mnist_ddp; one
// epoch timed. Reports the share of step time that backward spent waiting for
// all-reduces to finish, i.e. the communication that overlap did not hide, and the bytes
// DDP hands to all-reduce per step (its buckets, in the dtype on the wire):
//   --precision bf16     the model in bfloat16: bfloat16 gradients, bfloat16 buckets
//   --comm-hook bf16     float32 gradients sent as bfloat16 (PyTorch's bf16_compress_hook);
//                        fp16: as float16 (fp16_compress_hook)
// Prints (rank 0): RESULT bench=ddp world=N precision=… comm_hook=… samples_per_s=…
//   comm_wait_share=… allreduce_bytes_per_step=…
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
  std::string precision = "fp32", hook = "none";
  app.add_option("--data", data_dir, "directory with the IDX files");
  app.add_option("--epochs", epochs, "epochs to time")->check(CLI::PositiveNumber);
  app.add_option("--precision", precision, "the model's dtype: fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--comm-hook", hook,
                 "float32 buckets on the wire: none, bf16 (bf16_compress_hook) or fp16")
      ->check(CLI::IsMember({"none", "bf16", "fp16"}));
  CLI11_PARSE(app, argc, argv);
  return rg::parallel::main_guard(world, [&] {
    rg::manual_seed(0);
    rg::data::MNIST train(data_dir, rg::data::Split::Train);
    rg::data::DistributedSampler sampler(train.size(), world.size(), world.rank());
    rg::data::DataLoader loader(train, {.batch_size = 64, .sampler = &sampler});
    SimpleModel model;
    const rg::DType dtype = precision == "bf16" ? rg::kBFloat16 : rg::kFloat32;
    model.to(dtype);
    const rg::parallel::DDPCommHook comm_hook = hook == "bf16"   ? rg::parallel::DDPCommHook::BF16Compress
                                                : hook == "fp16" ? rg::parallel::DDPCommHook::FP16Compress
                                                                 : rg::parallel::DDPCommHook::None;
    rg::parallel::DistributedDataParallel ddp(model, world.communicator(), {.comm_hook = comm_hook});
    rg::optim::Adam opt(model.parameters(), {.lr = 1e-3});
    int64_t samples = 0, steps = 0;
    double seconds = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      sampler.set_epoch(epoch);
      world.communicator().barrier();  // start the clock together
      auto start = std::chrono::steady_clock::now();
      for (auto& [x, y] : loader) {
        opt.zero_grad();
        rg::nn::cross_entropy(ddp(x.to(dtype)), y).backward();
        opt.step();
        samples += x.size(0) * world.size();
        ++steps;
      }
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    // A world of one sends nothing: what it would send is its buckets' size.
    int64_t bucket_bytes = 0;
    for (size_t i = 0; i < ddp.num_buckets(); ++i) bucket_bytes += ddp.bucket_info(i).wire_bytes;
    const int64_t per_step = world.size() == 1 ? bucket_bytes : ddp.allreduce_bytes() / steps;
    if (world.is_main())
      std::printf(
          "RESULT bench=ddp world=%d threads_per_rank=%d precision=%s comm_hook=%s "
          "samples_per_s=%.0f comm_wait_share=%.3f allreduce_bytes_per_step=%lld\n",
          world.size(), rg::get_num_threads(), precision.c_str(),
          rg::parallel::comm_hook_name(comm_hook), static_cast<double>(samples) / seconds,
          ddp.comm_wait_seconds() / seconds, static_cast<long long>(per_step));
    return 0;
  });
}
