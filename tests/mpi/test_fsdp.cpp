// test_fsdp.cpp — FullyShardedDataParallel ends where DDP ends.
//
//   scripts/rgrun -n 3 build/bin/test_fsdp
//   scripts/rgrun -n 4 build/bin/test_fsdp --save ckpt.safetensors   (then, any N:)
//   scripts/rgrun -n 2 build/bin/test_fsdp --load ckpt.safetensors
//
// Two Transformer encoder layers (a parameter count that does not divide by N)
// train 10 AdamW steps on each rank's slice of the batch, once with DDP and a plain
// AdamW, once with FSDP (its AdamW steps the shards) under several wrappings: each
// layer a unit; one layer a unit and the other in the root unit, without resharding
// or prefetching; the whole model one unit. The contract: the same parameters on
// every rank (float64 within 1e-12, float32 within 1e-6), also with gradient
// accumulation (no_sync) and clipping (clip_grad_norm_ returns DDP's norm); each
// rank holds 1/N of the parameters between steps, and reading a released
// parameter is a clear error.
// --save: FSDP trains, evaluates a fixed batch, and rank 0 writes the full state
// dict with that loss in the metadata. --load: the checkpoint goes into DDP, into
// one process and into FSDP at this N: each gives the saved loss.
// Prints "rank R/N: P passed, F failed" per rank (checks.h); exits non-zero on a failure.
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/fsdp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
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

std::unique_ptr<TwoLayers> make_model(rg::DType dtype) { return mpi_test::make_two_layers(dtype); }

struct Run {
  int steps = 10;
  int micro_batches = 1;  // > 1: all but the last inside no_sync
  double clip = 0;        // > 0: clip the gradient's norm to this before each step
};

// A fixed batch of 2·N sequences; rank r's slice is rows [2r, 2r+2).
struct Batch {
  rg::Tensor x, y;
};
Batch batch(rg::Generator& data, rg::DType dtype) {
  return {rg::randn({2 * N, 6, 8}, {.dtype = dtype}, &data),
          rg::randn({2 * N, 6, 8}, {.dtype = dtype}, &data)};
}
rg::Tensor local_loss(const std::function<rg::Tensor(const rg::Tensor&)>& model, const Batch& b) {
  return rg::nn::mse_loss(model(b.x.narrow(0, 2 * rank, 2)), b.y.narrow(0, 2 * rank, 2));
}

// Trains `run` on DDP (fsdp == nullptr) or FSDP; returns the gradient norms seen.
template <typename Wrapper>
std::vector<double> train(Wrapper& wrapper, rg::optim::Optimizer& opt, rg::DType dtype,
                          const Run& run) {
  rg::Generator data(3);  // the same batches on every rank
  std::vector<double> norms;
  for (int s = 0; s < run.steps; ++s) {
    opt.zero_grad();
    for (int m = 0; m < run.micro_batches; ++m) {
      Batch b = batch(data, dtype);
      auto forward = [&](const rg::Tensor& x) { return wrapper(x); };
      if (m + 1 < run.micro_batches) {
        auto guard = wrapper.no_sync();
        local_loss(forward, b).backward();
      } else {
        local_loss(forward, b).backward();
      }
    }
    if (run.clip > 0) {
      if constexpr (std::is_same_v<Wrapper, par::FullyShardedDataParallel>)
        norms.push_back(wrapper.clip_grad_norm_(run.clip));
      else
        norms.push_back(rg::optim::clip_grad_norm(wrapper.module().parameters(), run.clip));
    }
    opt.step();
  }
  return norms;
}

// DDP + AdamW against FSDP + AdamW on the shards, under `options`.
void compare(const std::string& name, rg::DType dtype, const Run& run, par::FSDPOptions options,
             double tolerance, par::Communicator& comm) {
  auto plain = make_model(dtype);
  par::DistributedDataParallel ddp(*plain, comm);
  rg::optim::AdamW adamw(plain->parameters(), {.lr = 1e-2});
  std::vector<double> ddp_norms = train(ddp, adamw, dtype, run);

  auto model = make_model(dtype);
  par::FullyShardedDataParallel fsdp(*model, comm, std::move(options));
  rg::optim::AdamW sharded(fsdp.parameters(), {.lr = 1e-2});
  std::vector<double> fsdp_norms = train(fsdp, sharded, dtype, run);

  double diff = 0;
  {
    auto whole = fsdp.summon_full_params(/*writeback=*/false);
    // (the key bias left out: its gradient is rounding noise; see checks.h)
    diff = mpi_test::max_param_diff(*plain, *model, /*skip_key_bias=*/true);
  }
  check(diff <= tolerance, name + ": FSDP = DDP + AdamW (max diff " + std::to_string(diff) + ")");
  for (size_t i = 0; i < ddp_norms.size(); ++i)
    check(std::abs(ddp_norms[i] - fsdp_norms[i]) <= tolerance * std::max(1.0, ddp_norms[i]),
          name + ": clip_grad_norm_ step " + std::to_string(i) + " = DDP's norm (" +
              std::to_string(fsdp_norms[i]) + " vs " + std::to_string(ddp_norms[i]) + ")");
  if (rank == 0)
    std::printf("N=%d %s: max |fsdp - ddp| = %g, %zu units, %.1f ms waiting for communication\n",
                N, name.c_str(), diff, fsdp.units().size(), 1e3 * fsdp.comm_wait_seconds());
}

// Between steps each rank holds 1/N of the parameters (plus padding), and the
// module's own parameters are released: reading one is an error that says why.
void check_sharding(par::Communicator& comm) {
  auto model = make_model(rg::kFloat64);
  const int64_t total = model->num_parameters();
  par::FullyShardedDataParallel fsdp(*model, comm,
                                     {.auto_wrap_policy =
                                          par::wrap_modules_of_type<rg::nn::TransformerEncoderLayer>()});
  int64_t held = 0, numel = 0;
  for (const rg::Tensor& shard : fsdp.parameters()) held += shard.numel();
  for (const auto& unit : fsdp.units()) numel += unit.numel;
  check(numel == total, "the units hold every parameter once");
  const int64_t units = static_cast<int64_t>(fsdp.units().size());
  check(held * N >= numel && held * N < numel + N * units,
        "each rank holds 1/N of the parameters, up to padding (" + std::to_string(held) + " of " +
            std::to_string(total) + ")");
  check(fsdp.units().size() == 2 && fsdp.units()[0].name == "first", "one unit per layer, no root");
  mpi_test::check_error([&] { (void)model->first.linear1.weight.sum().item(); },
              "FullyShardedDataParallel gathers only while the unit runs",
              "a released parameter read outside its unit", rank);
  mpi_test::check_error([&] { (void)model->first.forward(rg::zeros({1, 2, 8}, {.dtype = rg::kFloat64})); },
              "memory has been released", "a unit called through forward(), not module(x)", rank);
  {
    auto whole = fsdp.summon_full_params();
    check(std::isfinite(model->first.linear1.weight.sum().item()),
          "summon_full_params gathers every unit");
    rg::Tensor x = rg::zeros({1, 2, 8}, {.dtype = rg::kFloat64});
    (void)(*model)(x);  // the module on its own: the units' hooks stand aside
    check(std::isfinite(model->second.linear2.weight.sum().item()),
          "inside summon_full_params the module runs alone and nothing is released");
    mpi_test::check_error([&] { (void)fsdp(x); }, "expected no summon_full_params() guard alive",
                          "fsdp(x) inside summon_full_params", rank);
  }
  // A unit's parameters must share a dtype.
  auto mixed = make_model(rg::kFloat64);
  mixed->second.linear2.to(rg::kFloat32);
  mpi_test::check_error([&] { par::FullyShardedDataParallel bad(*mixed, comm); }, "one dtype and device per unit",
              "a unit with two dtypes", rank);
}

// The optimizer state moves between FSDP and a plain optimizer: full_optim_state_dict
// is the plain AdamW's state (DDP's), and a fresh FSDP that loads the plain state (and
// the model) continues exactly as DDP continues.
void check_optimizer_state(par::Communicator& comm) {
  const Run three{.steps = 3};
  auto plain = make_model(rg::kFloat64);
  par::DistributedDataParallel ddp(*plain, comm);
  rg::optim::AdamW adamw(plain->parameters(), {.lr = 1e-2});
  train(ddp, adamw, rg::kFloat64, three);
  auto model = make_model(rg::kFloat64);
  par::FullyShardedDataParallel fsdp(
      *model, comm, {.auto_wrap_policy = par::wrap_modules_of_type<rg::nn::TransformerEncoderLayer>()});
  rg::optim::AdamW sharded(fsdp.parameters(), {.lr = 1e-2});
  train(fsdp, sharded, rg::kFloat64, three);

  std::map<std::string, std::string> want_meta, got_meta;
  rg::NamedTensors want = adamw.state_dict(&want_meta);
  rg::NamedTensors got = fsdp.full_optim_state_dict(sharded, &got_meta, 0);
  if (rank == 0) {
    bool same = got.size() == want.size();
    double worst = 0;
    for (size_t i = 0; same && i < want.size(); ++i) {
      same = got[i].first == want[i].first && got[i].second.shape() == want[i].second.shape();
      if (same) worst = std::max(worst, rg::amax(rg::abs(got[i].second - want[i].second)).item());
    }
    check(same, "full_optim_state_dict has the plain AdamW's keys and shapes (" +
                    std::to_string(got.size()) + " tensors)");
    check(worst <= 1e-12, "and its values (max diff " + std::to_string(worst) + ")");
    check(got_meta == want_meta, "and its metadata");
  } else {
    check(got.empty(), "full_optim_state_dict goes to rank 0 only");
  }
  // Resume under FSDP from the plain states, and take 3 more steps beside DDP.
  auto resumed = make_model(rg::kFloat64);
  par::FullyShardedDataParallel fsdp2(
      *resumed, comm, {.auto_wrap_policy = par::wrap_modules_of_type<rg::nn::TransformerEncoderLayer>()});
  rg::optim::AdamW sharded2(fsdp2.parameters(), {.lr = 1e-2});
  fsdp2.load_full_state_dict(plain->state_dict());
  fsdp2.load_full_optim_state_dict(sharded2, want, want_meta);
  check(sharded2.steps() == 3, "the loaded optimizer continues at step 3");
  train(ddp, adamw, rg::kFloat64, three);
  train(fsdp2, sharded2, rg::kFloat64, three);
  double diff = 0;
  {
    auto whole = fsdp2.summon_full_params(false);
    diff = mpi_test::max_param_diff(*plain, *resumed, /*skip_key_bias=*/true);
  }
  check(diff <= 1e-12, "FSDP resumed from DDP's model and AdamW state = DDP (max diff " +
                           std::to_string(diff) + ")");
  std::map<std::string, std::string> bad = want_meta;
  bad["group.0.size"] = "3";
  mpi_test::check_error([&] { fsdp2.load_full_optim_state_dict(sharded2, want, bad); },
                        "expected the state of an optimizer over the module's", "a state of another model",
                        rank);
}

const char* kWrapLayers = "each layer a unit";

par::FSDPOptions each_layer() {
  return {.auto_wrap_policy = par::wrap_modules_of_type<rg::nn::TransformerEncoderLayer>()};
}

// The fixed batch a checkpoint is judged by, the same at every N: 12 sequences,
// each rank's loss on its 12/N of them, averaged over the ranks (= the mean over all).
constexpr int kEvalRows = 12;
Batch eval_batch() {
  rg::Generator data(11);
  return {rg::randn({kEvalRows, 6, 8}, {.dtype = rg::kFloat64}, &data),
          rg::randn({kEvalRows, 6, 8}, {.dtype = rg::kFloat64}, &data)};
}

double eval_loss(const std::function<rg::Tensor(const rg::Tensor&)>& model, par::Communicator& comm) {
  rg::NoGradGuard no_grad;
  Batch b = eval_batch();
  const int rows = kEvalRows / N;
  rg::Tensor loss = rg::nn::mse_loss(model(b.x.narrow(0, rows * rank, rows)),
                                     b.y.narrow(0, rows * rank, rows))
                        .detach()
                        .reshape({1});
  comm.all_reduce(loss, par::Reduce::Avg);
  return loss.item();
}

double whole_batch_loss(TwoLayers& model) {
  rg::NoGradGuard no_grad;
  Batch b = eval_batch();
  return rg::nn::mse_loss(model(b.x), b.y).item();
}

int save_checkpoint(const std::string& path, par::Communicator& comm) {
  auto model = make_model(rg::kFloat64);
  par::FullyShardedDataParallel fsdp(*model, comm, each_layer());
  rg::optim::AdamW adamw(fsdp.parameters(), {.lr = 1e-2});
  train(fsdp, adamw, rg::kFloat64, {});
  const double loss = eval_loss([&](const rg::Tensor& x) { return fsdp(x); }, comm);
  rg::NamedTensors state = fsdp.full_state_dict(0);
  if (rank == 0) {
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", loss);
    rg::save_safetensors(state, path, {{"loss", text}, {"world", std::to_string(N)}});
    std::printf("saved %s: FSDP at N=%d, loss %.17g\n", path.c_str(), N, loss);
    check(state.size() == make_model(rg::kFloat64)->state_dict().size(),
          "the full state dict has every key");
  } else {
    check(state.empty(), "the full state dict goes to rank 0 only");
  }
  return mpi_test::report(rank, N);
}

int load_checkpoint(const std::string& path, par::Communicator& comm) {
  std::map<std::string, std::string> meta;
  rg::NamedTensors state = rg::load_safetensors(path, &meta);
  const double saved = std::stod(meta.at("loss"));
  // DDP at this N.
  auto model = make_model(rg::kFloat64);
  model->load_state_dict(state);
  par::DistributedDataParallel ddp(*model, comm);
  const double ddp_loss = eval_loss([&](const rg::Tensor& x) { return ddp(x); }, comm);
  check(std::abs(ddp_loss - saved) <= 1e-12, "DDP at N=" + std::to_string(N) + " gives the loss FSDP at N=" +
                                                 meta.at("world") + " saved");
  // One process.
  auto single = make_model(rg::kFloat64);
  single->load_state_dict(state);
  check(std::abs(whole_batch_loss(*single) - saved) <= 1e-12, "one process gives the saved loss");
  // FSDP at this N, from the full state dict.
  auto sharded = make_model(rg::kFloat64);
  par::FullyShardedDataParallel fsdp(*sharded, comm, each_layer());
  fsdp.load_full_state_dict(state);
  const double fsdp_loss = eval_loss([&](const rg::Tensor& x) { return fsdp(x); }, comm);
  check(std::abs(fsdp_loss - saved) <= 1e-12, "FSDP at N=" + std::to_string(N) + " gives the saved loss");
  if (rank == 0)
    std::printf("loaded %s (FSDP, N=%s): saved loss %.17g; DDP N=%d %.17g, one process %.17g, "
                "FSDP N=%d %.17g\n",
                path.c_str(), meta.at("world").c_str(), saved, N, ddp_loss,
                whole_batch_loss(*single), N, fsdp_loss);
  return mpi_test::report(rank, N);
}

}  // namespace

int main(int argc, char** argv) {
  par::World world(argc, argv);
  rank = world.rank();
  N = world.size();
  par::Communicator& comm = world.communicator();
  return par::main_guard(world, [&] {
    if (argc == 3 && std::strcmp(argv[1], "--save") == 0) return save_checkpoint(argv[2], comm);
    if (argc == 3 && std::strcmp(argv[1], "--load") == 0) return load_checkpoint(argv[2], comm);

    compare(kWrapLayers, rg::kFloat64, {}, each_layer(), 1e-12, comm);
    compare("the second layer in the root unit, no reshard, no prefetch", rg::kFloat64, {},
            {.auto_wrap_policy = [](const std::string& name, rg::nn::Module&) { return name == "first"; },
             .reshard_after_forward = false,
             .forward_prefetch = false,
             .backward_prefetch = false},
            1e-12, comm);
    compare("the whole model one unit", rg::kFloat64, {}, {}, 1e-12, comm);
    compare("float32", rg::kFloat32, {}, each_layer(), 1e-6, comm);
    compare("no_sync over 3 micro-batches", rg::kFloat64, {.steps = 4, .micro_batches = 3},
            each_layer(), 1e-12, comm);
    compare("clip_grad_norm_ to 0.05", rg::kFloat64, {.clip = 0.05}, each_layer(), 1e-12, comm);
    check_sharding(comm);
    check_optimizer_state(comm);
    return mpi_test::report(rank, N);
  });
}
