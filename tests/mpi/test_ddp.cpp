// test_ddp.cpp — the DDP contract, run by ctest under mpirun with N = 1, 2, 3, 4 ranks.
//
// Every rank trains two copies of one small model from the same initial weights:
//   reference: no DDP, on the whole global batch of N·B samples (what one process would do);
//   ddp:       wrapped in DistributedDataParallel, on its own B samples.
// After several Adam steps the DDP copy must equal the reference to 1e-5, on
// every rank. Also checked: gradient accumulation under no_sync(), the error
// for a parameter without a gradient, find_unused_parameters, and replicas of different
// models refused with an error naming the tensor and both shapes.
// Prints "N passed, M failed" (one line per rank) and exits non-zero on failure.
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include "checks.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace rg = ringgrad;

namespace {

struct Net : rg::nn::Module {
  rg::nn::Linear fc1{6, 16}, fc2{16, 4}, spare{4, 4};  // spare: used only when asked
  bool use_spare = false;
  Net() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("spare", spare);
  }
  rg::Tensor forward(const rg::Tensor& x) override {
    rg::Tensor h = fc2(rg::gelu(fc1(x)));
    return use_spare ? spare(h) : h;
  }
};

using mpi_test::check;

double max_diff(rg::nn::Module& a, rg::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    worst = std::max(worst, rg::amax(rg::abs(pa[i] - pb[i])).item());
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  rg::parallel::World world(argc, argv);
  const int rank = world.rank(), n = world.size();
  const int64_t B = 5;  // per-rank batch
  rg::set_num_threads(1);

  // Same data on every rank (same seed); rank r's shard is rows [r·B, (r+1)·B).
  rg::Generator data_gen(7);
  rg::Tensor X = rg::randn({8, n * B, 6}, {}, &data_gen);  // 8 steps of global batches
  rg::Tensor Y = rg::randint(0, 4, {8, n * B}, &data_gen);

  // --- the contract: N ranks × B == one process × N·B. With .grad as views into the
  // buckets (the default) and with copies; the copies run also skip zero_grad on odd
  // steps, so gradients accumulate across steps on top of last step's averaged ones.
  for (bool as_view : {true, false}) {
    rg::manual_seed(100 + rank);  // different init per rank: DDP must broadcast rank 0's
    Net model;
    rg::manual_seed(100);
    Net reference;  // rank 0's init on every rank
    model.use_spare = reference.use_spare = true;
    // Tiny caps (300 and 100 bytes) so this small model spreads over several buckets.
    rg::parallel::DistributedDataParallel ddp(model, world.communicator(),
                                              {.bucket_cap_mb = 0.0003,
                                               .first_bucket_cap_mb = 0.0001,
                                               .gradient_as_bucket_view = as_view});
    check(max_diff(model, reference) == 0, "broadcast of rank 0's parameters", rank);
    check(ddp.num_buckets() >= 2, "several buckets", rank);
    rg::optim::Adam opt(model.parameters(), {.lr = 1e-2});
    rg::optim::Adam ref_opt(reference.parameters(), {.lr = 1e-2});
    for (int step = 0; step < 8; ++step) {
      rg::Tensor x = X[step], y = Y[step];
      bool zero = as_view || step % 2 == 0;
      if (zero) ref_opt.zero_grad();
      rg::nn::cross_entropy(reference(x), y).backward();
      ref_opt.step();

      if (zero) opt.zero_grad();
      rg::Tensor xs = x.narrow(0, rank * B, B), ys = y.narrow(0, rank * B, B);
      rg::nn::cross_entropy(ddp(xs), ys).backward();
      opt.step();
    }
    double d = max_diff(model, reference);
    if (rank == 0)
      std::printf("contract (%s): %zu buckets, max |ddp - single process| = %.3g\n",
                  as_view ? "grad as bucket view" : "grad copies, accumulating", ddp.num_buckets(), d);
    check(d <= 1e-5,
          "DDP equals one process with the global batch (max diff " + std::to_string(d) + ")",
          rank);
  }

  if (n > 1) {  // --- replicas built from different models: an error naming the tensor, at once
    struct Wide : rg::nn::Module {
      rg::nn::Linear fc1;
      explicit Wide(int64_t width) : fc1(6, width) { register_module("fc1", fc1); }
    } model(rank == n - 1 ? 17 : 16);  // the last rank's is wider
    std::string what;
    try {
      rg::parallel::DistributedDataParallel ddp(model, world.communicator());
    } catch (const rg::Error& e) {
      what = e.what();
    }
    const std::string want = "fc1.bias is 'float32 [16]' on rank 0 and 'float32 [17]' on rank " +
                             std::to_string(n - 1);
    check(what.find(want) != std::string::npos,
          "DDP over different models: every rank's error names the tensor and both shapes (got '" +
              what + "')",
          rank);
  }

  {  // --- no_sync: two micro-batches accumulated locally, then one all-reduce
    rg::manual_seed(5);
    Net model, reference;
    model.use_spare = reference.use_spare = true;
    reference.load_state_dict(model.state_dict());
    rg::parallel::DistributedDataParallel ddp(model, world.communicator());
    rg::optim::SGD opt(model.parameters(), {.lr = 0.1});
    rg::optim::SGD ref_opt(reference.parameters(), {.lr = 0.1});
    rg::Tensor x = X[0], y = Y[0];
    ref_opt.zero_grad();
    for (int half = 0; half < 2; ++half) {  // reference: both halves of everyone's batch
      rg::Tensor xh = x.reshape({n, B, 6}).narrow(1, half * 2, 2).reshape({-1, 6});
      rg::Tensor yh = y.reshape({n, B}).narrow(1, half * 2, 2).reshape({-1});
      rg::nn::cross_entropy(reference(xh), yh).backward();
    }
    ref_opt.step();
    opt.zero_grad();
    rg::Tensor xs = x.narrow(0, rank * B, B), ys = y.narrow(0, rank * B, B);
    {
      auto guard = ddp.no_sync();
      rg::nn::cross_entropy(ddp(xs.narrow(0, 0, 2)), ys.narrow(0, 0, 2)).backward();
    }
    rg::nn::cross_entropy(ddp(xs.narrow(0, 2, 2)), ys.narrow(0, 2, 2)).backward();
    opt.step();
    double d = max_diff(model, reference);
    check(d <= 1e-5, "no_sync accumulation (max diff " + std::to_string(d) + ")", rank);
  }

  {  // --- a parameter without a gradient
    Net model;
    model.use_spare = false;
    rg::parallel::DistributedDataParallel ddp(model, world.communicator());
    std::string msg;
    try {
      rg::nn::cross_entropy(ddp(X[0].narrow(0, rank * B, B)), Y[0].narrow(0, rank * B, B))
          .backward();
    } catch (const rg::Error& e) {
      msg = e.what();
    }
    check(msg.find("spare.weight") != std::string::npos &&
              msg.find("find_unused_parameters") != std::string::npos,
          "unused parameter error names it: '" + msg + "'", rank);

    Net model2;
    rg::parallel::DistributedDataParallel ddp2(model2, world.communicator(),
                                               {.find_unused_parameters = true});
    rg::nn::cross_entropy(ddp2(X[0].narrow(0, rank * B, B)), Y[0].narrow(0, rank * B, B))
        .backward();
    check(
        model2.spare.weight.grad().defined() && model2.spare.weight.grad().abs().sum().item() == 0,
        "find_unused_parameters gives zero gradients", rank);
  }

  return mpi_test::report(rank, n);
}
