// world.cpp — which process am I: rank, size, local rank and device.
//
// An MPI launcher tells each process who it is through environment variables
// before main() runs. Their presence decides the backend: under mpirun (or
// Slurm's srun) the World initialises MPI and spans every process of the job;
// started plainly it is a world of one. The local rank (this process's index
// among those on the same host) picks the GPU, so that four ranks on a
// four-GPU node use cuda:0..3, and nothing here assumes a single host.
//
// Then the choice of backend for CUDA tensors (world.h): on a GPU host with
// NCCL, a DeviceRouter sends each operation to NCCL or to the host
// communicator by its tensor's device.
#include "ringgrad/parallel/world.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "ringgrad/core/device.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/threads.h"
#include "ringgrad/core/trace.h"
#include "ringgrad/parallel/mpi/mpi_communicator.h"
#include "ringgrad/parallel/nccl/nccl_communicator.h"

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

// The World's communicator on a GPU host with NCCL: each operation goes by its
// tensor's device, CUDA tensors to NCCL and CPU tensors to the host
// communicator (MPI, or the world of one). NCCL starts at the first operation
// on a CUDA tensor, which every rank reaches at the same point of its program
// (collectives are issued in the same order everywhere), so its collective
// setup matches; a program whose tensors stay on the CPU never starts it, and
// may run more ranks than the host has GPUs.
class DeviceRouter : public Communicator {
 public:
  DeviceRouter(Communicator& host, int device, int ranks_on_host)
      : host_(host), device_(device), ranks_on_host_(ranks_on_host) {}
  // A group's router owns its host communicator (the group of the parent's).
  DeviceRouter(std::unique_ptr<Communicator> host, int device, int ranks_on_host)
      : owned_host_(std::move(host)), host_(*owned_host_), device_(device),
        ranks_on_host_(ranks_on_host) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string backend_name() const override { return "nccl+" + host_.backend_name(); }

  // GPU memory is NCCL's, and NCCL reads ordinary device memory: only host
  // tensors may go to the host communicator's symmetric memory.
  Tensor symmetric_empty(const Shape& shape, TensorOptions options) override {
    if (options.device.is_cuda()) return empty(shape, options);
    return host_.symmetric_empty(shape, options);
  }

  // Through NCCL once it has started (the GPU collectives issued before it
  // have then completed on every rank), else through the host communicator.
  void barrier() override {
    std::unique_lock<std::mutex> lock(mutex_);
    Communicator& comm = nccl_ ? *nccl_ : host_;
    lock.unlock();
    comm.barrier();
  }
  // No lock: abort must never wait (it is called when something is stuck).
  void abort(int code) override { (nccl_ ? *nccl_ : host_).abort(code); }

 protected:
  // Each collective goes to the backend that moves this tensor, whose own
  // public method checks it against that backend (device, size) as well.
  WorkHandle do_all_reduce_async(Tensor& t, Reduce op) override {
    return route(t).all_reduce_async(t, op);
  }
  WorkHandle do_broadcast_async(Tensor& t, int root) override {
    return route(t).broadcast_async(t, root);
  }
  WorkHandle do_reduce_async(Tensor& t, int root, Reduce op) override {
    return route(t).reduce_async(t, root, op);
  }
  WorkHandle do_all_gather_async(Tensor& out, const Tensor& in) override {
    return route(in).all_gather_async(out, in);
  }
  WorkHandle do_reduce_scatter_async(Tensor& out, const Tensor& in, Reduce op) override {
    return route(in).reduce_scatter_async(out, in, op);
  }
  WorkHandle do_all_to_all_async(Tensor& out, const Tensor& in, const Exchange& send,
                                 const Exchange& recv) override {
    // Counts in elements here; the backend's public form takes rows: one element per row.
    Tensor flat_out = out.reshape({out.numel()});
    return route(in).all_to_all_async(flat_out, in.reshape({in.numel()}), send.count, recv.count);
  }
  // A group of the router: the host communicator's group, routed the same way;
  // its first CUDA tensor starts an NCCL communicator of the group's ranks.
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    std::unique_ptr<Communicator> host_group = host_.split(color, key);
    if (!host_group) return nullptr;
    return std::make_unique<DeviceRouter>(std::move(host_group), device_, ranks_on_host_);
  }
  WorkHandle do_send_async(const Tensor& t, int dst, int tag) override {
    return route(t).send_async(t, dst, tag);
  }
  WorkHandle do_recv_async(Tensor& t, int src, int tag) override {
    return route(t).recv_async(t, src, tag);
  }
  // CPU tensors' hierarchical all-reduces go through the host communicator (NCCL's own
  // algorithm across nodes is not counted).
  int64_t total_cross_host_bytes() const override { return host_.cross_host_bytes(); }

 private:
  Communicator& route(const Tensor& t) {
    if (!t.defined() || !t.device().is_cuda()) return host_;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!nccl_) {
      int gpus = cuda::device_count();
      RG_CHECK(ranks_on_host_ <= gpus, "nccl", "expected at most one rank per GPU, got ",
               ranks_on_host_, " ranks on this host and ", gpus,
               " GPU(s): NCCL refuses two ranks on one GPU (run at most ", gpus,
               " ranks per host, or keep the tensors on the CPU, e.g. --device cpu, where MPI "
               "moves them)");
      nccl_ = make_nccl_communicator(host_, device_);
    }
    return *nccl_;
  }

  std::unique_ptr<Communicator> owned_host_;  // a group's; declared first: destroyed last
  Communicator& host_;
  int device_, ranks_on_host_;
  std::mutex mutex_;                    // guards the lazy start of nccl_
  std::unique_ptr<Communicator> nccl_;  // started by the first CUDA tensor
};

}  // namespace

// OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; MPICH/Hydra sets PMI_SIZE; a
// PMIx launcher sets PMIX_RANK; Slurm's srun sets SLURM_PROCID and SLURM_NTASKS
// (a program run directly in an sbatch script, without srun, sees them too:
// MPI then starts as a singleton, a world of one that works all the same).
bool launched_by_mpi() {
  return has_env("OMPI_COMM_WORLD_SIZE") || has_env("PMI_SIZE") || has_env("PMIX_RANK") ||
         (has_env("SLURM_PROCID") && has_env("SLURM_NTASKS"));
}

// The settings a World reads, checked before MPI starts: a wrong one ends the program
// with its message (main_guard), not with an exception from a half-started MPI.
void check_world_settings() {
  comm_timeout_seconds();
  shared_memory_allreduce();
  test_ranks_per_host();
  check_cpu_settings();  // RINGGRAD_NUM_THREADS, _GEMM, _CPU_ATTENTION, _HUGE_PAGES
  const char* env = std::getenv("RINGGRAD_COMM");
  std::string choice = env && *env ? env : "auto";
  RG_CHECK(choice == "auto" || choice == "mpi" || choice == "nccl", "World",
           "expected RINGGRAD_COMM to be auto, mpi or nccl, got '", choice, "'");
  if (choice == "nccl")
    RG_CHECK(cuda::device_count() > 0, "World", "expected a GPU for RINGGRAD_COMM=nccl, got none (",
             cuda::is_built() ? "the driver reports no usable GPU" : "built without CUDA", ")");
}

World::World(int& argc, char**& argv) {
  RG_CHECK(!world_exists.exchange(true), "World",
           "expected one World per process, got a second (MPI starts only once)");
  try {
    check_world_settings();
  } catch (const Error& e) {
    setup_error_ = e.what();
    launcher_rank_ = env_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0);
    launcher_size_ = env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1);
    world_exists = false;
    return;
  }
  try {
    if (launched_by_mpi()) {
      host_ = make_mpi_communicator(argc, argv);
      owns_mpi_ = true;  // the communicator finalises MPI when it goes
      local_rank_ = env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0);
      local_size_ = env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1);
    } else {
      host_ = make_single_communicator();
    }
    comm_ = host_.get();
    choose_communicator();
  } catch (...) {
    // The members go as the exception leaves (NCCL before MPI: reverse
    // declaration order), seeing it in flight: they abort rather than wait for peers.
    world_exists = false;
    throw;
  }
}

// See world.h: NCCL for CUDA tensors on a GPU host (routed by device), unless
// RINGGRAD_COMM says otherwise.
void World::choose_communicator() {
  // (RINGGRAD_COMM's value, and a GPU for nccl, were checked before MPI started.)
  const char* env = std::getenv("RINGGRAD_COMM");
  std::string choice = env && *env ? env : "auto";
  Device dev = device();
  // This rank's GPU becomes the current device before any CUDA work, so that
  // the compute stream, the memory and NCCL all live on it — whichever backend
  // carries the collectives. (cuda:0 is current already; leaving it alone spares
  // a CPU-only program a CUDA context.)
  if (dev.is_cuda() && dev.index != 0) cuda::set_device(dev.index);
  if (choice == "mpi" || (choice == "auto" && !(dev.is_cuda() && nccl_is_built()))) return;
  if (choice == "nccl")
    device_ = make_nccl_communicator(*host_, dev.index);  // now, so that errors show at once
  else
    device_ = std::make_unique<DeviceRouter>(*host_, dev.index, local_size_);
  comm_ = device_.get();
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
  // NCCL first: it finishes its work and leaves while MPI is still there.
  // Destroying the MPI communicator then stops its thread (after the
  // operations already queued), and finalises MPI.
  comm_ = nullptr;
  device_.reset();
  host_.reset();
  world_exists = false;
}

Device World::device() const {
  int count = cuda::device_count();
  return count > 0 ? Device::cuda(local_rank_ % count) : kCPU;
}

Communicator& World::communicator() {
  if (!comm_) throw Error(setup_error_);
  return *comm_;
}

int main_guard(World& world, const std::function<int()>& body) {
  std::string what = world.setup_error();  // a World that did not start: body does not run
  if (world.started()) {
    try {
      return body();
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "unknown exception";
    }
  }
  std::fprintf(stderr, "[rank %d/%d] error: %s\n", world.rank(), world.size(), what.c_str());
  std::fflush(stderr);
  // The other ranks would wait for this one in their next collective: end them now. (A World
  // that did not start: every rank has the same settings and error, and no one to abort.)
  if (world.started() && world.size() > 1) world.communicator().abort(1);
  return 1;
}

std::string stop_trace(World& world, const std::string& path) {
  std::string file = trace::stop();
  if (file.empty() || world.size() == 1) return file;
  world.communicator().barrier();  // every rank has written its file
  std::vector<std::string> files;
  for (int r = 0; r < world.size(); ++r) files.push_back(trace::file_for_rank(path, r, world.size()));
  // Ranks on other hosts wrote their files there: then there is nothing to merge here.
  bool all_here = std::all_of(files.begin(), files.end(),
                              [](const std::string& f) { return std::filesystem::exists(f); });
  if (world.is_main() && all_here) trace::merge(files, path);
  return all_here ? path + " (all ranks; per rank: " + files.front() + ", …)"
                  : files.front() + " (the other ranks' files are on their hosts)";
}

}  // namespace ringgrad::parallel
