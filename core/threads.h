// threads.h — how many CPU threads ringgrad's kernels use.
//
// One setting for everything (GEMM and the elementwise loops): the environment
// variable RINGGRAD_NUM_THREADS, or set_num_threads(n) at run time. Default: the
// number of cores. Small ops stay on one thread whatever the setting: splitting
// a tiny loop costs more than it saves.
#pragma once

#include <cstdint>
#include <string>

namespace ringgrad {

void set_num_threads(int n);  // n >= 1
int get_num_threads();

// The CPU's float32 GEMM: "onednn-<version>" or "eigen" (RINGGRAD_GEMM=onednn|eigen|auto;
// auto, the default: oneDNN where the build has it). float64 GEMMs are always Eigen's.
std::string cpu_gemm_engine();

// Which way the CPU computes a float32 attention tile with head dims d and dv (with or
// without an additive mask) and no dropout, in the forward (or with backward = true, the backward), causal or not:
// "fused" (one kernel, the scores kept in registers: head dims 8, 16, 24, 32, 48, 64 and 128
// on AVX-512, either pass, causal or not — the answer depends on neither today; until the
// kernel took its groups in pairs, 128's backward went the GEMM route where not causal;
// core/cpu/attention_fused.cpp) or
// "gemm" (GEMMs and row passes). RINGGRAD_CPU_ATTENTION=auto|fused|gemm: auto (the
// default) as above; fused takes the fused kernel wherever it is compiled, on any CPU;
// gemm never.
std::string cpu_attention_kernel(int64_t d, int64_t dv, bool backward = false,
                                 bool causal = false);

// Reads every setting of the CPU backend from the environment (RINGGRAD_NUM_THREADS,
// RINGGRAD_GEMM, RINGGRAD_CPU_ATTENTION, RINGGRAD_HUGE_PAGES) and throws the first bad
// one's error, naming the variable and the value; without this call each is read at its
// first use. parallel::World calls it before MPI starts, so that every rank of a job
// reports a bad value alike and before any collective.
void check_cpu_settings();

}  // namespace ringgrad
