// reduced_precision.h — bfloat16 and float16 through MPI, which has no 16-bit float type.
//
//   MPI_Datatype type = MPI_UINT16_T;                      // 2 bytes travel as they are
//   MPI_Op op = mpi::reduced_precision_op(kBFloat16, Reduce::Sum);
//   MPI_Allreduce(MPI_IN_PLACE, data, n, type, op, comm);
//
// The elements travel as 2-byte words (half of float32's bytes on the wire); the
// reduction is a user-defined MPI_Op that, for each pair MPI combines, converts both to
// float32, adds (or takes the max), and rounds the result back to 16 bits once. MPI
// combines N contributions in N − 1 such steps (in an order of its choosing: a tree,
// a ring), so a sum over N ranks is rounded at most N − 1 times — the same as NCCL's
// and the ring's per-hop rounding; Max is exact. The shared-memory path
// (shared_memory.h) does better where it can: it reads every rank's buffer, sums in
// float32 and rounds once.
//
// Also here: the division of Reduce::Avg and the 16-bit loops of the shared-memory
// reduction (convert, accumulate in float32, round once).
//
// Internal to parallel/mpi/.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "ringgrad/core/dtype.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel::mpi {

// The user-defined MPI_Op for a 16-bit dtype (made once, commutative, never freed: MPI
// frees it at MPI_Finalize). Sum and Avg (a sum; the caller divides) add in float32 and
// round once per combination; Max compares exactly.
MPI_Op reduced_precision_op(DType dtype, Reduce op);

// In place: data[i] = round(float(data[i]) / n), over count 16-bit elements.
void divide_reduced_precision(DType dtype, void* data, int64_t count, int n);

// out[i] = round(in[0][i] ∘ in[1][i] ∘ … ∘ in[k-1][i]) over [lo, hi), accumulated in
// float32 (the sum in rank order: in[0] first), Avg divided in float32 before the one
// rounding. in[0] may be out itself. dtype: kBFloat16 or kFloat16.
void reduce_reduced_precision(DType dtype, void* out, const std::vector<const void*>& in,
                              int64_t lo, int64_t hi, Reduce op);

}  // namespace ringgrad::parallel::mpi
