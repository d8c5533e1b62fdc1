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
//
// Which backend moves the tensors (communicator()):
//   * a machine with GPUs, a build with NCCL: each operation goes by its
//     tensor's device — CUDA tensors through NCCL, CPU tensors through MPI (or
//     the world of one). backend_name() is "nccl+mpi" (or "nccl+single"). NCCL
//     starts at the first operation on a CUDA tensor, so a program that keeps
//     its tensors on the CPU never starts it. NCCL needs one GPU per rank: on a
//     single GPU that is a world of one (`mnist_ddp --device cuda`), and N ranks
//     need N GPUs per host (`scripts/rgrun -n 4 build/bin/mnist_ddp --device cuda`
//     on a 4-GPU host).
//   * otherwise: MPI ("mpi") under a launcher, the world of one ("single") without.
//   * RINGGRAD_COMM=mpi keeps NCCL out; RINGGRAD_COMM=nccl uses NCCL alone,
//     started at once (a CPU tensor is then an error); RINGGRAD_COMM=auto is the default.
// MPI stays underneath NCCL: it carries NCCL's id at the start and ends every
// rank when one fails (main_guard).
//
// On a GPU host the World makes cuda:<local rank> the current device of the
// thread that constructs it: construct it first in main, before any CUDA work.
#pragma once

#include <functional>
#include <memory>
#include <string>

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

  int rank() const { return comm_ ? comm_->rank() : launcher_rank_; }
  int size() const { return comm_ ? comm_->size() : launcher_size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes on this host
  Device device() const;
  Communicator& communicator();
  bool is_main() const { return rank() == 0; }  // the rank that prints and writes files
  // A World whose settings were wrong (every RINGGRAD_* variable it and the CPU backend read:
  // checked before MPI starts) did not start: rank() and size() are the launcher's, main_guard
  // prints the error and returns 1, and communicator() throws it.
  bool started() const { return comm_ != nullptr; }
  const std::string& setup_error() const { return setup_error_; }

 private:
  void choose_communicator();  // from the device and RINGGRAD_COMM (above)
  std::string setup_error_;
  int launcher_rank_ = 0, launcher_size_ = 1;

  std::unique_ptr<Communicator> host_;    // MPI under a launcher, else the world of one
  std::unique_ptr<Communicator> device_;  // NCCL, alone or routed by device; null if none
  Communicator* comm_ = nullptr;          // what communicator() returns
  int local_rank_ = 0;
  int local_size_ = 1;  // ranks on this host
  bool owns_mpi_ = false;
};

// True when this process was started by an MPI launcher (mpirun, srun).
bool launched_by_mpi();

// Runs body() and returns its exit code. If it throws, prints
// "[rank R/N] error: what()" to stderr and aborts the whole job (every rank
// ends at once instead of waiting for this one in its next collective), then
// returns 1. A World that did not start (its settings were wrong): prints its error
// and returns 1 without running body (every rank does the same). The usual end of main: `return main_guard(world, [&] { … return 0; });`
int main_guard(World& world, const std::function<int()>& body);

// Ends a trace started with trace::start(path, world.rank(), world.size()) on every
// rank (core/trace.h): each rank writes its file, and when all of them are on this
// host rank 0 merges them into `path`. Returns where the trace is, for printing
// ("" when tracing was not on). Every rank must call it.
std::string stop_trace(World& world, const std::string& path);

}  // namespace ringgrad::parallel
