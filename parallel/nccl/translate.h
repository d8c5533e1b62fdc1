// translate.h — ringgrad's dtypes, reductions and errors in NCCL's terms (internal to the
// NCCL backend, parallel/nccl/nccl_communicator.cpp).
#pragma once

#include <nccl.h>

#include <string>

#include "ringgrad/core/dtype_table.h"
#include "ringgrad/core/error.h"
#include "ringgrad/parallel/communicator.h"  // Reduce

namespace ringgrad::parallel::nccl_detail {

// ---- errors ----

// An NCCL return code other than ncclSuccess, as an Error naming our operation,
// the NCCL call, NCCL's explanation and where:
//   "[all_reduce] ncclAllReduce failed: invalid argument (…) (parallel/nccl/….cpp:312)"
[[noreturn]] inline void throw_nccl(const char* op, ncclResult_t code, const char* call,
                                    const char* file, int line, const std::string& hint = "") {
  std::string where = file;  // from parallel/ on: short, and the same on every machine
  if (size_t at = where.rfind("parallel/"); at != std::string::npos) where = where.substr(at);
  const char* last = ncclGetLastError(nullptr);  // NCCL's own account, when it has one
  std::string details = last && *last ? std::string(" (") + last + ")" : std::string();
  throw Error(detail::concat("[", op, "] ", call, " failed: ", ncclGetErrorString(code), details,
                             " (", where, ":", line, ")", hint));
}
#define RG_NCCL(op, fn, ...)                                               \
  do {                                                                     \
    ncclResult_t rg_nccl_code_ = fn(__VA_ARGS__);                          \
    if (rg_nccl_code_ != ncclSuccess)                                      \
      nccl_detail::throw_nccl(op, rg_nccl_code_, #fn, __FILE__, __LINE__); \
  } while (0)

// ---- dtypes and reductions ----

// Booleans travel as bytes 0 or 1. bfloat16 and float16 are NCCL's own: its kernels
// add them in float32 and round at every step of the ring (or tree), as our MPI path does.
inline const DTypeTable<ncclDataType_t>& nccl_types() {
  static const DTypeTable<ncclDataType_t> table("NCCL", {{kFloat32, ncclFloat32},
                                                         {kFloat64, ncclFloat64},
                                                         {kInt64, ncclInt64},
                                                         {kBool, ncclUint8},
                                                         {kBFloat16, ncclBfloat16},
                                                         {kFloat16, ncclFloat16}});
  return table;
}
inline ncclDataType_t nccl_type(DType t) { return nccl_types()(t); }

// Avg is NCCL's own (ncclAvg: the sum divided by the number of ranks, on the
// GPU). Booleans are bytes 0/1: their "sum" and "max" are both OR, as in the
// MPI backend.
inline ncclRedOp_t nccl_op(Reduce op, DType t) {
  if (t == DType::Bool) return ncclMax;
  switch (op) {
    case Reduce::Sum:
      return ncclSum;
    case Reduce::Avg:
      return ncclAvg;
    case Reduce::Max:
      return ncclMax;
  }
  return ncclSum;
}

}  // namespace ringgrad::parallel::nccl_detail
