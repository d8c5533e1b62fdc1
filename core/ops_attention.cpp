// ops_attention.cpp — blockwise scaled dot-product attention (see attention.h).
//
// One algorithm for every backend: the tile loop, the GEMMs and their operand
// layouts live here; a backend supplies only GEMM and the three row passes of
// backend.h (attention_tile_forward / _probs / _grad, math in row_math.h).
//
// Shapes (N = B·H pairs, one GEMM batch; bq × bk one tile):
//   forward, per query block i, for each key block j:
//     S   (N, bq, bk) = Q_i · K_jᵀ                        GEMM
//     row pass: running max m, sum l; O_i *= exp(m_old − m); S ← exp(scale·S + mask − m)
//     O_i (N, bq, Dv) += S · V_j                           GEMM, accumulating
//   then O = O / l and lse = m + log l.
//   backward, per tile, with D = rowsum(dO ⊙ O) and the saved (global) lse:
//     S = Q_i·K_jᵀ;  P = exp(scale·S + mask − lse)        GEMM + row pass
//     dV_j += Pᵀ·dO_i;  dP = dO_i·V_jᵀ                     GEMMs
//     dS = scale·P·(dP − D)                                row pass
//     dQ_i += dS·K_j;  dK_j += dSᵀ·Q_i                     GEMMs, accumulating
#include <algorithm>
#include <cmath>
#include <limits>

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

// Everything a tile loop needs, prepared once per call.
struct Problem {
  Dims4 s;
  int64_t pairs;  // N = B·H
  Tensor q, k, v;  // contiguous
  Tensor mask;     // expanded to (B, H, Tq, Tk) or undefined
  AttentionTile tile;  // the fields shared by every tile
  AttentionOptions o;

  Problem(const Tensor& q_, const Tensor& k_, const Tensor& v_, const AttentionOptions& opt)
      : o(opt) {
    s = check_inputs(q_, k_, v_, opt);
    pairs = s.b * s.h;
    q = q_.contiguous(), k = k_.contiguous(), v = v_.contiguous();
    if (opt.mask.defined()) mask = additive_mask(opt.mask, q.dtype()).expand({s.b, s.h, s.tq, s.tk});
    tile.dtype = q.dtype();
    tile.batch = s.b, tile.heads = s.h;
    tile.causal = opt.causal;
    tile.scale = scale_of(opt, s.d);
    tile.dropout_p = opt.dropout_p;
    tile.seed = opt.dropout_seed, tile.offset = opt.dropout_offset;
    tile.total_rows = opt.total_q ? opt.total_q : s.tq;
    tile.total_cols = opt.total_k ? opt.total_k : s.tk;
  }

  // The tile of queries [i0, i0 + rows) and keys [j0, j0 + cols).
  AttentionTile at_tile(int64_t i0, int64_t rows, int64_t j0, int64_t cols) const {
    AttentionTile t = tile;
    t.rows = rows, t.cols = cols;
    t.row_pos = o.q_offset + i0, t.col_pos = o.k_offset + j0;
    if (mask.defined()) t.mask = ref(mask.narrow(2, i0, rows).narrow(3, j0, cols));
    return t;
  }

  // Causal: a key block that starts after the last query of the block sees nothing.
  bool skipped(int64_t i0, int64_t rows, int64_t j0) const {
    return o.causal && o.k_offset + j0 > o.q_offset + i0 + rows - 1;
  }

  // S (N, rows, cols) = Q_i · K_jᵀ.
  void scores(Backend& be, const Tensor& out_s, int64_t i0, int64_t rows, int64_t j0,
              int64_t cols) const {
    Mat qi{at(q, i0 * s.d), s.tq * s.d, s.d, 1};
    Mat kjt{at(k, j0 * s.d), s.tk * s.d, 1, s.d};  // K_jᵀ: K_j read column-major
    gemm(be, q.dtype(), pairs, rows, cols, s.d, qi, kjt, out_s.raw_data(), rows * cols, cols, 0);
  }
};

// A (N, rows) view of a (N, T) tensor's columns [i0, i0 + rows).
TensorRef rows_of(const Tensor& t, int64_t i0, int64_t rows) { return ref(t.narrow(1, i0, rows)); }

}  // namespace

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionOptions& options) {
  NoGradGuard no_grad;
  Problem P(q, k, v, options);
  const Dims4& s = P.s;
  auto opts = detail::options_of(q);
  Backend& be = backend(q.device(), kOp);
  Tensor out = zeros({s.b, s.h, s.tq, s.dv}, opts);
  Tensor m = full({P.pairs, s.tq}, -std::numeric_limits<double>::infinity(), opts);
  Tensor l = zeros({P.pairs, s.tq}, opts);
  const int64_t bq = std::min(options.block_q, std::max<int64_t>(s.tq, 1));
  const int64_t bk = std::min(options.block_k, std::max<int64_t>(s.tk, 1));
  Tensor scores = empty({P.pairs, bq, bk}, opts);  // one tile, reused
  Tensor out3 = out.view({P.pairs, s.tq, s.dv});

  for (int64_t i0 = 0; i0 < s.tq; i0 += bq) {
    int64_t rows = std::min(bq, s.tq - i0);
    for (int64_t j0 = 0; j0 < s.tk && !P.skipped(i0, rows, j0); j0 += bk) {
      int64_t cols = std::min(bk, s.tk - j0);
      P.scores(be, scores, i0, rows, j0, cols);
      Tensor tile_s = scores.view({-1}).narrow(0, 0, P.pairs * rows * cols);
      be.attention_tile_forward(P.at_tile(i0, rows, j0, cols), ref(tile_s), rows_of(m, i0, rows),
                                rows_of(l, i0, rows), ref(out3.narrow(1, i0, rows)));
      // O_i += P̃ · V_j
      Mat p{scores.raw_data(), rows * cols, cols, 1};
      Mat vj{at(P.v, j0 * s.dv), s.tk * s.dv, s.dv, 1};
      gemm(be, q.dtype(), P.pairs, rows, s.dv, cols, p, vj, at_mut(out, i0 * s.dv), s.tq * s.dv,
           s.dv, 1.0);
    }
  }
  // Normalise: O /= l, lse = m + log l (−∞ + −∞ = −∞ for fully masked rows, whose O stays 0).
  Tensor inv = where(l > 0.0, 1.0 / l, detail::scalar_like(l, 0.0));
  out.mul_(inv.view({s.b, s.h, s.tq, 1}));
  Tensor lse = (m + log(l)).view({s.b, s.h, s.tq});
  return {out, lse};
}

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const Tensor& dout,
                                  const AttentionOptions& options) {
  NoGradGuard no_grad;
  Problem P(q, k, v, options);
  const Dims4& s = P.s;
  RG_CHECK(out.shape() == Shape({s.b, s.h, s.tq, s.dv}) && dout.shape() == out.shape() &&
               lse.shape() == Shape({s.b, s.h, s.tq}),
           kOp, "expected out and dout (B, H, Tq, Dv) = ", shape_str({s.b, s.h, s.tq, s.dv}),
           " and lse (B, H, Tq), got out ", shape_str(out.shape()), ", dout ",
           shape_str(dout.shape()), ", lse ", shape_str(lse.shape()));
  auto opts = detail::options_of(q);
  Backend& be = backend(q.device(), kOp);
  Tensor dO = dout.contiguous();
  Tensor lse2 = lse.contiguous().view({P.pairs, s.tq});
  Tensor dsum = (dO * out).sum(-1).contiguous().view({P.pairs, s.tq});  // D = rowsum(dO ⊙ O)
  Tensor dq = zeros(q.shape(), opts), dk = zeros(k.shape(), opts), dv = zeros(v.shape(), opts);
  const int64_t bq = std::min(options.block_q, std::max<int64_t>(s.tq, 1));
  const int64_t bk = std::min(options.block_k, std::max<int64_t>(s.tk, 1));
  const bool dropout = options.dropout_p > 0;
  Tensor probs = empty({P.pairs, bq, bk}, opts), dp = empty({P.pairs, bq, bk}, opts);
  Tensor dropped = dropout ? empty({P.pairs, bq, bk}, opts) : Tensor();

  for (int64_t i0 = 0; i0 < s.tq; i0 += bq) {
    int64_t rows = std::min(bq, s.tq - i0);
    Mat doi{at(dO, i0 * s.dv), s.tq * s.dv, s.dv, 1};
    Mat qi{at(P.q, i0 * s.d), s.tq * s.d, s.d, 1};
    for (int64_t j0 = 0; j0 < s.tk && !P.skipped(i0, rows, j0); j0 += bk) {
      int64_t cols = std::min(bk, s.tk - j0);
      int64_t n = P.pairs * rows * cols;
      AttentionTile tile = P.at_tile(i0, rows, j0, cols);
      // P = exp(scale·Q_i·K_jᵀ + mask − lse) (and its dropped-out form)
      P.scores(be, probs, i0, rows, j0, cols);
      be.attention_tile_probs(tile, ref(probs.view({-1}).narrow(0, 0, n)), rows_of(lse2, i0, rows),
                              dropout ? ref(dropped.view({-1}).narrow(0, 0, n)) : TensorRef{});
      const Tensor& used = dropout ? dropped : probs;  // what multiplied V
      // dV_j += P̃ᵀ · dO_i
      Mat used_t{used.raw_data(), rows * cols, 1, cols};
      gemm(be, q.dtype(), P.pairs, cols, s.dv, rows, used_t, doi, at_mut(dv, j0 * s.dv),
           s.tk * s.dv, s.dv, 1.0);
      // dP = dO_i · V_jᵀ, then dS = scale·P·(dP·keep − D)
      Mat vjt{at(P.v, j0 * s.dv), s.tk * s.dv, 1, s.dv};
      gemm(be, q.dtype(), P.pairs, rows, cols, s.dv, doi, vjt, dp.raw_data(), rows * cols, cols,
           0.0);
      be.attention_tile_grad(tile, ref(probs.view({-1}).narrow(0, 0, n)),
                             ref(dp.view({-1}).narrow(0, 0, n)), rows_of(dsum, i0, rows));
      // dQ_i += dS · K_j;  dK_j += dSᵀ · Q_i
      Mat ds{dp.raw_data(), rows * cols, cols, 1}, ds_t{dp.raw_data(), rows * cols, 1, cols};
      Mat kj{at(P.k, j0 * s.d), s.tk * s.d, s.d, 1};
      gemm(be, q.dtype(), P.pairs, rows, s.d, cols, ds, kj, at_mut(dq, i0 * s.d), s.tq * s.d, s.d,
           1.0);
      gemm(be, q.dtype(), P.pairs, cols, s.d, rows, ds_t, qi, at_mut(dk, j0 * s.d), s.tk * s.d,
           s.d, 1.0);
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
  // Contiguous once, here: forward and backward both read these (heads split off a
  // (B, T, E) tensor arrive as transposed views).
  Tensor qc = q.detach().contiguous(), kc = k.detach().contiguous(), vc = v.detach().contiguous();
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
