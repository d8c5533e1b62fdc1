// test_grad_scaler.cpp — GradScaler across ranks: with found_inf_all_reduce every rank skips
// the step that only one rank's gradients overflowed, so the replicas stay equal.
//
//   scripts/rgrun -n 2 build/bin/test_grad_scaler
//
// Every rank trains the same float32 parameters on the same data with its own local
// gradients (no DDP averaging, as ZeRO/FSDP shards or local-SGD have). At step 2 rank 1
// (rank 0 in a world of one) puts an inf into its gradient. With the all-reduced flag every
// rank's step() returns false there, every rank's scale backs off, and at every step all
// ranks hold the same parameters and scale (compared bit for bit through all_gather). A
// scaler without the hook shows why it is needed: there rank 1 alone skips and the
// replicas differ. Also: a float16 parameter beside a float32 one, the inf in the float16
// gradient. Prints "rank R/N: P passed, F failed" per rank (checks.h).
#include <ringgrad/optim/grad_scaler.h>
#include <ringgrad/parallel/grad_scaler_sync.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include "checks.h"

#include <cmath>
#include <string>
#include <vector>

namespace rg = ringgrad;
namespace optim = ringgrad::optim;

namespace {

int rank = 0, N = 1;

void check(bool ok, const std::string& what) { mpi_test::check(ok, what, rank); }

// Whether t holds the same bits on every rank: all_gather, then each row against row 0.
bool same_on_all_ranks(rg::parallel::Communicator& comm, const rg::Tensor& t) {
  const rg::Tensor all = comm.all_gather(t.detach().to(rg::kFloat64).contiguous());
  const std::vector<double> v = all.tolist<double>();
  const size_t n = static_cast<size_t>(t.numel());
  for (size_t r = 1; r < static_cast<size_t>(N); ++r)
    for (size_t i = 0; i < n; ++i)
      if (v[r * n + i] != v[i] && !(std::isnan(v[r * n + i]) && std::isnan(v[i]))) return false;
  return true;
}

// One run of `steps` iterations. Returns, per step, whether this rank stepped.
struct Run {
  std::vector<bool> stepped;
  bool params_equal_every_step = true, scales_equal_every_step = true;
  std::vector<double> scales;
};

Run train(rg::parallel::Communicator& comm, bool with_agree, rg::DType second_dtype) {
  const int inject_rank = N > 1 ? 1 : 0;
  const int inject_step = 2;
  rg::Tensor a = rg::from_vector<float>({0.5f, -1.0f, 2.0f}).requires_grad_();
  rg::Tensor h = rg::from_vector<float>({1.0f, 0.25f}).to(second_dtype).requires_grad_();
  optim::SGD opt({a, h}, {.lr = 0.1});
  optim::GradScalerOptions options{.init_scale = 1024.0, .growth_interval = 2};
  if (with_agree) options.agree = rg::parallel::found_inf_all_reduce(comm);
  optim::GradScaler scaler(options);

  Run run;
  for (int step = 0; step < 6; ++step) {
    opt.zero_grad();
    // the same loss on every rank: sum(a²·[1, 2, 3]) + sum(h·[0.5, -1])
    rg::Tensor loss = (a * a * rg::from_vector<float>({1.0f, 2.0f, 3.0f})).sum() +
                      (h * rg::from_vector<float>({0.5f, -1.0f}).to(second_dtype))
                          .sum()
                          .to(rg::kFloat32);
    scaler.scale(loss).backward();
    if (rank == inject_rank && step == inject_step) {
      rg::NoGradGuard no_grad;
      h.grad().narrow(0, 1, 1).fill_(INFINITY);  // this rank alone overflows
    }
    run.stepped.push_back(scaler.step(opt));
    scaler.update();
    run.scales.push_back(scaler.get_scale());
    const bool params_equal = same_on_all_ranks(comm, a) && same_on_all_ranks(comm, h);
    const bool scales_equal =
        same_on_all_ranks(comm, rg::full({1}, scaler.get_scale(), {.dtype = rg::kFloat64}));
    run.params_equal_every_step = run.params_equal_every_step && params_equal;
    run.scales_equal_every_step = run.scales_equal_every_step && scales_equal;
  }
  return run;
}

void test_all_ranks_skip(rg::parallel::Communicator& comm, rg::DType second_dtype) {
  const std::string tag = std::string(" (") + rg::dtype_name(second_dtype) + " second parameter)";
  const Run run = train(comm, /*with_agree=*/true, second_dtype);
  const std::vector<bool> want_stepped = {true, true, false, true, true, true};
  check(run.stepped == want_stepped, "every rank skips step 2 only" + tag);
  // 1024: ok, ok → grows to 2048 (interval 2); inf → 1024; ok, ok → 2048; ok
  const std::vector<double> want_scales = {1024, 2048, 1024, 1024, 2048, 2048};
  check(run.scales == want_scales, "the scale backs off and grows on every rank" + tag);
  check(run.params_equal_every_step, "parameters equal on every rank at every step" + tag);
  check(run.scales_equal_every_step, "scales equal on every rank at every step" + tag);
}

// Without the hook only the overflowing rank skips: the replicas part ways.
void test_without_agree(rg::parallel::Communicator& comm) {
  if (N < 2) return;
  const Run run = train(comm, /*with_agree=*/false, rg::kFloat32);
  check(run.stepped[2] == (rank != 1), "without agree, only rank 1 skips");
  check(!run.params_equal_every_step, "without agree, the parameters differ across ranks");
  check(!run.scales_equal_every_step, "without agree, the scales differ across ranks");
}

// The helper itself: the flag is the maximum over the ranks.
void test_flag(rg::parallel::Communicator& comm) {
  const optim::GradScalerOptions::Agree agree = rg::parallel::found_inf_all_reduce(comm);
  check(!agree(false), "no rank found one: false everywhere");
  check(agree(rank == N - 1), "only the last rank found one: true everywhere");
  check(agree(true), "every rank found one: true everywhere");
}

}  // namespace

int main(int argc, char** argv) {
  rg::parallel::World world(argc, argv);
  rank = world.rank();
  N = world.size();
  return rg::parallel::main_guard(world, [&] {
    rg::parallel::Communicator& comm = world.communicator();
    test_flag(comm);
    test_all_ranks_skip(comm, rg::kFloat32);
    test_all_ranks_skip(comm, rg::kFloat16);
    test_without_agree(comm);
    return mpi_test::report(rank, N);
  });
}
