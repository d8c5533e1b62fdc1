// mpi_communicator.h — the MPI backend of Communicator: CPU tensors between processes.
//
//   mpirun -n 4 prog   (or scripts/rgrun -n 4 prog)  ->  World calls make_mpi_communicator
//
// Each communicator (the world, each process group) runs one communication
// thread that makes its MPI calls, taking operations from a FIFO queue in the
// order the program issued them: the same order on every rank, which is what
// MPI's collectives require. The *_async forms only enqueue, so the caller
// keeps computing (DDP's overlap) while the thread moves bytes; blocking forms
// enqueue and wait.
//
// Timeout: a wait() that lasts longer than RINGGRAD_COMM_TIMEOUT_S seconds
// (default 300; "off": no limit) means a peer has died or stalled: the rank
// prints which operation timed out and calls MPI_Abort, which ends the job.
//
// This header keeps <mpi.h> out: the backend lives in parallel/mpi/, and a
// build without MPI links parallel/mpi/stub.cpp instead, whose factory throws
// "[World] built without MPI".
#pragma once

#include <memory>

#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

// Initialises MPI (MPI_THREAD_MULTIPLE where available: each process group has
// its own communication thread; SERIALIZED suffices without groups) unless the
// program already has, and
// returns a communicator over all ranks of MPI_COMM_WORLD. Destroying it stops
// the communication thread and, if it initialised MPI, finalises MPI.
std::unique_ptr<Communicator> make_mpi_communicator(int& argc, char**& argv);

}  // namespace ringgrad::parallel
