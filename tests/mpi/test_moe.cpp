// test_moe.cpp — expert parallelism under mpirun with N = 1, 2, 3, 4 ranks.
//
//   scripts/rgrun -n 4 build/bin/test_moe
//
// The all-to-all with per-rank counts (rows tagged by source and destination), its errors,
// and the contract of parallel/expert_parallel.h: for every layout (edp, ep) of the N ranks
// as data parallelism, with capacity dropping off and on, an ExpertParallelMoE on each rank's
// tokens gives the outputs, the input gradients, the router's, shared experts' and experts'
// gradients, and three AdamW steps of one process running the whole MoE on the whole batch
// (routing groups = N), in float64 within 1e-12; the same tokens are dropped. And the
// whole layer's state gathered back from the ep ranks (full_state_dict). And routing groups
// split over the ranks (as context parallelism splits sequences: nn::MoE::group_sum), in
// contiguous and zigzag pieces, with capacity dropping off and on (nn::GroupPieces).
// Prints "rank R/N: P passed, F failed" per rank (checks.h); exits non-zero on a failure.
#include <ringgrad/parallel/device_mesh.h>
#include <ringgrad/parallel/expert_parallel.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "checks.h"

namespace rg = ringgrad;
namespace nn = ringgrad::nn;
namespace par = rg::parallel;

namespace {

int rank = 0, N = 1;
void check(bool ok, const std::string& what) { mpi_test::check(ok, what, rank); }

double max_diff(const rg::Tensor& a, const rg::Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined() ? 0.0 : 1e300;
  if (a.shape() != b.shape()) return 1e300;
  if (a.numel() == 0) return 0.0;
  return rg::amax(rg::abs(a.to(rg::kFloat64) - b.to(rg::kFloat64))).item();
}

// Rank r sends r + j + 1 rows to rank j; row q of them holds (r, j, q) in its three columns.
void check_rows(par::Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  std::vector<int64_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
  std::vector<double> values;
  for (int j = 0; j < n; ++j) {
    send[size_t(j)] = r + j + 1;
    recv[size_t(j)] = j + r + 1;
    for (int q = 0; q < r + j + 1; ++q)
      values.insert(values.end(), {double(r), double(j), double(q)});
  }
  rg::Tensor in = rg::from_vector<double>(values, {int64_t(values.size() / 3), 3});
  rg::Tensor x = in.clone().requires_grad_();
  rg::Tensor out = par::all_to_all_rows(x, send, recv, comm);
  std::vector<double> got = out.tolist<double>();
  bool ok = true;
  size_t at = 0;
  for (int i = 0; i < n; ++i)
    for (int q = 0; q < i + r + 1; ++q, at += 3)
      ok = ok && got[at] == i && got[at + 1] == r && got[at + 2] == q;
  check(ok && at == got.size(), "all_to_all with counts: every row from its source, in order");
  // Backward sends each row's gradient home: d(sum(out · out))/dx = 2x.
  (out * out).sum().backward();
  check(max_diff(x.grad(), in * 2.0) == 0, "all_to_all_rows backward: the reverse exchange");
  const int64_t row_bytes = 3 * 8, kept = send[size_t(r)] * row_bytes;
  comm.reset_wire_bytes();
  par::all_to_all_rows(in, send, recv, comm);
  check(comm.wire_bytes(par::Collective::AllToAll) == in.nbytes() - (n > 1 ? kept : in.nbytes()),
        "all_to_all with counts: wire bytes are the rows sent to other ranks");
  mpi_test::check_error(
      [&] {
        rg::Tensor o = rg::empty({in.size(0) + 1, 3}, {.dtype = rg::kFloat64});
        comm.all_to_all_async(o, in, send, recv);
      },
      "expected the counts to add up to in's and out's rows", "counts that do not add up", rank);
  mpi_test::check_error(
      [&] {
        rg::Tensor o = rg::empty({in.size(0), 3}, {.dtype = rg::kFloat64});
        comm.all_to_all_async(o, in, std::vector<int64_t>(size_t(n) + 1, 0), recv);
      },
      "send and receive counts (one per rank)", "a count per rank", rank);
}

struct Layout {
  int ep;
  double capacity;
};

nn::MoEOptions options(double capacity) {
  return {.num_experts = 12,
          .top_k = 2,
          .hidden = 5,
          .shared_experts = 1,
          .capacity_factor = capacity,
          .aux_loss_coef = 0.1,
          .z_loss_coef = 0.01};
}

// One process: the whole MoE on the whole batch, each rank's tokens one routing group.
// Rank-r's EP module: its tokens only. Compared after forward, backward and 3 AdamW steps.
void run(par::Communicator& world, Layout lay) {
  const int ep = lay.ep, edp = N / ep;
  const std::string tag = "edp " + std::to_string(edp) + " × ep " + std::to_string(ep) +
                          (lay.capacity > 0 ? ", capacity factor 1" : ", dropless");
  par::DeviceMesh mesh(world, {{"edp", edp}, {"ep", ep}});
  constexpr int64_t dim = 4, tokens = 8;  // tokens per rank
  rg::manual_seed(7);
  nn::MoE reference(dim, options(lay.capacity));
  reference.to(rg::kFloat64);
  rg::manual_seed(7);
  nn::MoE whole(dim, options(lay.capacity));
  whole.to(rg::kFloat64);
  par::ExpertParallelMoE moe(whole, mesh.group("ep"));
  check(moe.local_experts() == 12 / ep, tag + ": experts per rank");
  // Two states alike: the same names in the same order, the same values exactly.
  auto same_state = [](const rg::NamedTensors& a, const rg::NamedTensors& b) {
    bool same = a.size() == b.size();
    for (size_t i = 0; same && i < a.size(); ++i)
      same = a[i].first == b[i].first && max_diff(a[i].second, b[i].second) == 0;
    return same;
  };
  // The whole layer's state, gathered from the ep ranks: the whole's, name by name.
  check(same_state(moe.full_state_dict(), whole.state_dict()),
        tag + ": full_state_dict = the whole layer's state_dict");
  {  // made in place, without the whole layer: the same share, the generator left alike
    const double next = rg::randn({1}).item();
    rg::manual_seed(7);
    par::ExpertParallelMoE made(dim, options(lay.capacity), mesh.group("ep"));
    made.to(rg::kFloat64);
    check(same_state(made.state_dict(), moe.state_dict()) && rg::randn({1}).item() == next,
          tag + ": made in place = cut from the whole layer");
    rg::manual_seed(8);
  }
  rg::Tensor x = rg::randn({N * tokens, dim}, {.dtype = rg::kFloat64});
  rg::Tensor target = rg::randn({N * tokens, dim}, {.dtype = rg::kFloat64});
  const int64_t first = rank * tokens;

  rg::optim::AdamW ref_opt(reference.parameters(), {.lr = 0.01});
  rg::optim::AdamW opt(moe.parameters(), {.lr = 0.01});
  for (int step = 0; step < 3; ++step) {
    const std::string at = tag + ", step " + std::to_string(step);
    ref_opt.zero_grad();
    opt.zero_grad();
    rg::Tensor xa = x.clone().requires_grad_();
    nn::MoEOutput all = reference.forward_moe(xa, N);
    rg::Tensor ref_loss = rg::nn::mse_loss(all.output, target) + all.aux_loss;
    ref_loss.backward();
    const int64_t ref_dropped = reference.stats().dropped;

    rg::Tensor xr = x.narrow(0, first, tokens).clone().requires_grad_();
    nn::MoEOutput mine = moe.forward_moe(xr);
    rg::Tensor loss =
        rg::nn::mse_loss(mine.output, target.narrow(0, first, tokens)) + mine.aux_loss;
    loss.backward();
    rg::Tensor dropped = rg::from_vector<int64_t>({moe.stats().dropped}, {1});
    world.all_reduce(dropped);
    check(dropped.item() == double(ref_dropped),
          at + ": the same tokens dropped (" + std::to_string(ref_dropped) + ")");
    if (lay.capacity > 0 && step == 0) check(ref_dropped > 0, at + ": the case drops tokens");
    // Data parallelism's average over all N ranks: dense by all-reduce, experts by theirs.
    par::all_reduce_grads(moe.dense_parameters(), world, par::Reduce::Avg);
    par::reduce_expert_grads(moe.expert_parameters(), edp > 1 ? &mesh.group("edp") : nullptr, N);

    double out = max_diff(mine.output, all.output.narrow(0, first, tokens));
    double dx = max_diff(xr.grad() * (1.0 / N), xa.grad().narrow(0, first, tokens));
    double grads = 0;
    const rg::NamedTensors ref_params = reference.named_parameters();
    for (const auto& [name, p] : moe.named_parameters())
      for (const auto& [ref_name, q] : ref_params)
        if (name == ref_name) grads = std::max(grads, max_diff(p.grad(), q.grad()));
    check(out <= 1e-12, at + ": outputs = one process's (" + std::to_string(out) + ")");
    check(dx <= 1e-12, at + ": input gradients = one process's (" + std::to_string(dx) + ")");
    check(grads <= 1e-12,
          at + ": parameter gradients = one process's (" + std::to_string(grads) + ")");
    ref_opt.step();
    opt.step();
  }
  double params = 0;
  const rg::NamedTensors ref_params = reference.named_parameters();
  for (const auto& [name, p] : moe.named_parameters())
    for (const auto& [ref_name, q] : ref_params)
      if (name == ref_name) params = std::max(params, max_diff(p, q));
  check(params <= 1e-12,
        tag + ": parameters after 3 AdamW steps = one process's (" + std::to_string(params) + ")");
  if (rank == 0) std::printf("N=%d %-28s max |ep - one process| = %.3g\n", N, tag.c_str(), params);
}

// Routing groups split over the ranks, as context parallelism splits a sequence: each of
// G sequences cut into pieces, rank r holding piece r of N (contiguous) or pieces r and
// 2N−1−r of 2N (zigzag, as the GPT's --cp cuts). With group_sum (sum_over_ranks) the load
// statistics and the balance loss are each whole sequence's, with the pieces (GroupPieces)
// capacity drops the assignments one process drops, and the ranks' averaged gradients are
// one process's on whole sequences.
void run_split_groups(par::Communicator& world, bool zigzag, double capacity) {
  constexpr int64_t dim = 4, G = 3, n = 24;  // n divisible by 2N pieces for N = 1–4
  const int64_t count = zigzag ? 2 * N : N, piece = n / count;
  const std::vector<int64_t> held =
      zigzag ? std::vector<int64_t>{rank, 2 * N - 1 - rank} : std::vector<int64_t>{rank};
  nn::MoEOptions o = options(capacity);
  rg::manual_seed(9);
  nn::MoE reference(dim, o);
  reference.to(rg::kFloat64);
  rg::manual_seed(9);
  nn::MoE moe(dim, o);
  moe.to(rg::kFloat64);
  moe.group_sum = [&world](const rg::Tensor& t) { return par::sum_over_ranks(t, world); };
  if (capacity > 0) moe.group_piece_count = count, moe.group_pieces_held = held;
  rg::Tensor x = rg::randn({G, n, dim}, {.dtype = rg::kFloat64});
  rg::Tensor target = rg::randn({G, n, dim}, {.dtype = rg::kFloat64});
  const auto mine_of = [&](const rg::Tensor& whole) {  // this rank's pieces of each sequence
    std::vector<rg::Tensor> parts;
    for (int64_t p : held) parts.push_back(whole.narrow(1, p * piece, piece));
    return rg::cat(parts, 1).contiguous();
  };
  const int64_t part = piece * int64_t(held.size());

  rg::Tensor xa = x.clone().requires_grad_();
  nn::MoEOutput all = reference.forward_moe(xa.reshape({G * n, dim}), G);
  (rg::nn::mse_loss(all.output, target.reshape({G * n, dim})) + all.aux_loss).backward();
  const double ref_balance = reference.stats().balance;

  rg::Tensor xr = mine_of(x).requires_grad_();
  nn::MoEOutput mine = moe.forward_moe(xr.reshape({G * part, dim}), G);
  rg::Tensor t = mine_of(target).reshape({G * part, dim});
  (rg::nn::mse_loss(mine.output, t) + mine.aux_loss).backward();
  par::all_reduce_grads(moe.parameters(), world, par::Reduce::Avg);

  char what[96];
  std::snprintf(what, sizeof what, "groups in %s pieces over %d ranks, capacity %g",
                zigzag ? "zigzag" : "contiguous", N, capacity);
  const std::string tag = what;
  rg::Tensor dropped = rg::full({1}, double(moe.stats().dropped), {.dtype = rg::kFloat64});
  world.all_reduce(dropped, par::Reduce::Sum);
  check(int64_t(dropped.item()) == reference.stats().dropped &&
            (capacity == 0) == (reference.stats().dropped == 0),
        tag + ": the ranks drop as many as one process (" + std::to_string(dropped.item()) +
            " vs " + std::to_string(reference.stats().dropped) +
            "), some when there is a capacity");
  check(std::abs(moe.stats().balance - ref_balance) <= 1e-12,
        tag + ": the balance loss is the whole sequences' (" + std::to_string(moe.stats().balance) +
            " vs " + std::to_string(ref_balance) + ")");
  const double out =
      max_diff(mine.output.reshape({G, part, dim}), mine_of(all.output.reshape({G, n, dim})));
  check(out <= 1e-12, tag + ": outputs = one process's (the same assignments dropped)");
  double grads = 0;
  auto mp = moe.parameters(), rp = reference.parameters();
  for (size_t i = 0; i < mp.size(); ++i) grads = std::max(grads, max_diff(mp[i].grad(), rp[i].grad()));
  check(grads <= 1e-12, tag + ": averaged gradients = one process's (" + std::to_string(grads) + ")");
  const double dx = max_diff(xr.grad() * (1.0 / N), mine_of(xa.grad()));
  check(dx <= 1e-12, tag + ": input gradients = one process's (" + std::to_string(dx) + ")");
  if (capacity > 0) {  // without the pieces, capacity over split groups is refused
    nn::MoE dropping(dim, o);
    dropping.group_sum = moe.group_sum;
    mpi_test::check_error(
        [&] {
          dropping.forward_moe(rg::zeros({G * part, dim}), G);
        },
        "expected capacity_factor 0 (dropless) where a routing group's tokens lie "
        "on several ranks",
        tag + ": capacity without pieces refused", rank);
  }
}

}  // namespace

int main(int argc, char** argv) {
  par::World world(argc, argv);
  rank = world.rank();
  N = world.size();
  return par::main_guard(world, [&] {
    check_rows(world.communicator());
    for (bool zigzag : {false, true})
      for (double capacity : {0.0, 1.0}) run_split_groups(world.communicator(), zigzag, capacity);
    for (int ep = 1; ep <= N; ++ep) {
      if (N % ep) continue;
      for (double capacity : {0.0, 1.0}) run(world.communicator(), {ep, capacity});
    }
    if (5 % N != 0)
      mpi_test::check_error(
          [&] { par::ExpertParallelMoE(nn::MoE(4, {.num_experts = 5}), world.communicator()); },
          "expected num_experts (5) divisible by the ep group's size", "experts that do not divide",
          rank);
    return mpi_test::report(rank, N);
  });
}
