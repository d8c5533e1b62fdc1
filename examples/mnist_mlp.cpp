// mnist_mlp.cpp — the article's SimpleModel trained on MNIST-format data.
//
//   Linear(784, 256) → ReLU → Linear(256, 10), cross-entropy, Adam lr 1e-3,
//   batch 64, 5 epochs. Default data: Fashion-MNIST from the Debian package
//   dataset-fashion-mnist; --data DIR reads real MNIST (the same IDX files).
//
//   build/bin/mnist_mlp [--epochs 5] [--batch-size 64] [--lr 1e-3] [--seed 0]
//                       [--threads N] [--data DIR] [--device cpu|cuda|auto]
//                       [--save PATH [--save-every N]] [--resume PATH] [--max-steps N]
//                       [--trace FILE.json [--trace-steps 20]] [--log FILE.jsonl [--log-every 50]]
//                       [--precision fp32|bf16|fp16] [--grad-accum N]
//
// --grad-accum N takes each step's N·--batch-size samples in N micro-batches of
// --batch-size, their gradients summed (simple_model.h): the run of --batch-size N·B with
// one micro-batch's activations alive at a time.
// --precision bf16|fp16 trains with PyTorch's AMP recipe (examples/precision.h): forward
// and loss under rg::autocast (the linears in 16 bits, the loss in float32), the float32
// parameters as master weights; fp16 adds a GradScaler. The test accuracy is evaluated under
// the same autocast. fp32 (the default) is the plain float32 run. A bf16/fp16 checkpoint
// resumes only under the same --precision.
// --save writes one checkpoint file (model, Adam state, the epoch and batch reached, the
// generator, under fp16 the GradScaler's scale and growth tracker) at the end and every --save-every steps; --resume continues from it exactly:
// killed at any step and resumed, the run ends with the same bits as an uninterrupted one
// (examples/checkpointing.h, tests/check_resume.sh).
// Shows progress within each epoch (a bar on a terminal, plain lines otherwise:
// examples/progress_bar.h), train loss and test accuracy per epoch,
// and ends with: RESULT example=mnist_mlp epochs=E test_acc=… samples_per_s=… precision=P
// model_gflops=… mfu=… gemm_gflops=… (6 FLOPs per parameter per sample, over this machine's
// measured GEMM rate: examples/mfu.h)
// --log FILE.jsonl writes a JSON line every --log-every steps and at each epoch's end (with
// the test accuracy): step, epoch, loss, samples/s, lr, elapsed_s (examples/metrics_log.h).
// --trace writes a Chrome trace of a few steps after 2 warm-up steps (forward, backward
// per op, the optimizer step): open it at https://ui.perfetto.dev.
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "checkpointing.h"
#include "metrics.h"
#include "metrics_log.h"
#include "mfu.h"
#include "precision.h"
#include "progress_bar.h"
#include "simple_model.h"

namespace rg = ringgrad;

int main(int argc, char** argv) {
  CLI::App app{"Train the article's SimpleModel (784-256-10 MLP) on MNIST-format data"};
  MnistRecipe recipe;  // --data --epochs --batch-size --lr --seed (simple_model.h)
  recipe.add_options(app);
  auto& [data_dir, epochs, batch_size, lr, seed] = recipe;
  Checkpointing ckpt;  // --save --save-every --resume --max-steps (checkpointing.h)
  ckpt.add_options(app);
  std::string device_name = "auto";
  int threads = 0;
  int64_t trace_steps = 20;
  std::string trace_path;
  app.add_option("--threads", threads, "CPU threads (default: RINGGRAD_NUM_THREADS or all cores)");
  app.add_option("--device", device_name, "cpu, cuda, cuda:N or auto (CUDA when a GPU is present)");
  app.add_option("--trace", trace_path, "write a Chrome trace of a few steps to FILE.json");
  app.add_option("--trace-steps", trace_steps, "steps to trace (after 2 warm-up steps)")
      ->check(CLI::PositiveNumber);
  LogOptions log_options{.every = 50};  // --log FILE.jsonl --log-every N (metrics_log.h)
  log_options.add_options(app);
  int64_t grad_accum = 1;
  app.add_option("--grad-accum", grad_accum, "micro-batches of --batch-size per step, gradients summed")
      ->check(CLI::PositiveNumber);
  Precision precision;  // --precision fp32|bf16|fp16 (precision.h)
  precision.add_options(app);
  CLI11_PARSE(app, argc, argv);

  try {
    ckpt.check();
    if (threads > 0) rg::set_num_threads(threads);
    rg::manual_seed(seed);
    rg::data::MNIST train(data_dir, rg::data::Split::Train);
    rg::data::MNIST test(data_dir, rg::data::Split::Test);
    rg::data::DataLoader loader(train, {.batch_size = batch_size * grad_accum,  // a step's samples
                                        .shuffle = true,
                                        .seed = seed,
                                        .pin_memory = rg::Device::resolve(device_name).is_cuda()});

    rg::Device device = rg::Device::resolve(device_name);
    SimpleModel model;
    model.to(device);  // before the optimizer: its state is created next to the parameters
    rg::optim::Adam opt(model.parameters(), {.lr = lr});
    rg::optim::GradScaler scaler({.enabled = precision.scaled()});  // fp16 only
    // What defines this run: a checkpoint resumes only under the same settings.
    std::map<std::string, std::string> run{{"batch_size", std::to_string(batch_size * grad_accum)},
                                           {"lr", std::to_string(lr)},
                                           {"seed", std::to_string(seed)}};
    if (precision.mixed()) run["precision"] = precision.name;  // fp32 checkpoints stay as they were
    const rg::TrainProgress at = ckpt.resume(model, opt, /*world_size=*/1, run,
                                             /*schedule=*/nullptr, /*loaded=*/nullptr, &scaler);
    if (!ckpt.resume_path.empty())
      std::printf("resumed from %s at step %lld (epoch %lld, batch %lld)\n",
                  ckpt.resume_path.c_str(), static_cast<long long>(at.step),
                  static_cast<long long>(at.epoch + 1), static_cast<long long>(at.batch));
    std::printf("model: %lld parameters on %s, %lld train / %lld test samples, %d thread(s)%s\n",
                static_cast<long long>(model.num_parameters()), device.str().c_str(),
                static_cast<long long>(train.size()), static_cast<long long>(test.size()),
                rg::get_num_threads(),
                precision.mixed() ? (", precision " + precision.name).c_str() : "");

    ProgressBar bar;  // a bar on a terminal, plain lines otherwise
    LossMeter loss_meter;  // mean loss per log interval and per epoch (metrics.h)
    MetricsLog log(log_options.path, /*writer=*/true, /*append=*/!ckpt.resume_path.empty());
    RateMeter rate;
    double test_acc = 0, train_seconds = 0;
    int64_t samples = 0;
    // Tracing covers steps [trace_first, trace_end): after warm-up, a bounded number.
    const int64_t trace_first = 2, trace_end = trace_first + trace_steps;
    int64_t global_step = at.step;
    auto finish_trace = [&] {
      std::string file = rg::trace::stop();
      if (file.empty()) return;
      bar.message("trace: steps " + std::to_string(trace_first) + "-" +
                  std::to_string(global_step - 1) + " written to " + file +
                  "\n  open it at https://ui.perfetto.dev (\"Open trace file\") or chrome://tracing");
    };
    auto log_line = [&](int64_t epoch) {  // the interval's mean loss and speed
      const double loss = loss_meter.flush(nullptr);
      bar.set_loss(loss);
      return MetricsLog::Line{{"step", global_step}, {"epoch", epoch + 1}, {"loss", loss},
                              {"samples_per_s", std::round(rate.rate(static_cast<double>(samples)))},
                              {"lr", opt.param_groups()[0].lr}};
    };
    const int64_t steps = loader.size();
    auto save = [&](int64_t epoch, int64_t batch) {
      ckpt.save(model, opt, Checkpointing::progress(global_step, epoch, batch, steps), 1, run,
                /*schedule=*/nullptr, /*generators=*/{}, &scaler);
    };
    bool stopped = ckpt.should_stop(global_step);  // by --max-steps
    for (int64_t epoch = at.epoch; epoch < epochs && !stopped; ++epoch) {
      loader.set_epoch(epoch);
      auto start = std::chrono::steady_clock::now();
      const int64_t first = epoch == at.epoch ? at.batch : 0;  // mid-epoch after --resume
      int64_t step = first;  // batches of this epoch taken
      loss_meter.new_epoch();
      bar.start("Epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs), steps, first,
                static_cast<double>(batch_size * grad_accum), "samples");
      for (auto& [x, y] : loader.starting_at(first)) {
        if (!trace_path.empty() && global_step == trace_first) rg::trace::start(trace_path);
        {
          rg::trace::Span span(rg::trace::enabled() ? "step " + std::to_string(global_step) : "",
                               "step");
          opt.zero_grad();
          double loss = 0;  // the step's mean over its samples
          for_each_micro_batch(x, y, batch_size, [&](const rg::Tensor& xs, const rg::Tensor& ys, double share, bool) {
            rg::Tensor part;
            {
              rg::autocast amp(device, precision.dtype(), precision.mixed());  // off for fp32
              part = rg::nn::cross_entropy(model(xs.to(device)), ys.to(device));
            }
            scaler.scale(part * share).backward();  // fp32/bf16: (share · loss).backward()
            loss += share * part.item();
          });
          scaler.step(opt);  // fp32/bf16: opt.step()
          scaler.update();
          loss_meter.add(loss);
        }
        samples += x.size(0);
        if (++global_step == trace_end) finish_trace();
        ++step;
        if (ckpt.due(global_step)) save(epoch, step);
        stopped = ckpt.should_stop(global_step);
        // A log line every --log-every steps (the epoch's end writes its own, below).
        if (log_options.due(global_step) && step < steps && !stopped) log.write(log_line(epoch));
        bar.update(step);
        if (stopped) break;
      }
      train_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      rg::cuda::synchronize();  // GPU work is asynchronous: finish it before reading the clock
      bar.close();
      MetricsLog::Line line = log_line(epoch);
      {
        rg::autocast amp(device, precision.dtype(), precision.mixed());
        test_acc = accuracy(model, test, device);
      }
      line["accuracy"] = test_acc;
      log.write(std::move(line));
      rate.restart(static_cast<double>(samples));  // the next interval: training time only
      std::printf("[Epoch %lld] train loss %.4f  test acc %.4f%s\n", static_cast<long long>(epoch + 1),
                  loss_meter.epoch_mean(), test_acc,
                  step < steps ? " (stopped mid-epoch: --max-steps)" : "");
      if (stopped || epoch + 1 == epochs) {
        if (!ckpt.save_path.empty()) {
          save(epoch, step);
          ckpt.finish();  // --save-async: on disk before saying so
          std::printf("saved %s (step %lld)\n", ckpt.save_path.c_str(),
                      static_cast<long long>(global_step));
        }
      }
    }
    finish_trace();  // a run shorter than the traced window
    // MFU (mfu.h): 6 FLOPs per parameter per sample, over this machine's GEMM rate.
    const double samples_per_s = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0.0;
    const double flops = 6.0 * double(model.num_parameters()) * samples_per_s, peak = mfu::peak_flops(device);
    std::printf("RESULT example=mnist_mlp epochs=%d test_acc=%.4f samples_per_s=%.0f precision=%s "
                "model_gflops=%.2f mfu=%.3f gemm_gflops=%.1f\n",
                epochs, test_acc, samples_per_s, precision.name.c_str(), flops / 1e9, flops / peak, peak / 1e9);
  } catch (const rg::Error& e) {
    std::fprintf(stderr, "mnist_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
