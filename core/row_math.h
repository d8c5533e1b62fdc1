// row_math.h — the math of the row-wise fused kernels: layer norm and the
// three passes of blockwise attention, one row at a time.
//
// Like kernel_math.h, every function is RG_HD: the CPU backend calls them from
// its loops and the CUDA backend from its kernels, so the numbers are tested on
// every machine even where no GPU can run a kernel. A "row" is one sample of a
// layer norm (d features) or one query row of an attention tile (cols keys).
#pragma once

#include "ringgrad/core/kernel_math.h"
#include "ringgrad/core/reduce_math.h"

namespace ringgrad::math {

// Σ f(j) over j in [0, d), in 16 partial sums (reduce_math.h's fold_interleaved).
template <typename T, typename F>
RG_HD T row_sum(int64_t d, F f) {
  return fold_interleaved<16>(d, T(0), f, [](T a, T b) { return a + b; });
}

// ---- layer norm: y = (x − mean)·rstd·w + b, rstd = 1/√(var + eps) ----
// x, y: one row of d elements; w, b may be null (no affine part).
template <typename T>
RG_HD void layer_norm_row(const T* x, int64_t d, T eps, const T* w, const T* b, T* y, T* mean_out,
                          T* rstd_out) {
  const T mean = row_sum<T>(d, [&](int64_t j) { return x[j]; }) / T(d);
  // two passes: no cancellation when |mean| ≫ std
  const T var = row_sum<T>(d, [&](int64_t j) { return (x[j] - mean) * (x[j] - mean); }) / T(d);
  T rstd = rsqrt(var + eps);
  for (int64_t j = 0; j < d; ++j) {
    T v = (x[j] - mean) * rstd;
    if (w) v *= w[j];
    if (b) v += b[j];
    y[j] = v;
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

// dx of one row. With g = dy·w and x̂ = (x − mean)·rstd:
//   dx = rstd·(g − mean(g) − x̂·mean(g·x̂))
// (dw and db are column sums of dy·x̂ and dy over the rows; the backends add them up.)
template <typename T>
RG_HD void layer_norm_backward_row(const T* dy, const T* x, int64_t d, T mean, T rstd, const T* w,
                                   T* dx) {
  auto g = [&](int64_t j) { return w ? dy[j] * w[j] : dy[j]; };
  const T mean_g = row_sum<T>(d, g) / T(d);
  const T mean_gx = row_sum<T>(d, [&](int64_t j) { return g(j) * (x[j] - mean) * rstd; }) / T(d);
  for (int64_t j = 0; j < d; ++j) dx[j] = rstd * (g(j) - mean_g - (x[j] - mean) * rstd * mean_gx);
}

// ---- attention: one query row of a tile ----
// What a row needs to score its keys: key j takes part when j < limit (causal;
// limit = cols otherwise); its score is scale·s[j] + mask[j·mask_stride].
template <typename T>
struct AttentionRow {
  int64_t cols = 0, limit = 0;
  const T* mask = nullptr;  // null: no mask
  int64_t mask_stride = 0;
  T scale = T(1);
  T dropout_p = T(0);
  uint64_t seed = 0, counter = 0;  // the dropout counter of key 0 of this row
};

// Dropout's factor for key j: 0 if dropped, 1/(1−p) if kept (1 without dropout).
template <typename T>
RG_HD T attention_keep(const AttentionRow<T>& r, int64_t j) {
  if (r.dropout_p == T(0)) return T(1);
  return philox_uniform<T>(r.seed, r.counter + uint64_t(j)) >= r.dropout_p
             ? T(1) / (T(1) - r.dropout_p)
             : T(0);
}

// One online-softmax step (Milakov & Gimelshein; FlashAttention): the row's
// running max m and sum l so far cover earlier key blocks, o is the row's
// unnormalised output so far (dv elements, stride o_stride). After the call,
// s[j] = exp(x_j − m)·keep_j, which the caller multiplies into this block's V and
// adds to o. A row that has seen only masked keys keeps m = −∞, l = 0, o = 0.
// (Loops are kept free of branches so that the CPU compiler vectorises them.)
template <typename T>
RG_HD void attention_row_forward(const AttentionRow<T>& r, T* s, T& m, T& l, T* o, int64_t dv,
                                 int64_t o_stride) {
  // Locals, not r's fields: the compiler then knows no store to s changes them.
  const int64_t cols = r.cols, limit = r.limit, mask_stride = r.mask_stride;
  const T scale = r.scale;
  const T* mask = r.mask;
  // Pass 1: the block's max score. Without a mask it is read off the raw s (scale·max s,
  // or scale·min s for a negative scale: a product rounds monotonically, so this is
  // exactly the largest scale·s[j]) and s is left for pass 2 to read once more; with a
  // mask, s[j] = x_j is stored on the way.
  T block_max = T(-INFINITY);
  if (mask) {
    RG_SIMD_REDUCE(max : block_max)
    for (int64_t j = 0; j < limit; ++j) {
      T x = scale * s[j] + mask[j * mask_stride];
      s[j] = x;
      block_max = x > block_max ? x : block_max;
    }
  } else if (limit > 0 && scale >= T(0)) {
    T hi = T(-INFINITY);
    RG_SIMD_REDUCE(max : hi)
    for (int64_t j = 0; j < limit; ++j) hi = s[j] > hi ? s[j] : hi;
    block_max = scale * hi;
  } else if (limit > 0) {
    T lo = T(INFINITY);
    RG_SIMD_REDUCE(min : lo)
    for (int64_t j = 0; j < limit; ++j) lo = s[j] < lo ? s[j] : lo;
    block_max = scale * lo;
  }
  T m_new = m > block_max ? m : block_max;
  if (m_new == T(-INFINITY)) {
    // Every key so far is masked — or every score of this block is NaN (the max skips
    // NaN), which must come out NaN, as in torch, not as a masked row's 0.
    bool nan = false;
    for (int64_t j = 0; j < limit; ++j) nan = nan || s[j] != s[j];
    if (!nan) {
      for (int64_t j = 0; j < cols; ++j) s[j] = T(0);
      return;
    }
    m_new = T(NAN);  // then every exp below, l and o are NaN
  }
  // Pass 2: s[j] = exp(x_j − m_new) (0 for masked keys), summed before dropout.
  const T x_scale = mask ? T(1) : scale;  // with a mask, s already holds x
  T sum = 0;
  RG_SIMD_REDUCE(+ : sum)
  for (int64_t j = 0; j < limit; ++j) {
    T e = exp_vec(x_scale * s[j] - m_new);
    s[j] = e;
    sum += e;
  }
  for (int64_t j = limit; j < cols; ++j) s[j] = T(0);
  if (r.dropout_p != T(0))
    for (int64_t j = 0; j < cols; ++j) s[j] *= attention_keep(r, j);
  const T correction = exp_vec(m - m_new);  // 0 on the first block (m = −∞)
  if (correction != T(1))
    for (int64_t c = 0; c < dv; ++c) o[c * o_stride] *= correction;
  l = l * correction + sum;
  m = m_new;
}

// Backward, first pass: s[j] = P_j = exp(x_j − lse), pd[j] = P_j·keep_j (pd may be null).
template <typename T>
RG_HD void attention_row_probs(const AttentionRow<T>& r, T* s, T lse, T* pd) {
  const int64_t cols = r.cols, limit = r.limit, mask_stride = r.mask_stride;
  const T scale = r.scale;
  const T* mask = r.mask;
  if (lse == T(-INFINITY)) {  // a row that saw no key at all
    for (int64_t j = 0; j < cols; ++j) s[j] = T(0);
  } else if (mask) {
    RG_SIMD
    for (int64_t j = 0; j < limit; ++j) s[j] = exp_vec(scale * s[j] + mask[j * mask_stride] - lse);
  } else {
    RG_SIMD
    for (int64_t j = 0; j < limit; ++j) s[j] = exp_vec(scale * s[j] - lse);
  }
  for (int64_t j = limit; j < cols; ++j) s[j] = T(0);
  if (pd)
    for (int64_t j = 0; j < cols; ++j) pd[j] = s[j] * attention_keep(r, j);
}

// Backward, second pass: dp[j] holds dO·V_jᵀ, the gradient of the dropped-out P.
// The gradient of the raw score Q·K_jᵀ is scale·P_j·(dp_j·keep_j − D), D = rowsum(dO ⊙ O).
template <typename T>
RG_HD void attention_row_grad(const AttentionRow<T>& r, const T* p, T* dp, T dsum) {
  const int64_t cols = r.cols;
  const T scale = r.scale;
  if (r.dropout_p == T(0)) {
    RG_SIMD
    for (int64_t j = 0; j < cols; ++j) dp[j] = scale * p[j] * (dp[j] - dsum);
  } else {
    for (int64_t j = 0; j < cols; ++j)
      dp[j] = scale * p[j] * (dp[j] * attention_keep(r, j) - dsum);
  }
}

// The AttentionRow of row i of tile pair n (= b·heads + h). The tile describes
// itself through the same fields on every backend (backend.h AttentionTile).
template <typename T, typename Tile, typename Ref>
RG_HD AttentionRow<T> attention_row(const Tile& tile, const Ref& mask, int64_t n, int64_t i) {
  AttentionRow<T> r;
  r.cols = tile.cols;
  r.limit = tile.cols;
  if (tile.causal) {  // key position col_pos + j may not exceed query position row_pos + i
    int64_t limit = tile.row_pos + i - tile.col_pos + 1;
    r.limit = limit < 0 ? 0 : (limit < tile.cols ? limit : tile.cols);
  }
  if (mask.data) {
    int64_t b = n / tile.heads, h = n % tile.heads;
    r.mask = static_cast<const T*>(mask.data) + b * mask.strides[0] + h * mask.strides[1] +
             i * mask.strides[2];
    r.mask_stride = mask.strides[3];
  }
  r.scale = T(tile.scale);
  r.dropout_p = T(tile.dropout_p);
  r.seed = tile.seed;
  r.counter = tile.offset +
              uint64_t((n * tile.total_rows + tile.row_pos + i) * tile.total_cols + tile.col_pos);
  return r;
}

}  // namespace ringgrad::math
