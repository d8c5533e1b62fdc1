// stub.cpp — the MPI backend of a build without MPI.
//
// Linked instead of parallel/mpi/*.cpp when CMake found no MPI (or
// RINGGRAD_MPI=OFF). A program started plainly is a world of one and never
// gets here; one started by mpirun does, and is told why it cannot join.
#include "ringgrad/parallel/mpi/mpi_communicator.h"

namespace ringgrad::parallel {

std::unique_ptr<Communicator> make_mpi_communicator(int&, char**&) {
  fail("World",
       "built without MPI: this program was started by an MPI launcher, but ringgrad was "
       "configured without MPI (Debian: apt-get install libopenmpi-dev, then reconfigure "
       "with -DRINGGRAD_MPI=ON), or run it without mpirun as a world of one");
}

}  // namespace ringgrad::parallel
