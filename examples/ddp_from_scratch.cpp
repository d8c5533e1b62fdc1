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
// The cost: each step every rank all-reduces every gradient once; a ring all-reduce
// sends 2(N−1)/N of its tensor from every rank, so each rank sends
//   2(N−1)/N · 4·P bytes per step        (P parameters, float32)
// whatever the batch: the program counts the bytes its ring really sent in the first
// step and prints them beside that.
// Each epoch prints the training loss averaged over every rank, and the test accuracy,
// each rank evaluating 1/N of the test set; --log FILE.jsonl [--log-every 50] writes them
// as JSON lines (the reporting lives in examples/epoch_report.h).
// Ends with: RESULT example=ddp_from_scratch world=N test_acc=… samples_per_s=… model_gflops=…
// mfu=… gemm_gflops=… (examples/mfu.h)
#include <ringgrad/data/distributed_sampler.h>
#include <ringgrad/parallel/ring_allreduce.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "epoch_report.h"
#include "metrics.h"
#include "mfu.h"
#include "parse_on_every_rank.h"
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

    EpochReport report(comm, log_options, world.is_main(), recipe.batch_size * world.size());
    int64_t params = 0, first_step_bytes = -1;
    for (const rg::Tensor& p : model.parameters()) params += p.numel();
    double test_acc = 0;
    for (int epoch = 0; epoch < recipe.epochs; ++epoch) {
      sampler.set_epoch(epoch);  // 2. a new shuffle each epoch, a different shard per rank
      report.begin_epoch(epoch, recipe.epochs, loader.size());
      for (auto& [x, y] : loader) {
        comm.reset_wire_bytes();
        opt.zero_grad();
        rg::Tensor loss = rg::nn::cross_entropy(model(x), y);
        loss.backward();  // the hooks have averaged every gradient when this returns
        opt.step();       // 4. the same step on every rank
        if (first_step_bytes < 0) first_step_bytes = comm.wire_bytes();
        report.step(loss.item(), epoch, recipe.lr);
      }
      // The weights are the same everywhere: each rank evaluates every N-th test batch.
      test_acc = accuracy(model, test, rg::kCPU, &comm);
      report.end_epoch(epoch, test_acc, recipe.lr);
    }
    // MFU (mfu.h): each rank's share of 6 FLOPs per parameter per sample, over one rank's
    // measured GEMM rate (a collective: every rank calls it).
    const double flops = 6.0 * double(params) * report.samples_per_second() / world.size();
    const double peak = mfu::rank_peak_flops(world);
    if (world.is_main()) {
      const int n = world.size();
      const double predicted = 2.0 * (n - 1) / n * 4.0 * double(params);
      std::printf("bytes each rank sent in a step: 2(N-1)/N x 4 x %ld parameters = %.0f predicted, "
                  "%ld measured\n",
                  long(params), predicted, long(first_step_bytes));
      std::printf("CHECK ddp_bytes_per_step predicted=%.0f measured=%ld\n", predicted,
                  long(first_step_bytes));
      std::printf("RESULT example=ddp_from_scratch world=%d test_acc=%.4f samples_per_s=%.0f "
                  "model_gflops=%.2f mfu=%.3f gemm_gflops=%.1f\n",
                  n, test_acc, report.samples_per_second(), flops / 1e9, flops / peak, peak / 1e9);
    }
    return 0;
  });
}
