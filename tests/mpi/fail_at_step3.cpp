// fail_at_step3.cpp — a rank that fails must not hang the others.
//
//   scripts/rgrun -n 2 build/bin/fail_at_step3 [guarded|unguarded|caught|stall|stall_shared]
//
// A training-like loop: each step computes a "gradient" and all-reduces it.
// At step 3 rank 1 goes wrong while rank 0 is already waiting in that step's
// all-reduce. Whatever the failure, the job must end, non-zero, within
// seconds, with a message naming the rank (tests/mpi/expect_failure.sh checks):
//   guarded    rank 1 throws inside main_guard: it prints "[rank 1/2] error: …"
//              and aborts the job (MPI_Abort).
//   unguarded  the exception leaves main: std::terminate, SIGABRT; mpirun
//              sees a rank die and kills the rest.
//   caught     main catches it after the World is gone: the World, destroyed
//              by the exception, skips MPI_Finalize (which would wait for
//              rank 0 forever); rank 1 returns 1 and mpirun ends the job.
//   stall      rank 1 just stops answering (sleeps): rank 0's wait times out
//              after RINGGRAD_COMM_TIMEOUT_S and aborts the job.
//   stall_shared  the same, all-reducing symmetric memory (no MPI call to time out).
//   group      as guarded, the all-reduce inside a process group (Communicator::split):
//              the whole job still ends, naming the rank.
//   group_stall   as stall, inside a group: the timeout names the rank in the job.
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

namespace rg = ringgrad;

namespace {

int train(rg::parallel::World& world, const char* mode) {
  rg::Tensor w = rg::randn({16, 16});
  // group, group_stall: the all-reduces run in a group of every rank, in reverse order.
  std::unique_ptr<rg::parallel::Communicator> group;
  rg::parallel::Communicator* comm = &world.communicator();
  if (std::strncmp(mode, "group", 5) == 0) {
    group = comm->split(0, -world.rank());
    comm = group.get();
  }
  // stall_shared: the all-reduce runs in symmetric (shared) memory, as DDP's buckets do.
  const bool shared = std::strcmp(mode, "stall_shared") == 0;
  rg::Tensor bucket = world.communicator().symmetric_empty({16});
  for (int step = 0; step < 10; ++step) {
    rg::Tensor x = rg::randn({4, 16});
    if (world.rank() == 1 && step == 3) {
      if (std::strstr(mode, "stall")) std::this_thread::sleep_for(std::chrono::hours(1));
      x = rg::randn({4, 15});  // a bug: the wrong input width
    }
    rg::Tensor grad = rg::matmul(x, w).sum(0);  // throws "[matmul] expected …" on rank 1
    if (shared) grad = bucket.copy_(grad);
    comm->all_reduce(grad, rg::parallel::Reduce::Avg);
    if (world.is_main()) std::printf("step %d done\n", step), std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "guarded";
  if (std::strcmp(mode, "caught") == 0) {
    try {
      rg::parallel::World world(argc, argv);
      return train(world, mode);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "caught after the World was destroyed: %s\n", e.what());
      return 1;
    }
  }
  rg::parallel::World world(argc, argv);
  if (std::strcmp(mode, "unguarded") == 0) return train(world, mode);
  return rg::parallel::main_guard(world, [&] { return train(world, mode); });
}
