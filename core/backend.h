// backend.h — the seam between ops and devices (internal header).
//
// Ops in core/ do the checking, shape arithmetic and autograd once; they then
// hand raw strided views to the Backend of their device, which only moves and
// computes numbers. core/cpu implements it always; core/cuda implements it in a
// CUDA build, and in a build without CUDA a stub throws "[op] built without CUDA".
#pragma once

#include <array>
#include <cstdint>
#include <functional>

#include "ringgrad/core/op_kinds.h"
#include "ringgrad/core/ops.h"
#include "ringgrad/core/tensor.h"

namespace ringgrad {

inline constexpr int kMaxDims = 8;

// A raw strided view: what a kernel needs to know about one operand.
struct TensorRef {
  void* data = nullptr;  // first element
  DType dtype = kFloat32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements (0 = broadcast)

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
};

// View of `t`; with `as_shape` given, t is broadcast to it (strides 0 on new dims).
TensorRef ref(const Tensor& t);
TensorRef ref(const Tensor& t, const Shape& as_shape);

// UnaryOp, BinaryOp, ReduceOp, RandomDist: see op_kinds.h.

// c(b) = alpha·a(b)·b(b) + beta·c(b) for b < batch; a is (m,k), b is (k,n), c is (m,n)
// row-major with row stride c_row_stride (0: n, tightly packed). Each of a and b is
// either row-major (col stride 1) or column-major (row stride 1): transposes are read
// in place. Batch strides of a and b may be 0 (broadcast). beta = 0 ignores c's old
// contents (even NaN); beta = 1 accumulates (what blockwise attention needs).
struct GemmArgs {
  DType dtype = kFloat32;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t a_batch_stride = 0, a_row_stride = 0, a_col_stride = 0;
  const void* b = nullptr;
  int64_t b_batch_stride = 0, b_row_stride = 0, b_col_stride = 0;
  void* c = nullptr;
  int64_t c_batch_stride = 0, c_row_stride = 0;
  double alpha = 1.0, beta = 0.0;
  // (n) contiguous, of dtype, or null: added to every row of every product after
  // alpha·A·B + beta·C — a Linear's bias. Set only where gemm_adds_bias(dtype) says so.
  const void* bias = nullptr;
  // Then max(0, ·) on every element (after the bias, if any): a Linear followed by ReLU
  // (nn::linear_relu). Set only where gemm_adds_bias(dtype) says so, as bias.
  bool relu = false;
  // Or null, or where GELU goes (after the bias, if any): gelu(·) of every element written
  // there, laid out as C, while C keeps its input, which GELU's backward needs — a Linear
  // followed by GELU (nn::linear_gelu). gelu_tanh: the tanh approximation. Set only where
  // gemm_adds_bias(dtype) says so, as bias; never with relu.
  void* gelu_out = nullptr;
  bool gelu_tanh = false;
  int64_t ldc() const { return c_row_stride ? c_row_stride : n; }
};

// One tile of blockwise attention (core/attention.h): queries [row_pos, row_pos + rows)
// against keys [col_pos, col_pos + cols) for all batch·heads pairs n = b·heads + h. The
// score of query i and key j is  x = scale·s[n,i,j] + mask[b,h,i,j], or −∞ when the tile is
// causal and key position > query position. Dropout (p > 0) keeps element (n, i, j) when
// philox_uniform(seed, offset + (n·total_rows + row_pos + i)·total_cols + col_pos + j) ≥ p,
// so every tile (and every rank in ring attention) draws the same mask for the same element.
struct AttentionTile {
  DType dtype = kFloat32;
  int64_t batch = 1, heads = 1, rows = 0, cols = 0;
  TensorRef mask;  // data == nullptr: none; else a (batch, heads, rows, cols) broadcast view
  bool causal = false;
  int64_t row_pos = 0, col_pos = 0;
  double scale = 1.0;
  double dropout_p = 0.0;
  uint64_t seed = 0, offset = 0;
  int64_t total_rows = 0, total_cols = 0;
};

// One tile of one batch·head pair (tile.batch = tile.heads = 1), of any size, for a backend
// that runs it as a single fused kernel (Backend::attention_tile_fused_*): ops_attention.cpp
// passes a work item's whole row of tiles (forward: a query block against every key) or
// column (backward: a key block against every query). Each pointer is the tile's first
// row; a row's elements are adjacent, and rows lie `ld` elements apart (the ld_ fields):
// d or dv when the operand is tightly packed, the whole token's width when the heads are
// still interleaved in a (B, T, H, D) tensor — the layout of a projection's output, read
// and written in place so that no head ever has to be copied out or back.
struct AttentionRows {
  int64_t q = 0, k = 0, v = 0;  // rows of q, k (d elements) and v (dv)
  int64_t o = 0;                // forward: rows of o; backward: rows of dout (dv)
  int64_t out = 0;              // backward: rows of the forward's output (dv)
  int64_t dq = 0, dk = 0, dv = 0;  // backward: the gradients' rows
};
// The forward's row is all of the call's keys, taken from nothing seen (no running m, l
// from an earlier call) to the end: the kernel writes the normalised output and the rows'
// log-sum-exp, as attention_forward returns them (a row that sees no key: O = 0, lse = −∞).
struct AttentionTileForward {
  AttentionTile tile;
  int64_t d = 0, dv = 0;
  AttentionRows ld;         // row strides: q, k, v, o
  const void* q = nullptr;  // (rows, d)
  const void* k = nullptr;  // (cols, d)
  const void* v = nullptr;  // (cols, dv)
  void* o = nullptr;        // (rows, dv): softmax(scale·Q·Kᵀ + mask)·V
  void* lse = nullptr;      // (rows): m + log l
};
struct AttentionTileBackward {
  AttentionTile tile;
  int64_t d = 0, dv = 0;
  AttentionRows ld;            // row strides: q, k, v, o (dout), dq, dk, dv
  const void* q = nullptr;     // (rows, d)
  const void* k = nullptr;     // (cols, d)
  const void* v = nullptr;     // (cols, dv)
  const void* dout = nullptr;  // (rows, dv)
  const void* lse = nullptr;   // (rows): the global log-sum-exp
  const void* out = nullptr;   // (rows, dv): the forward's output O
  const void* dsum = nullptr;  // (rows): rowsum(dO ⊙ O); null: the kernel computes it
  void* dq = nullptr;          // (rows, d), added to (dq_fresh: written)
  void* dk = nullptr;          // (cols, d), written: the column is every query
  void* dv_ = nullptr;         // (cols, dv), written (0 for keys no query sees)
  bool dq_fresh = false;  // dq holds nothing yet (cols > 0): every row written, as if added to 0
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Kernels a backend computes on bfloat16/float16 operands itself; all others get them
  // staged through float32 (core/reduced_precision.cpp). Fill, copy, where, index_select
  // and gather always take them as they are.
  enum class Kernel { Elementwise, Gemm };
  virtual bool native_reduced_precision(Kernel) const { return false; }

  // memory
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t nbytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t nbytes) = 0;

  // elementwise; out has the full (broadcast) shape, inputs carry broadcast strides
  virtual void fill(const TensorRef& out, double value) = 0;
  virtual void copy(const TensorRef& src, const TensorRef& dst) = 0;  // converts dtype
  virtual void unary(UnaryOp op, const TensorRef& in, const TensorRef& out, double p0,
                     double p1) = 0;
  virtual void binary(BinaryOp op, const TensorRef& a, const TensorRef& b,
                      const TensorRef& out) = 0;
  virtual void where(const TensorRef& cond, const TensorRef& a, const TensorRef& b,
                     const TensorRef& out) = 0;
  virtual void arange(const TensorRef& out, double start, double step) = 0;  // out contiguous
  virtual void random(const TensorRef& out, RandomDist dist, uint64_t seed, uint64_t offset,
                      double p0, double p1) = 0;  // out contiguous

  // Reduce a contiguous [outer, r, inner] block over r into out [outer, inner].
  virtual void reduce(ReduceOp op, const TensorRef& in, const TensorRef& out, int64_t outer,
                      int64_t r, int64_t inner) = 0;
  // Softmax / log-softmax of a contiguous [outer, r, inner] block over r.
  virtual void softmax(const TensorRef& in, const TensorRef& out, int64_t outer, int64_t r,
                       int64_t inner, bool log) = 0;
  // Gradient of (log-)softmax given its output y and the incoming gradient g (all contiguous).
  virtual void softmax_backward(const TensorRef& g, const TensorRef& y, const TensorRef& out,
                                int64_t outer, int64_t r, int64_t inner, bool log) = 0;

  virtual void gemm(const GemmArgs& args) = 0;
  // Whether gemm takes GemmArgs::bias (and GemmArgs::relu) at this dtype (else addmm adds
  // it after, in its own pass over C). The CPU adds it to each block of C just computed,
  // while it is in cache.
  virtual bool gemm_adds_bias(DType) const { return false; }

  // Layer norm over the last dim of contiguous x (n, d); weight/bias (d) may be absent
  // (data == nullptr). Writes y (n, d) and the per-row mean and 1/√(var + eps) (n).
  virtual void layer_norm(const TensorRef& x, const TensorRef& weight, const TensorRef& bias,
                          const TensorRef& y, const TensorRef& mean, const TensorRef& rstd,
                          int64_t n, int64_t d, double eps) = 0;
  // dx (n, d) always; dweight, dbias (d) when their data is not null (sums over rows).
  virtual void layer_norm_backward(const TensorRef& dy, const TensorRef& x, const TensorRef& mean,
                                   const TensorRef& rstd, const TensorRef& weight,
                                   const TensorRef& dx, const TensorRef& dweight,
                                   const TensorRef& dbias, int64_t n, int64_t d) = 0;

  // The three row passes of blockwise attention (see AttentionTile; s, p, dp are
  // contiguous (batch·heads, rows, cols); m, l, lse, dsum are (batch·heads, rows) views; o is
  // a (batch·heads, rows, dv) view).
  // Online-softmax step: s holds Q·Kᵀ; with m_new = max(m, max_j x), rescale o and l by
  // exp(m − m_new), add Σ_j exp(x − m_new) to l, and leave in s the dropped-out
  // exp(x − m_new)·keep/(1−p) that the caller multiplies into V and adds to o.
  virtual void attention_tile_forward(const AttentionTile& tile, const TensorRef& s,
                                      const TensorRef& m, const TensorRef& l,
                                      const TensorRef& o) = 0;
  // Backward, first pass: s holds Q·Kᵀ; set s = P = exp(x − lse) and, with dropout,
  // pd = P·keep/(1−p) (the probabilities that multiplied V).
  virtual void attention_tile_probs(const AttentionTile& tile, const TensorRef& s,
                                    const TensorRef& lse, const TensorRef& pd) = 0;
  // Backward, second pass: dp holds dO·Vᵀ; set dp = scale·P·(dp·keep/(1−p) − dsum), the
  // gradient of the raw scores Q·Kᵀ (dsum = rowsum(dO ⊙ O)).
  virtual void attention_tile_grad(const AttentionTile& tile, const TensorRef& p,
                                   const TensorRef& dp, const TensorRef& dsum) = 0;
  // A whole tile in one fused kernel, where the backend has one for it: the forward's
  // S = Q·Kᵀ, online-softmax step and O += P̃·V (the three steps above and the GEMMs between
  // them), or the backward's P, dV, dS, dK, dQ — the score tile never written out. False
  // (nothing done) when it has none for this tile (dtype, head dims, a mask, dropout): the
  // caller then runs the GEMMs and the row passes. The CPU has one for head dims 8 to 64
  // and 128 (core/cpu/attention_fused.cpp).
  virtual bool attention_tile_fused_forward(const AttentionTileForward&) { return false; }
  virtual bool attention_tile_fused_backward(const AttentionTileBackward&) { return false; }
  // Whether the forward's (or the backward's) of the two above takes the tiles of a problem
  // like `tile` (one pair; its dtype, mask dtype, dropout) at these head dims: asked once
  // per call, so that the tile loop can read q, k, v where they lie (AttentionRows) instead
  // of copying them first. The two passes may answer differently (the CPU: d = 128 where
  // not causal).
  enum class Pass { forward, backward };
  virtual bool attention_tile_fused(const AttentionTile&, int64_t /*d*/, int64_t /*dv*/, Pass) {
    return false;
  }
  // How the tile loop of core/ops_attention.cpp is scheduled. Its work is cut into
  // independent items (forward: a query block; backward: a key block), each covering
  // `pairs_per_item` batch·head pairs in its GEMMs and row passes. The CPU takes one pair
  // per item and runs items side by side on its threads, each item on one thread with
  // its tiles in cache (FlashAttention-2's CPU form); a GPU takes every pair in one
  // batched GEMM and runs the items one after another on its stream.
  struct AttentionPlan {
    int64_t pairs_per_item = 1;
    int workers = 1;  // items that may run at once: the number of scratch buffers
  };
  virtual AttentionPlan attention_plan(int64_t pairs) = 0;
  // body(item, worker) for every item in [0, items), at most plan.workers at once;
  // worker < plan.workers names the scratch the call may use. Returns when all are done.
  virtual void attention_run(int64_t items, const AttentionPlan& plan,
                             const std::function<void(int64_t item, int worker)>& body) = 0;

  // In place over contiguous p, m, v (and read-only g), all of one shape.
  virtual void adam_step(const TensorRef& p, const TensorRef& g, const TensorRef& m,
                         const TensorRef& v, const AdamStep& h) = 0;

  // Softmax cross-entropy over contiguous logits [n, c] and int64 targets [n]:
  //   lse[i]  = log Σ_j exp(x[i, j])
  //   loss[i] = lse[i] - (1-ε)·x[i, t_i] - ε·mean_j x[i, j]     (0 where t_i == ignore_index)
  // Targets outside [0, c) (other than ignore_index) throw.
  virtual void cross_entropy(const TensorRef& logits, const TensorRef& target,
                             const TensorRef& loss, const TensorRef& lse, int64_t n, int64_t c,
                             double smoothing, int64_t ignore_index) = 0;
  // dx[i, j] = g[i]·(softmax(x)[i, j] - (1-ε)·[j == t_i] - ε/c)   (0 rows where ignored)
  virtual void cross_entropy_backward(const TensorRef& grad_loss, const TensorRef& logits,
                                      const TensorRef& target, const TensorRef& lse,
                                      const TensorRef& grad_logits, int64_t n, int64_t c,
                                      double smoothing, int64_t ignore_index) = 0;

  // Indexing over contiguous [outer, d, inner] blocks; indices are int64 and checked.
  // index_select: out[o, i, j] = in[o, index[i], j]             (index 1-D, length n)
  virtual void index_select(const TensorRef& in, const TensorRef& index, const TensorRef& out,
                            int64_t outer, int64_t d, int64_t n, int64_t inner) = 0;
  // index_add: out[o, index[i], j] += src[o, i, j]
  virtual void index_add(const TensorRef& out, const TensorRef& index, const TensorRef& src,
                         int64_t outer, int64_t d, int64_t n, int64_t inner) = 0;
  // gather: out[o, i, j] = in[o, index[o, i, j], j]            (index [outer, n, inner])
  virtual void gather(const TensorRef& in, const TensorRef& index, const TensorRef& out,
                      int64_t outer, int64_t d, int64_t n, int64_t inner) = 0;
  // scatter_add: out[o, index[o, i, j], j] += src[o, i, j]
  virtual void scatter_add(const TensorRef& out, const TensorRef& index, const TensorRef& src,
                           int64_t outer, int64_t d, int64_t n, int64_t inner) = 0;
};

// The backend for `device`; `op` names the calling op for the error a build
// without CUDA gives ("[matmul] built without CUDA").
Backend& backend(Device device, const char* op);

namespace cpu {
Backend& backend();
}
namespace cuda {
Backend& backend(const char* op);  // core/cuda (or its stub)
void release_cached_memory();      // the caching allocator's free blocks back to the driver
}

}  // namespace ringgrad
