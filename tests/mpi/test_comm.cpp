// test_comm.cpp — the Communicator, run by ctest under mpirun with N = 1, 2, 3, 4 ranks.
//
//   scripts/rgrun -n 3 build/bin/test_comm
//
// Every rank fills its tensors with values that depend on its rank, runs each
// collective, and checks the result against the closed-form answer (sums of
// 1..N and the like). Also: the ring exchange over send/recv, async
// all-reduces waited in reverse order, barrier, the teaching ring_all_reduce
// against the backend's all_reduce on sizes that do not divide by N, the
// all-reduce of symmetric memory (shared memory on one host) against MPI's, the
// errors, the world of one, the bytes the hierarchical all-reduce sends to other hosts
// (cross_host_bytes), the bytes and operations by kind of collective
// (wire_bytes(kind)), and bfloat16/float16 all-reduces (the float32 sum rounded
// once on the shared-memory path; within the stated bound elsewhere). Rank 0 prints a
// few timings.
// Prints "rank R/N: P passed, F failed" per rank (checks.h); exits non-zero on a failure.
#include <ringgrad/parallel/ring_allreduce.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include "checks.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace rg = ringgrad;
using rg::parallel::Reduce;

namespace {

int rank = 0, N = 1;

void check(bool ok, const std::string& what) { mpi_test::check(ok, what, rank); }

template <typename F>
void check_error(F fn, const std::string& expected, const std::string& what) {
  mpi_test::check_error(fn, expected, what, rank);
}

// Largest |a - b| over all elements, in float64.
double max_diff(const rg::Tensor& a, const rg::Tensor& b) {
  auto x = a.tolist<double>(), y = b.tolist<double>();
  if (x.size() != y.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

const rg::DType kTypes[] = {rg::kFloat32, rg::kFloat64, rg::kInt64};

void test_all_reduce(rg::parallel::Communicator& comm) {
  // Rank r holds t[i] = (r+1)·(i+1). Over ranks: sum (i+1)·N(N+1)/2, max (i+1)·N.
  const int64_t n = 10;
  rg::Tensor i1 = rg::arange(1, n + 1, 1, {.dtype = rg::kFloat64});  // i+1
  for (rg::DType dt : kTypes) {
    std::string name = rg::dtype_name(dt);
    rg::Tensor sum = (i1 * (rank + 1.0)).to(dt);
    comm.all_reduce(sum, Reduce::Sum);
    check(max_diff(sum, i1 * (N * (N + 1) / 2.0)) == 0, "all_reduce sum " + name);

    rg::Tensor max = (i1 * (rank + 1.0)).to(dt);
    comm.all_reduce(max, Reduce::Max);
    check(max_diff(max, i1 * double(N)) == 0, "all_reduce max " + name);

    // Negative values and a maximum that is not on the last rank: (r+i) mod N - N.
    std::vector<int64_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = (rank + i) % N - N;
    rg::Tensor mixed = rg::from_vector(v).to(dt);
    comm.all_reduce(mixed, Reduce::Max);
    check(max_diff(mixed, rg::full({n}, -1.0)) == 0, "all_reduce max, mixed signs " + name);

    if (rg::is_floating(dt)) {
      rg::Tensor avg = (i1 * (rank + 1.0)).to(dt);
      comm.all_reduce(avg, Reduce::Avg);
      check(max_diff(avg, i1 * ((N + 1) / 2.0)) < 1e-6, "all_reduce avg " + name);
    }
  }
  rg::Tensor ints = rg::ones({3}, {.dtype = rg::kInt64});
  check_error([&] { comm.all_reduce(ints, Reduce::Avg); },
              "[all_reduce] expected a floating-point tensor for Reduce::Avg, got int64",
              "all_reduce avg int64");

  // A strided (transposed) tensor is reduced in place all the same.
  rg::Tensor base = rg::arange(0, 6).reshape({2, 3}) * float(rank + 1);
  rg::Tensor view = base.t();
  comm.all_reduce(view);
  check(max_diff(base, rg::arange(0, 6).reshape({2, 3}) * float(N * (N + 1) / 2)) == 0,
        "all_reduce of a transposed view writes through");
}

void test_broadcast(rg::parallel::Communicator& comm) {
  for (int root : {0, N - 1}) {
    for (rg::DType dt : kTypes) {
      rg::Tensor t = rg::full({4, 3}, rank * 10.0 + 1, {.dtype = dt});
      comm.broadcast(t, root);
      check(max_diff(t, rg::full({4, 3}, root * 10.0 + 1)) == 0,
            "broadcast from " + std::to_string(root) + " " + rg::dtype_name(dt));
    }
  }
  rg::Tensor b = rg::full({5}, double(rank), {.dtype = rg::kBool});
  comm.broadcast(b, 0);
  check(max_diff(b, rg::zeros({5})) == 0, "broadcast bool");
  rg::Tensor t = rg::zeros({2});
  check_error([&] { comm.broadcast(t, N); },
              "[broadcast] expected root in [0, " + std::to_string(N),
              "broadcast from a rank that does not exist");
}

void test_all_gather_reduce_scatter(rg::parallel::Communicator& comm) {
  // all_gather: rank r contributes full((2, 3), r); row k of the result is k.
  rg::Tensor g = comm.all_gather(rg::full({2, 3}, double(rank), {.dtype = rg::kFloat64}));
  check(g.shape() == rg::Shape{N, 2, 3}, "all_gather shape");
  rg::Tensor expected =
      rg::arange(0, N, 1, {.dtype = rg::kFloat64}).reshape({N, 1, 1}).expand({N, 2, 3});
  check(max_diff(g, expected) == 0, "all_gather values");

  // reduce_scatter: t (2N, 3), t[j][c] = r + j. Sum over ranks: N·j + N(N-1)/2;
  // rank r keeps rows 2r, 2r+1.
  for (rg::DType dt : kTypes) {
    rg::Tensor j =
        rg::arange(0, 2 * N, 1, {.dtype = rg::kFloat64}).reshape({2 * N, 1}).expand({2 * N, 3});
    rg::Tensor t = (j + double(rank)).to(dt);
    rg::Tensor mine = comm.reduce_scatter(t, Reduce::Sum);
    rg::Tensor want = j.narrow(0, 2 * rank, 2) * double(N) + N * (N - 1) / 2.0;
    check(mine.shape() == rg::Shape{2, 3} && max_diff(mine, want) == 0,
          std::string("reduce_scatter sum ") + rg::dtype_name(dt));
    if (rg::is_floating(dt)) {
      rg::Tensor avg = comm.reduce_scatter(t, Reduce::Avg);
      check(max_diff(avg, want / double(N)) < 1e-6,
            std::string("reduce_scatter avg ") + rg::dtype_name(dt));
    }
  }
  if (N > 1) {
    check_error(
        [&] {
          comm.reduce_scatter(rg::zeros({N + 1, 2}));
        },
        "[reduce_scatter] expected dim 0 divisible by the world size",
        "reduce_scatter of an indivisible tensor");
  }
}

void test_send_recv(rg::parallel::Communicator& comm) {
  if (comm.backend_name() == "single")
    return;  // run without mpirun: no peers (see test_world_of_one)
  // Every rank sends to its right and receives from its left, both in flight
  // at once (a blocking send on every rank would deadlock for large messages).
  const int right = (rank + 1) % N, left = (rank + N - 1) % N;
  for (int64_t n : {int64_t(5), int64_t(1) << 20}) {  // eager and rendezvous sizes
    rg::Tensor out = rg::full({n}, double(rank), {.dtype = rg::kFloat64});
    rg::Tensor in = rg::zeros({n}, {.dtype = rg::kFloat64});
    auto sent = comm.send_async(out, right, 7);
    auto got = comm.recv_async(in, left, 7);
    got->wait();
    sent->wait();
    check(max_diff(in, rg::full({n}, double(left))) == 0,
          "ring exchange of " + std::to_string(n) + " elements");
  }
  // The blocking forms, ordered so they cannot deadlock: even ranks send first.
  if (N > 1) {
    rg::Tensor out = rg::full({3}, double(rank)), in = rg::zeros({3});
    if (rank % 2 == 0) {
      comm.send(out, right);
      comm.recv(in, left);
    } else {
      comm.recv(in, left);
      comm.send(out, right);
    }
    check(max_diff(in, rg::full({3}, double(left))) == 0, "blocking send/recv");
  }
  // A message shorter than the receive buffer is an error on the receiver.
  rg::Tensor short_msg = rg::zeros({5}), big = rg::zeros({10});
  auto sent = comm.send_async(short_msg, right, 9);
  check_error([&] { comm.recv(big, left, 9); }, "[recv] expected 10 float32 elements from rank",
              "recv of a short message");
  sent->wait();
  // A longer one is MPI's own error (truncation), reported with the MPI call.
  rg::Tensor small = rg::zeros({2});
  sent = comm.send_async(short_msg, right, 10);
  check_error([&] { comm.recv(small, left, 10); }, "[recv] MPI_Test failed: MPI_ERR_TRUNCATE",
              "recv of a long message");
  sent->wait();
  check_error([&] { comm.send(short_msg, N, 0); }, "[send] expected dst in [0, ",
              "send to a rank that does not exist");
}

void test_async_and_barrier(rg::parallel::Communicator& comm) {
  // Issued back to back, waited in reverse: each holds its own correct sum.
  const int64_t sizes[] = {1, 1000, 100000, 7};
  std::vector<rg::Tensor> ts;
  std::vector<rg::parallel::WorkHandle> works;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(rg::full({sizes[k]}, (rank + 1.0) * (k + 1)));
    works.push_back(comm.all_reduce_async(ts.back()));
  }
  for (int k = 3; k >= 0; --k) works[k]->wait();
  for (int k = 0; k < 4; ++k) {
    check(works[k]->is_completed(), "is_completed after wait");
    check(max_diff(ts[k], rg::full({sizes[k]}, (k + 1) * N * (N + 1) / 2.0)) == 0,
          "async all_reduce " + std::to_string(k) + " waited in reverse order");
  }

  // Barrier: rank 0 arrives 200 ms late; nobody leaves before it arrives.
  auto t0 = std::chrono::steady_clock::now();
  if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  comm.barrier();
  double waited = ms_since(t0);
  check(waited >= 150, "barrier waits for the last rank (" + std::to_string(waited) + " ms)");
}

void test_ring_all_reduce(rg::parallel::Communicator& comm) {
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000003)}) {
    std::string size = " n=" + std::to_string(n);
    // float64 with integer values: every summation order is exact, so the ring
    // must equal the backend bit for bit.
    rg::Generator gen(1000 + rank);
    rg::Tensor ints = rg::randint(-1000, 1000, {n}, &gen).to(rg::kFloat64);
    for (Reduce op : {Reduce::Sum, Reduce::Max, Reduce::Avg}) {
      rg::Tensor ring = ints.clone(), backend = ints.clone();
      rg::parallel::ring_all_reduce(comm, ring, op);
      comm.all_reduce(backend, op);
      check(max_diff(ring, backend) == 0,
            "ring_all_reduce float64 exact, op " + std::to_string(int(op)) + size);
    }
    // float32 random values: equal up to summation order.
    rg::Tensor x = rg::randn({n}, {}, &gen);
    rg::Tensor ring = x.clone(), backend = x.clone();
    rg::parallel::ring_all_reduce(comm, ring);
    comm.all_reduce(backend);
    check(max_diff(ring, backend) < 1e-5, "ring_all_reduce float32" + size);
    rg::Tensor ring_i = ints.to(rg::kInt64), backend_i = ring_i.clone();
    rg::parallel::ring_all_reduce(comm, ring_i);
    comm.all_reduce(backend_i);
    check(max_diff(ring_i, backend_i) == 0, "ring_all_reduce int64" + size);
  }
  // A strided 2-D tensor.
  rg::Tensor base = rg::arange(0, 12).reshape({3, 4}) * float(rank + 1);
  rg::Tensor view = base.t();
  rg::parallel::ring_all_reduce(comm, view);
  check(max_diff(base, rg::arange(0, 12).reshape({3, 4}) * float(N * (N + 1) / 2)) == 0,
        "ring_all_reduce of a transposed view");
}

void test_world_of_one() {
  auto one = rg::parallel::make_single_communicator();
  rg::Tensor t = rg::full({3}, 2.0);
  one->all_reduce(t, Reduce::Avg);
  one->broadcast(t, 0);
  check(max_diff(t, rg::full({3}, 2.0)) == 0 && one->size() == 1, "world of one: identity");
  rg::Tensor g = one->all_gather(t);
  g.fill_(5);
  check(g.shape() == rg::Shape{1, 3} && t.tolist<float>()[0] == 2.0f,
        "world of one: all_gather copies");
  check_error([&] { one->send(t, 0); }, "[send] expected a peer rank, got a world of one",
              "world of one: send");
  rg::parallel::ring_all_reduce(*one, t);
  check(max_diff(t, rg::full({3}, 2.0)) == 0, "world of one: ring");
  check(one->cross_host_bytes() == 0, "world of one: no bytes to other hosts");
}

// Symmetric memory (one host: the MPI backend's shared-memory all-reduce)
// against MPI's all-reduce of a plain copy, on integer-valued data, so every
// summation order gives the same bits (and Avg, whose sums are not multiples
// of N, must divide as MPI's path does).
void test_symmetric_all_reduce(rg::parallel::Communicator& comm) {
  for (rg::DType dtype : kTypes) {
    for (int64_t n : {1, 7, 1000, 100003}) {
      std::string name = std::to_string(n) + " " + rg::dtype_name(dtype);
      comm.barrier();  // earlier operations have let go of their tensors
      const rg::MemoryStats before = rg::memory_stats();
      rg::Tensor t = comm.symmetric_empty({n}, {.dtype = dtype});
      check(t.shape() == rg::Shape{n} && t.dtype() == dtype && t.is_contiguous(),
            "symmetric_empty shape and dtype " + name);
      // Shared memory is mapped by the communicator, not made by the allocator: no
      // allocation is counted, but its bytes are this rank's, in memory_stats' live bytes
      // as any storage's (at least n elements: other threads may allocate meanwhile).
      // Without /dev/shm, or with it turned off, it is ordinary memory.
      const char* off = std::getenv("RINGGRAD_SHM_ALLREDUCE");
      if (N > 1 && n >= 1000 && std::filesystem::is_directory("/dev/shm") &&
          !(off && std::string(off) == "0")) {
        const rg::MemoryStats after = rg::memory_stats();
        check(after.allocations == before.allocations, "symmetric_empty in shared memory " + name);
        check(after.live_bytes >= before.live_bytes + n * int64_t(rg::element_size(dtype)),
              "symmetric_empty's bytes counted as live " + name);
        const int64_t held = after.live_bytes;
        t = rg::Tensor();  // unmapped: its bytes leave the count
        check(rg::memory_stats().live_bytes <= held - n * int64_t(rg::element_size(dtype)),
              "symmetric_empty's bytes uncounted when it goes " + name);
        t = comm.symmetric_empty({n}, {.dtype = dtype});
      }
      for (int round = 0; round < 3; ++round) {
        for (Reduce op : {Reduce::Sum, Reduce::Max, Reduce::Avg}) {
          if (op == Reduce::Avg && dtype == rg::kInt64) continue;
          // rank-, round- and index-dependent integers, some negative
          std::vector<double> v(n);
          for (int64_t i = 0; i < n; ++i)
            v[i] = (i % 13 - 6) * (rank + 1) + round * N - rank + (rank == 0 ? i % 2 : 0);
          rg::Tensor plain = rg::from_vector(v).to(dtype);
          t.copy_(plain);
          comm.all_reduce(t, op);
          comm.all_reduce(plain, op);
          const char* op_name = op == Reduce::Sum ? "sum " : op == Reduce::Max ? "max " : "avg ";
          check(max_diff(t, plain) == 0, std::string("symmetric all_reduce ") + op_name + name +
                                             " round " + std::to_string(round));
        }
      }
      // A part of it is not the symmetric tensor: it goes through MPI, just as right.
      if (n > 1) {
        rg::Tensor part = t.narrow(0, 1, n - 1);
        part.fill_(rank + 1.0);
        comm.all_reduce(part);
        check(max_diff(part, rg::full({n - 1}, N * (N + 1) / 2.0)) == 0,
              "all_reduce of a slice of a symmetric tensor " + name);
      }
    }
  }
  // Real-valued data (no exact sums): every rank must end with the same bits — the
  // hierarchical path (ranks on several hosts) included — and within rounding of MPI's.
  {
    rg::Generator gen(1234 + rank);
    const int64_t n = 30011;
    rg::Tensor t = comm.symmetric_empty({n});
    rg::Tensor plain = rg::randn({n}, {}, &gen);
    t.copy_(plain);
    comm.all_reduce(t, Reduce::Avg);
    comm.all_reduce(plain, Reduce::Avg);
    rg::Tensor everyone = comm.all_gather(t);
    check(max_diff(everyone, t.unsqueeze(0).expand({N, n})) == 0,
          "symmetric all_reduce of real values: the same bits on every rank");
    check(max_diff(t, plain) <= 1e-6, "symmetric all_reduce of real values: within rounding of MPI's");
  }
  // Many back-to-back rounds, ranks arriving at different times: the barriers
  // must keep a fast rank from overwriting its buffer while a slow one reads it.
  rg::Tensor t = comm.symmetric_empty({4099});
  bool all_right = true;
  for (int round = 0; round < 200; ++round) {
    if ((round + rank) % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    t.fill_(double(round + rank));
    comm.all_reduce(t);
    double want = double(round) * N + N * (N - 1) / 2.0;
    auto got = t.tolist<float>();
    all_right = all_right && got.front() == want && got.back() == want && got[2049] == want;
  }
  check(all_right, "symmetric all_reduce, 200 back-to-back rounds");
  // While a rank waits in the shared-memory all-reduce, its sends in flight must
  // still move: rank 1 receives a large message before it joins the all-reduce
  // that rank 0 has already entered (with MPI idle on rank 0, rank 1 would wait forever).
  if (N > 1 && rank <= 1) {
    rg::Tensor big = rg::full({4 << 20}, 3.0);  // 16 MB: sent in pieces, as the receiver asks
    rg::Tensor sym = comm.symmetric_empty({1000});
    sym.fill_(1.0);
    if (rank == 0) {
      rg::parallel::WorkHandle sent = comm.send_async(big, 1);
      comm.all_reduce(sym);
      sent->wait();
    } else {
      rg::Tensor got = rg::zeros({4 << 20});
      comm.recv(got, 0);
      check(got.tolist<float>()[(4 << 20) - 1] == 3.0f, "large recv before the all-reduce");
      comm.all_reduce(sym);
    }
    // ranks 2.. join the all-reduce at once
    check(sym.tolist<float>()[999] == float(N), "shared-memory all-reduce beside a send in flight");
  } else if (N > 1) {
    rg::Tensor sym = comm.symmetric_empty({1000});
    sym.fill_(1.0);
    comm.all_reduce(sym);
    check(sym.tolist<float>()[999] == float(N), "shared-memory all-reduce beside a send in flight");
  }
  if (N > 1)
    check_error([&] { comm.symmetric_empty({rank + 1}); }, "same size on every rank",
                "symmetric_empty with different sizes");
}

// ---- bfloat16 and float16
//
// Rank r holds x_r[i] = k · 2^-(i mod 5) with k an integer of at most 8 significant bits
// (bfloat16) or 11 (float16), a pseudo-random function of (r, i): exactly a 16-bit value,
// and any sum of N <= 4 of them is exact in float32 (at most 8 + 4 + 2 bits). So the
// all-reduce's answer, computed once in float32 and rounded once, is known bit for bit:
//   one rounding (the shared-memory path on one host; and every path for N <= 2, which
//   makes one addition): equal to round(S) exactly, S = the exact sum;
//   per-step rounding (MPI's user-defined op, the ring, hosts in the hierarchical path):
//   a sum of N terms in N − 1 rounded additions, |got − S| <= γ_{N−1} · Σ|x_r|, where
//   γ_m = m·u / (1 − m·u) and u = 2^-8 (bfloat16: 8 significant bits) or 2^-11 (float16).
//   Avg divides the sum in float32 and rounds once more: + u·|S|/N.
// Max is exact everywhere.
double x16(rg::DType dt, int r, int64_t i) {
  const int64_t span = dt == rg::kBFloat16 ? 255 : 2047;  // 8 or 11 significant bits
  const int64_t k = (i * 7919 + r * 104729 + (i * r) % 97 + 13) % (2 * span + 1) - span;
  return std::ldexp(double(k), -int(i % 5));
}

double unit_roundoff(rg::DType dt) { return dt == rg::kBFloat16 ? 0x1p-8 : 0x1p-11; }

// got (16-bit) against the rank-independent answer: exact when the path rounds once,
// else within `roundings` steps of the bound above; true when every element passes.
bool within_16bit_bound(const rg::Tensor& got, rg::DType dt, int64_t n, Reduce op, bool once,
                        int roundings) {
  auto g = got.tolist<double>();
  const double u = unit_roundoff(dt), gamma = roundings * u / (1 - roundings * u);
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0, abs_sum = 0, max = -INFINITY;
    for (int r = 0; r < N; ++r) {
      const double x = x16(dt, r, i);
      sum += x, abs_sum += std::abs(x), max = std::max(max, x);
    }
    if (op == Reduce::Max) {
      if (g[i] != max) return false;
      continue;
    }
    const float exact = op == Reduce::Avg ? float(sum) / float(N) : float(sum);  // as the paths
    const double once_rounded =
        double(float(dt == rg::kBFloat16 ? float(rg::BFloat16(exact)) : float(rg::Float16(exact))));
    if (once) {
      if (g[i] != once_rounded) return false;
      continue;
    }
    double bound = gamma * abs_sum;
    if (op == Reduce::Avg) bound = (bound + u * (std::abs(sum) + bound)) / N;
    if (std::abs(g[i] - double(exact)) > bound * 1.0001) return false;
  }
  return true;
}

// cross_host_bytes(): what the hierarchical all-reduce sends to the other hosts, 2(H−1)/H
// of this rank's chunk (1/k of the tensor) per all-reduce of a symmetric tensor — on
// RINGGRAD_TEST_RANKS_PER_HOST=k "hosts" (mpi_comm_hierarchical_4). 0 on one host, for
// ordinary tensors, and with shared memory off; reset_wire_bytes() zeroes it.
void test_cross_host_bytes(rg::parallel::Communicator& comm) {
  const char* fake = std::getenv("RINGGRAD_TEST_RANKS_PER_HOST");
  const char* off = std::getenv("RINGGRAD_SHM_ALLREDUCE");
  const int k = fake && std::atoi(fake) > 0 ? std::atoi(fake) : N, hosts = N / k;
  const bool hierarchical = hosts > 1 && k > 1 && N % k == 0 &&
                            std::filesystem::is_directory("/dev/shm") &&
                            !(off && std::string(off) == "0");
  const int64_t n = 4096 * k;  // each rank's chunk: 4096 floats, a whole number of cache lines
  const int64_t per_all_reduce = hierarchical ? 2 * (hosts - 1) * 4096 * 4 / hosts : 0;
  rg::Tensor sym = comm.symmetric_empty({n});
  rg::Tensor plain = rg::ones({n});
  comm.reset_wire_bytes();
  check(comm.cross_host_bytes() == 0, "cross_host_bytes: 0 after reset_wire_bytes");
  sym.fill_(1.0);
  comm.all_reduce(sym);
  comm.all_reduce(plain);  // an ordinary tensor: MPI's all-reduce, not counted
  check(comm.cross_host_bytes() == per_all_reduce,
        "cross_host_bytes of one symmetric all-reduce: " + std::to_string(comm.cross_host_bytes()) +
            ", expected " + std::to_string(per_all_reduce));
  comm.all_reduce(sym, Reduce::Avg);
  check(comm.cross_host_bytes() == 2 * per_all_reduce, "cross_host_bytes adds up");
  check(sym.tolist<float>()[n - 1] == float(N) && plain.tolist<float>()[0] == float(N),
        "the counted all-reduces' results");
  comm.reset_wire_bytes();
  check(comm.cross_host_bytes() == 0 && comm.wire_bytes() == 0, "reset_wire_bytes: both counts");
}

// wire_bytes(kind) and operations(kind): one operation of each kind on a tensor of 1200
// floats (4800 bytes; 1200 divides by 1..4 ranks), each counted under its kind with the
// fraction wire_bytes() documents; the kinds add up to wire_bytes(). A world of one sends
// nothing: no bytes, no operations.
void test_wire_bytes_by_kind(rg::parallel::Communicator& comm) {
  using rg::parallel::Collective;
  const int64_t n = 1200;
  const double bytes = 4.0 * n;
  comm.reset_wire_bytes();
  for (int k = 0; k < rg::parallel::kCollectives; ++k)
    check(comm.wire_bytes(Collective(k)) == 0 && comm.operations(Collective(k)) == 0,
          std::string("by kind: 0 after reset_wire_bytes, ") + rg::parallel::collective_name(Collective(k)));
  rg::Tensor t = rg::ones({n});
  comm.all_reduce(t);
  comm.all_reduce(t);  // two operations
  comm.broadcast(t, 0);
  comm.reduce(t, 0);
  rg::Tensor gathered = comm.all_gather(t);
  rg::Tensor scattered = comm.reduce_scatter(t);
  rg::Tensor swapped = rg::empty({n});
  comm.all_to_all(swapped, t);
  const bool peers = N > 1 && comm.backend_name() != "single";
  if (peers) {  // to the right, from the left
    rg::Tensor in = rg::empty({n});
    auto sent = comm.send_async(t, (rank + 1) % N, 3);
    comm.recv(in, (rank + N - 1) % N, 3);
    sent->wait();
  }
  const auto counted = [&](double fraction) { return static_cast<int64_t>(fraction * bytes); };
  const struct {
    Collective kind;
    int64_t bytes, operations;
  } expected[] = {
      {Collective::AllReduce, 2 * counted(2.0 * (N - 1) / N), 2},
      {Collective::Broadcast, counted(double(N - 1) / N), 1},
      {Collective::Reduce, counted(double(N - 1) / N), 1},
      {Collective::AllGather, counted(N - 1), 1},
      {Collective::ReduceScatter, counted(double(N - 1) / N), 1},
      {Collective::AllToAll, counted(double(N - 1) / N), 1},
      {Collective::Send, peers ? counted(1) : 0, peers ? 1 : 0},
  };
  int64_t total = 0;
  for (const auto& e : expected) {
    const std::string name = rg::parallel::collective_name(e.kind);
    const int64_t ops = N > 1 ? e.operations : 0;
    check(comm.wire_bytes(e.kind) == e.bytes,
          "wire_bytes(" + name + ") = " + std::to_string(comm.wire_bytes(e.kind)) + ", expected " +
              std::to_string(e.bytes));
    check(comm.operations(e.kind) == ops, "operations(" + name + ") = " +
                                              std::to_string(comm.operations(e.kind)) + ", expected " +
                                              std::to_string(ops));
    total += e.bytes;
  }
  check(comm.wire_bytes() == total, "the kinds add up to wire_bytes()");
  check(std::string(rg::parallel::collective_name(Collective::ReduceScatter)) == "reduce_scatter",
        "collective_name");
  comm.reset_wire_bytes();
  check(comm.wire_bytes(Collective::AllReduce) == 0 && comm.operations(Collective::AllReduce) == 0,
        "reset_wire_bytes: the kinds too");
}

void test_reduced_precision_all_reduce(rg::parallel::Communicator& comm) {
  const char* off = std::getenv("RINGGRAD_SHM_ALLREDUCE");
  const bool shm = !(off && std::string(off) == "0") && std::filesystem::is_directory("/dev/shm");
  const bool one_host = !std::getenv("RINGGRAD_TEST_RANKS_PER_HOST");
  for (rg::DType dt : {rg::kBFloat16, rg::kFloat16}) {
    const std::string type = rg::dtype_name(dt);
    for (int64_t n : {1, 7, 1000, 100003}) {
      std::vector<double> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = x16(dt, rank, i);
      rg::Tensor mine = rg::from_vector(v).to(dt);  // exact: every value is a 16-bit value
      rg::Tensor sym = comm.symmetric_empty({n}, {.dtype = dt});
      for (Reduce op : {Reduce::Sum, Reduce::Avg, Reduce::Max}) {
        const std::string what = type + " n=" + std::to_string(n) + " op " + std::to_string(int(op));
        // MPI's all-reduce with the 16-bit MPI_Op: one rounding per combination.
        rg::Tensor plain = mine.clone();
        comm.all_reduce(plain, op);
        check(plain.dtype() == dt, "16-bit all_reduce keeps the dtype " + what);
        check(within_16bit_bound(plain, dt, n, op, N <= 2, N - 1),
              "16-bit all_reduce through MPI: " + std::string(N <= 2 ? "exact" : "within bound") +
                  " " + what);
        // Symmetric memory: one host's shared memory sums in float32 and rounds once.
        sym.copy_(mine);
        comm.all_reduce(sym, op);
        const bool once = N <= 2 || (shm && one_host);
        check(within_16bit_bound(sym, dt, n, op, once, N - 1),
              "16-bit symmetric all_reduce: " + std::string(once ? "rounded once, exact" : "within bound") +
                  " " + what);
        rg::Tensor everyone = comm.all_gather(sym);
        check(max_diff(everyone, sym.unsqueeze(0).expand({N, n})) == 0,
              "16-bit symmetric all_reduce: the same bits on every rank " + what);
        // The teaching ring: a 16-bit chunk per hop, added in float32, rounded per hop.
        rg::Tensor ring = mine.clone();
        rg::parallel::ring_all_reduce(comm, ring, op);
        check(within_16bit_bound(ring, dt, n, op, N <= 2 && op != Reduce::Avg, N - 1),
              "16-bit ring_all_reduce within bound " + what);
      }
    }
    // reduce_scatter through MPI: the same user-defined op.
    std::vector<double> v(4 * N);
    for (int64_t i = 0; i < 4 * N; ++i) v[i] = x16(dt, rank, i);
    auto scattered = comm.reduce_scatter(rg::from_vector(v).reshape({N, 4}).to(dt)).tolist<double>();
    bool ok = scattered.size() == 4;
    const double u = unit_roundoff(dt);
    for (int64_t i = 0; ok && i < 4; ++i) {
      double sum = 0, abs_sum = 0;
      for (int r = 0; r < N; ++r)
        sum += x16(dt, r, 4 * rank + i), abs_sum += std::abs(x16(dt, r, 4 * rank + i));
      ok = std::abs(scattered[i] - sum) <= (N - 1) * u / (1 - (N - 1) * u) * abs_sum * 1.0001;
    }
    check(ok, "16-bit reduce_scatter within bound " + type);
  }
}

// Rank 0 prints how long a 25 MB all-reduce takes (DDP's default bucket), and
// DDP's bucket for the mnist model through MPI and through symmetric memory.
void report_timings(rg::parallel::Communicator& comm) {
  if (N == 1) return;
  rg::Tensor t = rg::ones({25 * 1000 * 1000 / 4});
  comm.all_reduce(t);  // warm up
  double best_backend = 1e9, best_ring = 1e9;
  for (int it = 0; it < 3; ++it) {
    comm.barrier();
    auto t0 = std::chrono::steady_clock::now();
    comm.all_reduce(t);
    best_backend = std::min(best_backend, ms_since(t0));
    comm.barrier();
    t0 = std::chrono::steady_clock::now();
    rg::parallel::ring_all_reduce(comm, t);
    best_ring = std::min(best_ring, ms_since(t0));
  }
  if (rank == 0)
    std::printf("[rank 0/%d] all_reduce 25 MB float32: MPI %.1f ms, ring_all_reduce %.1f ms\n", N,
                best_backend, best_ring);
  // DDP's bucket for the mnist model: 203,530 float32 (814 KB).
  rg::Tensor plain = rg::ones({203530}), shared = comm.symmetric_empty({203530});
  shared.fill_(1);
  double best[2] = {1e9, 1e9};
  for (int it = 0; it < 50; ++it) {
    int k = 0;
    for (rg::Tensor* x : {&plain, &shared}) {
      comm.barrier();
      auto t0 = std::chrono::steady_clock::now();
      comm.all_reduce(*x, Reduce::Avg);
      best[k] = std::min(best[k], ms_since(t0) * 1e3);
      ++k;
    }
  }
  if (rank == 0)
    std::printf("[rank 0/%d] all_reduce 814 KB float32: MPI %.0f us, symmetric memory %.0f us\n", N,
                best[0], best[1]);
}

}  // namespace

int main(int argc, char** argv) {
  rg::parallel::World world(argc, argv);
  rank = world.rank();
  N = world.size();
  return rg::parallel::main_guard(world, [&] {
    rg::parallel::Communicator& comm = world.communicator();
    // On a GPU host with an NCCL build the World routes CUDA tensors to NCCL ("nccl+mpi").
    std::string want = rg::parallel::launched_by_mpi() ? "mpi" : "single";
    check(comm.backend_name() == want || comm.backend_name() == "nccl+" + want, "backend name");
    check(world.device() == rg::kCPU || rg::cuda::is_available(), "device");
    test_world_of_one();
    test_all_reduce(comm);
    test_broadcast(comm);
    test_all_gather_reduce_scatter(comm);
    test_send_recv(comm);
    test_async_and_barrier(comm);
    test_ring_all_reduce(comm);
    test_symmetric_all_reduce(comm);
    test_cross_host_bytes(comm);
    test_wire_bytes_by_kind(comm);
    test_reduced_precision_all_reduce(comm);
    report_timings(comm);
    return mpi_test::report(rank, N);
  });
}
