// reduced_precision.cpp — the 16-bit reductions of the MPI backend (see reduced_precision.h).
//
// Every loop here loads 16-bit values as float (exact: each bfloat16 and float16 value is
// a float32 value), computes in float32, and stores once, rounding to nearest even
// (core/half.h): the storage types have no arithmetic, so nothing accumulates in 16 bits.
#include "ringgrad/parallel/mpi/reduced_precision.h"

#include <algorithm>

#include "ringgrad/core/dispatch.h"
#include "ringgrad/core/error.h"
#include "ringgrad/core/half.h"
#include "ringgrad/core/kernel_math.h"
#include "ringgrad/parallel/mpi/comm_thread.h"  // RG_MPI

namespace ringgrad::parallel::mpi {

namespace {

// MPI's user function: inout[i] = in[i] ∘ inout[i], one rounding per element.
template <typename T, bool kMax>
void combine(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  const int n = *len;
  for (int i = 0; i < n; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    b[i] = T(kMax ? (x > y ? x : y) : x + y);
  }
}

MPI_Op make_op(MPI_User_function* fn) {
  MPI_Op op;
  RG_MPI("all_reduce", MPI_Op_create, fn, /*commute=*/1, &op);
  return op;
}

// out[lo, hi) from the k inputs: blocks of float32 accumulators, so the inner loops are
// plain float arithmetic over arrays (vectorisable), and each output is rounded once.
template <typename T>
void reduce_blocks(T* out, const std::vector<const T*>& in, int64_t lo, int64_t hi, Reduce op) {
  constexpr int64_t kBlock = 1024;
  float acc[kBlock];
  const int k = static_cast<int>(in.size());
  for (int64_t start = lo; start < hi; start += kBlock) {
    const int64_t m = std::min(kBlock, hi - start);
    const T* first = in[0] + start;
    RG_SIMD
    for (int64_t j = 0; j < m; ++j) acc[j] = static_cast<float>(first[j]);
    for (int p = 1; p < k; ++p) {
      const T* c = in[p] + start;
      if (op == Reduce::Max) {
        RG_SIMD
        for (int64_t j = 0; j < m; ++j) {
          const float v = static_cast<float>(c[j]);
          acc[j] = acc[j] > v ? acc[j] : v;
        }
      } else {
        RG_SIMD
        for (int64_t j = 0; j < m; ++j) acc[j] += static_cast<float>(c[j]);
      }
    }
    if (op == Reduce::Avg) {  // divided, not multiplied by 1/k: as the float32 paths
      const float count = static_cast<float>(k);
      RG_SIMD
      for (int64_t j = 0; j < m; ++j) acc[j] /= count;
    }
    T* dst = out + start;
    RG_SIMD
    for (int64_t j = 0; j < m; ++j) dst[j] = T(acc[j]);
  }
}

}  // namespace

MPI_Op reduced_precision_op(DType dtype, Reduce op) {
  // Made on first use (after MPI_Init, on a communication thread); thread-safe statics.
  static const MPI_Op bf16_sum = make_op(&combine<BFloat16, false>);
  static const MPI_Op bf16_max = make_op(&combine<BFloat16, true>);
  static const MPI_Op fp16_sum = make_op(&combine<Float16, false>);
  static const MPI_Op fp16_max = make_op(&combine<Float16, true>);
  const bool max = op == Reduce::Max;
  if (dtype == kBFloat16) return max ? bf16_max : bf16_sum;
  RG_CHECK(dtype == kFloat16, "all_reduce", "internal error: expected bfloat16 or float16, got ",
           dtype);
  return max ? fp16_max : fp16_sum;
}

void divide_reduced_precision(DType dtype, void* data, int64_t count, int n) {
  dispatch_reduced(dtype, "all_reduce", [&]<typename T>() {
    T* p = static_cast<T*>(data);
    const float d = static_cast<float>(n);
    for (int64_t i = 0; i < count; ++i) p[i] = T(static_cast<float>(p[i]) / d);
  });
}

void reduce_reduced_precision(DType dtype, void* out, const std::vector<const void*>& in,
                              int64_t lo, int64_t hi, Reduce op) {
  dispatch_reduced(dtype, "all_reduce", [&]<typename T>() {
    std::vector<const T*> typed;
    for (const void* p : in) typed.push_back(static_cast<const T*>(p));
    reduce_blocks(static_cast<T*>(out), typed, lo, hi, op);
  });
}

}  // namespace ringgrad::parallel::mpi
