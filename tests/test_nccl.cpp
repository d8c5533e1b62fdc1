// test_nccl.cpp — the NCCL backend: clear refusals everywhere, every operation on a GPU.
//
// Without NCCL in the build, or without a GPU, these tests check the error a
// user gets and say "SKIPPED: no CUDA device". On a GPU machine
// (scripts/gpu-check) they run the real NCCL path as a world of one on cuda:0:
// NCCL refuses two ranks on one GPU, so several ranks need a multi-GPU host
// (parallel/README.md). A world of one cannot show a reduction across ranks,
// but a send to itself moves real data through NCCL, and every collective,
// stream ordering and error path runs.
#include <cstdlib>

#include "ringgrad/parallel/fsdp.h"
#include "ringgrad/parallel/nccl/group.h"
#include "ringgrad/parallel/nccl/nccl_communicator.h"
#include "ringgrad/parallel/world.h"
#include "test_helpers.h"

namespace par = rg::parallel;
using test::contains;
using test::error_of;
using test::ScopedEnv;

namespace {

bool nccl_runs_here() { return par::nccl_is_built() && rg::cuda::is_available(); }

void say_skipped(const std::string& what) {
  std::string build = !rg::cuda::is_built()   ? "built without CUDA"
                      : !par::nccl_is_built() ? "built without NCCL"
                                              : "built with NCCL";
  MESSAGE("SKIPPED: no CUDA device (" << build << "): " << what);
}

}  // namespace

// The group helper of the NCCL backend (parallel/nccl/group.h) with stand-in calls:
// results are ints, 0 is success. A group left open would defer every later NCCL call.
TEST_CASE("nccl: a group is ended even when a call in it fails, then the failure is thrown") {
  namespace nd = par::nccl_detail;
  struct Calls {
    int starts = 0, ends = 0;
    std::vector<std::string> log;
  };
  auto run = [](Calls& c, int start_result, int end_result, const std::vector<int>& results,
                bool body_throws = false) {
    try {
      nd::in_group(
          0, [&] { ++c.starts; return start_result; },
          [&] { ++c.ends; return end_result; },
          [&](auto note) {
            for (size_t i = 0; i < results.size(); ++i) {
              c.log.push_back("call" + std::to_string(i));
              note(results[i], i % 2 ? "ncclRecv" : "ncclSend");
            }
            if (body_throws) throw rg::Error("[all_to_all] expected a dtype NCCL moves");
          },
          [](int code, const char* call) {
            throw rg::Error(std::string(call) + " failed with " + std::to_string(code));
          });
    } catch (const rg::Error& e) {
      return std::string(e.what());
    }
    return std::string();  // nothing thrown
  };
  Calls ok;
  CHECK(run(ok, 0, 0, {0, 0, 0}).empty());
  CHECK((ok.starts == 1 && ok.ends == 1 && ok.log.size() == 3));

  Calls send_fails;  // the second send fails: every call still made, the group ended, then thrown
  CHECK(run(send_fails, 0, 0, {0, 0, 5, 7}) == "ncclSend failed with 5");
  CHECK((send_fails.ends == 1 && send_fails.log.size() == 4));

  Calls end_fails;
  CHECK(run(end_fails, 0, 3, {0, 0}) == "ncclGroupEnd failed with 3");

  Calls body_throws;  // an exception of the body's own (a bad dtype): ended, then rethrown
  CHECK(run(body_throws, 0, 0, {0}, true) == "[all_to_all] expected a dtype NCCL moves");
  CHECK(body_throws.ends == 1);

  Calls start_fails;  // no group was opened: nothing to end, no call made
  CHECK(run(start_fails, 2, 0, {0}) == "ncclGroupStart failed with 2");
  CHECK((start_fails.ends == 0 && start_fails.log.empty()));
}

TEST_CASE("nccl: without NCCL or without a GPU the factory says why") {
  if (nccl_runs_here()) return;  // the tests below use the real thing
  auto single = par::make_single_communicator();
  std::string err = error_of([&] { par::make_nccl_communicator(*single, 0); });
  if (!par::nccl_is_built()) {
    CHECK(contains(err, "[nccl] built without NCCL"));
    CHECK(contains(err, "-DRINGGRAD_NCCL=ON"));
  } else {
    CHECK(contains(err, "[nccl] expected a CUDA device, got none"));
  }
  say_skipped("the NCCL collectives ran nowhere");
}

TEST_CASE("nccl: World picks the backend by device, RINGGRAD_COMM overrides") {
  ScopedEnv timeout("RINGGRAD_COMM_TIMEOUT_S", nullptr);
  {
    ScopedEnv comm("RINGGRAD_COMM", nullptr);
    par::World world;
    CHECK(world.size() == 1);
    CHECK(world.communicator().backend_name() == (nccl_runs_here() ? "nccl+single" : "single"));
    // CPU tensors go to the world of one whatever the device.
    rg::Tensor c = test::f32({1, 2});
    world.communicator().all_reduce(c, par::Reduce::Avg);
    test::check_close(c, {1, 2});
    if (nccl_runs_here()) {  // a CUDA tensor starts NCCL, lazily
      rg::Tensor g = test::f32({3, 4}).to(world.device());
      world.communicator().all_reduce(g, par::Reduce::Sum);
      test::check_close(g, {3, 4});
      world.communicator().barrier();
    }
  }
  {
    ScopedEnv comm("RINGGRAD_COMM", "mpi");
    par::World world;
    CHECK(world.communicator().backend_name() == "single");
  }
  {
    // A wrong setting: the World does not start (checked before MPI would), and says why
    // when used; main_guard prints it and returns 1.
    ScopedEnv comm("RINGGRAD_COMM", "carrier-pigeon");
    par::World world;
    CHECK_FALSE(world.started());
    CHECK(contains(world.setup_error(), "[World] expected RINGGRAD_COMM to be auto, mpi or nccl, got 'carrier-pigeon'"));
    CHECK(contains(error_of([&] { world.communicator(); }), "got 'carrier-pigeon'"));
    bool ran = false;
    CHECK(par::main_guard(world, [&] { return ran = true, 0; }) == 1);
    CHECK_FALSE(ran);
  }
  {
    ScopedEnv timeout("RINGGRAD_COMM_TIMEOUT_S", "-1");
    par::World world;
    CHECK_FALSE(world.started());
    CHECK(contains(world.setup_error(), "[RINGGRAD_COMM_TIMEOUT_S] expected a number of seconds > 0"));
  }
  {
    ScopedEnv comm("RINGGRAD_COMM", "nccl");
    if (!rg::cuda::is_available()) {  // checked before MPI starts, as the settings above
      par::World world;
      CHECK_FALSE(world.started());
      CHECK(contains(world.setup_error(), "[World] expected a GPU for RINGGRAD_COMM=nccl, got none"));
    } else if (!par::nccl_is_built()) {
      CHECK(contains(error_of([] { par::World world; }), "[nccl] built without NCCL"));
    } else {
      par::World world;
      CHECK(world.communicator().backend_name() == "nccl");
      rg::Tensor c = test::f32({1});
      CHECK(contains(error_of([&] { world.communicator().all_reduce(c); }),
                     "[all_reduce] expected a CUDA tensor for the nccl backend, got cpu"));
    }
  }
}

TEST_CASE("nccl: a world of one on one GPU runs every operation") {
  if (!nccl_runs_here()) {
    say_skipped("collectives, send/recv to self, stream ordering");
    return;
  }
  auto single = par::make_single_communicator();
  auto comm = par::make_nccl_communicator(*single, 0);
  CHECK(comm->backend_name() == "nccl");
  CHECK(comm->rank() == 0);
  CHECK(comm->size() == 1);
  const rg::Device gpu = rg::Device::cuda(0);

  // all_reduce over one rank: each dtype and op leaves the values as they are.
  rg::Tensor a = test::f32({1, -2, 3}).to(gpu);
  for (par::Reduce op : {par::Reduce::Sum, par::Reduce::Avg, par::Reduce::Max}) {
    comm->all_reduce(a, op);
    test::check_close(a, {1, -2, 3});
  }
  rg::Tensor d = test::f64({0.5, 1e300}).to(gpu);
  comm->all_reduce(d, par::Reduce::Avg);
  test::check_close(d, {0.5, 1e300});
  rg::Tensor n = test::i64({7, -(int64_t(1) << 40)}).to(gpu);
  comm->all_reduce(n, par::Reduce::Max);
  test::check_close(n, {7, -double(int64_t(1) << 40)});

  // A strided tensor works through a contiguous copy, copied back by wait().
  rg::Tensor m = test::f32({1, 2, 3, 4, 5, 6}, {2, 3}).to(gpu);
  rg::Tensor mt = m.transpose(0, 1);
  REQUIRE(!mt.is_contiguous());
  comm->all_reduce(mt, par::Reduce::Sum);
  test::check_close(m, {1, 2, 3, 4, 5, 6});

  // Non-blocking, then ordered: the kernel after wait() sees the result.
  const int64_t big = int64_t(1) << 22;
  rg::Tensor x = rg::full({big}, 2.0, {.device = gpu}) * 1.5;  // a kernel NCCL must wait for
  par::WorkHandle w = comm->all_reduce_async(x, par::Reduce::Sum);
  w->wait();  // orders the compute stream; the host goes on at once
  CHECK(x.sum().item() == doctest::Approx(3.0 * double(big)));  // .item() synchronises
  CHECK(w->is_completed());

  comm->broadcast(a, 0);
  test::check_close(a, {1, -2, 3});
  comm->reduce(a, 0, par::Reduce::Sum);  // ZeRO-2's collective
  test::check_close(a, {1, -2, 3});
  // the buffer forms (sharded training's)
  rg::Tensor flat = rg::empty({3}, {.device = gpu});
  comm->all_gather_async(flat, a)->wait();
  test::check_close(flat, {1, -2, 3});
  rg::Tensor part = rg::empty({3}, {.device = gpu});
  comm->reduce_scatter_async(part, a, par::Reduce::Avg)->wait();
  test::check_close(part, {1, -2, 3});

  rg::Tensor exchanged = rg::empty({3}, {.device = gpu});  // Ulysses' collective
  comm->all_to_all(exchanged, a);
  test::check_close(exchanged, {1, -2, 3});
  rg::Tensor rows = rg::empty({1, 3}, {.device = gpu});  // expert parallelism's, by counts
  comm->all_to_all_async(rows, a.reshape({1, 3}), {1}, {1})->wait();
  test::check_close(rows, {1, -2, 3});

  rg::Tensor gathered = comm->all_gather(a);
  CHECK(gathered.shape() == rg::Shape{1, 3});
  CHECK(gathered.device() == gpu);
  test::check_close(gathered, {1, -2, 3});

  rg::Tensor scattered = comm->reduce_scatter(m, par::Reduce::Avg);
  CHECK(scattered.shape() == rg::Shape{2, 3});
  test::check_close(scattered, {1, 2, 3, 4, 5, 6});

  // Send to itself: real bytes through NCCL. The send and the receive are
  // posted, then start together as one group at the first wait().
  rg::Tensor src = rg::full({big}, 1.0, {.device = gpu}) * 3.0;  // written just before the send
  rg::Tensor dst = rg::zeros({big}, {.device = gpu});
  par::WorkHandle sent = comm->send_async(src, 0, 5);
  par::WorkHandle got = comm->recv_async(dst, 0, 5);
  got->wait();
  sent->wait();
  CHECK(dst.sum().item() == doctest::Approx(3.0 * double(big)));

  // Received into a strided destination; the receive posted first this time.
  rg::Tensor grid = rg::zeros({2, 3}, {.device = gpu});
  rg::Tensor column_major = grid.transpose(0, 1);  // (3, 2), strided
  rg::Tensor payload = test::f32({1, 2, 3, 4, 5, 6}, {3, 2}).to(gpu);
  got = comm->recv_async(column_major, 0);
  sent = comm->send_async(payload, 0);
  sent->wait();
  got->wait();
  test::check_close(column_major, {1, 2, 3, 4, 5, 6});
  test::check_close(grid, {1, 3, 5, 2, 4, 6});

  // ncclCommSplit: a world of one splits into a world of one, kNoGroup into none.
  std::unique_ptr<par::Communicator> group = comm->split(0, 0);
  REQUIRE(group != nullptr);
  CHECK(group->backend_name() == "nccl");
  CHECK((group->rank() == 0 && group->size() == 1));
  rg::Tensor in_group = test::f32({4, 5}).to(gpu);
  group->all_reduce(in_group, par::Reduce::Sum);
  test::check_close(in_group, {4, 5});
  CHECK(comm->split(par::Communicator::kNoGroup, 0) == nullptr);
  group.reset();

  // A Work dropped without wait(), then a barrier: nothing hangs, nothing leaks.
  comm->all_reduce_async(x, par::Reduce::Sum).reset();
  comm->barrier();
  rg::cuda::synchronize();
}

TEST_CASE("nccl: FSDP on one GPU trains as the plain model does") {
  if (!nccl_runs_here()) {
    say_skipped("FSDP's all-gathers, reduce-scatters and released CUDA memory");
    return;
  }
  auto single = par::make_single_communicator();
  auto comm = par::make_nccl_communicator(*single, 0);
  const rg::Device gpu = rg::Device::cuda(0);
  auto make = [&] {
    rg::manual_seed(3);
    auto m = std::make_shared<rg::nn::Sequential>(std::initializer_list<std::shared_ptr<rg::nn::Module>>{
        std::make_shared<rg::nn::Linear>(6, 7), std::make_shared<rg::nn::GELU>(),
        std::make_shared<rg::nn::Linear>(7, 3)});
    m->to(gpu);
    return m;
  };
  auto plain = make(), model = make();
  rg::optim::AdamW plain_opt(plain->parameters(), {.lr = 1e-2});
  par::FullyShardedDataParallel fsdp(*model, *comm,
                                     {.auto_wrap_policy = par::wrap_modules_of_type<rg::nn::Linear>()});
  rg::optim::AdamW opt(fsdp.parameters(), {.lr = 1e-2});
  rg::Generator data(1);
  for (int step = 0; step < 3; ++step) {
    rg::Tensor x = rg::randn({5, 6}, {}, &data).to(gpu);
    plain_opt.zero_grad();
    opt.zero_grad();
    (*plain)(x).pow(2).mean().backward();
    fsdp(x).pow(2).mean().backward();
    plain_opt.step();
    opt.step();
  }
  CHECK_CONTAINS(error_of([&] { (void)(*model)[0].parameters()[0].sum().item(); }),
                 "memory has been released");
  auto whole = fsdp.summon_full_params(false);
  auto a = plain->parameters(), b = model->parameters();
  for (size_t i = 0; i < a.size(); ++i)
    CHECK(rg::amax(rg::abs(a[i] - b[i])).item() <= 1e-6);
}

TEST_CASE("nccl: wrong tensors and ranks are clear errors") {
  if (!nccl_runs_here()) {
    say_skipped("argument checks");
    return;
  }
  auto single = par::make_single_communicator();
  auto comm = par::make_nccl_communicator(*single, 0);
  const rg::Device gpu = rg::Device::cuda(0);
  rg::Tensor cpu = test::f32({1, 2});
  rg::Tensor g = test::f32({1, 2}).to(gpu);
  rg::Tensor ints = test::i64({1, 2}).to(gpu);

  CHECK(contains(error_of([&] { comm->all_reduce(cpu); }),
                 "[all_reduce] expected a CUDA tensor for the nccl backend, got cpu (Tensor[2] "
                 "float32 cpu"));
  CHECK(contains(error_of([&] { comm->send(cpu, 0); }), "[send] expected a CUDA tensor"));
  CHECK(contains(error_of([&] { comm->all_reduce(ints, par::Reduce::Avg); }),
                 "[all_reduce] expected a floating-point tensor for Reduce::Avg, got int64"));
  CHECK(contains(error_of([&] { comm->broadcast(g, 1); }),
                 "[broadcast] expected root in [0, 1), got 1"));
  CHECK(
      contains(error_of([&] { comm->send_async(g, 1); }), "[send] expected dst in [0, 1), got 1"));
  CHECK(contains(error_of([&] { comm->recv_async(g, -1); }),
                 "[recv] expected src in [0, 1), got -1"));
  CHECK(contains(error_of([&] { comm->reduce_scatter(rg::scalar_tensor(1.0, {.device = gpu})); }),
                 "[reduce_scatter] expected dim 0 divisible by the world size 1"));
  // The communicator still works after the refusals.
  comm->all_reduce(g);
  test::check_close(g, {1, 2});
}

// Opt-in (it aborts an NCCL communicator, which a broken driver could turn into
// a hang): scripts/gpu-check runs it as
//   ringgrad_tests --no-skip -tc="nccl: a receive nobody sends*"
TEST_CASE("nccl: a receive nobody sends is an error, not a hang" * doctest::skip()) {
  if (!nccl_runs_here()) {
    say_skipped("the timeout");
    return;
  }
  auto single = par::make_single_communicator();
  std::unique_ptr<par::Communicator> comm;
  {
    ScopedEnv timeout("RINGGRAD_COMM_TIMEOUT_S", "2");
    comm = par::make_nccl_communicator(*single, 0);
  }
  rg::Tensor t = rg::zeros({4}, {.device = rg::Device::cuda(0)});
  par::WorkHandle w = comm->recv_async(t, 0);
  // wait() does not block the host: NCCL may refuse the lone receive from itself
  // at once (wait() throws), or the GPU waits for a send that never comes — then
  // the watchdog aborts the communicator after 2 s, and the barrier (which does
  // wait on the host, within the same limit) throws.
  std::string err = error_of([&] {
    w->wait();
    comm->barrier();
  });
  MESSAGE("the unmatched receive: " << err);
  CHECK((contains(err, "[recv] ncclRecv failed") || contains(err, "[recv] ncclGroupEnd failed") ||
         contains(err, "recv did not complete within 2 s") ||
         contains(err, "[barrier] did not complete within 2 s on rank 0/1") ||
         contains(err, "got one aborted after an earlier error") ||
         contains(err, "got the NCCL communicator aborted")));
  // Whatever caught it, the communicator is aborted now, and says why.
  if (!contains(err, "ncclRecv failed") && !contains(err, "ncclGroupEnd failed"))
    CHECK(contains(error_of([&] { comm->all_reduce(t); }),
                   "[all_reduce] expected a working NCCL communicator, got one aborted"));
}
