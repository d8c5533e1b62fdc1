// bench_pipeline.cpp — the pipeline bubble and memory, measured against the theory.
//
//   scripts/rgrun -n 2 build/bin/bench_pipeline [--layers-per-stage 4 --width 1024 --batch 64]
//       [--schedules gpipe,1f1b,interleaved,zb-h1] [--virtual-stages 2] [--trace pipe.json]
//
// Each rank is one stage of Linear(width, width) + ReLU layers (enough compute per
// micro-batch that the idle time is the schedule's, not the messages' latency). For
// m = 1, 2, 4, 8, 16 micro-batches and each schedule, one warm-up step, then the best
// of 3: the share of the step each rank spent waiting for a neighbour, beside the
// theory (parallel::ideal_bubble: (p − 1) / (m + p − 1) for GPipe and 1F1B, divided by v
// for interleaved (the rank's layers cut into v chunks; m a multiple of p), (p − 1) /
// (3m + p − 1) for ZB-H1),
// the micro-batches each stage held at once, and the peak of the step's tensor memory
// above what the stage held before it (activations, gradients and what W keeps). With
// --trace, a Chrome trace of one step of each schedule at m = 4 (PATH with the schedule
// before its extension: pipe.1f1b.json): each micro-batch's forward (F0…), backward
// (B0…) and, under ZB-H1, weight gradients (W0…) on each stage's compute track.
// Prints (rank 0; the worst rank's bubble, the largest held and peak per row):
//   RESULT bench=pipeline world=P schedule=S virtual_stages=V micro_batches=M bubble=…
//          theory=… held=… step_peak_mb=… ms_per_step=…
#include <ringgrad/parallel/device_mesh.h>
#include <ringgrad/parallel/pipeline.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace rg = ringgrad;
namespace par = rg::parallel;

int main(int argc, char** argv) {
  par::World world(argc, argv);
  CLI::App app{"Pipeline bubble: measured vs (p - 1) / (m + p - 1)"};
  int64_t layers = 4, width = 1024, batch = 64;
  std::string trace_path, schedules = "gpipe,1f1b,interleaved,zb-h1";
  int64_t virtual_stages = 2;
  app.add_option("--layers-per-stage", layers, "Linear + ReLU layers on each rank")->check(CLI::PositiveNumber);
  app.add_option("--width", width, "features of every layer")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "samples per step (divisible by 16)")->check(CLI::PositiveNumber);
  app.add_option("--schedules", schedules, "comma-separated: gpipe, 1f1b, interleaved, zb-h1");
  app.add_option("--virtual-stages", virtual_stages, "interleaved: chunks per rank (dividing --layers-per-stage)")
      ->check(CLI::PositiveNumber);
  app.add_option("--trace", trace_path, "Chrome traces of one step of each schedule, m = 4");
  CLI11_PARSE(app, argc, argv);
  return par::main_guard(world, [&] {
    RG_CHECK(batch % 16 == 0, "bench_pipeline", "expected --batch divisible by 16, got ", batch);
    par::DeviceMesh mesh(world.communicator(), {{"pp", world.size()}});
    par::Communicator& pp = mesh.group("pp");
    rg::manual_seed(static_cast<uint64_t>(world.rank()));
    RG_CHECK(layers % virtual_stages == 0, "bench_pipeline", "expected --virtual-stages to divide "
             "--layers-per-stage ", layers, ", got ", virtual_stages);
    rg::nn::Sequential stage;  // the rank's layers; interleaved: the same layers as v chunks
    std::vector<std::shared_ptr<rg::nn::Sequential>> chunks;
    for (int64_t l = 0; l < layers; ++l) {
      if (l % (layers / virtual_stages) == 0) chunks.push_back(std::make_shared<rg::nn::Sequential>());
      auto linear = std::make_shared<rg::nn::Linear>(width, width);
      auto relu = std::make_shared<rg::nn::ReLU>();
      stage.add(linear), stage.add(relu);
      chunks.back()->add(linear), chunks.back()->add(relu);
    }
    std::vector<rg::nn::Module*> chunk_ptrs;
    for (auto& c : chunks) chunk_ptrs.push_back(c.get());
    rg::Tensor x = rg::randn({batch, width}), y = rg::randn({batch, width});
    auto loss = [](const rg::Tensor& out, const rg::Tensor& t) { return rg::nn::mse_loss(out, t); };
    if (world.is_main())
      std::printf("world %d: %lld x Linear(%lld) + ReLU per stage, batch %lld\n", world.size(),
                  static_cast<long long>(layers), static_cast<long long>(width),
                  static_cast<long long>(batch));
    std::vector<par::PipelineSchedule> todo;
    for (size_t at = 0; at <= schedules.size();) {
      const size_t comma = std::min(schedules.find(',', at), schedules.size());
      todo.push_back(par::parse_schedule(schedules.substr(at, comma - at)));
      at = comma + 1;
    }
    for (par::PipelineSchedule schedule : todo) {
      const char* name = par::schedule_name(schedule);
      std::string traced_path = trace_path;  // pipe.json -> pipe.1f1b.json
      if (!traced_path.empty()) {
        const size_t dot = traced_path.rfind('.');
        traced_path.insert(dot == std::string::npos ? traced_path.size() : dot, std::string(".") + name);
      }
      const bool interleaved = schedule == par::PipelineSchedule::Interleaved1F1B;
      for (int64_t m : {1, 2, 4, 8, 16}) {
        if (interleaved && m % pp.size() != 0) continue;  // Megatron's order needs m a multiple of p
        par::Pipeline pipe = interleaved ? par::Pipeline(chunk_ptrs, pp, {.micro_batches = m, .schedule = schedule})
                                         : par::Pipeline(stage, pp, {.micro_batches = m, .schedule = schedule});
        double bubble = 1, ms = 0, peak = 0, held = 0;
        for (int run = 0; run < 4; ++run) {  // a warm-up, then the best of 3
          stage.zero_grad();
          const bool traced = !trace_path.empty() && run == 3 && m == 4;
          if (traced) rg::trace::start(traced_path, world.rank(), world.size());
          pp.barrier();
          const int64_t before = rg::memory_stats().live_bytes;
          rg::reset_peak_memory();
          pipe.forward_backward(x, y, loss);
          const double step_peak = static_cast<double>(rg::memory_stats().peak_bytes - before);
          if (traced) par::stop_trace(world, traced_path);
          if (run == 0) continue;
          // The worst rank's bubble this step; the largest held count and peak.
          rg::Tensor b = rg::from_vector<double>({pipe.bubble(), static_cast<double>(pipe.max_held()), step_peak});
          pp.all_reduce(b, par::Reduce::Max);
          std::vector<double> worst = b.tolist<double>();
          if (worst[0] < bubble) bubble = worst[0], ms = 1e3 * pipe.step_seconds();
          held = worst[1], peak = std::max(peak, worst[2]);
        }
        if (world.is_main())
          std::printf("RESULT bench=pipeline world=%d schedule=%s virtual_stages=%lld micro_batches=%lld "
                      "bubble=%.3f theory=%.3f held=%.0f step_peak_mb=%.1f ms_per_step=%.1f\n",
                      world.size(), name, static_cast<long long>(pipe.virtual_stages()),
                      static_cast<long long>(m), bubble, pipe.theoretical_bubble(), held, peak / 1e6, ms);
      }
      if (world.is_main() && !trace_path.empty())
        std::printf("trace of a %s step (4 micro-batches) written to %s\n", name, traced_path.c_str());
    }
    return 0;
  });
}
