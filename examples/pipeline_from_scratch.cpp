// pipeline_from_scratch.cpp — pipeline parallelism in one page: GPipe, then 1F1B, and the
// bubble each leaves beside its formula.
//
//   scripts/rgrun -n 2 build/bin/pipeline_from_scratch [--micro-batches 1,2,4,8]
//
// A stack of p·L Linear+tanh layers is cut into p stages, one per rank: rank r holds
// layers [r·L, (r+1)·L). A batch is cut into m micro-batches so that the stages can work
// at once. For micro-batch i, stage r runs
//   F_i: receive the activation from r − 1 (stage 0: take x's slice), run its layers,
//        send the output to r + 1 (the last stage: compute the loss);
//   B_i: receive dL/d(output) from r + 1 (the last stage: start from the loss), run
//        backward through its layers, send dL/d(input) to r − 1.
// The two classic orders of these steps:
//   GPipe  every F, then every B. Each stage holds the activations of all m
//          micro-batches until their backward.
//   1F1B   p − 1 − r warm-up F's, then one F and one B in turn, then the remaining B's.
//          Stage r holds at most p − r micro-batches' activations.
// Both take the same time: the first stage's last F starts once m − 1 F's are done, the
// last stage's first B waits for the first F to cross p − 1 stages, and so on. With
// every F taking tF and every B tB, a step lasts (m + p − 1)·(tF + tB) and each stage
// computes for m·(tF + tB) of it; the rest, the bubble, is
//   (p − 1) / (m + p − 1)           of every rank's step,
// which only more micro-batches (or fewer stages) shrink. p = 2:
//   GPipe, m = 4   rank 0:  F0 F1 F2 F3 .. .. .. B0 B0 B1 B1 B2 B2 B3 B3
//                  rank 1:  .. F0 F1 F2 F3 B0 B0 B1 B1 B2 B2 B3 B3 .. ..
//   (B takes twice as long as F; ".." is one tF of idle time: 3·tF = (p − 1)·(tF + tB) of
//   the 15 tF of the step on each rank, 3/15 = (p − 1)/(m + p − 1).)
// The program measures each rank's idle time (waiting for a neighbour's message, or for
// the others to finish the step) for both schedules and every m given (the median of
// --steps steps after a warm-up), prints it beside the formula, checks that every
// schedule gives the gradients of the plain model (one process, the whole batch), and
// counts the activations each stage held at once. --last-stage-layers K gives the last
// stage K layers instead of L: the formula assumes equal stages, the measurement does not.
// Ends with: RESULT example=pipeline_from_scratch world=P micro_batches=M gpipe_bubble=…
//            onef1b_bubble=… theory=…   (for the last m given)
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "parse_on_every_rank.h"

namespace rg = ringgrad;
namespace par = rg::parallel;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One stage's share of the model: L layers of y = tanh(x·Wᵀ + b).
struct Stage {
  std::vector<rg::Tensor> weights, biases;
  rg::Tensor forward(rg::Tensor x) const {
    for (size_t l = 0; l < weights.size(); ++l) x = rg::tanh(rg::nn::linear(x, weights[l], biases[l]));
    return x;
  }
  std::vector<rg::Tensor> parameters() const {
    std::vector<rg::Tensor> all = weights;
    all.insert(all.end(), biases.begin(), biases.end());
    return all;
  }
};

// Layers [first, first + count) of the whole model: the same numbers on every rank (one
// seed for the whole stack), as leaves that collect gradients.
Stage make_stage(int64_t first, int64_t count, int64_t width) {
  rg::manual_seed(7);
  Stage s;
  for (int64_t l = 0; l < first + count; ++l) {
    rg::Tensor w = rg::randn({width, width}) * (1.0 / std::sqrt(double(width)));
    rg::Tensor b = rg::randn({width}) * 0.1;
    if (l >= first) s.weights.push_back(w.requires_grad_()), s.biases.push_back(b.requires_grad_());
  }
  return s;
}

// What one schedule's step measured on this rank.
struct StepStats {
  double seconds = 0, idle = 0;  // the whole step; waiting for neighbours
  int64_t max_held = 0;          // micro-batches whose activations were held at once
};

enum class Schedule { GPipe, OneFOneB };

// One training step's forward and backward through the pipeline: the gradients of
// L = mean over the batch of Σ y² accumulate into the stage's parameters.
StepStats pipeline_step(const Stage& stage, par::Communicator& comm, Schedule schedule,
                        const rg::Tensor& x, int64_t m) {
  const int64_t p = comm.size(), r = comm.rank(), rows = x.size(0) / m, width = x.size(1);
  const bool first = r == 0, last = r == p - 1;
  StepStats stats;
  std::vector<rg::Tensor> inputs(m), outputs(m);  // held from F_i until B_i
  std::vector<par::WorkHandle> sends;             // in flight; waited for at the end
  int64_t held = 0;

  // A blocking receive: the time spent in it is the bubble.
  auto receive = [&](int src, int tag) {
    rg::Tensor t = rg::empty({rows, width});
    const auto start = Clock::now();
    comm.recv(t, src, tag);
    stats.idle += since(start);
    return t;
  };
  auto F = [&](int64_t i) {  // activations go forward with tag 2i
    inputs[i] = first ? x.narrow(0, i * rows, rows) : receive(r - 1, 2 * i).requires_grad_();
    outputs[i] = stage.forward(inputs[i]);
    if (!last) sends.push_back(comm.send_async(outputs[i].detach(), r + 1, 2 * i));
    stats.max_held = std::max(stats.max_held, ++held);
  };
  auto B = [&](int64_t i) {  // gradients come back with tag 2i + 1
    if (last)
      (outputs[i].pow(2).sum() * (1.0 / double(x.size(0)))).backward();
    else
      outputs[i].backward(receive(r + 1, 2 * i + 1));
    if (!first) sends.push_back(comm.send_async(inputs[i].grad(), r - 1, 2 * i + 1));
    inputs[i] = outputs[i] = rg::Tensor();  // this micro-batch's activations can go
    --held;
  };

  comm.barrier();  // every rank starts the step together
  const auto start = Clock::now();
  if (schedule == Schedule::GPipe) {
    for (int64_t i = 0; i < m; ++i) F(i);
    for (int64_t i = 0; i < m; ++i) B(i);
  } else {
    const int64_t warmup = std::min(p - 1 - r, m);
    int64_t next_f = 0, next_b = 0;
    while (next_f < warmup) F(next_f++);
    while (next_f < m) F(next_f++), B(next_b++);
    while (next_b < m) B(next_b++);
  }
  // The step ends for everyone when the last stage is done: the time a rank finished
  // early waits here is bubble too (the next step could not start sooner).
  const auto waiting = Clock::now();
  for (par::WorkHandle& w : sends) w->wait();
  comm.barrier();
  stats.idle += since(waiting);
  stats.seconds = since(start);
  return stats;
}

int main(int argc, char** argv) {
  par::World world(argc, argv);
  CLI::App app{"Pipeline parallelism from scratch: GPipe and 1F1B, and their bubble (rgrun -n P)"};
  std::vector<int64_t> micro_batches{1, 2, 4, 8};
  int64_t layers = 8, width = 512, rows = 128, steps = 3, last_layers = 0;
  app.add_option("--micro-batches", micro_batches, "values of m to measure")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--layers", layers, "L: layers per stage")->check(CLI::PositiveNumber);
  app.add_option("--last-stage-layers", last_layers, "the last stage's layers (default: --layers)")
      ->check(CLI::PositiveNumber);
  app.add_option("--width", width, "features of every layer")->check(CLI::PositiveNumber);
  app.add_option("--rows", rows, "rows per micro-batch (a batch has m of them)")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "steps per measurement, after a warm-up (the median counts)")
      ->check(CLI::PositiveNumber);
  if (auto code = parse_on_every_rank(world, app, argc, argv)) return *code;

  return par::main_guard(world, [&] {
    par::Communicator& comm = world.communicator();
    const int p = world.size(), r = world.rank();
    if (last_layers == 0) last_layers = layers;
    const int64_t mine_count = r == p - 1 ? last_layers : layers;  // this stage's layers
    const int64_t total = (p - 1) * layers + last_layers;
    const Stage stage = make_stage(r * layers, mine_count, width);
    std::string last_note;  // (appended, not "…" + to_string(): GCC 12's -Wrestrict, bug 105651)
    if (last_layers != layers) last_note.append(", the last ").append(std::to_string(last_layers));
    if (world.is_main())
      std::printf("%d stages of %ld layers%s (width %ld), micro-batches of %ld rows\n", p,
                  long(layers), last_note.c_str(), long(width), long(rows));
    if (world.is_main())
      std::printf("%4s  %-6s %10s %10s %10s %8s %12s\n", "m", "", "bubble", "theory", "step ms",
                  "held", "max |grad-plain|");
    double worst_grad = 0, gpipe_last = 0, onef1b_last = 0, theory_last = 0;
    for (int64_t m : micro_batches) {
      rg::Generator data(11);
      const rg::Tensor x = rg::randn({m * rows, width}, {}, &data);
      // The plain model, one process, the whole batch: the gradients to compare with.
      const Stage whole = make_stage(0, total, width);
      (whole.forward(x).pow(2).sum() * (1.0 / double(x.size(0)))).backward();
      const double theory = double(p - 1) / double(m + p - 1);
      for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB}) {
        // One warm-up step, then `steps` measured ones. Each step's bubble is the mean of
        // the ranks' idle / step (an all-reduce, after the step); the median step counts,
        // so that a moment when the machine ran something else does not.
        StepStats last;
        std::vector<std::pair<double, double>> measured;  // (mean bubble, step seconds)
        for (int64_t s = 0; s <= steps; ++s) {
          for (rg::Tensor& t : stage.parameters()) t.set_grad(rg::Tensor());
          last = pipeline_step(stage, comm, schedule, x, m);
          rg::Tensor b = rg::from_vector<double>({last.idle / last.seconds / p, last.seconds / p},
                                                 {2}, {.dtype = rg::kFloat64});
          comm.all_reduce(b, par::Reduce::Sum);
          if (s > 0) measured.emplace_back(b.tolist<double>()[0], b.tolist<double>()[1]);
        }
        std::sort(measured.begin(), measured.end());
        const auto [median_bubble, median_seconds] = measured[measured.size() / 2];
        // The gradients of one step against the plain model's layers [r·L, r·L + count).
        double diff = 0;
        std::vector<rg::Tensor> mine = stage.parameters();
        for (int64_t l = 0; l < mine_count; ++l) {
          diff = std::max(diff, rg::amax(rg::abs(mine[l].grad() - whole.weights[r * layers + l].grad())).item());
          diff = std::max(diff, rg::amax(rg::abs(mine[mine_count + l].grad() - whole.biases[r * layers + l].grad())).item());
        }
        // Every rank's bubble (idle / step) and the worst gradient difference, on rank 0.
        rg::Tensor numbers = rg::from_vector<double>({0.0, 0.0, diff, double(last.max_held)}, {4},
                                                     {.dtype = rg::kFloat64});
        rg::Tensor all = comm.all_gather(numbers);  // (p, 4)
        std::vector<double> v = all.tolist<double>();
        const double bubble = median_bubble, step_s = median_seconds;
        double grad = 0;
        std::string held;
        int64_t held_sum = 0, held_predicted = 0;  // over the stages: GPipe m each, 1F1B p − r
        for (int q = 0; q < p; ++q) {
          grad = std::max(grad, v[4 * q + 2]);
          held += (q ? "/" : "") + std::to_string(int64_t(v[4 * q + 3]));
          held_sum += int64_t(v[4 * q + 3]);
          held_predicted += schedule == Schedule::GPipe ? m : std::min<int64_t>(p - q, m);
        }
        worst_grad = std::max(worst_grad, grad);
        const char* name = schedule == Schedule::GPipe ? "gpipe" : "1f1b";
        (schedule == Schedule::GPipe ? gpipe_last : onef1b_last) = bubble;
        theory_last = theory;
        if (world.is_main()) {
          std::printf("%4ld  %-6s %10.3f %10.3f %10.1f %8s %12.2g\n", long(m), name, bubble, theory,
                      step_s * 1e3, held.c_str(), grad);
          std::printf("CHECK bubble_%s_m%ld predicted=%.3f measured=%.3f\n", name, long(m), theory,
                      bubble);
          std::printf("CHECK held_%s_m%ld predicted=%ld measured=%ld\n", name, long(m),
                      long(held_predicted), long(held_sum));
        }
      }
    }
    if (world.is_main()) {
      std::printf("bubble: each rank's time waiting (for a neighbour, or the step's end) / the step,"
                  " averaged over ranks, median of the steps;"
                  " held: activations each stage held at once (rank 0/1/...)\n");
      std::printf("every schedule's gradients equal the plain model's: max diff %.2g (float32)\n",
                  worst_grad);
      std::printf("RESULT example=pipeline_from_scratch world=%d micro_batches=%ld gpipe_bubble=%.3f "
                  "onef1b_bubble=%.3f theory=%.3f\n",
                  p, long(micro_batches.back()), gpipe_last, onef1b_last, theory_last);
    }
    return worst_grad <= 1e-4 ? 0 : 1;
  });
}
