// grad_scaler_sync.cpp — GradScaler's inf/NaN flag, all-reduced with Max over the ranks.
#include "ringgrad/parallel/grad_scaler_sync.h"

#include "ringgrad/core/factory.h"

namespace ringgrad::parallel {

optim::GradScalerOptions::Agree found_inf_all_reduce(Communicator& comm, Device device) {
  return [&comm, device](bool found_inf_here) {
    // flag (1,) float32: 1 where this rank found an inf/NaN; after Max, 1 if any rank did
    Tensor flag = full({1}, found_inf_here ? 1.0 : 0.0, {.dtype = kFloat32, .device = device});
    comm.all_reduce(flag, Reduce::Max);
    return flag.item() > 0;
  };
}

}  // namespace ringgrad::parallel
