// ddp_from_scratch.cpp — data parallelism in one page, before any engineering.
//
//   scripts/rgrun -n 2 build/bin/ddp_from_scratch       (or plainly: a world of one)
//
// The whole idea of DistributedDataParallel, in its simplest correct form:
//   1. Every rank starts from the same weights: rank 0's, broadcast to all.
//   2. Every rank trains on its own shard of each epoch (DistributedSampler).
//   3. As soon as backward has finished a parameter's gradient, a hook on that
//      parameter averages it over the ranks with a ring all-reduce — the
//      project's own, written out over send/recv in parallel/ring_allreduce.cpp —
//      and waits for it: one blocking all-reduce per parameter.
//   4. Every rank now holds the same averaged gradient, takes the same Adam step,
//      and the weights stay equal without ever being sent again.
// N ranks with batch B then train like one process with batch N·B.
//
// parallel/ddp.h is the same idea made fast: gradients packed into a few large
// buckets (fewer messages), each bucket's all-reduce started while backward
// still computes the earlier layers' gradients (overlap). examples/mnist_ddp.cpp
// trains with it; with the same seed and recipe it reaches the same test
// accuracy as this program (ctest example_ddp_from_scratch_2 checks that).
// Each epoch prints the training loss averaged over every rank, and the test accuracy,
// each rank evaluating 1/N of the test set (examples/metrics.h); --log FILE.jsonl
// [--log-every 50] writes them as JSON lines (examples/metrics_log.h).
// Ends with: RESULT example=ddp_from_scratch world=N test_acc=… samples_per_s=…
#include <ringgrad/data/distributed_sampler.h>
#include <ringgrad/parallel/ring_allreduce.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "metrics.h"
#include "metrics_log.h"
#include "parse_on_every_rank.h"
#include "progress_bar.h"
#include "simple_model.h"

namespace rg = ringgrad;
namespace par = rg::parallel;

int main(int argc, char** argv) {
  par::World world(argc, argv);
  CLI::App app{"Data parallelism from scratch: a ring all-reduce per gradient (rgrun -n N)"};
  MnistRecipe recipe;  // the same options and defaults as mnist_ddp (simple_model.h)
  recipe.add_options(app, "samples per step on each rank");
  LogOptions log_options{.every = 50};  // --log FILE.jsonl --log-every N (metrics_log.h)
  log_options.add_options(app);
  if (auto code = parse_on_every_rank(world, app, argc, argv)) return *code;  // all ranks agree

  return par::main_guard(world, [&] {
    par::Communicator& comm = world.communicator();
    rg::manual_seed(recipe.seed);
    rg::data::MNIST train(recipe.data_dir, rg::data::Split::Train);
    rg::data::MNIST test(recipe.data_dir, rg::data::Split::Test);
    rg::data::DistributedSampler sampler(train.size(), world.size(), world.rank(),
                                         {.seed = recipe.seed});
    rg::data::DataLoader loader(train, {.batch_size = recipe.batch_size, .sampler = &sampler});
    SimpleModel model;

    // 1. The same starting point everywhere: rank 0's weights.
    for (rg::Tensor& p : model.parameters()) comm.broadcast(p, 0);
    // 3. Average each gradient over the ranks the moment backward has finished it.
    for (rg::Tensor& p : model.parameters())
      p.register_post_accumulate_grad_hook([&comm](rg::Tensor& param) {
        rg::Tensor grad = param.grad();  // shares the gradient's memory: reduced in place
        par::ring_all_reduce(comm, grad, par::Reduce::Avg);
      });
    rg::optim::Adam opt(model.parameters(), {.lr = recipe.lr});

    // What rank 0 shows and logs is every rank's: the loss averaged over all of them.
    LossMeter loss_meter;
    MetricsLog log(log_options.path, world.is_main());
    RateMeter rate;
    ProgressBar bar(world.is_main());
    double seconds = 0, test_acc = 0;
    int64_t samples = 0, step = 0;
    auto log_line = [&](int epoch) {  // a collective: the interval's loss over all ranks
      bar.set_loss(loss_meter.flush(&comm));
      return MetricsLog::Line{{"step", step}, {"epoch", epoch + 1}, {"loss", loss_meter.last},
                              {"samples_per_s", std::round(rate.rate(double(samples)))},
                              {"lr", recipe.lr}};
    };
    for (int epoch = 0; epoch < recipe.epochs; ++epoch) {
      sampler.set_epoch(epoch);  // 2. a new shuffle each epoch, a different shard per rank
      auto start = std::chrono::steady_clock::now();
      loss_meter.new_epoch();
      bar.start("Epoch " + std::to_string(epoch + 1) + "/" + std::to_string(recipe.epochs),
                loader.size(), 0, double(recipe.batch_size * world.size()), "samples");
      int64_t batch = 0;
      for (auto& [x, y] : loader) {
        opt.zero_grad();
        rg::Tensor loss = rg::nn::cross_entropy(model(x), y);
        loss.backward();  // the hooks have averaged every gradient when this returns
        opt.step();       // 4. the same step on every rank
        loss_meter.add(loss.item());
        samples += x.size(0) * world.size();
        ++step, ++batch;
        if (log_options.due(step) && batch < loader.size()) log.write(log_line(epoch));
        bar.update(batch);
      }
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      bar.close();
      // The weights are the same everywhere: each rank evaluates every N-th test batch.
      MetricsLog::Line line = log_line(epoch);
      test_acc = accuracy(model, test, rg::kCPU, &comm);
      line["accuracy"] = test_acc;
      log.write(std::move(line));
      rate.restart(double(samples));
      if (world.is_main())
        std::printf("[Epoch %d] Loss: %.4f  test acc %.4f\n", epoch + 1, loss_meter.epoch_mean(),
                    test_acc);
    }
    if (world.is_main())
      std::printf("RESULT example=ddp_from_scratch world=%d test_acc=%.4f samples_per_s=%.0f\n",
                  world.size(), test_acc, static_cast<double>(samples) / seconds);
    return 0;
  });
}
