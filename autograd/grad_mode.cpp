// grad_mode.cpp — the per-thread "record the graph" flag.
#include "ringgrad/autograd/grad_mode.h"

namespace ringgrad {

static thread_local bool grad_enabled = true;

bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool enabled) { grad_enabled = enabled; }

}  // namespace ringgrad
