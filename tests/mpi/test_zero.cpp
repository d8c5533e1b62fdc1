// test_zero.cpp — ZeroRedundancyOptimizer (ZeRO-1) equals DDP + the same optimizer.
//
//   scripts/rgrun -n 3 build/bin/test_zero
//
// Two Transformer encoder layers (float64; a parameter count that does not divide
// by N) train 10 AdamW steps on each rank's slice of the batch, once with DDP and a
// plain AdamW on every rank, once with DDP and ZeRO-1 (each rank's AdamW holds only
// its own parameters' state; the parameters are broadcast from their owners after
// each step), and once with ZeRO-2 and no DDP (each gradient reduced to its owner
// only). The contract: the same parameters on every rank — ZeRO-1 bit for bit,
// ZeRO-2 within 1e-12 (sums in another order) — the ranks' optimizer states add up
// to the full one (each holds about 1/N of it), and under ZeRO-2 each rank keeps
// only its own parameters' gradients.
// Prints "rank R/N: P passed, F failed" per rank (checks.h); exits non-zero on a failure.
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/parallel/zero.h>
#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "checks.h"
#include "two_layers.h"

namespace rg = ringgrad;
namespace par = rg::parallel;

namespace {

int rank = 0, N = 1;
void check(bool ok, const std::string& what) { mpi_test::check(ok, what, rank); }

using mpi_test::TwoLayers;

std::unique_ptr<TwoLayers> make_model() { return mpi_test::make_two_layers(rg::kFloat64); }

// Trains 10 steps; `step` updates the parameters after backward (with DDP's
// averaging, or — ZeRO-2 — with the optimizer's own hooks); `after_backward` looks
// at the gradients in between.
template <typename Step, typename Zero, typename Look>
void train(TwoLayers& model, par::Communicator& comm, bool with_ddp, Step&& step, Zero&& zero_grad,
           Look&& after_backward) {
  std::unique_ptr<par::DistributedDataParallel> ddp;
  if (with_ddp) ddp = std::make_unique<par::DistributedDataParallel>(model, comm);
  rg::Generator data(3);  // the same batches on every rank; each takes its slice
  for (int s = 0; s < 10; ++s) {
    rg::Tensor x = rg::randn({2 * N, 6, 8}, {.dtype = rg::kFloat64}, &data);
    rg::Tensor y = rg::randn({2 * N, 6, 8}, {.dtype = rg::kFloat64}, &data);
    zero_grad();
    rg::Tensor out = model(x.narrow(0, 2 * rank, 2));
    rg::nn::mse_loss(out, y.narrow(0, 2 * rank, 2)).backward();
    after_backward();
    step();
  }
}

}  // namespace

int main(int argc, char** argv) {
  par::World world(argc, argv);
  rank = world.rank();
  N = world.size();
  par::Communicator& comm = world.communicator();
  return par::main_guard(world, [&] {
    auto plain = make_model();
    rg::optim::AdamW adamw(plain->parameters(), {.lr = 1e-2});
    train(*plain, comm, true, [&] { adamw.step(); }, [&] { adamw.zero_grad(); }, [] {});

    auto sharded = make_model();
    par::ZeroRedundancyOptimizer zero(sharded->parameters(), comm, [](std::vector<rg::Tensor> p) {
      return std::make_unique<rg::optim::AdamW>(p, rg::optim::AdamWOptions{.lr = 1e-2});
    });
    train(*sharded, comm, true, [&] { zero.step(); }, [&] { zero.zero_grad(); }, [] {});
    const double diff = mpi_test::max_param_diff(*plain, *sharded);
    check(diff == 0, "ZeRO-1 = DDP + AdamW, bit for bit (max diff " + std::to_string(diff) + ")");

    // ZeRO-2, without DDP: gradients reduced to their owners only.
    auto sharded2 = make_model();
    par::ZeroRedundancyOptimizer zero2(
        sharded2->parameters(), comm,
        [](std::vector<rg::Tensor> p) {
          return std::make_unique<rg::optim::AdamW>(p, rg::optim::AdamWOptions{.lr = 1e-2});
        },
        {.stage = 2});
    int64_t kept = 0, all = 0;  // gradient elements this rank holds after backward
    train(*sharded2, comm, false, [&] { zero2.step(); }, [&] { zero2.zero_grad(); }, [&] {
      kept = all = 0;
      for (const rg::Tensor& p : sharded2->parameters()) {
        all += p.numel();
        if (p.grad().defined()) kept += p.numel();
      }
    });
    // (the key bias left out: MPI_Reduce and DDP's shared-memory all-reduce sum in
    // different orders, and checks.h says what AdamW makes of that)
    const double diff2 = mpi_test::max_param_diff(*plain, *sharded2, /*skip_key_bias=*/true);
    check(diff2 <= 1e-12, "ZeRO-2 = DDP + AdamW (max diff " + std::to_string(diff2) + ")");
    int64_t own = 0;
    for (size_t i = 0; i < sharded2->parameters().size(); ++i)
      if (zero2.owner(i) == rank) own += sharded2->parameters()[i].numel();
    check(kept == own, "ZeRO-2: after backward, only the own parameters' gradients are kept");

    // Clipping: under ZeRO-2 each rank holds only its own gradients, and
    // clip_grad_norm_ must still give the global norm and DDP's clipped steps.
    auto clipped = make_model();
    rg::optim::AdamW clipped_opt(clipped->parameters(), {.lr = 1e-2});
    std::vector<double> ddp_norms, zero_norms;
    train(*clipped, comm, true, [&] {
      ddp_norms.push_back(rg::optim::clip_grad_norm(clipped->parameters(), 0.05));
      clipped_opt.step();
    }, [&] { clipped_opt.zero_grad(); }, [] {});
    auto clipped2 = make_model();
    par::ZeroRedundancyOptimizer clipped_zero2(
        clipped2->parameters(), comm,
        [](std::vector<rg::Tensor> p) {
          return std::make_unique<rg::optim::AdamW>(p, rg::optim::AdamWOptions{.lr = 1e-2});
        },
        {.stage = 2});
    train(*clipped2, comm, false, [&] {
      zero_norms.push_back(clipped_zero2.clip_grad_norm_(0.05));
      clipped_zero2.step();
    }, [&] { clipped_zero2.zero_grad(); }, [] {});
    double norm_diff = 0;
    for (size_t i = 0; i < ddp_norms.size(); ++i)
      norm_diff = std::max(norm_diff, std::abs(ddp_norms[i] - zero_norms[i]) / ddp_norms[i]);
    check(ddp_norms.size() == 10 && ddp_norms[0] > 0.05 && norm_diff <= 1e-12,
          "ZeRO-2 clip_grad_norm_ = DDP's global norm (relative diff " + std::to_string(norm_diff) + ")");
    const double diff_clip = mpi_test::max_param_diff(*clipped, *clipped2, /*skip_key_bias=*/true);
    check(diff_clip <= 1e-12, "ZeRO-2 with clipping = DDP + clip_grad_norm (max diff " +
                                  std::to_string(diff_clip) + ")");

    // The optimizer state: each rank's share, adding up to the whole.
    std::map<std::string, std::string> meta;
    int64_t full = 0;
    for (const auto& [name, t] : adamw.state_dict(&meta)) full += static_cast<int64_t>(t.nbytes());
    const int64_t mine = zero.local_state_bytes();
    rg::Tensor total = rg::scalar_tensor(double(mine), {.dtype = rg::kFloat64});
    comm.all_reduce(total, par::Reduce::Sum);
    check(static_cast<int64_t>(total.item()) == full, "the ranks' states add up to the full state");
    // consolidate_state_dict: on rank 0, exactly the plain AdamW's state and metadata,
    // loadable by a plain optimizer (ZeRO -> DDP or one process).
    std::map<std::string, std::string> zero_meta;
    rg::NamedTensors consolidated = zero.consolidate_state_dict(&zero_meta, 0);
    if (rank == 0) {
      rg::NamedTensors want = adamw.state_dict(&meta);
      bool same = consolidated.size() == want.size();
      for (size_t i = 0; same && i < want.size(); ++i)
        same = consolidated[i].first == want[i].first &&
               consolidated[i].second.shape() == want[i].second.shape() &&
               rg::allclose(consolidated[i].second, want[i].second, 0, 0);
      check(same, "consolidated state = the plain AdamW's, key by key, bit for bit (" +
                      std::to_string(consolidated.size()) + " tensors)");
      check(zero_meta == meta, "consolidated metadata = the plain AdamW's");
      auto fresh = make_model();
      rg::optim::AdamW reloaded(fresh->parameters(), {.lr = 1e-2});
      reloaded.load_state_dict(consolidated, zero_meta);
      check(reloaded.steps() == 10, "a plain AdamW loads it");
    }
    {
      // Every rank loads the whole plain state into a fresh ZeRO-1 and keeps its part:
      // consolidating it again gives the same state, bit for bit.
      auto fresh = make_model();
      par::ZeroRedundancyOptimizer again(fresh->parameters(), comm, [](std::vector<rg::Tensor> p) {
        return std::make_unique<rg::optim::AdamW>(p, rg::optim::AdamWOptions{.lr = 1e-2});
      });
      again.load_consolidated_state_dict(adamw.state_dict(&meta), meta);
      check(again.local_state_bytes() == mine, "load_consolidated_state_dict keeps this rank's part");
      std::map<std::string, std::string> again_meta;
      rg::NamedTensors round = again.consolidate_state_dict(&again_meta, 0);
      if (rank == 0) {
        bool same = round.size() == consolidated.size() && again_meta == zero_meta;
        for (size_t i = 0; same && i < round.size(); ++i)
          same = round[i].first == consolidated[i].first &&
                 rg::allclose(round[i].second, consolidated[i].second, 0, 0);
        check(same, "loaded and consolidated again: the same state");
      }
    }
    if (rank != 0) {
      check(consolidated.empty(), "other ranks get nothing");
    }
    int64_t params = 0;
    for (const rg::Tensor& p : sharded->parameters()) params += p.numel();
    if (rank == 0)
      std::printf(
          "N=%d: %lld parameters; optimizer state %lld bytes in all, %lld on rank 0 (%.2f of "
          "it); max |zero1 - ddp| = %g; ZeRO-2: max |zero2 - ddp| = %g, rank 0 keeps %lld of "
          "%lld gradient elements\n",
          N, static_cast<long long>(params), static_cast<long long>(full),
          static_cast<long long>(mine), double(mine) / double(full), diff, diff2,
          static_cast<long long>(kept), static_cast<long long>(all));
    return mpi_test::report(rank, N);
  });
}
