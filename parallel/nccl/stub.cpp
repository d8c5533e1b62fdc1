// stub.cpp — the NCCL backend of a build without NCCL.
//
// Linked instead of parallel/nccl/nccl_communicator.cpp when CMake found no
// CUDA, or no NCCL (or RINGGRAD_NCCL=OFF). World never asks for NCCL then
// (CUDA tensors stay unsupported by the MPI backend); RINGGRAD_COMM=nccl, or a
// direct call, is told why it cannot have it.
#include "ringgrad/parallel/nccl/nccl_communicator.h"

namespace ringgrad::parallel {

bool nccl_is_built() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int) {
  fail("nccl",
       "built without NCCL: the NCCL backend needs the CUDA backend and NCCL's nccl.h and "
       "libnccl (Debian: apt-get install libnccl-dev, or point NCCL_HOME at an NCCL "
       "install), then reconfigure with -DRINGGRAD_CUDA=ON -DRINGGRAD_NCCL=ON; or keep "
       "tensors on the CPU, where the MPI backend moves them");
}

}  // namespace ringgrad::parallel
