// test_communicator.cpp — the Communicator contract, checked once for every backend.
//
// Communicator's public collectives check their arguments before any backend
// runs (parallel/communicator.cpp). The world of one checks nothing itself, so
// each error below comes from that shared contract; the MPI tests
// (tests/mpi/test_comm.cpp) see the same errors from the MPI backend, and the
// NCCL tests (test_nccl.cpp) from NCCL. Also here: the one reader of
// RINGGRAD_COMM_TIMEOUT_S, which every backend uses.
#include <ringgrad/parallel/communicator.h>
#include <ringgrad/parallel/device_mesh.h>

#include <sstream>

#include "test_helpers.h"

namespace par = rg::parallel;
using test::error_of;
using test::ScopedEnv;

TEST_CASE("communicator: the shared checks name the operation and the bad argument") {
  auto comm = par::make_single_communicator();
  rg::Tensor undefined;
  rg::Tensor x = rg::arange(4, {.dtype = rg::kFloat32});
  rg::Tensor ints = rg::arange(4, {.dtype = rg::kInt64});

  CHECK_CONTAINS(error_of([&] { comm->all_reduce(undefined); }),
                 "[all_reduce] expected a defined tensor, got an undefined one");
  CHECK_CONTAINS(error_of([&] { comm->all_reduce(ints, par::Reduce::Avg); }),
                 "[all_reduce] expected a floating-point tensor for Reduce::Avg, got int64");
  CHECK_CONTAINS(error_of([&] { comm->broadcast(x, 1); }),
                 "[broadcast] expected root in [0, 1), got 1");
  CHECK_CONTAINS(error_of([&] { comm->broadcast(x, -1); }),
                 "[broadcast] expected root in [0, 1), got -1");
  CHECK_CONTAINS(error_of([&] { comm->reduce(x, 2); }), "[reduce] expected root in [0, 1), got 2");
  CHECK_CONTAINS(error_of([&] { comm->reduce(ints, 0, par::Reduce::Avg); }),
                 "[reduce] expected a floating-point tensor for Reduce::Avg, got int64");
  CHECK_CONTAINS(error_of([&] { comm->all_gather(undefined); }),
                 "[all_gather] expected a defined tensor");
  CHECK_CONTAINS(error_of([&] { comm->reduce_scatter(ints, par::Reduce::Avg); }),
                 "[reduce_scatter] expected a floating-point tensor for Reduce::Avg, got int64");
  CHECK_CONTAINS(error_of([&] { comm->reduce_scatter(rg::scalar_tensor(2.0)); }),
                 "[reduce_scatter] expected dim 0 divisible by the world size 1, got shape []");
  CHECK_CONTAINS(error_of([&] { comm->send(x, 3); }), "[send] expected dst in [0, 1), got 3");
  CHECK_CONTAINS(error_of([&] { comm->send(x, 0, -2); }), "[send] expected a tag >= 0, got -2");
  CHECK_CONTAINS(error_of([&] { comm->recv(x, -1); }), "[recv] expected src in [0, 1), got -1");
  CHECK_CONTAINS(error_of([&] { comm->recv(x, 0, -1); }), "[recv] expected a tag >= 0, got -1");
  // Past the contract, the backend's own answer: a world of one has no peer.
  CHECK_CONTAINS(error_of([&] { comm->send(x, 0); }),
                 "[send] expected a peer rank, got a world of one");
}

TEST_CASE("communicator: valid calls on a world of one are the identity") {
  auto comm = par::make_single_communicator();
  rg::Tensor x = rg::arange(6, {.dtype = rg::kFloat64}).reshape({3, 2});
  rg::Tensor before = x.clone();
  comm->all_reduce(x, par::Reduce::Avg);
  comm->broadcast(x, 0);
  comm->reduce(x, 0, par::Reduce::Avg);
  CHECK(rg::allclose(x, before, 0, 0));
  rg::Tensor gathered = comm->all_gather(x);
  CHECK_SHAPE(gathered, {1, 3, 2});
  CHECK(rg::allclose(comm->reduce_scatter(x), before, 0, 0));
  // integer sums and maxima are fine; only the average must be floating
  rg::Tensor ints = rg::arange(4, {.dtype = rg::kInt64});
  comm->all_reduce(ints, par::Reduce::Max);
  CHECK(ints.tolist<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("communicator: RINGGRAD_COMM_TIMEOUT_S is parsed strictly") {
  {
    ScopedEnv env("RINGGRAD_COMM_TIMEOUT_S", nullptr);
    CHECK(par::comm_timeout_seconds() == 300.0);
  }
  for (auto [text, want] : std::vector<std::pair<const char*, double>>{
           {"off", 0.0}, {"2.5", 2.5}, {"600", 600.0}, {"1e2", 100.0}}) {
    ScopedEnv env("RINGGRAD_COMM_TIMEOUT_S", text);
    CHECK(par::comm_timeout_seconds() == want);
  }
  // 0 used to mean "no limit": now only the word does, so a typo cannot switch it off.
  for (const char* bad : {"", "0", "0.0", "abc", "10s", "-1", "nan", "inf", "1e999", " 5x", "OFF"}) {
    ScopedEnv env("RINGGRAD_COMM_TIMEOUT_S", bad);
    std::string err = error_of([] { par::comm_timeout_seconds(); });
    CHECK_CONTAINS(err, "[RINGGRAD_COMM_TIMEOUT_S] expected a number of seconds > 0, or 'off'");
    CHECK_CONTAINS(err, std::string("got '") + bad + "'");
  }
}

TEST_CASE("communicator: groups of a world of one are worlds of one") {
  auto comm = par::make_single_communicator();
  auto g = comm->split(3, 0);
  REQUIRE(g != nullptr);
  CHECK(g->size() == 1);
  CHECK(g->rank() == 0);
  CHECK(comm->split(par::Communicator::kNoGroup, 0) == nullptr);
  CHECK(comm->new_group({0}) != nullptr);
  CHECK_CONTAINS(error_of([&] { comm->split(-5, 0); }), "[split] expected a color >= 0");
  CHECK_CONTAINS(error_of([&] { comm->new_group({}); }), "[new_group] expected at least one rank");
  CHECK_CONTAINS(error_of([&] { comm->new_group({1}); }),
                 "[new_group] expected ranks in [0, 1), got 1");
  CHECK_CONTAINS(error_of([&] { comm->new_group({0, 0}); }),
                 "[new_group] expected distinct ranks, got 0 twice");
}

TEST_CASE("communicator: the buffer forms of all_gather and reduce_scatter check their sizes") {
  auto comm = par::make_single_communicator();
  rg::Tensor in = rg::arange(6, {.dtype = rg::kFloat64}).reshape({2, 3});
  rg::Tensor out = rg::empty({6}, {.dtype = rg::kFloat64});
  comm->all_gather_async(out, in)->wait();
  CHECK(rg::allclose(out, in.reshape({6}), 0, 0));
  rg::Tensor scattered = rg::empty({2, 3}, {.dtype = rg::kFloat64});
  comm->reduce_scatter_async(scattered, in * 2.0, par::Reduce::Avg)->wait();
  CHECK(rg::allclose(scattered, in * 2.0, 0, 0));

  rg::Tensor small = rg::empty({5}, {.dtype = rg::kFloat64});
  CHECK_CONTAINS(error_of([&] { comm->all_gather_async(small, in); }),
                 "[all_gather] expected 1 × 6 = 6 elements in the whole buffer");
  rg::Tensor f32 = rg::empty({6});
  CHECK_CONTAINS(error_of([&] { comm->all_gather_async(f32, in); }),
                 "[all_gather] expected both tensors of one dtype on one device");
  rg::Tensor strided = rg::empty({3, 2}, {.dtype = rg::kFloat64}).t();
  CHECK_CONTAINS(error_of([&] { comm->reduce_scatter_async(strided, in); }),
                 "[reduce_scatter] expected a contiguous output buffer");
  rg::Tensor ints = rg::arange(6, {.dtype = rg::kInt64});
  rg::Tensor ints_out = rg::empty({6}, {.dtype = rg::kInt64});
  CHECK_CONTAINS(error_of([&] { comm->reduce_scatter_async(ints_out, ints, par::Reduce::Avg); }),
                 "[reduce_scatter] expected a floating-point tensor for Reduce::Avg");
}

TEST_CASE("device mesh: a world of one, and the errors that name the sizes") {
  auto comm = par::make_single_communicator();
  par::DeviceMesh mesh(*comm, {{"dp", 1}, {"cp", 1}});
  CHECK(mesh.ndim() == 2);
  CHECK(mesh.size("dp") == 1);
  CHECK(mesh.rank("cp") == 0);
  CHECK(mesh.group("dp").size() == 1);
  CHECK(mesh.group({"dp", "cp"}).size() == 1);
  std::ostringstream os;
  os << mesh;
  CHECK(os.str() == "DeviceMesh(dp=1, cp=1) on 1 ranks\n  rank 0: dp 0, cp 0");
  CHECK_CONTAINS(error_of([&] { par::DeviceMesh bad(*comm, {{"dp", 2}, {"cp", 2}}); }),
                 "[DeviceMesh] expected axis sizes that multiply to the 1 ranks, got dp=2, cp=2 "
                 "(4 ranks)");
  CHECK_CONTAINS(error_of([&] { par::DeviceMesh bad(*comm, {{"dp", 1}, {"dp", 1}}); }),
                 "expected distinct axis names, got 'dp' twice");
  CHECK_CONTAINS(error_of([&] { par::DeviceMesh bad(*comm, {{"dp", 0}}); }),
                 "expected axis sizes >= 1, got dp=0");
  CHECK_CONTAINS(error_of([&] { mesh.group("tp"); }),
                 "[DeviceMesh] expected one of the axes (dp=1, cp=1), got 'tp'");
  CHECK_CONTAINS(error_of([&] { mesh.rank_at({0}); }), "expected 2 coordinates, got 1");
}
