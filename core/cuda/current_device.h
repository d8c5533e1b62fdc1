// current_device.h — choosing this process's GPU (internal to ringgrad).
//
// The backend runs every op on one compute stream, created on the device that
// is current when CUDA is first used, and memory is allocated on the current
// device. A process of a multi-GPU job must therefore make its own GPU current
// before any CUDA work: World does it, for cuda:<local rank>, when it is
// constructed (so four ranks on a four-GPU host use GPUs 0..3, not all GPU 0).
// Declared without <cuda_runtime.h>, so that code compiled without CUDA can
// call it; core/cuda/stub.cpp defines it for builds without CUDA.
#pragma once

namespace ringgrad::cuda {

// cudaSetDevice(index) for the calling thread: the thread that goes on to do
// the CUDA work (the CUDA runtime keeps one current device per host thread).
void set_device(int index);

}  // namespace ringgrad::cuda
