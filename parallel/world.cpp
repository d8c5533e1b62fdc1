// world.cpp — which process am I: rank, size, local rank and device.
//
// An MPI launcher tells each process who it is through environment variables
// before main() runs. Their presence decides the backend: under mpirun (or
// Slurm's srun) the World initialises MPI and spans every process of the job;
// started plainly it is a world of one. The local rank (this process's index
// among those on the same host) picks the GPU, so that four ranks on a
// four-GPU node use cuda:0..3, and nothing here assumes a single host.
#include "ringgrad/parallel/world.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "ringgrad/parallel/mpi_communicator.h"

namespace ringgrad::parallel {

namespace {

bool has_env(const char* name) { return std::getenv(name) != nullptr; }

// The first of these variables that is set, as an int; `fallback` if none is.
int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names)
    if (const char* text = std::getenv(name)) return std::atoi(text);
  return fallback;
}

// Only one World per process: MPI can be initialised only once.
std::atomic<bool> world_exists{false};

}  // namespace

// OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; MPICH/Hydra sets PMI_SIZE; a
// PMIx launcher sets PMIX_RANK; Slurm's srun sets SLURM_PROCID and SLURM_NTASKS
// (a program run directly in an sbatch script, without srun, sees them too:
// MPI then starts as a singleton, a world of one that works all the same).
bool launched_by_mpi() {
  return has_env("OMPI_COMM_WORLD_SIZE") || has_env("PMI_SIZE") || has_env("PMIX_RANK") ||
         (has_env("SLURM_PROCID") && has_env("SLURM_NTASKS"));
}

World::World(int& argc, char**& argv) {
  RG_CHECK(!world_exists.exchange(true), "World",
           "expected one World per process, got a second (MPI starts only once)");
  try {
    if (launched_by_mpi()) {
      comm_ = make_mpi_communicator(argc, argv);
      owns_mpi_ = true;  // the communicator finalises MPI when it goes
      local_rank_ = env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0);
    } else {
      comm_ = make_single_communicator();
    }
  } catch (...) {
    world_exists = false;
    throw;
  }
}

// MPI_Init may edit the command line it is given; without one, hand it a
// stand-in that lives as long as the program.
static int& stand_in_argc() {
  static int argc = 1;
  return argc;
}
static char**& stand_in_argv() {
  static char name[] = "ringgrad";
  static char* args[] = {name, nullptr};
  static char** argv = args;
  return argv;
}
World::World() : World(stand_in_argc(), stand_in_argv()) {}

World::~World() {
  // Destroying the MPI communicator stops its thread (after the operations
  // already queued), then finalises MPI.
  comm_.reset();
  world_exists = false;
}

Device World::device() const {
  int count = cuda::device_count();
  return count > 0 ? Device::cuda(local_rank_ % count) : kCPU;
}

int main_guard(World& world, const std::function<int()>& body) {
  std::string what;
  try {
    return body();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown exception";
  }
  std::fprintf(stderr, "[rank %d/%d] error: %s\n", world.rank(), world.size(), what.c_str());
  std::fflush(stderr);
  // The other ranks would wait for this one in their next collective: end them now.
  if (world.size() > 1) world.communicator().abort(1);
  return 1;
}

}  // namespace ringgrad::parallel
