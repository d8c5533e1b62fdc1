// hierarchical_from_scratch.cpp — the all-reduce across hosts in one page: inside each host
// first, then one chunk per rank between the hosts. And what a rank that stops answering does.
//
//   RINGGRAD_TEST_RANKS_PER_HOST=2 scripts/rgrun -n 4 build/bin/hierarchical_from_scratch
//   scripts/rgrun --hostfile hosts -n 8 build/bin/hierarchical_from_scratch     (real hosts)
//
// N ranks on H hosts, k = N/H on each; mpirun numbers the ranks of a host together.
// Inside a host the links are fast (NVLink between GPUs; shared memory here), between
// hosts they are slow (the network). Chapter 1's flat ring passes through every rank in
// order, so on each host one rank's right-hand neighbour is on the next host: that rank
// sends 2(N−1)/N of the tensor across, as every link of the ring carries, and the whole
// ring moves at the pace of that link. The hierarchical all-reduce (Horovod's
// HOROVOD_HIERARCHICAL_ALLREDUCE; the library's own, below):
//   1. reduce-scatter inside the host: the host's rank j gets chunk j (1/k of the tensor)
//      summed over the host's k ranks;
//   2. all-reduce of that chunk across the hosts, with the ranks that hold chunk j on the
//      other hosts (H ranks, one per host): the k chunks cross at the same time, each
//      from its own rank;
//   3. all-gather inside the host: every rank copies each finished chunk from its owner.
// Bytes each rank sends to other hosts, for an all-reduce of n bytes (ring model, as
// Communicator::wire_bytes counts):
//   flat ring      2(N−1)/N · n    from the one rank of each host whose neighbour is
//                                  across; 0 from the others
//   hierarchical   2(H−1)/H · n/k  from every rank; 2(H−1)/H · n per host
// The busiest link across carries k·(N−1)/N·H/(H−1) times less: 3 times at 2 hosts of 2
// ranks, 15 times at 2 hosts of 8 GPUs.
//
// Below, the flat ring is parallel/ring_allreduce.cpp and the hierarchical one is three
// collectives on two groups (Communicator::split). The library's own version is
// Communicator::symmetric_empty + all_reduce (parallel/mpi/shared_memory.cpp), which DDP's
// buckets use: the same three steps, with the steps inside a host reading the peers'
// shared memory. The program runs the three on the same integer-valued data (every order
// of the sums then gives the same bits), prints what each rank sent to other hosts —
// wire_bytes() of the ring and of the cross-host group, cross_host_bytes() of the
// library's — beside the formulas, and the largest difference between the results.
//
// --stall-rank R: afterwards the ranks all-reduce a few more times, and rank R stops
// answering (sleeps for ever) before the third: the others wait in that all-reduce until
// their watchdog (RINGGRAD_COMM_TIMEOUT_S, default 300 s) ends the whole job, naming the
// ranks that never arrived. --trace out.json records the three versions (their second
// round) as a Chrome trace.
// Ends with: RESULT example=hierarchical_from_scratch world=N hosts=H … max_diff=…
#include <ringgrad/parallel/ring_allreduce.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>
#include <unistd.h>  // gethostname

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "parse_on_every_rank.h"

namespace rg = ringgrad;
namespace par = rg::parallel;

// RINGGRAD_TEST_RANKS_PER_HOST=k, the library's test hook: every k consecutive ranks are one
// "host", so that one machine can play several: par::test_ranks_per_host() (0: not set).
using par::test_ranks_per_host;

// The host of every rank, numbered 0, 1, … in rank order: from the test hook when it is
// set, else from the ranks' host names.
std::vector<int> host_of_each_rank(par::Communicator& comm) {
  const int n = comm.size();
  std::vector<int> host(n);
  if (const int k = test_ranks_per_host(); k > 0) {
    for (int r = 0; r < n; ++r) host[r] = r / k;
    return host;
  }
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  const int64_t mine = static_cast<int64_t>(std::hash<std::string>{}(name) >> 1);
  const std::vector<int64_t> names =
      comm.all_gather(rg::from_vector<int64_t>({mine})).tolist<int64_t>();
  std::map<int64_t, int> number;  // host name's hash -> host number, by first rank
  for (int r = 0; r < n; ++r) host[r] = number.emplace(names[r], int(number.size())).first->second;
  return host;
}

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  par::World world(argc, argv);
  CLI::App app{"The hierarchical all-reduce from scratch, beside the flat ring (rgrun -n N)"};
  int64_t numel = 262144;  // 1 MB of float32: a gradient bucket
  int stall_rank = -1;
  std::string trace_path;
  app.add_option("--numel", numel,
                 "float32 elements to all-reduce (a multiple of the ranks per host)")
      ->check(CLI::PositiveNumber);
  app.add_option("--stall-rank", stall_rank,
                 "afterwards, this rank stops answering: the watchdog ends the job")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--trace", trace_path,
                 "write a Chrome trace of the three all-reduces to FILE.json");
  if (auto code = parse_on_every_rank(world, app, argc, argv)) return *code;  // all ranks agree

  return par::main_guard(world, [&] {
    par::Communicator& comm = world.communicator();
    const int N = world.size(), rank = world.rank();
    const std::vector<int> host = host_of_each_rank(comm);
    const int H = host.back() + 1, k = N / H, local = rank % k;  // local: my index on my host
    std::string hosts_by_rank;
    bool uniform = N % H == 0;
    for (int r = 0; r < N; ++r) {
      hosts_by_rank.append(r ? " " : "").append(std::to_string(host[r]));
      uniform = uniform && host[r] == r / k;
    }
    RG_CHECK(uniform, "hosts",
             "expected the same number of ranks on every host, numbered together (mpirun's "
             "default placement), got the hosts ",
             hosts_by_rank, " (rank by rank)");
    RG_CHECK(stall_rank < N, "--stall-rank", "expected a rank below ", N, ", got ", stall_rank);
    RG_CHECK(numel % k == 0, "--numel", "expected a multiple of the ", k,
             " ranks per host (each gets an equal chunk), got ", numel);
    const int64_t n = numel * 4;  // bytes

    // Small rank-dependent integers: their sums are exact in float32, in any order.
    std::vector<float> values(numel);
    for (int64_t i = 0; i < numel; ++i) values[i] = float((i * 7 + rank * 13) % 17 - 8);
    const rg::Tensor mine = rg::from_vector(values);  // (numel)

    // The two groups of the hierarchy: the k ranks of my host, and the H ranks (one per
    // host) whose chunk is the same as mine.
    std::unique_ptr<par::Communicator> inside = comm.split(host[rank], rank);
    std::unique_ptr<par::Communicator> across = comm.split(local, rank);
    rg::Tensor shared = comm.symmetric_empty({numel});  // the library's: shared memory per host

    rg::Tensor flat, scratch;
    int64_t flat_inside = 0, flat_across = 0, scratch_inside = 0, scratch_across = 0,
            library_across = 0;
    // Twice: MPI connects two ranks at their first message, so the second round is the one
    // to trace (the bytes are the same in both).
    for (int round = 0; round < 2; ++round) {
      if (round == 1 && !trace_path.empty()) rg::trace::start(trace_path, rank, N);
      {  // chapter 1's flat ring over all N ranks, rank r sending to r + 1: inside its host or not
        rg::trace::Span span(rg::trace::enabled() ? "flat ring" : "", "step");
        flat = mine.clone();
        comm.reset_wire_bytes();
        par::ring_all_reduce(comm, flat);
        (host[(rank + 1) % N] == host[rank] ? flat_inside : flat_across) = comm.wire_bytes();
      }
      {  // the hierarchical all-reduce, from scratch
        rg::trace::Span span(rg::trace::enabled() ? "hierarchical, from scratch" : "", "step");
        inside->reset_wire_bytes();
        across->reset_wire_bytes();
        // 1. (numel/k): chunk `local` of the tensor, summed over my host's ranks
        rg::Tensor chunk = inside->reduce_scatter(mine);
        across->all_reduce(chunk);  // 2. summed over every host: final
        scratch = inside->all_gather(chunk).reshape({numel});  // 3. (k, numel/k): every chunk
        scratch_inside = inside->wire_bytes();
        scratch_across = across->wire_bytes();
      }
      {  // the library's, in symmetric memory (what DDP's buckets use)
        rg::trace::Span span(rg::trace::enabled() ? "hierarchical, library" : "", "step");
        shared.copy_(mine);
        comm.reset_wire_bytes();
        comm.all_reduce(shared);
        library_across = comm.cross_host_bytes();
      }
    }
    const std::string trace_file = par::stop_trace(world, trace_path);

    // Every rank's counts, and the largest difference from the flat ring anywhere.
    const double diff =
        std::max((scratch - flat).abs().max().item(), (shared - flat).abs().max().item());
    const rg::Tensor row =
        rg::from_vector<double>({double(flat_inside), double(flat_across), double(scratch_inside),
                                 double(scratch_across), double(library_across), diff});
    constexpr int kColumns = 6;
    const std::vector<double> all = comm.all_gather(row).tolist<double>();  // (N, kColumns)
    if (world.is_main()) {
      auto at = [&](int r, int column) { return all[size_t(r * kColumns + column)]; };
      // each column summed over host 0's ranks, and its largest value
      double per_host[kColumns] = {}, busiest[kColumns] = {}, max_diff = 0;
      for (int r = 0; r < N; ++r) {
        for (int c = 0; c < kColumns - 1; ++c) {
          if (host[r] == 0) per_host[c] += at(r, c);
          busiest[c] = std::max(busiest[c], at(r, c));
        }
        max_diff = std::max(max_diff, at(r, kColumns - 1));
      }
      const double flat_per_host = H > 1 ? 2.0 * (N - 1) / N * double(n) : 0;
      const double hier_per_rank = 2.0 * (H - 1) / H * double(n) / k;
      std::printf("all-reduce of %lld float32 (n = %lld bytes) over %d ranks: %d host(s) of %d%s\n",
                  static_cast<long long>(numel), static_cast<long long>(n), N, H, k,
                  test_ranks_per_host() > 0 ? " (RINGGRAD_TEST_RANKS_PER_HOST)" : "");
      std::printf(
          "bytes each rank sent      flat ring (chapter 1)    hierarchical, from scratch    "
          "library\n");
      std::printf(
          "rank  host          inside host  to other hosts  inside host  to other hosts  to other "
          "hosts\n");
      for (int r = 0; r < N; ++r)
        std::printf("%4d  %4d  %19.0f  %14.0f  %11.0f  %14.0f  %14.0f\n", r, host[r], at(r, 0),
                    at(r, 1), at(r, 2), at(r, 3), at(r, 4));
      std::printf("host 0 in all  %15.0f  %14.0f  %11.0f  %14.0f  %14.0f\n", per_host[0],
                  per_host[1], per_host[2], per_host[3], per_host[4]);
      std::printf(
          "predicted: flat ring 2(N-1)/N x n = %.0f to other hosts per host; hierarchical, per "
          "rank, 2(k-1)/k x n = %.0f inside and 2(H-1)/H x n/k = %.0f to other hosts\n",
          flat_per_host, 2.0 * (k - 1) / k * double(n), hier_per_rank);
      std::printf("the results: max |hierarchical - flat ring| = %g (integer-valued data: exact)\n",
                  max_diff);
      if (!trace_file.empty()) std::printf("trace: %s\n", trace_file.c_str());
      std::printf("CHECK flat_ring_cross_host_bytes_per_host predicted=%.0f measured=%.0f\n",
                  flat_per_host, per_host[1]);
      std::printf("CHECK hierarchical_cross_host_bytes_per_host predicted=%.0f measured=%.0f\n",
                  hier_per_rank * k, per_host[4]);
      std::printf("CHECK hierarchical_cross_host_bytes_busiest_rank predicted=%.0f measured=%.0f\n",
                  hier_per_rank, busiest[4]);
      std::printf("CHECK from_scratch_cross_host_bytes_busiest_rank predicted=%.0f measured=%.0f\n",
                  hier_per_rank, busiest[3]);
      std::printf("CHECK hierarchical_vs_flat_max_diff predicted=0 measured=%g\n", max_diff);
      std::printf(
          "RESULT example=hierarchical_from_scratch world=%d hosts=%d flat_cross_host_bytes=%.0f "
          "hierarchical_cross_host_bytes=%.0f max_diff=%g\n",
          N, H, busiest[1], busiest[4], max_diff);
      std::fflush(stdout);
    }

    // A rank that stops answering (a hung GPU, a deadlock, a host cut off): nothing fails,
    // so nothing reports. Every other rank waits in its next all-reduce until its watchdog
    // gives up, prints which ranks never arrived, and ends the job (MPI_Abort).
    if (stall_rank >= 0) {
      for (int round = 1; round <= 5; ++round) {
        if (rank == stall_rank && round == 3) {
          std::printf("rank %d stops answering before all-reduce %d (unix time %.3f)\n", rank,
                      round, unix_time());
          std::fflush(stdout);
          for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
        }
        comm.all_reduce(shared, par::Reduce::Avg);
        if (world.is_main()) std::printf("all-reduce %d done\n", round), std::fflush(stdout);
      }
    }
    return 0;
  });
}
