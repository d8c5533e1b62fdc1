// ops_attention.cpp — blockwise scaled dot-product attention (see attention.h).
//
// One algorithm for every backend: the tile loop, the GEMMs and their operand
// layouts live here; a backend supplies only GEMM, the three row passes of
// backend.h (attention_tile_forward / _probs / _grad, math in row_math.h) and the
// schedule of the loop's work items (attention_plan / attention_run) — and, where it has
// one, a kernel that runs a work item's whole row (or column) of tiles in one go
// (attention_tile_fused_*: the CPU's for head dims 8 to 64 and 128, asked per pass), which
// the loop tries first.
//
// Work items (np = the plan's pairs per item: 1 on the CPU, all N = B·H on a GPU):
//   forward: (pairs, query block i), each looping over the key blocks j;
//   backward: (pairs, key block j), each looping over the query blocks i.
// Items are independent (the backward's dQ, which every key block adds to, is summed in a
// fixed order: see attention_backward), each with its own scratch tiles, allocated once
// per call.
//
// Layouts: the GEMM route reads contiguous (B, H, T, D) operands (copied once where they
// are not). Where the backend's fused kernel takes the whole problem (fused_problem), q,
// k, v and dO are read where they lie, rows a stride apart — heads split off a (B, T, H·D)
// projection are transposed views — and the output and dQ, dK, dV are laid out like
// their inputs (laid_out_like): (B, T, H, D) underneath, so that merging the heads
// back into (B, T, E), or their gradients into the projection's, is a view, not a copy
// (as PyTorch's CPU flash attention lays out its output).
//
// Shapes (bq × bk one tile):
//   forward, per query block i, for each key block j:
//     S   (np, bq, bk) = Q_i · K_jᵀ                       GEMM
//     row pass: running max m, sum l; O_i *= exp(m_old − m); S ← exp(scale·S + mask − m)
//     O_i (np, bq, Dv) += S · V_j                          GEMM, accumulating
//   then O = O / l and lse = m + log l.
//   backward, per key block j, for each query block i, with D = rowsum(dO ⊙ O) and the
//   saved (global) lse:
//     S = Q_i·K_jᵀ;  P = exp(scale·S + mask − lse)        GEMM + row pass
//     dV_j += Pᵀ·dO_i;  dP = dO_i·V_jᵀ                     GEMMs
//     dS = scale·P·(dP − D)                                row pass
//     dK_j += dSᵀ·Q_i;  dQ_i += dS·K_j                     GEMMs, accumulating
#include <algorithm>
#include <cmath>
#include <limits>

#include "ringgrad/core/autocast.h"
#include "ringgrad/core/attention.h"
#include "ringgrad/core/op_utils.h"

namespace ringgrad {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// The problem's sizes, checked once.
struct Dims4 {
  int64_t b, h, tq, tk, d, dv;
};

Dims4 check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  for (const Tensor* t : {&q, &k, &v}) {
    detail::check_defined(*t, kOp);
    detail::check_floating(*t, kOp);
    detail::check_same_device(q, *t, kOp);
    detail::check_same_dtype(q, *t, kOp);
  }
  RG_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.size(0) == q.size(0) &&
               v.size(0) == q.size(0) && k.size(1) == q.size(1) && v.size(1) == q.size(1) &&
               k.size(3) == q.size(3) && v.size(2) == k.size(2),
           kOp, "expected q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv), got q ",
           shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  RG_CHECK(o.block_q > 0 && o.block_k > 0, kOp, "expected positive block sizes, got block_q ",
           o.block_q, ", block_k ", o.block_k);
  RG_CHECK(o.dropout_p >= 0 && o.dropout_p < 1, kOp, "expected 0 <= dropout_p < 1, got ",
           o.dropout_p);
  Dims4 s{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  if (o.mask.defined()) {
    detail::check_same_device(q, o.mask, kOp);
    RG_CHECK(o.mask.dtype() == q.dtype() || o.mask.dtype() == kBool, kOp,
             "expected a bool mask (true = may attend) or an additive one of dtype ", q.dtype(),
             ", got ", o.mask.dtype());
    detail::check_broadcasts_to(o.mask, {s.b, s.h, s.tq, s.tk}, kOp, "a mask");
  }
  return s;
}

// A bool mask as torch's scaled_dot_product_attention reads it (true: the query may attend
// to the key) turned into the additive form the kernel adds to the scores: 0 or −∞.
Tensor additive_mask(const Tensor& mask, DType dtype) {
  if (mask.dtype() != kBool) return mask;
  TensorOptions opts{.dtype = dtype, .device = mask.device()};
  return where(mask, full({}, 0.0, opts), full({}, -std::numeric_limits<double>::infinity(), opts));
}

double scale_of(const AttentionOptions& o, int64_t d) {
  return o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(d));
}

// (rows × cols) operand of one GEMM batch entry at `p`: strides in elements.
struct Mat {
  const void* p;
  int64_t batch_stride, row_stride, col_stride;
};

// c (N, m, n) (row stride ldc, batch stride c_batch) = a·b + beta·c, for N = batch pairs.
void gemm(Backend& be, DType dt, int64_t batch, int64_t m, int64_t n, int64_t k, Mat a, Mat b,
          void* c, int64_t c_batch, int64_t ldc, double beta) {
  GemmArgs g;
  g.dtype = dt;
  g.batch = batch, g.m = m, g.n = n, g.k = k;
  g.a = a.p, g.a_batch_stride = a.batch_stride, g.a_row_stride = a.row_stride,
  g.a_col_stride = a.col_stride;
  g.b = b.p, g.b_batch_stride = b.batch_stride, g.b_row_stride = b.row_stride,
  g.b_col_stride = b.col_stride;
  g.c = c, g.c_batch_stride = c_batch, g.c_row_stride = ldc;
  g.beta = beta;
  be.gemm(g);
}

// Pointer to element `index` of contiguous t.
const void* at(const Tensor& t, int64_t index) {
  return static_cast<const char*>(t.raw_data()) + index * int64_t(element_size(t.dtype()));
}
void* at_mut(const Tensor& t, int64_t index) {
  return static_cast<char*>(t.raw_data()) + index * int64_t(element_size(t.dtype()));
}

// The (np, rows) block [n0, n0 + np) × [i0, i0 + rows) of a contiguous (pairs, t) tensor,
// or with width > 0 the (np, rows, width) block of a contiguous (pairs, t, width) one.
// Built by hand, not through narrow(): no allocation per tile.
TensorRef block_ref(const Tensor& x, int64_t t, int64_t n0, int64_t np, int64_t i0, int64_t rows,
                    int64_t width = 0) {
  TensorRef r;
  const int64_t w = width ? width : 1;
  r.data = at_mut(x, (n0 * t + i0) * w);
  r.dtype = x.dtype();
  r.ndim = width ? 3 : 2;
  r.shape[0] = np, r.shape[1] = rows, r.shape[2] = width;
  r.strides[0] = t * w, r.strides[1] = w, r.strides[2] = 1;
  return r;
}

// n contiguous elements at p (a score tile) as a backend reads them.
TensorRef flat_ref(void* p, DType dtype, int64_t n) {
  TensorRef r;
  r.data = p, r.dtype = dtype, r.ndim = 1, r.shape[0] = n, r.strides[0] = 1;
  return r;
}

// Whether the backend's fused kernel takes every work item of this problem in this pass (one
// pair per item, and the tile's dtype, mask dtype, dropout and head dims): then q, k, v (and
// in the backward dO, dQ, dK, dV) are read and written where they lie, rows a stride apart.
using Pass = Backend::Pass;
bool fused_problem(Backend& be, const Dims4& s, DType dtype, const AttentionOptions& o,
                   Pass pass) {
  if (be.attention_plan(s.b * s.h).pairs_per_item != 1) return false;
  AttentionTile t;
  t.dtype = dtype;
  t.dropout_p = o.dropout_p;
  t.causal = o.causal;
  if (o.mask.defined()) {  // (only its dtype is asked about: the additive form's)
    static const float probe = 0;
    t.mask.data = const_cast<float*>(&probe);
    t.mask.dtype = o.mask.dtype() == kBool ? dtype : o.mask.dtype();
  }
  return be.attention_tile_fused(t, s.d, s.dv, pass);
}

// An operand as the tile loop reads it: on the fused route as it lies where its rows'
// elements are adjacent (a head split off a (B, T, H·D) projection); else, and on the
// GEMM route always, a contiguous copy (none where it already is).
Tensor as_read(const Tensor& t, bool fused) {
  const bool adjacent = t.size(3) == 1 || t.stride(3) == 1;
  const bool rows_apart = t.size(2) == 1 || t.stride(2) != 0;  // (0 means packed to a kernel)
  return fused && adjacent && rows_apart ? t : t.contiguous();
}

// A new (B, H, T, w) tensor laid out like `like`: (B, T, H, w) underneath when like's
// heads are interleaved within its tokens (stride(1) < stride(2)), so that the output or
// gradient goes back to the projection's layout without a copy. Uninitialised.
Tensor laid_out_like(const Tensor& like, int64_t w) {
  const int64_t b = like.size(0), h = like.size(1), t = like.size(2);
  auto opts = detail::options_of(like);
  if (h > 1 && t > 1 && like.stride(1) < like.stride(2))
    return empty({b, t, h, w}, opts).transpose(1, 2);
  return empty({b, h, t, w}, opts);
}

// Everything a tile loop needs, prepared once per call.
struct Problem {
  Dims4 s;
  int64_t pairs;  // N = B·H
  bool fused;      // fused_problem: every item runs in the backend's fused kernel
  Tensor q, k, v;  // as_read: contiguous, unless fused
  Tensor mask;     // expanded to (B, H, Tq, Tk) or undefined
  TensorRef mask_ref;  // its view (data null: none)
  AttentionTile tile;  // the fields shared by every tile
  AttentionOptions o;
  Backend::AttentionPlan plan;  // how the backend runs the work items
  int64_t bq, bk;               // tile size: queries × keys
  int64_t items_per_block;      // work items per query (or key) block: pairs / pairs_per_item

  Problem(const Tensor& q_, const Tensor& k_, const Tensor& v_, const AttentionOptions& opt,
          Backend& be, Pass pass)
      : o(opt) {
    s = check_inputs(q_, k_, v_, opt);
    pairs = s.b * s.h;
    fused = fused_problem(be, s, q_.dtype(), opt, pass);
    q = as_read(q_, fused), k = as_read(k_, fused), v = as_read(v_, fused);
    if (opt.mask.defined()) {
      mask = additive_mask(opt.mask, q.dtype()).expand({s.b, s.h, s.tq, s.tk});
      mask_ref = ref(mask);
    }
    tile.dtype = q.dtype();
    tile.batch = s.b, tile.heads = s.h;
    tile.causal = opt.causal;
    tile.scale = scale_of(opt, s.d);
    tile.dropout_p = opt.dropout_p;
    tile.seed = opt.dropout_seed, tile.offset = opt.dropout_offset;
    tile.total_rows = opt.total_q ? opt.total_q : s.tq;
    tile.total_cols = opt.total_k ? opt.total_k : s.tk;
    plan = be.attention_plan(pairs);
    // (at least one pair per item, also where there are no pairs: B·H = 0 divides by it)
    RG_CHECK(plan.pairs_per_item >= 1 &&
                 (plan.pairs_per_item == 1 || plan.pairs_per_item == pairs),
             kOp, "internal: a backend's attention plan takes one pair or all pairs per item, "
             "got ", plan.pairs_per_item, " of ", pairs);
    items_per_block = pairs / plan.pairs_per_item;
    bq = std::min(opt.block_q, std::max<int64_t>(s.tq, 1));
    bk = std::min(opt.block_k, std::max<int64_t>(s.tk, 1));
  }

  // The tile of pairs [n0, n0 + pairs_per_item), queries [i0, i0 + rows), keys [j0, j0 + cols).
  // A one-pair tile is that pair's (1, 1) slice: its mask view and dropout counters
  // start at pair n0.
  AttentionTile at_tile(int64_t n0, int64_t i0, int64_t rows, int64_t j0, int64_t cols) const {
    AttentionTile t = tile;
    t.rows = rows, t.cols = cols;
    t.row_pos = o.q_offset + i0, t.col_pos = o.k_offset + j0;
    const bool one_pair = plan.pairs_per_item == 1;
    if (one_pair) {
      t.batch = 1, t.heads = 1;
      t.offset += uint64_t(n0) * uint64_t(t.total_rows) * uint64_t(t.total_cols);
    }
    if (mask_ref.data) {
      TensorRef m = mask_ref;
      int64_t first = i0 * m.strides[2] + j0 * m.strides[3];
      if (one_pair) {
        first += n0 / s.h * m.strides[0] + n0 % s.h * m.strides[1];
        m.shape[0] = m.shape[1] = 1;
      }
      m.data = static_cast<char*>(m.data) + first * int64_t(element_size(m.dtype));
      m.shape[2] = rows, m.shape[3] = cols;
      t.mask = m;
    }
    return t;
  }

  // Row i of pair n of a (B, H, T, ·) operand whose rows' elements are adjacent, and the
  // distance between its rows.
  static void* row_at(const Tensor& t, int64_t heads, int64_t n, int64_t i) {
    return at_mut(t, n / heads * t.stride(0) + n % heads * t.stride(1) + i * t.stride(2));
  }
  static int64_t row_stride(const Tensor& t) { return t.stride(2); }

  // Causal: a key block that starts after the last query of the block sees nothing.
  bool skipped(int64_t i0, int64_t rows, int64_t j0) const {
    return o.causal && o.k_offset + j0 > o.q_offset + i0 + rows - 1;
  }

  // The columns of key block [j0, j0 + bk) that the query block can see: causal, the
  // keys after its last query are hidden from every row, and are not computed at all.
  int64_t visible_cols(int64_t i0, int64_t rows, int64_t j0) const {
    const int64_t cols = std::min(bk, s.tk - j0);
    if (!o.causal) return cols;
    return std::min(cols, o.q_offset + i0 + rows - (o.k_offset + j0));
  }

  // Causal, a tile that crosses the diagonal is taken in row slices of kDiagonalRows, each
  // computing only the keys its own last row sees: of a 128 × 128 diagonal tile, 75% of
  // the scores instead of all of them. (32-row slices computed 62.5% but their GEMMs ran
  // slower: at T = 512, d = 128, causal, 64 rows are 2–5% faster; 16 and 128 slower.)
  // f(first row, rows, cols) for each part of tile (i0, rows) × key block j0.
  static constexpr int64_t kDiagonalRows = 64;
  template <typename F>
  void for_each_part(int64_t i0, int64_t rows, int64_t j0, F&& f) const {
    const int64_t cols = visible_cols(i0, rows, j0);
    const bool crosses = o.causal && o.k_offset + j0 + cols - 1 > o.q_offset + i0;
    if (!crosses || rows <= kDiagonalRows) return f(i0, rows, cols);
    for (int64_t r0 = i0; r0 < i0 + rows; r0 += kDiagonalRows) {
      const int64_t part = std::min(kDiagonalRows, i0 + rows - r0);
      if (!skipped(r0, part, j0)) f(r0, part, visible_cols(r0, part, j0));
    }
  }

  // S (np, rows, cols) = Q_i · K_jᵀ for pairs [n0, n0 + np).
  void scores(Backend& be, void* out_s, int64_t n0, int64_t np, int64_t i0, int64_t rows,
              int64_t j0, int64_t cols) const {
    Mat qi{at(q, (n0 * s.tq + i0) * s.d), s.tq * s.d, s.d, 1};
    Mat kjt{at(k, (n0 * s.tk + j0) * s.d), s.tk * s.d, 1, s.d};  // K_jᵀ: K_j read column-major
    gemm(be, q.dtype(), np, rows, cols, s.d, qi, kjt, out_s, rows * cols, cols, 0);
  }
};

}  // namespace

// The forward's work items: (pairs n0.., query block i). Each runs the whole row of
// tiles of its query block, keeping its running (m, l, O) — the tile loop below.
// bfloat16/float16 attention runs its tile loop on float32 copies: the running (m, l, O)
// accumulate across key blocks and must not be rounded to 16 bits at every block. The
// output comes back in q's dtype; lse stays float32 (as FlashAttention's does).
static AttentionOptions in_float32(const AttentionOptions& options) {
  AttentionOptions o = options;
  if (o.mask.defined() && is_reduced_precision(o.mask.dtype())) o.mask = o.mask.to(kFloat32);
  return o;
}

// The float32 copies are made a few sequences (batch entries) at a time, at most 2^18
// elements of q per chunk, so they stay small next to the 16-bit activations. Batch
// entries are independent — except for dropout, whose mask is drawn by pair index: with
// dropout the call is one chunk.
// Checks a 16-bit call's dtypes; returns its batch size b and the entries per chunk.
struct Chunking {
  int64_t b, chunk;
};
static Chunking float32_chunks(const Tensor& q, const Tensor& k, const Tensor& v,
                               const AttentionOptions& options) {
  detail::check_same_dtype(q, k, kOp);
  detail::check_same_dtype(q, v, kOp);
  if (q.dim() != 4) return {1, 1};
  const int64_t b = q.size(0);
  if (options.dropout_p > 0 || b <= 1) return {b, b};
  return {b, std::clamp<int64_t>((int64_t(1) << 18) / std::max<int64_t>(q.numel() / b, 1), 1, b)};
}
// q, k, v, out, dout (B, H, T, D) and lse (B, H, T): batch entries b0 … b0 + n.
static Tensor batch_chunk(const Tensor& t, int64_t b, int64_t b0, int64_t n) {
  return t.defined() && t.dim() >= 1 && t.size(0) == b ? t.narrow(0, b0, n) : t;
}
// A mask broadcasts to (B, H, Tq, Tk): only a 4-D one with B entries has a batch dim to cut.
static AttentionOptions options_chunk(const AttentionOptions& options, int64_t b, int64_t b0,
                                      int64_t n) {
  AttentionOptions o = options;
  if (o.mask.defined() && o.mask.dim() == 4) o.mask = batch_chunk(o.mask, b, b0, n);
  return o;
}

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionOptions& options) {
  NoGradGuard no_grad;
  if (is_reduced_precision(q.dtype())) {
    // (not a structured binding: clang 14 cannot capture one in the lambda below)
    const Chunking chunking = float32_chunks(q, k, v, options);
    const int64_t b = chunking.b, chunk = chunking.chunk;
    if (chunk < b) {
      AttentionOutput all;
      for (int64_t b0 = 0; b0 < b; b0 += chunk) {
        const int64_t n = std::min(chunk, b - b0);
        auto cut = [&](const Tensor& t) { return batch_chunk(t, b, b0, n); };
        AttentionOutput r = attention_forward(cut(q), cut(k), cut(v), options_chunk(options, b, b0, n));
        if (!all.out.defined()) {
          Shape os = r.out.shape(), ls = r.lse.shape();
          os[0] = ls[0] = b;
          all.out = empty(os, detail::options_of(r.out));
          all.lse = empty(ls, detail::options_of(r.lse));
        }
        all.out.narrow(0, b0, n).copy_(r.out);
        all.lse.narrow(0, b0, n).copy_(r.lse);
      }
      return all;
    }
    AttentionOutput r =
        attention_forward(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32), in_float32(options));
    return {r.out.to(q.dtype()), r.lse};
  }
  Backend& be = backend(q.device(), kOp);
  Problem P(q, k, v, options, be, Pass::forward);
  const Dims4& s = P.s;
  auto opts = detail::options_of(q);
  const int64_t bq = P.bq, bk = P.bk, np = P.plan.pairs_per_item;
  const int64_t q_blocks = (s.tq + bq - 1) / bq;
  // Last query blocks first: under a causal mask they have the most key blocks, and
  // starting them early leaves the short ones to even out the threads at the end.
  auto block_of = [&](int64_t item) { return (q_blocks - 1 - item % q_blocks) * bq; };

  if (P.fused) {
    // The whole row of tiles of each query block in one kernel call, from nothing seen to
    // the normalised output and lse: no running (m, l) kept between calls.
    Tensor out = laid_out_like(P.q, s.dv), lse = empty({s.b, s.h, s.tq}, opts);
    be.attention_run(P.pairs * q_blocks, P.plan, [&](int64_t item, int) {
      const int64_t n = item / q_blocks, i0 = block_of(item), rows = std::min(bq, s.tq - i0);
      AttentionTileForward f;
      f.tile = P.at_tile(n, i0, rows, 0, s.tk), f.d = s.d, f.dv = s.dv;
      f.ld.q = P.row_stride(P.q), f.ld.k = P.row_stride(P.k), f.ld.v = P.row_stride(P.v);
      f.ld.o = P.row_stride(out);
      f.q = P.row_at(P.q, s.h, n, i0);
      f.k = P.row_at(P.k, s.h, n, 0), f.v = P.row_at(P.v, s.h, n, 0);
      f.o = P.row_at(out, s.h, n, i0);
      f.lse = at_mut(lse, n * s.tq + i0);
      RG_CHECK(be.attention_tile_fused_forward(f), kOp,
               "internal: the backend's fused kernel declined a tile it said it takes");
    });
    return {out, lse};
  }

  Tensor out = zeros({s.b, s.h, s.tq, s.dv}, opts);
  Tensor m = full({P.pairs, s.tq}, -std::numeric_limits<double>::infinity(), opts);
  Tensor l = zeros({P.pairs, s.tq}, opts);
  // One score tile per worker, allocated once for the call.
  const int64_t tile_elems = np * bq * bk;
  Tensor scratch = empty({P.plan.workers, tile_elems}, opts);

  be.attention_run(P.items_per_block * q_blocks, P.plan, [&](int64_t item, int worker) {
    const int64_t n0 = item / q_blocks * np;
    const int64_t i0 = block_of(item), rows = std::min(bq, s.tq - i0);
    void* tile_s = at_mut(scratch, worker * tile_elems);
    for (int64_t j0 = 0; j0 < s.tk && !P.skipped(i0, rows, j0); j0 += bk) {
      // (rows [ii, ii + rr) of the block: all of them, or a slice on the causal diagonal)
      P.for_each_part(i0, rows, j0, [&](int64_t ii, int64_t rr, int64_t cols) {
        const TensorRef m_i = block_ref(m, s.tq, n0, np, ii, rr);
        const TensorRef l_i = block_ref(l, s.tq, n0, np, ii, rr);
        const TensorRef o_i = block_ref(out, s.tq, n0, np, ii, rr, s.dv);
        // S = Q_i · K_jᵀ, then the online-softmax step turns it into P̃ and rescales O_i
        P.scores(be, tile_s, n0, np, ii, rr, j0, cols);
        be.attention_tile_forward(P.at_tile(n0, ii, rr, j0, cols),
                                  flat_ref(tile_s, q.dtype(), np * rr * cols), m_i, l_i, o_i);
        // O_i += P̃ · V_j
        Mat p{tile_s, rr * cols, cols, 1};
        Mat vj{at(P.v, (n0 * s.tk + j0) * s.dv), s.tk * s.dv, s.dv, 1};
        gemm(be, q.dtype(), np, rr, s.dv, cols, p, vj, o_i.data, s.tq * s.dv, s.dv, 1.0);
      });
    }
  });
  // Normalise: O /= l, lse = m + log l (−∞ + −∞ = −∞ for fully masked rows, whose O stays 0).
  Tensor inv = where(l > 0.0, 1.0 / l, detail::scalar_like(l, 0.0));
  out.mul_(inv.view({s.b, s.h, s.tq, 1}));
  Tensor lse = (m + log(l)).view({s.b, s.h, s.tq});
  return {out, lse};
}

// The backward, as in FlashAttention-2: a column of tiles per key block j, so dK_j and dV_j
// have one writer; dQ_i gets a contribution from every key block. For the same bits on
// every run those contributions are added in a fixed order, with the work split one of
// two ways:
//  - by pairs, when there are enough for the workers: an item is a pair group's whole
//    backward, key block after key block, and dQ has one writer;
//  - by key blocks, when there are few pairs (long sequences, ring attention): pair group
//    after pair group, `workers` items each take every workers-th key block, adding dQ
//    into a buffer of their own, and the buffers are summed in item order after.
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const Tensor& dout,
                                  const AttentionOptions& options) {
  NoGradGuard no_grad;
  if (is_reduced_precision(q.dtype())) {
    // (not a structured binding: clang 14 cannot capture one in the lambda below)
    const Chunking chunking = float32_chunks(q, k, v, options);
    const int64_t b = chunking.b, chunk = chunking.chunk;
    if (chunk < b) {
      AttentionGrads all{empty_like(q), empty_like(k), empty_like(v)};
      for (int64_t b0 = 0; b0 < b; b0 += chunk) {
        const int64_t n = std::min(chunk, b - b0);
        auto cut = [&](const Tensor& t) { return batch_chunk(t, b, b0, n); };
        AttentionGrads g = attention_backward(cut(q), cut(k), cut(v), cut(out), cut(lse),
                                              cut(dout), options_chunk(options, b, b0, n));
        all.dq.narrow(0, b0, n).copy_(g.dq);
        all.dk.narrow(0, b0, n).copy_(g.dk);
        all.dv.narrow(0, b0, n).copy_(g.dv);
      }
      return all;
    }
    auto f = [](const Tensor& t) { return t.to(kFloat32); };
    AttentionGrads g = attention_backward(f(q), f(k), f(v), f(out), f(lse), f(dout),
                                          in_float32(options));
    return {g.dq.to(q.dtype()), g.dk.to(k.dtype()), g.dv.to(v.dtype())};
  }
  Backend& be = backend(q.device(), kOp);
  Problem P(q, k, v, options, be, Pass::backward);
  const Dims4& s = P.s;
  RG_CHECK(out.shape() == Shape({s.b, s.h, s.tq, s.dv}) && dout.shape() == out.shape() &&
               lse.shape() == Shape({s.b, s.h, s.tq}),
           kOp, "expected out and dout (B, H, Tq, Dv) = ", shape_str({s.b, s.h, s.tq, s.dv}),
           " and lse (B, H, Tq), got out ", shape_str(out.shape()), ", dout ",
           shape_str(dout.shape()), ", lse ", shape_str(lse.shape()));
  auto opts = detail::options_of(q);
  Tensor dO = as_read(dout, P.fused);
  Tensor lse2 = lse.contiguous().view({P.pairs, s.tq});
  // D = rowsum(dO ⊙ O): the fused kernel computes its rows itself, from O as it lies
  // (no (B, H, Tq, Dv) product written and read back); the GEMM route gets it here.
  const Tensor out_read = P.fused ? as_read(out, true) : Tensor();
  const Tensor dsum =
      P.fused ? Tensor() : (dO * out).sum(-1).contiguous().view({P.pairs, s.tq});
  const int64_t bq = P.bq, bk = P.bk, np = P.plan.pairs_per_item;
  const int64_t k_blocks = (s.tk + bk - 1) / bk;
  const int64_t groups = P.items_per_block;  // pair groups of np pairs
  const int workers = P.plan.workers;
  // The work split by pairs (below), or by key blocks when there are too few pairs
  const bool by_pairs = workers == 1 || groups >= 4 * int64_t(workers) || groups % workers == 0;
  // (fused: each gradient laid out like its input, a projection's layout where q, k, v were.
  // The fused kernel writes a key block's dK and dV whole — its column is every query — so
  // they start uninitialised; so does dQ where one call takes all of a pair's key blocks
  // (split by pairs) and writes it whole (dq_fresh). Else dQ, which every key block adds
  // to, starts at zero.)
  auto grad_for = [&](const Tensor& like, int64_t w, bool added_to) {
    if (!P.fused) return zeros(like.shape(), opts);
    Tensor t = laid_out_like(like, w);
    if (added_to) t.zero_();
    return t;
  };
  const bool dq_written = P.fused && by_pairs && k_blocks > 0;
  Tensor dq = grad_for(P.q, s.d, !dq_written), dk = grad_for(P.k, s.d, false),
         dv = grad_for(P.v, s.dv, false);
  const bool dropout = options.dropout_p > 0;
  // Per worker, allocated once for the call: P, dP and (with dropout) the dropped-out P.
  const int64_t tile_elems = np * bq * bk, per_worker = tile_elems * (dropout ? 3 : 2);
  Tensor scratch = empty({workers, per_worker}, opts);

  // Key blocks [jb, jb + nb) of pair group n0 (nb > 1 only on the fused route), all their
  // query blocks in order; dQ of the group's first pair at dq_n0 (pairs tq·d apart, rows
  // ldq apart).
  auto column = [&](int64_t n0, int64_t jb, int64_t nb, void* dq_n0, int64_t ldq, bool dq_fresh,
                    int worker) {
    RG_ASSERT(nb == 1 || P.fused);
    const int64_t j0 = jb * bk;
    void* probs = at_mut(scratch, worker * per_worker);
    void* dp = at_mut(scratch, worker * per_worker + tile_elems);
    void* dropped = dropout ? at_mut(scratch, worker * per_worker + 2 * tile_elems) : nullptr;
    // The whole column of tiles in one fused kernel, where the backend has one; else tile by tile.
    if (P.fused) {
      AttentionTileBackward b;
      b.tile = P.at_tile(n0, 0, s.tq, j0, std::min(nb * bk, s.tk - j0)), b.d = s.d, b.dv = s.dv;
      b.ld.q = P.row_stride(P.q), b.ld.k = P.row_stride(P.k), b.ld.v = P.row_stride(P.v);
      b.ld.o = P.row_stride(dO), b.ld.out = P.row_stride(out_read), b.ld.dq = ldq;
      b.ld.dk = P.row_stride(dk), b.ld.dv = P.row_stride(dv);
      b.q = P.row_at(P.q, s.h, n0, 0);
      b.k = P.row_at(P.k, s.h, n0, j0), b.v = P.row_at(P.v, s.h, n0, j0);
      b.dout = P.row_at(dO, s.h, n0, 0);
      b.lse = block_ref(lse2, s.tq, n0, np, 0, s.tq).data;
      b.out = P.row_at(out_read, s.h, n0, 0);  // (dsum null: D from dout and out)
      b.dq = dq_n0;
      b.dq_fresh = dq_fresh;
      b.dk = P.row_at(dk, s.h, n0, j0);
      b.dv_ = P.row_at(dv, s.h, n0, j0);
      RG_CHECK(be.attention_tile_fused_backward(b), kOp,
               "internal: the backend's fused kernel declined a tile it said it takes");
      return;
    }
    Mat kj{at(P.k, (n0 * s.tk + j0) * s.d), s.tk * s.d, s.d, 1};
    Mat vjt{at(P.v, (n0 * s.tk + j0) * s.dv), s.tk * s.dv, 1, s.dv};
    void* dk_j = at_mut(dk, (n0 * s.tk + j0) * s.d);
    void* dv_j = at_mut(dv, (n0 * s.tk + j0) * s.dv);
    for (int64_t i0_block = 0; i0_block < s.tq; i0_block += bq) {
      const int64_t rows_block = std::min(bq, s.tq - i0_block);
      if (P.skipped(i0_block, rows_block, j0)) continue;
      // (rows [i0, i0 + rows): the whole query block, or a slice on the causal diagonal)
      P.for_each_part(i0_block, rows_block, j0, [&](int64_t i0, int64_t rows, int64_t cols) {
        const int64_t n = np * rows * cols;
        const AttentionTile tile = P.at_tile(n0, i0, rows, j0, cols);
        const TensorRef lse_i = block_ref(lse2, s.tq, n0, np, i0, rows);
        const TensorRef dsum_i = block_ref(dsum, s.tq, n0, np, i0, rows);
        void* dq_i = static_cast<char*>(dq_n0) + i0 * s.d * int64_t(element_size(q.dtype()));
        auto flat = [&](void* p) { return flat_ref(p, q.dtype(), n); };
        Mat doi{at(dO, (n0 * s.tq + i0) * s.dv), s.tq * s.dv, s.dv, 1};
        Mat qi{at(P.q, (n0 * s.tq + i0) * s.d), s.tq * s.d, s.d, 1};
        // P = exp(scale·Q_i·K_jᵀ + mask − lse) (and its dropped-out form)
        P.scores(be, probs, n0, np, i0, rows, j0, cols);
        be.attention_tile_probs(tile, flat(probs), lse_i, dropout ? flat(dropped) : TensorRef{});
        // dV_j += P̃ᵀ · dO_i
        Mat used_t{dropout ? dropped : probs, rows * cols, 1, cols};  // what multiplied V
        gemm(be, q.dtype(), np, cols, s.dv, rows, used_t, doi, dv_j, s.tk * s.dv, s.dv, 1.0);
        // dP = dO_i · V_jᵀ, then dS = scale·P·(dP·keep − D)
        gemm(be, q.dtype(), np, rows, cols, s.dv, doi, vjt, dp, rows * cols, cols, 0.0);
        be.attention_tile_grad(tile, flat(probs), flat(dp), dsum_i);
        // dK_j += dSᵀ · Q_i;  dQ_i += dS · K_j
        Mat ds{dp, rows * cols, cols, 1}, ds_t{dp, rows * cols, 1, cols};
        gemm(be, q.dtype(), np, cols, s.d, rows, ds_t, qi, dk_j, s.tk * s.d, s.d, 1.0);
        gemm(be, q.dtype(), np, rows, s.d, cols, ds, kj, dq_i, s.tq * s.d, s.d, 1.0);
      });
    }
  };

  // dQ rows of pair group g (np = 1 when fused, the only case where dq may be strided)
  auto dq_group = [&](int64_t g) {
    return P.fused ? dq.select(0, g / s.h).select(0, g % s.h)
                   : dq.view({P.pairs, s.tq, s.d}).narrow(0, g * np, np);
  };
  if (by_pairs) {
    be.attention_run(groups, P.plan, [&](int64_t g, int worker) {
      void* dq_g = P.row_at(dq, s.h, g * np, 0);
      // Fused: every key block in one call, so D is computed once; the kernel runs a pass
      // per block, in block order, and dQ gets the same sums as from a call per block.
      const int64_t per_call = P.fused ? k_blocks : 1;
      for (int64_t jb = 0; jb < k_blocks; jb += per_call)
        column(g * np, jb, per_call, dq_g, P.row_stride(dq), dq_written, worker);
    });
  } else {
    // dQ of one pair group per item: (workers, np, tq, d), summed in item order.
    Tensor parts = empty({workers, np, s.tq, s.d}, opts);
    for (int64_t g = 0; g < groups; ++g) {
      parts.zero_();
      be.attention_run(workers, P.plan, [&](int64_t c, int worker) {
        for (int64_t jb = c; jb < k_blocks; jb += workers)
          column(g * np, jb, 1, at_mut(parts, c * np * s.tq * s.d), s.d, false, worker);
      });
      Tensor dq_g = dq_group(g);
      for (int64_t c = 0; c < workers; ++c) dq_g.add_(parts[c].view(dq_g.shape()));
    }
  }
  return {dq, dk, dv};
}

void merge_attention_(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  const char* op = "merge_attention";
  RG_CHECK(out.shape() == block_out.shape() && lse.shape() == block_lse.shape() &&
               out.dim() == lse.dim() + 1,
           op, "expected matching (out, lse) pairs, got ", shape_str(out.shape()), "/",
           shape_str(lse.shape()), " and ", shape_str(block_out.shape()), "/",
           shape_str(block_lse.shape()));
  NoGradGuard no_grad;
  // Where the running lse is −∞ (nothing seen yet) or the block's is (it saw nothing),
  // sigmoid(lse_j − lse) is 1 or 0 and the formulas below pick one side exactly.
  Tensor w = sigmoid(block_lse - lse);  // the block's share of the merged softmax
  Tensor both_empty = maximum(lse, block_lse) == -std::numeric_limits<double>::infinity();
  w = where(both_empty, detail::scalar_like(w, 0.0), w);
  out.sub_(w.unsqueeze(-1) * (out - block_out));
  Tensor merged = maximum(lse, block_lse) + log(1.0 + exp(-abs(lse - block_lse)));
  lse.copy_(where(both_empty, lse, merged));
}

Tensor repeat_kv_heads(const Tensor& kv, int64_t groups) {
  RG_CHECK(kv.dim() == 4 && groups >= 1, "repeat_kv_heads",
           "expected kv (B, Hkv, T, D) and groups >= 1, got ", shape_str(kv.shape()), " and ",
           groups);
  if (groups == 1) return kv;
  const int64_t b = kv.size(0), h = kv.size(1), t = kv.size(2), d = kv.size(3);
  return kv.unsqueeze(2).expand({b, h, groups, t, d}).reshape({b, h * groups, t, d});
}

namespace {

// torch's layouts other than (B, H, T, D): (T, D), (H, T, D) and (…, H, T, D) with the
// leading dims broadcasting among q, k, v and the mask. They are folded into one batch
// dim, attended as (B, H, T, D), and the output unfolded to (…, H, Tq, Dv).
Tensor attention_any_batch(const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionOptions& options) {
  RG_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, kOp,
           "expected q (…, Tq, D), k (…, Tk, D), v (…, Tk, Dv), got q ", shape_str(q.shape()),
           ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  auto heads = [](const Tensor& t) { return t.dim() > 2 ? t.size(-3) : 1; };
  RG_CHECK((heads(k) == heads(q) || options.enable_gqa) && heads(v) == heads(k) &&
               k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2),
           kOp, "expected q (…, H, Tq, D), k (…, H, Tk, D), v (…, H, Tk, Dv), got q ",
           shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  auto lead_of = [](const Tensor& t) {
    return t.dim() > 3 ? Shape(t.shape().begin(), t.shape().end() - 3) : Shape{};
  };
  Shape lead = broadcast_shapes(broadcast_shapes(lead_of(q), lead_of(k), kOp), lead_of(v), kOp);
  int64_t n = 1;
  for (int64_t d : lead) n *= d;
  auto fold = [&](const Tensor& t) {  // -> (n, heads, T, D)
    Tensor x = t;
    while (x.dim() < 3) x = x.unsqueeze(0);
    Shape to = lead;
    to.insert(to.end(), x.shape().end() - 3, x.shape().end());
    return x.expand(to).reshape({n, to[to.size() - 3], to[to.size() - 2], to.back()});
  };
  AttentionOptions o = options;
  if (o.mask.defined() && o.mask.dim() > 3) o.mask = fold(o.mask);
  Tensor out = scaled_dot_product_attention(fold(q), fold(k), fold(v), o);
  Shape out_shape = lead;
  if (std::max({q.dim(), k.dim(), v.dim()}) >= 3) out_shape.push_back(out.size(1));
  out_shape.push_back(out.size(2));
  out_shape.push_back(out.size(3));
  return out.reshape(out_shape);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options) {
  for (const Tensor* t : {&q, &k, &v}) detail::check_defined(*t, kOp);
  if (auto dt = detail::autocast_lower({&q, &k, &v})) {  // under rg::autocast: in its dtype
    AttentionOptions o = options;
    if (o.mask.defined() && o.mask.dtype() != kBool) o.mask = detail::autocast_cast(o.mask, *dt);
    return scaled_dot_product_attention(detail::autocast_cast(q, *dt), detail::autocast_cast(k, *dt),
                                        detail::autocast_cast(v, *dt), o);
  }
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || k.size(0) != q.size(0) ||
      v.size(0) != q.size(0))
    return attention_any_batch(q, k, v, options);
  if (options.enable_gqa && q.dim() == 4 && k.dim() == 4 && v.dim() == 4 &&
      k.size(1) != q.size(1)) {
    RG_CHECK(k.size(1) > 0 && v.size(1) == k.size(1) && q.size(1) % k.size(1) == 0, kOp,
             "expected with enable_gqa k and v heads dividing q's heads, got q ",
             shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
    const int64_t groups = q.size(1) / k.size(1);
    return scaled_dot_product_attention(q, repeat_kv_heads(k, groups), repeat_kv_heads(v, groups),
                                        options);
  }
  AttentionOptions o = options;
  if (o.dropout_p > 0 && q.dim() == 4 && k.dim() == 4) {
    // Fix the dropout counters now, so backward regenerates exactly this mask.
    Generator& gen = o.generator ? *o.generator : default_generator();
    o.total_q = o.total_q ? o.total_q : q.size(2);
    o.total_k = o.total_k ? o.total_k : k.size(2);
    o.dropout_seed = gen.seed();
    o.dropout_offset = gen.advance(uint64_t(q.size(0) * q.size(1) * o.total_q * o.total_k));
  }
  // Heads split off a (B, T, E) projection arrive as transposed views, rows E apart. The
  // backend's fused kernel reads (and the backward writes) them where they lie; the GEMM
  // route wants them contiguous, copied once, here: forward and backward both read them,
  // so they stay where they lie only if both passes are fused.
  // (16-bit attention runs on float32 copies anyway: attention_forward)
  auto both_fused = [&] {
    Backend& be = backend(q.device(), kOp);
    const Dims4 s = check_inputs(q, k, v, o);
    return fused_problem(be, s, q.dtype(), o, Pass::forward) &&
           fused_problem(be, s, q.dtype(), o, Pass::backward);
  };
  const bool in_place = !is_reduced_precision(q.dtype()) && both_fused();
  Tensor qc = as_read(q.detach(), in_place), kc = as_read(k.detach(), in_place),
         vc = as_read(v.detach(), in_place);
  AttentionOutput r = attention_forward(qc, kc, vc, o);
  if (autograd::needs_grad({&q, &k, &v}))
    autograd::record(kOp, r.out, {&q, &k, &v},
                     [qc, kc, vc, out = r.out.detach(), lse = r.lse, o](const Tensor& g) {
                       AttentionGrads d = attention_backward(qc, kc, vc, out, lse, g, o);
                       return autograd::Grads{d.dq, d.dk, d.dv};
                     });
  return r.out;
}

}  // namespace ringgrad
