// bench_pipeline.cpp — the pipeline bubble, measured against the theory.
//
//   scripts/rgrun -n 2 build/bin/bench_pipeline [--layers-per-stage 4 --width 1024 --batch 64]
//                                                [--trace pipe.json]
//
// Each rank is one stage of Linear(width, width) + ReLU layers (enough compute per
// micro-batch that the idle time is the schedule's, not the messages' latency). For
// m = 1, 2, 4, 8, 16 micro-batches and both schedules, one warm-up step, then the best
// of 3: the share of the step each rank spent waiting for a neighbour, beside
// (p − 1) / (m + p − 1). With --trace, a Chrome trace of one 1F1B step at m = 4: each
// micro-batch's forward (F0…) and backward (B0…) on each stage's compute track.
// Prints (rank 0, the worst rank's bubble per row):
//   RESULT bench=pipeline world=P schedule=S micro_batches=M bubble=… theory=… ms_per_step=…
#include <ringgrad/parallel/device_mesh.h>
#include <ringgrad/parallel/pipeline.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

namespace rg = ringgrad;
namespace par = rg::parallel;

int main(int argc, char** argv) {
  par::World world(argc, argv);
  CLI::App app{"Pipeline bubble: measured vs (p - 1) / (m + p - 1)"};
  int64_t layers = 4, width = 1024, batch = 64;
  std::string trace_path;
  app.add_option("--layers-per-stage", layers, "Linear + ReLU layers on each rank")->check(CLI::PositiveNumber);
  app.add_option("--width", width, "features of every layer")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "samples per step (divisible by 16)")->check(CLI::PositiveNumber);
  app.add_option("--trace", trace_path, "a Chrome trace of one 1F1B step with 4 micro-batches");
  CLI11_PARSE(app, argc, argv);
  return par::main_guard(world, [&] {
    RG_CHECK(batch % 16 == 0, "bench_pipeline", "expected --batch divisible by 16, got ", batch);
    par::DeviceMesh mesh(world.communicator(), {{"pp", world.size()}});
    par::Communicator& pp = mesh.group("pp");
    rg::manual_seed(static_cast<uint64_t>(world.rank()));
    rg::nn::Sequential stage;
    for (int64_t l = 0; l < layers; ++l) {
      stage.add(std::make_shared<rg::nn::Linear>(width, width));
      stage.add(std::make_shared<rg::nn::ReLU>());
    }
    rg::Tensor x = rg::randn({batch, width}), y = rg::randn({batch, width});
    auto loss = [](const rg::Tensor& out, const rg::Tensor& t) { return rg::nn::mse_loss(out, t); };
    if (world.is_main())
      std::printf("world %d: %lld x Linear(%lld) + ReLU per stage, batch %lld\n", world.size(),
                  static_cast<long long>(layers), static_cast<long long>(width),
                  static_cast<long long>(batch));
    for (auto schedule : {par::PipelineSchedule::GPipe, par::PipelineSchedule::OneFOneB}) {
      const char* name = schedule == par::PipelineSchedule::GPipe ? "gpipe" : "1f1b";
      for (int64_t m : {1, 2, 4, 8, 16}) {
        par::Pipeline pipe(stage, pp, {.micro_batches = m, .schedule = schedule});
        double bubble = 1, ms = 0;
        for (int run = 0; run < 4; ++run) {  // a warm-up, then the best of 3
          stage.zero_grad();
          const bool traced = !trace_path.empty() && run == 3 && m == 4 &&
                              schedule == par::PipelineSchedule::OneFOneB;
          if (traced) rg::trace::start(trace_path, world.rank(), world.size());
          pp.barrier();
          pipe.forward_backward(x, y, loss);
          if (traced) par::stop_trace(world, trace_path);
          if (run == 0) continue;
          // The worst rank's bubble this step.
          rg::Tensor b = rg::full({1}, pipe.bubble(), {.dtype = rg::kFloat64});
          pp.all_reduce(b, par::Reduce::Max);
          if (b.item() < bubble) bubble = b.item(), ms = 1e3 * pipe.step_seconds();
        }
        if (world.is_main())
          std::printf("RESULT bench=pipeline world=%d schedule=%s micro_batches=%lld bubble=%.3f "
                      "theory=%.3f ms_per_step=%.1f\n",
                      world.size(), name, static_cast<long long>(m), bubble, pipe.theoretical_bubble(), ms);
      }
    }
    if (world.is_main() && !trace_path.empty())
      std::printf("trace of a 1F1B step (4 micro-batches) written to %s\n", trace_path.c_str());
    return 0;
  });
}
