// test_accumulate.cpp — gradient accumulation and activation recomputation, under every
// data-parallel strategy, equal one process that takes the whole batch at once.
//
//   scripts/rgrun -n 3 build/bin/test_accumulate
//
// For each strategy (ddp; zero1 = DDP + ZeRO-1; zero2; fsdp), each accumulation A = 1..4,
// and recomputation off and on (nn::checkpoint around each of the two layers): 3 AdamW
// steps, each over a global batch of 2·N·A sequences. Rank r takes its 2·A of them in A
// micro-batches of 2, each micro-batch's loss divided by A, and only the last backward
// communicates (the strategy's no_sync() around the others). The reference is one process
// (each rank computes it alone) with the whole batch in one backward. The contract: every
// parameter within 1e-12 of the reference (float64; the key bias aside, checks.h), on every
// rank. And no_sync() sends nothing: under ddp, zero1 and zero2 a step sends as many bytes
// with accumulation A as with 1 (FSDP gathers each unit again for every micro-batch's
// forward, by design, so its bytes grow with A). Prints "rank R/N: P passed, F failed" per rank (checks.h); exits non-zero on a failure.
#include <ringgrad/nn/checkpoint.h>
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/fsdp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/parallel/zero.h>
#include <ringgrad/ringgrad.h>

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "checks.h"
#include "two_layers.h"

namespace rg = ringgrad;
namespace par = rg::parallel;

namespace {

int rank = 0, N = 1;
void check(bool ok, const std::string& what) { mpi_test::check(ok, what, rank); }

// The two layers, each optionally recomputed in backward instead of keeping its activations.
struct Net : mpi_test::TwoLayers {
  bool recompute = false;
  rg::Tensor forward(const rg::Tensor& x) override {
    if (!recompute) return TwoLayers::forward(x);
    rg::Tensor h = rg::nn::checkpoint([this](const std::vector<rg::Tensor>& in) { return first(in[0]); }, {x});
    return rg::nn::checkpoint([this](const std::vector<rg::Tensor>& in) { return second(in[0]); }, {h});
  }
};

std::unique_ptr<Net> make_net(bool recompute) {
  rg::manual_seed(5);  // the same weights everywhere, and as two_layers.h makes them
  auto m = std::make_unique<Net>();
  m->to(rg::kFloat64);
  m->recompute = recompute;
  return m;
}

std::unique_ptr<rg::optim::Optimizer> adamw(std::vector<rg::Tensor> params) {
  return std::make_unique<rg::optim::AdamW>(params, rg::optim::AdamWOptions{.lr = 1e-2});
}

constexpr int kSteps = 3, kRows = 2;  // rows per micro-batch

// The step's whole batch: 2·N·A sequences, the same on every rank.
std::pair<rg::Tensor, rg::Tensor> batch(rg::Generator& data, int accumulation) {
  rg::Tensor x = rg::randn({kRows * N * accumulation, 6, 8}, {.dtype = rg::kFloat64}, &data);
  rg::Tensor y = rg::randn({kRows * N * accumulation, 6, 8}, {.dtype = rg::kFloat64}, &data);
  return {x, y};
}

// One process, the whole batch in one backward.
std::unique_ptr<Net> reference(int accumulation) {
  auto m = make_net(false);
  auto opt = adamw(m->parameters());
  rg::Generator data(3);
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(data, accumulation);
    opt->zero_grad();
    rg::nn::mse_loss((*m)(x), y).backward();
    opt->step();
  }
  return m;
}

void compare(const std::string& strategy, int accumulation, bool recompute, Net& want, par::Communicator& comm) {
  auto m = make_net(recompute);
  std::unique_ptr<par::DistributedDataParallel> ddp;
  std::unique_ptr<par::ZeroRedundancyOptimizer> zero;
  std::unique_ptr<par::FullyShardedDataParallel> fsdp;
  std::unique_ptr<rg::optim::Optimizer> opt;
  if (strategy == "ddp" || strategy == "zero1") ddp = std::make_unique<par::DistributedDataParallel>(*m, comm);
  if (strategy == "ddp") opt = adamw(m->parameters());
  if (strategy == "zero1" || strategy == "zero2")
    zero = std::make_unique<par::ZeroRedundancyOptimizer>(m->parameters(), comm, adamw,
                                                          par::ZeroOptions{.stage = strategy == "zero1" ? 1 : 2});
  if (strategy == "fsdp") {  // one unit: the checkpoints lie inside it
    fsdp = std::make_unique<par::FullyShardedDataParallel>(*m, comm);
    opt = adamw(fsdp->parameters());
  }
  rg::Generator data(3);
  comm.reset_wire_bytes();
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(data, accumulation);
    zero ? zero->zero_grad() : opt->zero_grad();
    for (int k = 0; k < accumulation; ++k) {
      const int64_t first = int64_t(rank * accumulation + k) * kRows;
      // Every micro-batch but the last only accumulates: nothing is sent.
      const bool last = k == accumulation - 1;
      std::optional<par::DistributedDataParallel::NoSync> ddp_quiet;
      std::optional<par::ZeroRedundancyOptimizer::NoSync> zero_quiet;
      std::optional<par::FullyShardedDataParallel::NoSync> fsdp_quiet;
      if (!last && ddp) ddp_quiet.emplace(*ddp);
      if (!last && strategy == "zero2") zero_quiet.emplace(*zero);
      if (!last && fsdp) fsdp_quiet.emplace(*fsdp);
      rg::Tensor xs = x.narrow(0, first, kRows), ys = y.narrow(0, first, kRows);
      rg::Tensor out = fsdp ? (*fsdp)(xs) : ddp ? (*ddp)(xs) : (*m)(xs);
      (rg::nn::mse_loss(out, ys) * (1.0 / accumulation)).backward();
    }
    zero ? zero->step() : opt->step();
  }
  const int64_t sent = comm.wire_bytes();
  double diff = 0;
  {
    std::optional<par::FullyShardedDataParallel::FullParams> whole;
    if (fsdp) whole.emplace(*fsdp, /*writeback=*/false);
    diff = mpi_test::max_param_diff(want, *m, /*skip_key_bias=*/true);
  }
  const std::string name = strategy + " accumulation " + std::to_string(accumulation) +
                           (recompute ? " recompute" : "");
  check(diff <= 1e-12, name + ": = one process with the whole batch (max diff " + std::to_string(diff) + ")");
  // Bytes sent by the run with accumulation 1, by strategy: the others must match it.
  static std::map<std::string, int64_t> unaccumulated;
  if (accumulation == 1 && !recompute) unaccumulated[strategy] = sent;
  if (strategy != "fsdp")
    check(sent == unaccumulated.at(strategy), name + ": sends what accumulation 1 sends (" +
                                                  std::to_string(sent) + " vs " +
                                                  std::to_string(unaccumulated.at(strategy)) + " bytes)");
  if (rank == 0) std::printf("N=%d %-34s max |diff| = %.3g, %lld bytes sent\n", N, name.c_str(), diff,
                             static_cast<long long>(sent));
}

}  // namespace

int main(int argc, char** argv) {
  par::World world(argc, argv);
  rank = world.rank();
  N = world.size();
  par::Communicator& comm = world.communicator();
  return par::main_guard(world, [&] {
    for (int accumulation = 1; accumulation <= 4; ++accumulation) {
      auto want = reference(accumulation);
      for (const char* strategy : {"ddp", "zero1", "zero2", "fsdp"})
        for (bool recompute : {false, true}) compare(strategy, accumulation, recompute, *want, comm);
    }
    // ZeRO-1's gradients are DDP's: its no_sync is DDP's, and asking ZeRO for one says so.
    auto m = make_net(false);
    par::ZeroRedundancyOptimizer zero1(m->parameters(), comm, adamw);
    mpi_test::check_error([&] { auto quiet = zero1.no_sync(); }, "DistributedDataParallel::no_sync",
                          "ZeRO-1 no_sync", rank);
    return mpi_test::report(rank, N);
  });
}
