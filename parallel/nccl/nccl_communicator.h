// nccl_communicator.h — the NCCL backend of Communicator: CUDA tensors between GPUs.
//
//   World on a GPU host            ->  CUDA tensors go through this backend (world.h)
//   make_nccl_communicator(boot, d) ->  the same, by hand (tests)
//
// One GPU per rank: NCCL refuses two ranks of one communicator on the same GPU.
// On a single-GPU machine the whole path still runs with one rank (plain
// `mnist_ddp --device cuda`, no mpirun); several ranks need a host with as many
// GPUs as ranks per host (`scripts/rgrun -n 4 build/bin/mnist_ddp --device cuda`
// on a 4-GPU host), and NCCL crosses hosts by itself.
//
// How it works (parallel/nccl/nccl_communicator.cpp): NCCL kernels run on a
// comm stream of their own, ordered against the compute stream by CUDA events,
// so that all-reduces overlap backward; sends and receives are started in
// groups (ncclGroupStart/End), so a ring exchange cannot deadlock; wait() orders
// the compute stream after the operation without blocking the host, and a
// watchdog thread aborts the NCCL communicator (and the job) when an operation
// fails or lasts longer than RINGGRAD_COMM_TIMEOUT_S seconds (default 300; off:
// no watchdog), naming the operation and the rank, instead of hanging.
//
// This header keeps <nccl.h> out: a build without NCCL (or without CUDA) links
// parallel/nccl/stub.cpp instead, whose factory throws "[nccl] built without NCCL".
#pragma once

#include <memory>

#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

// Whether this build has the NCCL backend (CMake found CUDA and NCCL).
bool nccl_is_built();

// A communicator over the same ranks as `bootstrap`, on GPU `device` (this
// rank's cuda:<local rank>), which it makes the calling thread's current
// device. Collective: every rank of `bootstrap` must call it. Rank 0 creates
// NCCL's unique id and `bootstrap` (MPI under mpirun; the world of one) carries
// it to the others. `bootstrap` must outlive the result, whose abort() ends the
// job through bootstrap.abort().
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device);

}  // namespace ringgrad::parallel
