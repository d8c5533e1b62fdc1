// threads.h — how many CPU threads ringgrad's kernels use.
//
// One setting for everything (GEMM and the elementwise loops): the environment
// variable RINGGRAD_NUM_THREADS, or set_num_threads(n) at run time. Default: the
// number of cores. Small ops stay on one thread whatever the setting: splitting
// a tiny loop costs more than it saves.
#pragma once

namespace ringgrad {

void set_num_threads(int n);  // n >= 1
int get_num_threads();

}  // namespace ringgrad
