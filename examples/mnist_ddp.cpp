// mnist_ddp.cpp — the article's DDP program: the MLP trained data-parallel over N ranks.
//
//   scripts/rgrun -n 2 build/bin/mnist_ddp            (or plainly: a world of one)
//
// Every rank holds the whole model and a 1/N shard of each epoch's data
// (DistributedSampler, reshuffled by set_epoch); DistributedDataParallel
// averages the gradients across ranks during backward, so every rank takes the
// same Adam step. Per-rank batch 64, Adam lr 1e-3, 5 epochs; rank 0 prints.
// Each epoch's line has the training loss averaged over every rank's batches, and the test
// accuracy evaluated in shards: each rank evaluates 1/N of the test set and the counts are
// summed (examples/metrics.h) — the same number one process evaluating all of it prints.
// Ends with: RESULT example=mnist_ddp world=N test_acc=… samples_per_s=… (global) precision=P
// comm_hook=… model_gflops=… mfu=… gemm_gflops=… (per rank: examples/mfu.h)
//
// --grad-accum N: each rank takes each step's N·--batch-size samples in N micro-batches of
// --batch-size (simple_model.h), and only the last backward all-reduces (ddp.no_sync()
// around the others): the run of --batch-size N·B, one micro-batch's activations at a time.
//
// --precision bf16|fp16: PyTorch's AMP recipe (examples/precision.h): forward and loss under
// rg::autocast, backward and the step outside it; the float32 parameters are the master
// weights, so DDP all-reduces float32 gradients. fp16 adds a GradScaler; DDP's averaged
// gradients are the same on every rank, so every rank skips the same steps (its agree
// function, parallel/grad_scaler_sync.h, would be needed only where gradients stay local).
// --comm-hook bf16|fp16 sends each gradient bucket as 16 bits (DDP's bf16/fp16_compress_hook),
// with any --precision. A bf16/fp16 checkpoint resumes only under the same --precision;
// fp16's holds the GradScaler's state (its scale and growth tracker), restored on every rank.
//
// --log FILE.jsonl writes one JSON line every --log-every steps (default 50) and at each
// epoch's end (with the test accuracy): step, epoch, loss, samples/s, lr, elapsed seconds
// (examples/metrics_log.h; scripts/plot draws it). On a terminal rank 0 shows a progress
// bar (examples/progress_bar.h), plain lines otherwise.
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
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "checkpointing.h"
#include "metrics.h"
#include "metrics_log.h"
#include "mfu.h"
#include "parse_on_every_rank.h"
#include "precision.h"
#include "progress_bar.h"
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
  LogOptions log_options{.every = 50};  // --log FILE.jsonl --log-every N (metrics_log.h)
  log_options.add_options(app);
  Precision precision;  // --precision fp32|bf16|fp16 (precision.h)
  precision.add_options(app);
  CommHookOption comm_hook;  // --comm-hook none|bf16|fp16 (precision.h)
  comm_hook.add_options(app);
  int64_t grad_accum = 1;
  app.add_option("--grad-accum", grad_accum, "micro-batches of --batch-size per step, gradients summed")
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
    const int64_t step_batch = recipe.batch_size * grad_accum;  // a step's samples on each rank
    rg::data::DataLoader loader(train, {.batch_size = step_batch, .sampler = &sampler});

    SimpleModel model;
    model.to(device);
    rg::parallel::DDPOptions ddp_options;
    if (bucket_cap_mb > 0)
      ddp_options.bucket_cap_mb = ddp_options.first_bucket_cap_mb = bucket_cap_mb;
    ddp_options.comm_hook = comm_hook.hook();
    rg::parallel::DistributedDataParallel ddp(model, world.communicator(), ddp_options);
    rg::optim::Adam opt(model.parameters(), {.lr = recipe.lr});
    rg::optim::GradScaler scaler({.enabled = precision.scaled()});  // fp16 only
    // What defines this run: a checkpoint resumes only under the same settings.
    std::map<std::string, std::string> run{{"batch_size", std::to_string(step_batch)},
                                           {"lr", std::to_string(recipe.lr)},
                                           {"seed", std::to_string(recipe.seed)}};
    if (precision.mixed()) run["precision"] = precision.name;  // fp32 checkpoints stay as they were
    const rg::TrainProgress at = ckpt.resume(model, opt, world.size(), run,
                                             /*schedule=*/nullptr, /*loaded=*/nullptr, &scaler);
    if (!ckpt.resume_path.empty() && world.is_main())
      std::printf("resumed from %s at step %lld (epoch %lld, batch %lld)\n",
                  ckpt.resume_path.c_str(), static_cast<long long>(at.step),
                  static_cast<long long>(at.epoch + 1), static_cast<long long>(at.batch));
    if (world.is_main())
      std::printf(
          "world %d, per-rank batch %lld (global %lld), %lld steps per epoch, %zu gradient "
          "bucket(s), device %s, backend %s%s\n",
          world.size(), static_cast<long long>(step_batch),
          static_cast<long long>(step_batch * world.size()),
          static_cast<long long>(loader.size()),
          ddp.num_buckets(), device.str().c_str(), world.communicator().backend_name().c_str(),
          precision.mixed() || comm_hook.name != "none"
              ? (", precision " + precision.name + ", comm hook " + comm_hook.name).c_str()
              : "");

    // Tracing covers steps [trace_first, trace_end): after warm-up, a bounded number.
    const int64_t trace_first = 2, trace_end = trace_first + trace_steps;
    int64_t step = at.step;  // steps taken, over all epochs
    ProgressBar bar(world.is_main());  // rank 0: a bar on a terminal, plain lines otherwise
    auto finish_trace = [&] {
      std::string where = rg::parallel::stop_trace(world, trace_path);
      if (where.empty()) return;
      bar.message("trace: steps " + std::to_string(trace_first) + "-" + std::to_string(step - 1) +
                  " written to " + where +
                  "\n  open it at https://ui.perfetto.dev (\"Open trace file\") or chrome://tracing");
    };

    double seconds = 0, test_acc = 0;
    int64_t samples = 0;
    const int64_t per_epoch = loader.size();
    rg::parallel::Communicator& comm = world.communicator();
    // The loss of every rank's steps (metrics.h), a JSON line per interval, a progress bar:
    // rank 0 writes and prints, every rank takes part in the averages.
    LossMeter loss_meter;
    MetricsLog log(log_options.path, world.is_main(), /*append=*/!ckpt.resume_path.empty());
    RateMeter rate;
    auto log_line = [&](int64_t epoch) {  // the interval: mean loss over all ranks, speed
      const double loss = loss_meter.flush(&comm);  // a collective
      bar.set_loss(loss);
      return MetricsLog::Line{{"step", step}, {"epoch", epoch + 1}, {"loss", loss},
                              {"samples_per_s", std::round(rate.rate(static_cast<double>(samples)))},
                              {"lr", opt.param_groups()[0].lr}};
    };
    auto save = [&](int64_t epoch, int64_t batch) {  // rank 0 writes for every replica
      if (world.is_main())
        ckpt.save(model, opt, Checkpointing::progress(step, epoch, batch, per_epoch),
                  world.size(), run, /*schedule=*/nullptr, /*generators=*/{}, &scaler);
    };
    bool stopped = ckpt.should_stop(step);  // by --max-steps
    for (int64_t epoch = at.epoch; epoch < recipe.epochs && !stopped; ++epoch) {
      sampler.set_epoch(epoch);  // a new shuffle each epoch, the same on every rank
      auto start = std::chrono::steady_clock::now();
      const int64_t first = epoch == at.epoch ? at.batch : 0;  // mid-epoch after --resume
      int64_t batch = first;
      loss_meter.new_epoch();
      bar.start("Epoch " + std::to_string(epoch + 1) + "/" + std::to_string(recipe.epochs), per_epoch,
                first, static_cast<double>(step_batch * world.size()), "samples");
      for (auto& [x, y] : loader.starting_at(first)) {
        if (!trace_path.empty() && step == trace_first)
          rg::trace::start(trace_path, world.rank(), world.size());
        {
          rg::trace::Span span(rg::trace::enabled() ? "step " + std::to_string(step) : "", "step");
          opt.zero_grad();
          double loss = 0;  // this rank's mean over the step's samples
          for_each_micro_batch(x, y, recipe.batch_size,
                               [&](const rg::Tensor& xs, const rg::Tensor& ys, double share, bool last) {
            std::optional<rg::parallel::DistributedDataParallel::NoSync> quiet;
            if (!last) quiet.emplace(ddp);  // accumulate only: the last backward all-reduces the sum
            rg::Tensor part;
            {
              rg::autocast amp(device, precision.dtype(), precision.mixed());  // off for fp32
              part = rg::nn::cross_entropy(ddp(xs.to(device)), ys.to(device));
            }
            scaler.scale(part * share).backward();  // buckets are all-reduced while the last runs
            loss += share * part.item();
          });
          scaler.step(opt);  // fp32/bf16: opt.step(); fp16: unless inf/NaN
          scaler.update();
          loss_meter.add(loss);
        }
        samples += x.size(0) * world.size();
        if (++step == trace_end) finish_trace();
        ++batch;
        if (ckpt.due(step)) save(epoch, batch);
        stopped = ckpt.should_stop(step);
        // A log line every --log-every steps (the epoch's end writes its own, below).
        if (log_options.due(step) && batch < per_epoch && !stopped) log.write(log_line(epoch));
        bar.update(batch);
        if (stopped) break;
      }
      rg::cuda::synchronize();
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      bar.close();
      // Every rank has the same weights: each evaluates its share of the test set.
      MetricsLog::Line line = log_line(epoch);
      {
        rg::autocast amp(device, precision.dtype(), precision.mixed());
        test_acc = accuracy(model, test, device, &comm);
      }
      line["accuracy"] = test_acc;
      log.write(std::move(line));
      rate.restart(static_cast<double>(samples));  // the next interval: training time only
      if (world.is_main())
        std::printf("[Epoch %lld] Loss: %.4f  test acc %.4f%s\n", static_cast<long long>(epoch + 1),
                    loss_meter.epoch_mean(), test_acc,
                    batch < per_epoch ? " (stopped mid-epoch: --max-steps)" : "");
      if ((stopped || epoch + 1 == recipe.epochs) && !ckpt.save_path.empty()) {
        save(epoch, batch);
        ckpt.finish();  // --save-async: on disk before saying so
        if (world.is_main())
          std::printf("saved %s (step %lld)\n", ckpt.save_path.c_str(), static_cast<long long>(step));
      }
    }
    finish_trace();  // a run shorter than the traced window
    // MFU (mfu.h): each rank's share of 6 FLOPs per parameter per sample, over one rank's
    // measured GEMM rate.
    const double samples_per_s = static_cast<double>(samples) / seconds;
    const double flops = 6.0 * double(model.num_parameters()) * samples_per_s / world.size();
    const double peak = mfu::rank_peak_flops(world, device);
    if (world.is_main())
      std::printf("RESULT example=mnist_ddp world=%d test_acc=%.4f samples_per_s=%.0f precision=%s "
                  "comm_hook=%s model_gflops=%.2f mfu=%.3f gemm_gflops=%.1f\n",
                  world.size(), test_acc, samples_per_s, precision.name.c_str(), comm_hook.name.c_str(),
                  flops / 1e9, flops / peak, peak / 1e9);
    return 0;
  });
}
