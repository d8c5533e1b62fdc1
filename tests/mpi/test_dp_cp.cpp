// test_dp_cp.cpp — data × context parallelism on a device mesh equals one process.
//
//   scripts/rgrun -n 4 build/bin/test_dp_cp
//
// For every mesh (dp, cp) with dp · cp = N (N = 4: 1×4, 2×2, 4×1): a Transformer
// encoder layer trains 3 AdamW steps. Each dp group member takes its slice of the
// batch; inside it, the cp group shards every sequence (context_parallel: ring
// attention over the cp group, zigzag when causal); DDP averages the gradients
// over the flattened (dp, cp) group, as picotron does: each rank's loss is the mean
// over its tokens, so the average over all ranks is the mean over all tokens. The
// contract: every rank ends with the parameters of one process that trained on
// the whole batch and whole sequences — float64 within 1e-10, float32 within 1e-5 —
// causal and not.
// Prints "rank R/N: P passed, F failed" per rank (checks.h); exits non-zero on a failure.
#include <ringgrad/parallel/context_parallel.h>
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/device_mesh.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "checks.h"

namespace rg = ringgrad;
namespace par = rg::parallel;

namespace {

int rank = 0, N = 1;
void check(bool ok, const std::string& what) { mpi_test::check(ok, what, rank); }

constexpr int64_t kModel = 8, kHeads = 2, kSteps = 3;

std::unique_ptr<rg::nn::TransformerEncoderLayer> make_layer(rg::DType dtype) {
  rg::manual_seed(11);  // the same weights in every copy, on every rank
  auto layer = std::make_unique<rg::nn::TransformerEncoderLayer>(
      kModel, kHeads,
      rg::nn::TransformerLayerOptions{.dim_feedforward = 16, .dropout = 0.0, .batch_first = true});
  layer->to(dtype);
  return layer;
}

void run(par::Communicator& comm, int dp, int cp, bool causal, rg::DType dtype) {
  const std::string tag = "dp " + std::to_string(dp) + " × cp " + std::to_string(cp) +
                          (causal ? " causal " : " ") + (dtype == rg::kFloat64 ? "f64" : "f32");
  const int64_t batch = 2 * dp, seq = 4 * cp;  // zigzag: 2·cp chunks of 2 positions
  const rg::TensorOptions opts{.dtype = dtype};
  rg::Generator data(7);  // the same data on every rank
  rg::Tensor x = rg::randn({batch, seq, kModel}, opts, &data);
  rg::Tensor target = rg::randn({batch, seq, kModel}, opts, &data);

  // One process, the whole batch and the whole sequences.
  auto reference_layer = make_layer(dtype);
  rg::nn::TransformerEncoderLayer& reference = *reference_layer;
  rg::optim::AdamW ref_opt(reference.parameters(), {.lr = 1e-2});
  for (int step = 0; step < kSteps; ++step) {
    ref_opt.zero_grad();
    rg::nn::mse_loss(reference.forward(x, {.is_causal = causal}), target).backward();
    ref_opt.step();
  }

  // The mesh: this rank's slice of the batch (dp), of each sequence (cp).
  par::DeviceMesh mesh(comm, {{"dp", dp}, {"cp", cp}});
  auto model_layer = make_layer(dtype);
  rg::nn::TransformerEncoderLayer& model = *model_layer;
  par::DistributedDataParallel ddp(model, mesh.group({"dp", "cp"}));
  rg::optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  const int64_t local = batch / dp, first = mesh.rank("dp") * local;
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    rg::Tensor xb = x.narrow(0, first, local).contiguous();
    rg::Tensor tb = target.narrow(0, first, local).contiguous();
    {
      auto region = par::context_parallel(mesh.group("cp"), {&xb, &tb}, /*seq_dims=*/{1},
                                          {.causal = causal});
      rg::nn::mse_loss(model.forward(xb, {.is_causal = causal}), tb).backward();
    }  // DDP has averaged the gradients over dp × cp when backward returned
    opt.step();
  }
  // (the attention's key bias left out: checks.h says why)
  const double diff = mpi_test::max_param_diff(model, reference, /*skip_key_bias=*/true);
  const double tol = dtype == rg::kFloat64 ? 1e-10 : 1e-5;
  check(diff <= tol, tag + ": parameters = one process's (max diff " + std::to_string(diff) + ")");
  if (rank == 0) std::printf("N=%d %-22s max |mesh - one process| = %.3g\n", N, tag.c_str(), diff);
}

}  // namespace

int main(int argc, char** argv) {
  par::World world(argc, argv);
  rank = world.rank();
  N = world.size();
  return par::main_guard(world, [&] {
    for (int dp = 1; dp <= N; ++dp) {
      if (N % dp) continue;
      for (bool causal : {false, true})
        for (rg::DType dtype : {rg::kFloat64, rg::kFloat32})
          run(world.communicator(), dp, N / dp, causal, dtype);
    }
    return mpi_test::report(rank, N);
  });
}
