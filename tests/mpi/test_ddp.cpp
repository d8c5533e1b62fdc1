// test_ddp.cpp — the DDP contract, run by ctest under mpirun with N = 1, 2, 3, 4 ranks.
//
// Every rank trains two copies of one small model from the same initial weights:
//   reference: no DDP, on the whole global batch of N·B samples (what one process would do);
//   ddp:       wrapped in DistributedDataParallel, on its own B samples.
// After several Adam steps the DDP copy must equal the reference to 1e-5, on
// every rank. Also checked: gradient accumulation under no_sync(), the error
// for a parameter without a gradient, find_unused_parameters, and replicas of different
// models refused with an error naming the tensor and both shapes, ignored_parameters left
// to each rank. And 16-bit
// communication: a bfloat16 model's bfloat16 buckets against one bfloat16 process, the
// bf16/fp16 compression hooks against float32 DDP, each within a bound derived below,
// with half the bytes on the wire; a model mixing dtypes gets buckets per dtype.
// Prints "N passed, M failed" (one line per rank) and exits non-zero on failure.
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include "checks.h"

#include <cmath>
#include <cstdlib>
#include <vector>
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

// How many times the all-reduce of a 16-bit bucket rounds its sum: once on one host's
// shared memory (every rank's buffer summed in float32), once per combination through
// MPI's 16-bit op (N − 1). RINGGRAD_SHM_ALLREDUCE=0 turns shared memory off.
int sum_roundings(int n) {
  if (n == 1) return 0;
  const char* off = std::getenv("RINGGRAD_SHM_ALLREDUCE");
  const bool shm = !(off && std::string(off) == "0") && !std::getenv("RINGGRAD_TEST_RANKS_PER_HOST");
  return shm ? 1 : n - 1;
}

// Each parameter's .grad as float64 (any dtype), in parameter order.
std::vector<rg::Tensor> grads64(rg::nn::Module& m) {
  std::vector<rg::Tensor> out;
  for (rg::Tensor& p : m.parameters()) out.push_back(p.grad().to(rg::kFloat64));
  return out;
}

// The largest |a − b| / scale over every element (scale 0: a must equal b).
double worst_ratio(const std::vector<rg::Tensor>& a, const std::vector<rg::Tensor>& b,
                   const std::vector<rg::Tensor>& scale) {
  double worst = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    auto x = a[t].tolist<double>(), y = b[t].tolist<double>(), s = scale[t].tolist<double>();
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = std::abs(x[i] - y[i]);
      worst = std::max(worst, d == 0 ? 0 : s[i] > 0 ? d / s[i] : INFINITY);
    }
  }
  return worst;
}

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

  {  // --- ignored_parameters: fc2 stays each rank's own (not broadcast, not averaged)
    rg::manual_seed(300 + rank);
    Net model;
    model.use_spare = true;
    const rg::Tensor own_fc2 = model.fc2.weight.clone();
    rg::parallel::DistributedDataParallel ddp(
        model, world.communicator(), {.ignored_parameters = {"fc2.weight", "fc2.bias"}});
    check(rg::amax(rg::abs(model.fc2.weight - own_fc2)).item() == 0,
          "ignored_parameters: not broadcast from rank 0", rank);
    rg::Tensor x = X[0].narrow(0, rank * B, B), y = Y[0].narrow(0, rank * B, B);
    rg::nn::cross_entropy(ddp(x), y).backward();
    // The same backward without DDP: the ignored gradient is this rank's own, unaveraged.
    Net alone;
    alone.use_spare = true;
    alone.load_state_dict(model.state_dict());
    rg::nn::cross_entropy(alone(x), y).backward();
    check(rg::amax(rg::abs(model.fc2.weight.grad() - alone.fc2.weight.grad())).item() == 0,
          "ignored_parameters: the local gradient, not averaged", rank);
    std::string msg;
    try {
      rg::parallel::DistributedDataParallel bad(model, world.communicator(),
                                                {.ignored_parameters = {"fc9.weight"}});
    } catch (const rg::Error& e) {
      msg = e.what();
    }
    check(msg.find("expected ignored_parameters to name parameters of the module, got 'fc9.weight'") !=
              std::string::npos,
          "ignored_parameters: an unknown name is an error: '" + msg + "'", rank);
  }

  rg::parallel::Communicator& comm = world.communicator();
  const int k = sum_roundings(n);

  {  // --- a bfloat16 model: bfloat16 buckets; one backward equals one bfloat16 process
    // on the global batch within bfloat16's rounding (u = 2^-8: 8 significant bits).
    //
    // The bound. Let P_r be rank r's share of a gradient element (its local gradient / N),
    // accumulated in float32 over its rows; the single process rounds P = Σ P_r once:
    // |ref − P| <= u|P|. DDP rounds each P_r to bfloat16 (backward's result, and its
    // division by N when N is not a power of two: up to 2u|P_r|), then the bucket's sum
    // k times (k = 1 on shared memory, N − 1 through MPI): |ddp − P| <= (2 + k)·u·Σ|P_r|
    // to first order. With N not a power of two the two runs also scale the loss's
    // gradient by 1/(N·B) and 1/B, which round differently (once more each). Σ|P_r| <= M,
    // M = Σ over the N·B samples of |per-sample gradient| (float32), so
    //     |ddp − ref| <= (3 + k + (N a power of two ? 0 : 2)) · u · M.
    const double u = 0x1p-8;
    rg::manual_seed(100);
    Net model;
    rg::manual_seed(100);
    Net reference;
    rg::manual_seed(100);
    Net f32;  // float32, for the per-sample magnitudes M
    model.use_spare = reference.use_spare = f32.use_spare = true;
    model.to(rg::kBFloat16);
    reference.to(rg::kBFloat16);
    rg::parallel::DistributedDataParallel ddp(
        model, comm, {.bucket_cap_mb = 0.0003, .first_bucket_cap_mb = 0.0001});
    bool bf16_buckets = ddp.num_buckets() >= 2;
    for (size_t i = 0; i < ddp.num_buckets(); ++i) {
      auto info = ddp.bucket_info(i);
      bf16_buckets = bf16_buckets && info.dtype == rg::kBFloat16 && info.wire_dtype == rg::kBFloat16;
    }
    check(bf16_buckets, "a bfloat16 model has bfloat16 buckets", rank);
    rg::Tensor x = X[0].to(rg::kBFloat16), y = Y[0];
    rg::nn::cross_entropy(reference(x), y).backward();
    rg::nn::cross_entropy(ddp(x.narrow(0, rank * B, B)), y.narrow(0, rank * B, B)).backward();
    std::vector<rg::Tensor> M;
    for (int64_t i = 0; i < n * B; ++i) {
      f32.zero_grad();
      (rg::nn::cross_entropy(f32(X[0].narrow(0, i, 1)), Y[0].narrow(0, i, 1)) * (1.0 / double(n * B)))
          .backward();
      auto g = grads64(f32);
      for (size_t t = 0; t < g.size(); ++t) {
        if (M.size() <= t)
          M.push_back(rg::abs(g[t]));
        else
          M[t] = M[t] + rg::abs(g[t]);
      }
    }
    const bool power_of_two = (n & (n - 1)) == 0;
    const double C = 3 + k + (power_of_two ? 0 : 2);
    bool dtype_ok = true;
    for (rg::Tensor& p : model.parameters()) dtype_ok = dtype_ok && p.grad().dtype() == rg::kBFloat16;
    check(dtype_ok, "a bfloat16 model's gradients stay bfloat16", rank);
    std::vector<rg::Tensor> scale;
    for (rg::Tensor& m : M) scale.push_back(m * (u * 1.0001));
    double r = worst_ratio(grads64(model), grads64(reference), scale);
    if (rank == 0)
      std::printf("bf16 model: max |ddp - single process| = %.3g u·M (bound %.0f u·M, k = %d)\n", r,
                  C, k);
    check(r <= C, "bfloat16 DDP equals one bfloat16 process within " + std::to_string(C) +
                      " u·M (got " + std::to_string(r) + ")",
          rank);
  }

  // --- PyTorch's bf16_compress_hook / fp16_compress_hook on a float32 model: the
  // gradients of float32 DDP within 16-bit rounding, half the bytes on the wire.
  // The bound: the float32 bucket holds P_r = g_r/N; the hook rounds it to 16 bits
  // (u|P_r|) and the all-reduce rounds the sum k times, so
  //     |hook − float32 DDP| <= (1 + k)·u·(1 + u)·Σ_r|P_r|  (+ float32's own 2^-20 slack),
  // u = 2^-8 for bfloat16, 2^-11 for float16.
  for (auto hook : {rg::parallel::DDPCommHook::BF16Compress, rg::parallel::DDPCommHook::FP16Compress}) {
    const bool bf16 = hook == rg::parallel::DDPCommHook::BF16Compress;
    const rg::DType wire = bf16 ? rg::kBFloat16 : rg::kFloat16;
    const double u = bf16 ? 0x1p-8 : 0x1p-11;
    const std::string name = rg::parallel::comm_hook_name(hook);
    rg::manual_seed(100);
    Net plain_model;
    rg::manual_seed(100);
    Net hooked_model;
    rg::manual_seed(100);
    Net local;  // each rank's own gradient, for the bound's Σ_r|P_r|
    plain_model.use_spare = hooked_model.use_spare = local.use_spare = true;
    rg::parallel::DistributedDataParallel plain(
        plain_model, comm, {.bucket_cap_mb = 0.0003, .first_bucket_cap_mb = 0.0001});
    rg::parallel::DistributedDataParallel hooked(
        hooked_model, comm,
        {.bucket_cap_mb = 0.0003, .first_bucket_cap_mb = 0.0001, .comm_hook = hook});
    bool layout = hooked.num_buckets() == plain.num_buckets();
    for (size_t i = 0; layout && i < hooked.num_buckets(); ++i) {
      auto h = hooked.bucket_info(i), p = plain.bucket_info(i);
      layout = h.dtype == rg::kFloat32 && h.wire_dtype == wire && p.wire_dtype == rg::kFloat32 &&
               2 * h.wire_bytes == p.wire_bytes;
    }
    check(layout, name + ": float32 buckets sent as " + rg::dtype_name(wire) + ", half the bytes", rank);
    rg::Tensor xs = X[1].narrow(0, rank * B, B), ys = Y[1].narrow(0, rank * B, B);
    const int64_t w0 = comm.wire_bytes();
    rg::nn::cross_entropy(plain(xs), ys).backward();
    const int64_t w1 = comm.wire_bytes();
    rg::nn::cross_entropy(hooked(xs), ys).backward();
    const int64_t w2 = comm.wire_bytes();
    const double ratio = n == 1 ? 0.5 : double(w2 - w1) / double(w1 - w0);
    if (rank == 0 && n > 1)
      std::printf("%s: %lld bytes all-reduced per step vs %lld in float32 (%.3f×), wire %.3f×\n",
                  name.c_str(), static_cast<long long>(hooked.allreduce_bytes()),
                  static_cast<long long>(plain.allreduce_bytes()),
                  double(hooked.allreduce_bytes()) / double(plain.allreduce_bytes()),
                  ratio);
    check(2 * hooked.allreduce_bytes() == plain.allreduce_bytes() && std::abs(ratio - 0.5) < 0.01,
          name + ": half the bytes on the wire", rank);
    std::vector<rg::Tensor> sum_abs;  // Σ_r |g_r| / N
    for (int r = 0; r < n; ++r) {
      local.zero_grad();
      rg::nn::cross_entropy(local(X[1].narrow(0, r * B, B)), Y[1].narrow(0, r * B, B)).backward();
      auto g = grads64(local);
      for (size_t t = 0; t < g.size(); ++t) {
        rg::Tensor a = rg::abs(g[t]) * (1.0 / n);
        if (sum_abs.size() <= t)
          sum_abs.push_back(a);
        else
          sum_abs[t] = sum_abs[t] + a;
      }
    }
    const double C = (1 + k) * (1 + u) + 0x1p-20 / u;  // in units of u·Σ|P_r|
    std::vector<rg::Tensor> scale;
    for (rg::Tensor& m : sum_abs) scale.push_back(m * (u * 1.0001));
    double r = worst_ratio(grads64(hooked_model), grads64(plain_model), scale);
    if (rank == 0)
      std::printf("%s: max |hook - float32 DDP| = %.3g u·Σ|P_r| (bound %.2f)\n", name.c_str(), r, C);
    check(r <= C, name + ": float32 DDP's gradients within 16-bit rounding (" + std::to_string(r) +
                      " u·Σ|P_r|)",
          rank);
    check(n == 1 || r > 0, name + ": the hook did round (not a float32 all-reduce)", rank);
  }

  {  // --- a model mixing dtypes: one bucket per dtype, each sent in its own dtype
    struct Mixed : rg::nn::Module {
      rg::nn::Linear fc1{6, 16}, fc2{16, 4};
      Mixed() {
        register_module("fc1", fc1);
        register_module("fc2", fc2);
      }
      rg::Tensor forward(const rg::Tensor& x) override {
        return fc2(rg::gelu(fc1(x)).to(rg::kBFloat16)).to(rg::kFloat32);
      }
    } model;
    model.fc2.to(rg::kBFloat16);
    rg::parallel::DistributedDataParallel ddp(model, comm);
    bool per_dtype = ddp.num_buckets() == 2;
    for (size_t i = 0; per_dtype && i < 2; ++i) {
      auto names = ddp.bucket_parameters(i);
      const rg::DType dt = ddp.bucket_info(i).dtype;
      for (const std::string& p : names)
        per_dtype = per_dtype && (p.starts_with("fc2") == (dt == rg::kBFloat16));
      per_dtype = per_dtype && names.size() == 2;
    }
    check(per_dtype, "a model mixing float32 and bfloat16: one bucket per dtype", rank);
    rg::nn::cross_entropy(ddp(X[2].narrow(0, rank * B, B)), Y[2].narrow(0, rank * B, B)).backward();
    check(model.fc1.weight.grad().dtype() == rg::kFloat32 &&
              model.fc2.weight.grad().dtype() == rg::kBFloat16,
          "mixed dtypes: each gradient in its parameter's dtype", rank);
  }

  return mpi_test::report(rank, n);
}
