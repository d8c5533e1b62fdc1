// mnist_ddp.cpp — the article's DDP program: the MLP trained data-parallel over N ranks.
//
//   scripts/rgrun -n 2 build/bin/mnist_ddp            (or plainly: a world of one)
//
// Every rank holds the whole model and a 1/N shard of each epoch's data
// (DistributedSampler, reshuffled by set_epoch); DistributedDataParallel
// averages the gradients across ranks during backward, so every rank takes the
// same Adam step. Per-rank batch 64, Adam lr 1e-3, 5 epochs; rank 0 prints.
// Ends with: RESULT example=mnist_ddp world=N test_acc=… samples_per_s=… (global)
//
// --save PATH [--save-every N], --resume PATH, --max-steps N: one checkpoint file,
// written by rank 0 (every replica holds the same state) and read by every rank; a
// resumed run continues at the same step of the same epoch's shuffle, and ends with the
// same bits as an uninterrupted run at the same world size (examples/checkpointing.h).
//
// --trace out.json records a few steps (--trace-steps, after 2 warm-up steps) as a
// Chrome trace: every rank writes out.rank<r>.json, and rank 0 merges them into
// out.json, one group of tracks per rank (open it at https://ui.perfetto.dev). The
// compute track shows forward, backward and each bucket's launch; the comm track shows
// the bucket all-reduces. This model's 0.8 MB of gradients fit in one bucket, which
// starts when backward is done; --bucket-cap-mb 0.01 gives one bucket per parameter,
// and fc2's all-reduces then run while backward computes fc1's gradients.
#include <ringgrad/data/distributed_sampler.h>
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpointing.h"
#include "parse_on_every_rank.h"
#include "simple_model.h"

namespace rg = ringgrad;

int main(int argc, char** argv) {
  rg::parallel::World world(argc, argv);
  CLI::App app{"Train the article's MLP data-parallel (run under scripts/rgrun -n N)"};
  MnistRecipe recipe;  // --data --epochs --batch-size --lr --seed (simple_model.h)
  recipe.add_options(app, "samples per step on each rank");
  std::string device_name = "auto";
  std::string trace_path;
  int64_t trace_steps = 20;
  Checkpointing ckpt;  // --save --save-every --resume --max-steps (checkpointing.h)
  ckpt.add_options(app);
  double bucket_cap_mb = 0;  // 0: DDP's defaults (1 MB first bucket, then 25 MB)
  app.add_option("--device", device_name,
                 "cpu, cuda or auto (cuda:<local rank> when GPUs are present)");
  app.add_option("--bucket-cap-mb", bucket_cap_mb,
                 "gradient bucket size, every bucket (default: 1 MB first, then 25 MB)")
      ->check(CLI::PositiveNumber);
  app.add_option("--trace", trace_path, "write a Chrome trace of a few steps to FILE.json");
  app.add_option("--trace-steps", trace_steps, "steps to trace (after 2 warm-up steps)")
      ->check(CLI::PositiveNumber);
  if (auto code = parse_on_every_rank(world, app, argc, argv)) return *code;  // all ranks agree

  return rg::parallel::main_guard(world, [&] {
    ckpt.check();
    rg::Device device = device_name == "auto" ? world.device() : rg::Device::resolve(device_name);
    rg::manual_seed(recipe.seed);
    rg::data::MNIST train(recipe.data_dir, rg::data::Split::Train);
    rg::data::MNIST test(recipe.data_dir, rg::data::Split::Test);
    // Every rank reads its own copy of the data: the same sizes, or the shards would differ.
    rg::parallel::check_same_across_ranks(
        world.communicator(),
        {{"train samples", std::to_string(train.size())}, {"test samples", std::to_string(test.size())}},
        "the data (" + recipe.data_dir + ")");
    rg::data::DistributedSampler sampler(train.size(), world.size(), world.rank(),
                                         {.seed = recipe.seed});
    rg::data::DataLoader loader(train, {.batch_size = recipe.batch_size, .sampler = &sampler});

    SimpleModel model;
    model.to(device);
    rg::parallel::DDPOptions ddp_options;
    if (bucket_cap_mb > 0)
      ddp_options.bucket_cap_mb = ddp_options.first_bucket_cap_mb = bucket_cap_mb;
    rg::parallel::DistributedDataParallel ddp(model, world.communicator(), ddp_options);
    rg::optim::Adam opt(model.parameters(), {.lr = recipe.lr});
    // What defines this run: a checkpoint resumes only under the same settings.
    const std::map<std::string, std::string> run{{"batch_size", std::to_string(recipe.batch_size)},
                                                 {"lr", std::to_string(recipe.lr)},
                                                 {"seed", std::to_string(recipe.seed)}};
    const rg::TrainProgress at = ckpt.resume(model, opt, world.size(), run);
    if (!ckpt.resume_path.empty() && world.is_main())
      std::printf("resumed from %s at step %lld (epoch %lld, batch %lld)\n",
                  ckpt.resume_path.c_str(), static_cast<long long>(at.step),
                  static_cast<long long>(at.epoch + 1), static_cast<long long>(at.batch));
    if (world.is_main())
      std::printf(
          "world %d, per-rank batch %lld (global %lld), %lld steps per epoch, %zu gradient "
          "bucket(s), device %s, backend %s\n",
          world.size(), static_cast<long long>(recipe.batch_size),
          static_cast<long long>(recipe.batch_size * world.size()),
          static_cast<long long>(loader.size()),
          ddp.num_buckets(), device.str().c_str(), world.communicator().backend_name().c_str());

    // Tracing covers steps [trace_first, trace_end): after warm-up, a bounded number.
    const int64_t trace_first = 2, trace_end = trace_first + trace_steps;
    int64_t step = at.step;  // steps taken, over all epochs
    auto finish_trace = [&] {
      std::string where = rg::parallel::stop_trace(world, trace_path);
      if (where.empty()) return;
      if (world.is_main())
        std::printf(
            "trace: steps %lld-%lld written to %s\n"
            "  open it at https://ui.perfetto.dev (\"Open trace file\") or chrome://tracing\n",
            static_cast<long long>(trace_first), static_cast<long long>(step - 1), where.c_str());
    };

    double seconds = 0, test_acc = 0;
    int64_t samples = 0;
    const int64_t per_epoch = loader.size();
    auto save = [&](int64_t epoch, int64_t batch) {  // rank 0 writes for every replica
      if (world.is_main())
        ckpt.save(model, opt, Checkpointing::progress(step, epoch, batch, per_epoch),
                  world.size(), run);
    };
    bool stopped = ckpt.should_stop(step);  // by --max-steps
    for (int64_t epoch = at.epoch; epoch < recipe.epochs && !stopped; ++epoch) {
      sampler.set_epoch(epoch);  // a new shuffle each epoch, the same on every rank
      auto start = std::chrono::steady_clock::now();
      float last = 0;
      const int64_t first = epoch == at.epoch ? at.batch : 0;  // mid-epoch after --resume
      int64_t batch = first;
      for (auto& [x, y] : loader.starting_at(first)) {
        if (!trace_path.empty() && step == trace_first)
          rg::trace::start(trace_path, world.rank(), world.size());
        {
          rg::trace::Span span(rg::trace::enabled() ? "step " + std::to_string(step) : "", "step");
          opt.zero_grad();
          rg::Tensor loss = rg::nn::cross_entropy(ddp(x.to(device)), y.to(device));
          loss.backward();  // buckets are all-reduced while this runs
          opt.step();
          last = static_cast<float>(loss.item());
        }
        samples += x.size(0) * world.size();
        if (++step == trace_end) finish_trace();
        ++batch;
        if (ckpt.due(step)) save(epoch, batch);
        if ((stopped = ckpt.should_stop(step))) break;
      }
      rg::cuda::synchronize();
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // Every rank has the same weights: rank 0 evaluates for everyone.
      if (world.is_main()) {
        test_acc = accuracy(model, test, device);
        std::printf("[Epoch %lld] Loss: %.4f  test acc %.4f%s\n", static_cast<long long>(epoch + 1),
                    last, test_acc, batch < per_epoch ? " (stopped mid-epoch: --max-steps)" : "");
      }
      if ((stopped || epoch + 1 == recipe.epochs) && !ckpt.save_path.empty()) {
        save(epoch, batch);
        if (world.is_main())
          std::printf("saved %s (step %lld)\n", ckpt.save_path.c_str(), static_cast<long long>(step));
      }
    }
    finish_trace();  // a run shorter than the traced window
    if (world.is_main())
      std::printf("RESULT example=mnist_ddp world=%d test_acc=%.4f samples_per_s=%.0f\n",
                  world.size(), test_acc, static_cast<double>(samples) / seconds);
    return 0;
  });
}
