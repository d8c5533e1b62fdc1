// test_groups.cpp — process groups and the device mesh, under mpirun with N = 1, 2, 3, 4 ranks.
//
//   scripts/rgrun -n 4 build/bin/test_groups
//
// Groups split by parity and by blocks, torch's new_group, collectives inside each
// group checked against the same reduction computed by hand from the ranks the
// group holds; two groups used at once from one rank (their messages must not
// mix); the buffer forms all_gather_async / reduce_scatter_async; all_to_all; and the device
// mesh: coordinates, one-axis and flattened groups, against the row-major layout.
// Prints "rank R/N: P passed, F failed" per rank (checks.h); exits non-zero on a failure.
#include <ringgrad/parallel/device_mesh.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "checks.h"

namespace rg = ringgrad;
namespace par = rg::parallel;
using par::Reduce;

namespace {

int rank = 0, N = 1;

void check(bool ok, const std::string& what) { mpi_test::check(ok, what, rank); }

template <typename F>
void check_error(F fn, const std::string& expected, const std::string& what) {
  mpi_test::check_error(fn, expected, what, rank);
}

bool equal(const rg::Tensor& t, const std::vector<double>& want) {
  std::vector<double> got = t.to(rg::kFloat64).tolist<double>();
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::abs(got[i] - want[i]) > 1e-12 * (1 + std::abs(want[i]))) return false;
  return true;
}

// What every rank contributes: a short vector that names the rank.
rg::Tensor contribution(int r) {
  return rg::from_vector<double>({double(r + 1), double(10 * r), double(r * r)}, {3},
                                 {.dtype = rg::kFloat64});
}

// The collectives of one group against hand computations over `members` (world
// ranks, in the group's rank order).
void check_group(par::Communicator& g, const std::vector<int>& members, const std::string& name) {
  const int gs = static_cast<int>(members.size());
  check(g.size() == gs, name + ": size " + std::to_string(g.size()));
  check(members[static_cast<size_t>(g.rank())] == rank, name + ": this rank's position");

  std::vector<double> sum(3, 0), mx(3, -1e300);
  for (int m : members)
    for (int i = 0; i < 3; ++i) {
      double v = contribution(m).tolist<double>()[static_cast<size_t>(i)];
      sum[static_cast<size_t>(i)] += v;
      mx[static_cast<size_t>(i)] = std::max(mx[static_cast<size_t>(i)], v);
    }
  rg::Tensor t = contribution(rank);
  g.all_reduce(t, Reduce::Sum);
  check(equal(t, sum), name + ": all_reduce sum");
  t = contribution(rank);
  g.all_reduce(t, Reduce::Max);
  check(equal(t, mx), name + ": all_reduce max");
  t = contribution(rank);
  g.all_reduce(t, Reduce::Avg);
  std::vector<double> avg = sum;
  for (double& v : avg) v /= gs;
  check(equal(t, avg), name + ": all_reduce avg");

  // broadcast from the group's last rank
  t = contribution(rank);
  g.broadcast(t, gs - 1);
  check(equal(t, contribution(members.back()).tolist<double>()), name + ": broadcast");

  // all_gather: rows in group rank order
  rg::Tensor gathered = g.all_gather(contribution(rank));
  std::vector<double> want;
  for (int m : members)
    for (double v : contribution(m).tolist<double>()) want.push_back(v);
  check(gathered.shape() == rg::Shape({gs, 3}) && equal(gathered, want), name + ": all_gather");

  // the buffer forms: all_gather_async into a flat buffer, reduce_scatter_async out of one
  rg::Tensor flat = rg::empty({gs * 3}, {.dtype = rg::kFloat64});
  g.all_gather_async(flat, contribution(rank))->wait();
  check(equal(flat, want), name + ": all_gather_async into a flat buffer");
  // every member contributes (r+1)·[0, 1, …, 2·gs − 1]; chunk k = elements [2k, 2k+2)
  rg::Tensor whole = rg::arange(2 * gs, {.dtype = rg::kFloat64}) * double(rank + 1);
  rg::Tensor mine = rg::empty({2}, {.dtype = rg::kFloat64});
  g.reduce_scatter_async(mine, whole, Reduce::Sum)->wait();
  double weight = 0;
  for (int m : members) weight += m + 1;
  const double k = g.rank();
  check(equal(mine, {2 * k * weight, (2 * k + 1) * weight}), name + ": reduce_scatter_async");

  // all_to_all: member at group rank i sends 100·i + j (two copies) to group rank j, and
  // receives 100·j + i from each j, in j's chunk
  std::vector<double> outgoing, expected;
  for (int j = 0; j < gs; ++j)
    for (int c = 0; c < 2; ++c) {
      outgoing.push_back(100.0 * g.rank() + j);
      expected.push_back(100.0 * j + g.rank());
    }
  rg::Tensor sent = rg::from_vector(outgoing), received = rg::empty({2 * gs}, {.dtype = rg::kFloat64});
  g.all_to_all(received, sent);
  check(equal(received, expected), name + ": all_to_all");

  // a ring inside the group, by group ranks
  if (gs > 1) {
    rg::Tensor out = contribution(rank), in = rg::empty({3}, {.dtype = rg::kFloat64});
    auto s = g.send_async(out, (g.rank() + 1) % gs, 3);
    auto r = g.recv_async(in, (g.rank() + gs - 1) % gs, 3);
    r->wait();
    s->wait();
    check(equal(in, contribution(members[static_cast<size_t>((g.rank() + gs - 1) % gs)])
                        .tolist<double>()),
          name + ": ring send/recv");
  }
  g.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  par::World world(argc, argv);
  rank = world.rank();
  N = world.size();
  par::Communicator& comm = world.communicator();

  // ---- split by parity: evens and odds
  {
    auto parity = comm.split(rank % 2, rank);
    std::vector<int> members;
    for (int r = rank % 2; r < N; r += 2) members.push_back(r);
    check(parity != nullptr, "parity: a group");
    if (parity) check_group(*parity, members, "parity");
  }

  // ---- split by blocks of two, numbered in reverse (key = -rank)
  {
    auto block = comm.split(rank / 2, -rank);
    std::vector<int> members;
    for (int r = std::min(N, (rank / 2) * 2 + 2) - 1; r >= (rank / 2) * 2; --r) members.push_back(r);
    if (block) check_group(*block, members, "blocks of two, reversed");
  }

  // ---- torch's new_group: the last ranks, in a given order; the others get nothing
  {
    std::vector<int> ranks;
    for (int r = N - 1; r >= N / 2; --r) ranks.push_back(r);
    auto g = comm.new_group(ranks);
    bool member = rank >= N / 2;
    check((g != nullptr) == member, "new_group: members get a group, the others nullptr");
    if (g) check_group(*g, ranks, "new_group");
    check_error([&] { comm.new_group({0, 0}); }, "[new_group] expected distinct ranks, got 0 twice",
                "new_group: duplicates");
    check_error([&] { comm.new_group({N}); }, "[new_group] expected ranks in [0, ", "new_group: range");
    check_error([&] { comm.split(-7, 0); }, "[split] expected a color >= 0", "split: color");
  }

  // ---- two groups at once from every rank: async all-reduces interleaved, waited in
  // reverse order, with the world's own in between; no message may land in the wrong one
  {
    auto evens_odds = comm.split(rank % 2, rank);
    auto halves = comm.split(rank < (N + 1) / 2 ? 0 : 1, rank);
    for (int round = 0; round < 20; ++round) {
      rg::Tensor a = rg::full({1000}, double(rank + round), {.dtype = rg::kFloat64});
      rg::Tensor b = rg::full({1000}, double(100 * rank + round), {.dtype = rg::kFloat64});
      rg::Tensor c = rg::full({7}, 1.0, {.dtype = rg::kFloat64});
      auto wa = evens_odds->all_reduce_async(a, Reduce::Sum);
      auto wc = comm.all_reduce_async(c, Reduce::Sum);
      auto wb = halves->all_reduce_async(b, Reduce::Sum);
      wb->wait();
      wc->wait();
      wa->wait();
      double want_a = 0, want_b = 0;
      for (int r = rank % 2; r < N; r += 2) want_a += r + round;
      const int half = rank < (N + 1) / 2 ? 0 : 1;
      for (int r = 0; r < N; ++r)
        if ((r < (N + 1) / 2 ? 0 : 1) == half) want_b += 100 * r + round;
      check(rg::amin(a).item() == want_a && rg::amax(a).item() == want_a,
            "concurrent groups: parity sum, round " + std::to_string(round));
      check(rg::amin(b).item() == want_b && rg::amax(b).item() == want_b,
            "concurrent groups: halves sum, round " + std::to_string(round));
      check(rg::amin(c).item() == N && rg::amax(c).item() == N,
            "concurrent groups: world sum, round " + std::to_string(round));
    }
  }

  // ---- the device mesh: (dp, cp) = (N/2, 2) when N is even, else (N, 1)
  {
    const int cp = N % 2 == 0 ? 2 : 1, dp = N / cp;
    par::DeviceMesh mesh(comm, {{"dp", dp}, {"cp", cp}});
    check(mesh.rank("dp") == rank / cp && mesh.rank("cp") == rank % cp, "mesh: coordinates");
    check(mesh.rank_at({mesh.rank("dp"), mesh.rank("cp")}) == rank, "mesh: rank_at");
    std::vector<int> cp_members, dp_members, all(static_cast<size_t>(N));
    for (int c = 0; c < cp; ++c) cp_members.push_back(mesh.rank_at({rank / cp, c}));
    for (int d = 0; d < dp; ++d) dp_members.push_back(mesh.rank_at({d, rank % cp}));
    std::iota(all.begin(), all.end(), 0);
    check_group(mesh.group("cp"), cp_members, "mesh cp");
    check_group(mesh.group("dp"), dp_members, "mesh dp");
    check_group(mesh.group({"dp", "cp"}), all, "mesh dp×cp flattened");
    check(&mesh.group({"cp", "dp"}) == &mesh.group({"dp", "cp"}), "mesh: one flattened group");
    check_error([&] { par::DeviceMesh bad(comm, {{"dp", N + 1}}); },
                "[DeviceMesh] expected axis sizes that multiply to the " + std::to_string(N) +
                    " ranks, got dp=" + std::to_string(N + 1),
                "mesh: sizes");
    check_error([&] { mesh.rank("tp"); }, "expected one of the axes (dp=", "mesh: unknown axis");
    std::ostringstream os;
    os << mesh;
    check(os.str().find("rank " + std::to_string(N - 1) + ": dp " + std::to_string(dp - 1) +
                        ", cp " + std::to_string(cp - 1)) != std::string::npos,
          "mesh: printed table");
    if (rank == 0) std::printf("%s\n", os.str().c_str());
  }

  return mpi_test::report(rank, N);
}
