// test_zero.cpp — ZeroRedundancyOptimizer (ZeRO-1) equals DDP + the same optimizer.
//
//   scripts/rgrun -n 3 build/bin/test_zero
//
// Two Transformer encoder layers (float64; a parameter count that does not divide
// by N) train 10 AdamW steps on each rank's slice of the batch, once with DDP and a
// plain AdamW on every rank, once with DDP and ZeRO-1 (each rank's AdamW holds only
// its own parameters' state; the parameters are broadcast from their owners after
// each step). The contract: the same parameters on every rank, bit for bit, and the
// ranks' optimizer states add up to the full one (each holds about 1/N of it).
// Prints "rank R/N: P passed, F failed" per rank (checks.h); exits non-zero on a failure.
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/parallel/zero.h>
#include <ringgrad/ringgrad.h>

#include <cstdio>
#include <memory>
#include <string>

#include "checks.h"

namespace rg = ringgrad;
namespace par = rg::parallel;

namespace {

int rank = 0, N = 1;
void check(bool ok, const std::string& what) { mpi_test::check(ok, what, rank); }

struct TwoLayers : rg::nn::Module {
  rg::nn::TransformerEncoderLayer first{8, 2, {.dim_feedforward = 12, .dropout = 0.0,
                                               .batch_first = true}};
  rg::nn::TransformerEncoderLayer second{8, 2, {.dim_feedforward = 12, .dropout = 0.0,
                                                .batch_first = true, .norm_first = true}};
  TwoLayers() {
    register_module("first", first);
    register_module("second", second);
  }
  rg::Tensor forward(const rg::Tensor& x) override { return second(first(x)); }
};

std::unique_ptr<TwoLayers> make_model() {
  rg::manual_seed(5);  // the same weights everywhere
  auto m = std::make_unique<TwoLayers>();
  m->to(rg::kFloat64);
  return m;
}

// Trains 10 steps; `step` updates the parameters after DDP's backward.
template <typename Step, typename Zero>
void train(TwoLayers& model, par::Communicator& comm, Step&& step, Zero&& zero_grad) {
  par::DistributedDataParallel ddp(model, comm);
  rg::Generator data(3);  // the same batches on every rank; each takes its slice
  for (int s = 0; s < 10; ++s) {
    rg::Tensor x = rg::randn({2 * N, 6, 8}, {.dtype = rg::kFloat64}, &data);
    rg::Tensor y = rg::randn({2 * N, 6, 8}, {.dtype = rg::kFloat64}, &data);
    zero_grad();
    rg::Tensor out = ddp(x.narrow(0, 2 * rank, 2));
    rg::nn::mse_loss(out, y.narrow(0, 2 * rank, 2)).backward();
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
    train(*plain, comm, [&] { adamw.step(); }, [&] { adamw.zero_grad(); });

    auto sharded = make_model();
    par::ZeroRedundancyOptimizer zero(sharded->parameters(), comm, [](std::vector<rg::Tensor> p) {
      return std::make_unique<rg::optim::AdamW>(p, rg::optim::AdamOptions{.lr = 1e-2});
    });
    train(*sharded, comm, [&] { zero.step(); }, [&] { zero.zero_grad(); });

    double diff = 0;
    {
      rg::NoGradGuard no_grad;
      auto a = plain->parameters(), b = sharded->parameters();
      for (size_t i = 0; i < a.size(); ++i)
        diff = std::max(diff, rg::amax(rg::abs(a[i] - b[i])).item());
    }
    check(diff == 0, "ZeRO-1 = DDP + AdamW, bit for bit (max diff " + std::to_string(diff) + ")");

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
    } else {
      check(consolidated.empty(), "other ranks get nothing");
    }
    int64_t params = 0;
    for (const rg::Tensor& p : sharded->parameters()) params += p.numel();
    if (rank == 0)
      std::printf(
          "N=%d: %lld parameters; optimizer state %lld bytes in all, %lld on rank 0 (%.2f of "
          "it); max |zero - ddp| = %g\n",
          N, static_cast<long long>(params), static_cast<long long>(full),
          static_cast<long long>(mine), double(mine) / double(full), diff);
    return mpi_test::report(rank, N);
  });
}
