// index.cpp — CPU index_select / index_add / gather / scatter_add over [outer, d, inner].
//
// Indices are checked here, where they are read: an out-of-range index throws
// ringgrad::Error naming the index and the size (embedding ids and class labels
// are the usual culprits). The adding kernels run on one thread: two rows may
// share a target.
#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/cpu/loops.h"

namespace ringgrad::cpu {
namespace {

inline int64_t checked(int64_t idx, int64_t d, const char* op) {
  if (idx < -d || idx >= d)
    fail(op, "expected indices in [", -d, ", ", d, ") for a dim of size ", d, ", got ", idx);
  return idx < 0 ? idx + d : idx;
}

}  // namespace

void CpuBackend::index_select(const TensorRef& in, const TensorRef& index, const TensorRef& out,
                              int64_t outer, int64_t d, int64_t n, int64_t inner) {
  const int64_t* idx = static_cast<const int64_t*>(index.data);
  for (int64_t i = 0; i < n; ++i) checked(idx[i], d, "index_select");
  dispatch_storage(in.dtype, [&]<typename T>() {
    const T* x = static_cast<const T*>(in.data);
    T* y = static_cast<T*>(out.data);
    parallel_for(outer * n, outer * n * inner, [&](int64_t b, int64_t e) {
      for (int64_t oi = b; oi < e; ++oi) {
        int64_t o = oi / n, i = oi % n;
        int64_t src = idx[i] < 0 ? idx[i] + d : idx[i];
        const T* row = x + (o * d + src) * inner;
        std::copy(row, row + inner, y + oi * inner);
      }
    });
  });
}

void CpuBackend::index_add(const TensorRef& out, const TensorRef& index, const TensorRef& src,
                           int64_t outer, int64_t d, int64_t n, int64_t inner) {
  const int64_t* idx = static_cast<const int64_t*>(index.data);
  for (int64_t i = 0; i < n; ++i) checked(idx[i], d, "index_add");
  dispatch_numeric(out.dtype, "index_add", [&]<typename T>() {
    T* y = static_cast<T*>(out.data);
    const T* s = static_cast<const T*>(src.data);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < n; ++i) {
        int64_t dst = idx[i] < 0 ? idx[i] + d : idx[i];
        T* row = y + (o * d + dst) * inner;
        const T* from = s + (o * n + i) * inner;
        for (int64_t j = 0; j < inner; ++j) row[j] += from[j];
      }
  });
}

void CpuBackend::gather(const TensorRef& in, const TensorRef& index, const TensorRef& out,
                        int64_t outer, int64_t d, int64_t n, int64_t inner) {
  const int64_t* idx = static_cast<const int64_t*>(index.data);
  int64_t total = outer * n * inner;
  for (int64_t t = 0; t < total; ++t) checked(idx[t], d, "gather");
  dispatch_storage(in.dtype, [&]<typename T>() {
    const T* x = static_cast<const T*>(in.data);
    T* y = static_cast<T*>(out.data);
    parallel_for(total, total, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t o = t / (n * inner), j = t % inner;
        int64_t k = idx[t] < 0 ? idx[t] + d : idx[t];
        y[t] = x[(o * d + k) * inner + j];
      }
    });
  });
}

void CpuBackend::scatter_add(const TensorRef& out, const TensorRef& index, const TensorRef& src,
                             int64_t outer, int64_t d, int64_t n, int64_t inner) {
  const int64_t* idx = static_cast<const int64_t*>(index.data);
  int64_t total = outer * n * inner;
  for (int64_t t = 0; t < total; ++t) checked(idx[t], d, "scatter_add");
  dispatch_numeric(out.dtype, "scatter_add", [&]<typename T>() {
    T* y = static_cast<T*>(out.data);
    const T* s = static_cast<const T*>(src.data);
    for (int64_t t = 0; t < total; ++t) {
      int64_t o = t / (n * inner), j = t % inner;
      int64_t k = idx[t] < 0 ? idx[t] + d : idx[t];
      y[(o * d + k) * inner + j] += s[t];
    }
  });
}

}  // namespace ringgrad::cpu
