// world.h — which process am I, among how many, on which device.
//
//   int main(int argc, char** argv) {
//     rg::parallel::World world(argc, argv);
//     if (world.rank() == 0) std::printf("%d ranks\n", world.size());
//
// Started by mpirun (scripts/rgrun -n N prog …), a World initialises MPI and
// spans all N processes; started plainly it is a world of one, with no MPI at
// all. The device is cuda:<local rank> when GPUs are present, else the CPU.
// Only one World may exist in a process; it finalises MPI when destroyed.
#pragma once

#include <functional>
#include <memory>

#include "ringgrad/core/device.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

class World {
 public:
  World(int& argc, char**& argv);
  World();  // no command line to hand to MPI
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  int local_rank() const { return local_rank_; }  // rank among the processes on this host
  Device device() const;
  Communicator& communicator() { return *comm_; }
  bool is_main() const { return rank() == 0; }  // the rank that prints and writes files

 private:
  std::unique_ptr<Communicator> comm_;
  int local_rank_ = 0;
  bool owns_mpi_ = false;
};

// True when this process was started by an MPI launcher (mpirun, srun).
bool launched_by_mpi();

// Runs body() and returns its exit code. If it throws, prints
// "[rank R/N] error: what()" to stderr and aborts the whole job (every rank
// ends at once instead of waiting for this one in its next collective), then
// returns 1. The usual end of main: `return main_guard(world, [&] { … return 0; });`
int main_guard(World& world, const std::function<int()>& body);

}  // namespace ringgrad::parallel
