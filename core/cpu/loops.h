// loops.h — the CPU's generic loops (internal).
//
// parallel_for: split [0, n) over the configured threads when the work is big enough.
// for_each_row: visit N same-shaped strided operands row by row, after merging
// dims that are contiguous in every operand, so most elementwise ops become one
// long unit-stride loop that the compiler vectorises.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "ringgrad/core/backend.h"
#include "ringgrad/core/thread_pool.h"
#include "ringgrad/core/dispatch.h"
#include "ringgrad/core/threads.h"

// An element function's lambda (`[](float x) RG_ELEMENT_FN { ... }`) inlined into every loop
// that calls it, however large its body: GCC left GELU's (erf and exp inlined) as a call per
// element in each of map2's four loops, and the loops did not vectorise (its backward ran at
// 11 ns an element instead of 1).
#define RG_ELEMENT_FN __attribute__((always_inline))

namespace ringgrad::cpu {

// Below this much work (≈ element-operations) a loop runs on one thread. The pool's
// workers poll for a while after each job (core/thread_pool.cpp), so during training the
// next loop finds them awake and a worker starts its chunk ~0.5 µs after the call, about
// what a vectorised loop does in 10–30k element-operations (PyTorch's grain is 32k). It
// was 2^20, sized for a worker asleep; measured at 2^15, 2 threads (interleaved, best of
// 4): transformer_reverse 39.3k -> 45.3k tokens/s and bench_transformer 19.9k -> 22.8k, and
// with another process holding one core 26.3k -> 25.4k (a late worker costs its chunk, no
// more). 2^13 and 2^14, tried since the hand-off got cheaper, changed nothing measurable.
inline constexpr int64_t kParallelGrain = int64_t(1) << 15;

// f(begin, end) over [0, n), in parallel chunks when `work` (≈ elements touched) is
// large. A few chunks per thread let a thread that starts late take fewer.
template <typename F>
void parallel_for(int64_t n, int64_t work, F&& f) {
  int threads = get_num_threads();
  if (threads <= 1 || work < kParallelGrain || n < 2 || in_parallel_region()) {
    f(int64_t(0), n);
    return;
  }
  int64_t chunks = std::min<int64_t>(n, int64_t(threads) * 4);
  parallel_chunks(chunks, threads, [&](int64_t c) { f(n * c / chunks, n * (c + 1) / chunks); });
}

// The loop structure of N operands that share one shape.
template <size_t N>
struct RowLoop {
  int ndim = 0;  // after merging; the last dim is the row
  std::array<int64_t, kMaxDims> shape{};
  std::array<std::array<int64_t, kMaxDims>, N> strides{};
};

template <size_t N>
RowLoop<N> make_row_loop(const std::array<const TensorRef*, N>& ops) {
  const TensorRef& first = *ops[0];
  RowLoop<N> L;
  for (int d = 0; d < first.ndim; ++d) {
    if (first.shape[d] == 1) continue;  // size-1 dims do not move any pointer
    bool merge = L.ndim > 0;
    for (size_t k = 0; k < N && merge; ++k)
      merge = L.strides[k][L.ndim - 1] == ops[k]->strides[d] * first.shape[d];
    if (merge) {
      L.shape[L.ndim - 1] *= first.shape[d];
      for (size_t k = 0; k < N; ++k) L.strides[k][L.ndim - 1] = ops[k]->strides[d];
    } else {
      L.shape[L.ndim] = first.shape[d];
      for (size_t k = 0; k < N; ++k) L.strides[k][L.ndim] = ops[k]->strides[d];
      ++L.ndim;
    }
  }
  return L;
}

// row(ptrs, n, strides): process one row of n elements; ptrs[k] points at
// operand k's first element of the row (as char*), strides[k] is its element stride.
template <size_t N, typename Row>
void for_each_row(const std::array<const TensorRef*, N>& ops, Row&& row) {
  RowLoop<N> L = make_row_loop<N>(ops);
  std::array<size_t, N> esize;
  for (size_t k = 0; k < N; ++k) esize[k] = element_size(ops[k]->dtype);
  if (ops[0]->numel() == 0) return;
  int64_t row_len = L.ndim ? L.shape[L.ndim - 1] : 1;
  std::array<int64_t, N> row_stride{};
  for (size_t k = 0; k < N; ++k) row_stride[k] = L.ndim ? L.strides[k][L.ndim - 1] : 1;
  int64_t rows = 1;
  for (int d = 0; d + 1 < L.ndim; ++d) rows *= L.shape[d];

  // Too few rows to share out (a contiguous tensor merges into one row of numel): cut each
  // row into pieces, and share out the pieces. The row functions here are elementwise, so
  // a piece of a row is a row. Pieces of at least kMinPiece elements, cut at multiples of
  // 16 so that each piece's vectorised loop stays aligned as the whole row's was.
  constexpr int64_t kMinPiece = 4096;
  const int threads = get_num_threads();
  const int64_t wanted = int64_t(threads) * 4;  // parallel_for's chunks per thread
  if (threads > 1 && rows < wanted && rows * row_len >= kParallelGrain && row_len >= 2 * kMinPiece &&
      !in_parallel_region()) {
    const int64_t pieces = std::min((wanted + rows - 1) / rows, row_len / kMinPiece);
    auto row_start = [&](int64_t r) {  // operand k's offset (in elements) of row r
      std::array<int64_t, N> off{};
      for (int d = L.ndim - 2; d >= 0; --d) {
        const int64_t i = r % L.shape[d];
        r /= L.shape[d];
        for (size_t k = 0; k < N; ++k) off[k] += i * L.strides[k][d];
      }
      return off;
    };
    parallel_chunks(rows * pieces, threads, [&](int64_t u) {
      const int64_t r = u / pieces, q = u % pieces;
      const int64_t lo = row_len * q / pieces / 16 * 16;
      const int64_t hi = q + 1 == pieces ? row_len : row_len * (q + 1) / pieces / 16 * 16;
      if (hi <= lo) return;
      const std::array<int64_t, N> off = row_start(r);
      std::array<char*, N> ptrs;
      for (size_t k = 0; k < N; ++k)
        ptrs[k] = static_cast<char*>(ops[k]->data) +
                  (off[k] + lo * row_stride[k]) * static_cast<int64_t>(esize[k]);
      row(ptrs, hi - lo, row_stride);
    });
    return;
  }

  parallel_for(rows, rows * row_len, [&](int64_t begin, int64_t end) {
    std::array<int64_t, kMaxDims> idx{};
    int64_t rem = begin;
    for (int d = L.ndim - 2; d >= 0; --d) {
      idx[d] = rem % L.shape[d];
      rem /= L.shape[d];
    }
    std::array<char*, N> ptrs;
    for (int64_t r = begin; r < end; ++r) {
      for (size_t k = 0; k < N; ++k) {
        int64_t off = 0;
        for (int d = 0; d + 1 < L.ndim; ++d) off += idx[d] * L.strides[k][d];
        ptrs[k] = static_cast<char*>(ops[k]->data) + off * static_cast<int64_t>(esize[k]);
      }
      row(ptrs, row_len, row_stride);
      for (int d = L.ndim - 2; d >= 0; --d) {  // next row: odometer increment
        if (++idx[d] < L.shape[d]) break;
        idx[d] = 0;
      }
    }
  });
}

}  // namespace ringgrad::cpu
