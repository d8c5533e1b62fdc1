// test_pipeline.cpp — a model cut into N pipeline stages computes the gradients of the
// whole model in one process.
//
//   scripts/rgrun -n 3 build/bin/test_pipeline
//
// Four blocks (Linear + Tanh; the last a Linear alone), float64, cut into N contiguous
// stages (N = 3: blocks {0, 1}, {2}, {3}); rank r holds stage r, with the weights of the
// plain model every rank builds from one seed. A batch of 8 in 4 micro-batches:
//  * GPipe, 1F1B and ZB-H1 each give the plain model's loss and, on every stage, the
//    plain gradients of its blocks (within 1e-12), holding the activations of as many
//    micro-batches at once as the schedule says (GPipe m, 1F1B min(p − r, m), ZB-H1 at
//    most min(p, m));
//  * 3 AdamW steps under 1F1B and under ZB-H1 end with the plain model's parameters;
//  * interleaved 1F1B (N >= 2; 2N blocks, two chunks a rank) likewise, with its held count;
//  * each rank's measured bubble is printed beside the theory, (p − 1) / (m + p − 1);
//  * a batch the micro-batches do not divide is a clear error (N <= 2).
// Prints "rank R/N: P passed, F failed" per rank (checks.h); exits non-zero on a failure.
#include <ringgrad/parallel/device_mesh.h>
#include <ringgrad/parallel/pipeline.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checks.h"

namespace rg = ringgrad;
namespace par = rg::parallel;

namespace {

int rank = 0, N = 1;
void check(bool ok, const std::string& what) { mpi_test::check(ok, what, rank); }
constexpr int kBlocks = 4;

// The plain model's blocks: Linear(6, 6) + Tanh, the last without Tanh.
std::vector<std::shared_ptr<rg::nn::Linear>> make_linears(int count = kBlocks) {
  rg::manual_seed(21);
  std::vector<std::shared_ptr<rg::nn::Linear>> linears;
  for (int b = 0; b < count; ++b) {
    linears.push_back(std::make_shared<rg::nn::Linear>(6, 6));
    linears.back()->to(rg::kFloat64);
  }
  return linears;
}

// Blocks [first, last) as one Sequential.
std::shared_ptr<rg::nn::Sequential> blocks(const std::vector<std::shared_ptr<rg::nn::Linear>>& l,
                                           int first, int last) {
  auto seq = std::make_shared<rg::nn::Sequential>();
  for (int b = first; b < last; ++b) {
    seq->add(l[static_cast<size_t>(b)]);
    if (b + 1 < static_cast<int>(l.size())) seq->add(std::make_shared<rg::nn::Tanh>());
  }
  return seq;
}

// Stage r's blocks: as even a cut as possible, the earlier stages taking the extra.
std::pair<int, int> stage_blocks(int r) {
  const int base = kBlocks / N, extra = kBlocks % N;
  const int first = r * base + std::min(r, extra);
  return {first, first + base + (r < extra ? 1 : 0)};
}

struct Batch {
  rg::Tensor x, y;
};
Batch batch(int step) {
  rg::Generator gen(100 + static_cast<uint64_t>(step));
  return {rg::randn({8, 6}, {.dtype = rg::kFloat64}, &gen), rg::randn({8, 6}, {.dtype = rg::kFloat64}, &gen)};
}

rg::Tensor mse(const rg::Tensor& out, const rg::Tensor& y) { return rg::nn::mse_loss(out, y); }

double max_grad_diff(const std::vector<rg::Tensor>& a, const std::vector<rg::Tensor>& b) {
  double worst = a.size() == b.size() ? 0 : 1e300;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, rg::amax(rg::abs(a[i].grad() - b[i].grad())).item());
  return worst;
}

void check_schedule(par::Communicator& pp, par::PipelineSchedule schedule, const std::string& name) {
  auto plain_linears = make_linears(), stage_linears = make_linears();
  auto plain = blocks(plain_linears, 0, kBlocks);
  auto [first, last] = stage_blocks(rank);
  auto stage = blocks(stage_linears, first, last);
  auto reference = blocks(plain_linears, first, last);  // the plain model's part for this stage
  par::Pipeline pipe(*stage, pp, {.micro_batches = 4, .schedule = schedule});
  Batch b = batch(0);
  rg::Tensor plain_loss = mse((*plain)(b.x), b.y);
  plain_loss.backward();
  const double loss = pipe.forward_backward(b.x, b.y, mse);
  check(std::abs(loss - plain_loss.item()) <= 1e-12,
        name + ": the batch's loss on every rank (" + std::to_string(loss) + ")");
  const double diff = max_grad_diff(stage->parameters(), reference->parameters());
  check(diff <= 1e-12, name + ": stage " + std::to_string(rank) + "'s gradients = the plain model's (max diff " +
                           std::to_string(diff) + ")");
  std::printf("N=%d %s, rank %d (blocks %d-%d): bubble %.2f measured, %.2f in theory (%.1f ms step)\n", N,
              name.c_str(), rank, first, last - 1, pipe.bubble(), pipe.theoretical_bubble(),
              1e3 * pipe.step_seconds());
  check(pipe.bubble() >= 0 && pipe.bubble() <= 1, name + ": a measured bubble");
  // ZB-H1's W's run where the stage would wait, so its later stages' counts depend on time:
  // at most 1F1B's first stage's, min(p, m), and that exactly on the first stage.
  const bool zb = schedule == par::PipelineSchedule::ZeroBubbleH1;
  const int64_t m = 4, held = schedule == par::PipelineSchedule::GPipe ? m
                              : zb                                     ? std::min<int64_t>(N, m)
                                                                       : std::min<int64_t>(N - rank, m);
  const bool held_ok = zb && rank > 0 ? pipe.max_held() <= held : pipe.max_held() == held;
  check(held_ok, name + ": stage " + std::to_string(rank) + " held " + std::to_string(pipe.max_held()) +
                     " micro-batches at once, expected " + (zb && rank > 0 ? "at most " : "") +
                     std::to_string(held));
}

// Interleaved 1F1B: 2N blocks, rank r holding blocks r and N + r as its two chunks (the
// pipeline's stages r and N + r), 2N micro-batches of 2 rows: the plain model's loss and
// gradients, the held count of the formula, and 3 AdamW steps.
void check_interleaved(par::Communicator& pp) {
  const int v = 2, blocks_n = v * N, m = 2 * N;
  auto plain_linears = make_linears(blocks_n), stage_linears = make_linears(blocks_n);
  auto plain = blocks(plain_linears, 0, blocks_n);
  std::vector<std::shared_ptr<rg::nn::Sequential>> chunks, reference;
  std::vector<rg::nn::Module*> chunk_ptrs;
  for (int c = 0; c < v; ++c) {
    chunks.push_back(blocks(stage_linears, c * N + rank, c * N + rank + 1));
    reference.push_back(blocks(plain_linears, c * N + rank, c * N + rank + 1));
    chunk_ptrs.push_back(chunks.back().get());
  }
  par::Pipeline pipe(chunk_ptrs, pp, {.micro_batches = m, .schedule = par::PipelineSchedule::Interleaved1F1B});
  std::vector<rg::Tensor> mine, want;
  for (int c = 0; c < v; ++c)
    for (auto& t : chunks[size_t(c)]->parameters()) mine.push_back(t);
  for (int c = 0; c < v; ++c)
    for (auto& t : reference[size_t(c)]->parameters()) want.push_back(t);
  rg::optim::AdamW a(plain->parameters(), {.lr = 1e-2}), s(mine, {.lr = 1e-2});
  double worst_loss = 0, worst_grad = 0;
  for (int step = 0; step < 3; ++step) {
    rg::Generator gen(300 + static_cast<uint64_t>(step));
    rg::Tensor x = rg::randn({2 * m, 6}, {.dtype = rg::kFloat64}, &gen);
    rg::Tensor y = rg::randn({2 * m, 6}, {.dtype = rg::kFloat64}, &gen);
    a.zero_grad(), s.zero_grad();
    rg::Tensor plain_loss = mse((*plain)(x), y);
    plain_loss.backward();
    const double loss = pipe.forward_backward(x, y, mse);
    worst_loss = std::max(worst_loss, std::abs(loss - plain_loss.item()));
    worst_grad = std::max(worst_grad, max_grad_diff(mine, want));
    a.step(), s.step();
  }
  check(worst_loss <= 1e-12, "interleaved: the batch's loss on every rank, 3 steps (max diff " +
                                 std::to_string(worst_loss) + ")");
  check(worst_grad <= 1e-12, "interleaved: rank " + std::to_string(rank) +
                                 "'s chunks' gradients = the plain model's (max diff " + std::to_string(worst_grad) + ")");
  double worst = 0;
  for (size_t i = 0; i < mine.size(); ++i) worst = std::max(worst, rg::amax(rg::abs(mine[i] - want[i])).item());
  check(worst <= 1e-12, "interleaved: 3 AdamW steps end with the plain model's parameters (max diff " +
                            std::to_string(worst) + ")");
  const int64_t held = std::min<int64_t>((N - rank - 1) * 2 + (v - 1) * N + 1, int64_t(m) * v);
  check(pipe.max_held() == held, "interleaved: rank " + std::to_string(rank) + " held " +
                                     std::to_string(pipe.max_held()) + " chunk activations at once, expected " +
                                     std::to_string(held));
  std::printf("N=%d interleaved (v=2, m=%d), rank %d: bubble %.2f measured, %.2f in theory\n", N, m, rank,
              pipe.bubble(), pipe.theoretical_bubble());
  const double ev = pipe.evaluate(rg::full({2 * m, 6}, 0.5, {.dtype = rg::kFloat64}),
                                  rg::zeros({2 * m, 6}, {.dtype = rg::kFloat64}), mse);
  rg::Tensor want_ev;
  {
    rg::NoGradGuard no_grad;
    want_ev = mse((*plain)(rg::full({2 * m, 6}, 0.5, {.dtype = rg::kFloat64})), rg::zeros({2 * m, 6}, {.dtype = rg::kFloat64}));
  }
  check(std::abs(ev - want_ev.item()) <= 1e-12, "interleaved: evaluate() gives the plain model's loss");
  if (rank == 0) {  // what the schedule refuses
    mpi_test::check_error([&] { par::Pipeline bad(chunk_ptrs, pp, {.micro_batches = 4}); },
                          "virtual stages run under the interleaved schedule", "chunks under 1F1B", rank);
    mpi_test::check_error(
        [&] {
          par::Pipeline bad(chunk_ptrs, pp, {.micro_batches = N + 1, .schedule = par::PipelineSchedule::Interleaved1F1B});
        },
        "micro-batches a multiple of them", "interleaved with m not a multiple of p", rank);
  }
}

void check_training(par::Communicator& pp, par::PipelineSchedule schedule) {
  const std::string name = par::schedule_name(schedule);
  auto plain_linears = make_linears(), stage_linears = make_linears();
  auto plain = blocks(plain_linears, 0, kBlocks);
  auto [first, last] = stage_blocks(rank);
  auto stage = blocks(stage_linears, first, last);
  auto reference = blocks(plain_linears, first, last);
  par::Pipeline pipe(*stage, pp, {.micro_batches = 4, .schedule = schedule});
  rg::optim::AdamW a(plain->parameters(), {.lr = 1e-2}), s(stage->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    Batch b = batch(step);
    a.zero_grad(), s.zero_grad();
    mse((*plain)(b.x), b.y).backward();
    if (step == 0) rg::trace::start("pipeline-trace-test.json", rank, N);
    pipe.forward_backward(b.x, b.y, mse);
    if (step == 0) {  // each micro-batch's forward and backward, a span each on every stage
      std::ifstream in(rg::trace::stop());
      const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      std::set<std::string> spans;
      if (doc.contains("traceEvents"))
        for (const nlohmann::json& e : doc["traceEvents"])
          if (e.value("cat", "") == "pipeline") spans.insert(e.value("name", ""));
      std::vector<std::string> passes{"F", "B"};
      if (schedule == par::PipelineSchedule::ZeroBubbleH1) passes.push_back("W");
      for (const std::string& pass : passes)
        for (int m = 0; m < 4; ++m) {
          const std::string span = pass + std::to_string(m);
          check(spans.count(span) == 1, name + ": the traced step has the pipeline span " + span);
        }
    }
    a.step(), s.step();
  }
  double worst = 0;
  auto mine = stage->parameters(), want = reference->parameters();
  for (size_t i = 0; i < mine.size(); ++i)
    worst = std::max(worst, rg::amax(rg::abs(mine[i] - want[i])).item());
  check(worst <= 1e-12, "3 AdamW steps under " + name + ": the plain model's parameters (max diff " +
                            std::to_string(worst) + ")");
  // (With a middle stage the first and last would throw and the middle one wait for an
  // activation: in a program, main_guard then ends the job; here only N <= 2.)
  if (N <= 2 && schedule == par::PipelineSchedule::OneFOneB)
    mpi_test::check_error(
        [&] {
          rg::Tensor odd = rg::zeros({6, 6}, {.dtype = rg::kFloat64});
          pipe.forward_backward(odd, odd, mse);
        },
        "micro-batches", "a batch of 6 in 4 micro-batches", rank);
}

}  // namespace

int main(int argc, char** argv) {
  par::World world(argc, argv);
  rank = world.rank();
  N = world.size();
  par::DeviceMesh mesh(world.communicator(), {{"pp", N}});
  par::Communicator& pp = mesh.group("pp");
  return par::main_guard(world, [&] {
    if (N > kBlocks) return mpi_test::report(rank, N);  // one block per stage at most
    check_schedule(pp, par::PipelineSchedule::GPipe, "GPipe");
    check_schedule(pp, par::PipelineSchedule::OneFOneB, "1F1B");
    check_schedule(pp, par::PipelineSchedule::ZeroBubbleH1, "ZB-H1");
    check_training(pp, par::PipelineSchedule::OneFOneB);
    check_training(pp, par::PipelineSchedule::ZeroBubbleH1);
    if (N >= 2) check_interleaved(pp);
    if (rank == 0) {  // the schedules' names, both ways
      for (auto s : {par::PipelineSchedule::GPipe, par::PipelineSchedule::OneFOneB,
                     par::PipelineSchedule::Interleaved1F1B, par::PipelineSchedule::ZeroBubbleH1})
        check(par::parse_schedule(par::schedule_name(s)) == s, std::string("the schedule ") + par::schedule_name(s));
      mpi_test::check_error([] { par::parse_schedule("zb-v"); }, "expected a schedule gpipe, 1f1b, interleaved or zb-h1, got 'zb-v'",
                            "an unknown schedule", rank);
    }
    return mpi_test::report(rank, N);
  });
}
