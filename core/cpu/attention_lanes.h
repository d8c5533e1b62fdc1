// attention_lanes.h — the fused attention kernel's 16-lane vectors and the products it is
// built from (internal: core/cpu/attention_fused.cpp alone includes it).
//
// A Vec is 16 floats, one AVX-512 register: 16 positions (queries or keys) of one work
// item ride in its lanes. Here: loads and stores, exp2 and log2 on 16 lanes, the 16 × 16
// transposes that turn an item's rows into lanes and back, and the products over a group
// of 16 positions, or two (group_dots, group_accumulate, rows_accumulate). What the kernel
// does with them, and why each is shaped as it is: attention_fused.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#if defined(__AVX512F__)
#include <immintrin.h>  // exp2_16's AVX-512 instructions
#endif

#include "ringgrad/core/kernel_math.h"

namespace ringgrad::cpu::lanes {

constexpr int kLanes = 16;       // positions per vector

using Vec = float __attribute__((vector_size(64)));     // 16 floats
using IVec = int32_t __attribute__((vector_size(64)));  // 16 ints, or lane masks (−1 or 0)
using LaneRows = float (*)[16];  // rows of 16 lanes: a transposed operand, or one per position
using ConstLaneRows = const float (*)[16];

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kLn2 = 0.693147181f;

inline Vec splat(float x) { return Vec{} + x; }
// x in every lane, for a value read from memory and used more than once: one broadcast
// load (splat's 0 + x may not be folded away, since 0 + −0 is +0).
[[gnu::always_inline]] inline Vec broadcast(const float* x) {
  return Vec{*x, *x, *x, *x, *x, *x, *x, *x, *x, *x, *x, *x, *x, *x, *x, *x};
}
inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }
// The first n (≤ 16) floats at p (stride 1); the other lanes `fill`.
inline Vec load_n(const float* p, int n, float fill = 0.0f) {
  if (n == kLanes) return load(p);
  alignas(64) float a[kLanes];
  for (int i = 0; i < kLanes; ++i) a[i] = i < n ? p[i] : fill;
  return load(a);
}
inline void store_n(float* p, Vec v, int n) {
  if (n == kLanes) return store(p, v);
  alignas(64) float a[kLanes];
  store(a, v);
  for (int i = 0; i < n; ++i) p[i] = a[i];
}
// Lane-wise max and min; a NaN in x passes through (vmaxps / vminps with x second).
inline Vec max_of(Vec x, Vec y) { return y > x ? y : x; }
inline Vec min_of(Vec x, Vec y) { return y < x ? y : x; }

// max over j < n of s[j], lane by lane: four chains, so the loop is not one long wait on
// vmaxps's latency.
inline Vec lane_max(const float (*s)[kLanes], int64_t n) {
  Vec m[4] = {splat(-kInf), splat(-kInf), splat(-kInf), splat(-kInf)};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int u = 0; u < 4; ++u) m[u] = max_of(m[u], load(s[j + u]));
  for (; j < n; ++j) m[0] = max_of(m[0], load(s[j]));
  return max_of(max_of(m[0], m[1]), max_of(m[2], m[3]));
}

// The scores live in base 2: the softmax scale is multiplied by log2 e once, into the
// item's own transposed operand (Q̂ᵀ forward, K̂ᵀ backward), so that every score becomes
// 2^(s − m) instead of e^(s' − m'), the same number: exp(x) = 2^(x·log2 e). That saves
// exp's multiply by log2 e and its two-part reduction by ln 2 on every score, a third of
// the instructions that are not FMAs at head dim 16. The log-sum-exp leaves the kernel in
// natural units (lse = ln 2 · (m + log2 l)), as every other route gives it.
//
// 2^x on 16 lanes: n = round(x), r = x − n in [−½, ½] (exact), 2^r by a degree-5
// polynomial (least squares on Chebyshev nodes), times 2^n: relative error ≤ 2.2e-7
// measured over [−126, 128] on both paths below, about what math::exp_vec's degree-6
// Taylor polynomial gives. Exactly 0 below −126 (where 2^x would be subnormal; so a
// hidden score, −∞, gives 0), +∞ from 128 on; a NaN stays NaN. With AVX-512, round(x)
// and p·2^n are one instruction each (vrndscaleps, vscalefps, which also gives 0 or ∞
// where 2^n is out of range); elsewhere n is rounded by the 1.5·2^23 trick and 2^n built
// from its bits.
constexpr float kExp2Min = -126.0f, kExp2Max = 128.0f;
inline Vec exp2_poly5(Vec r) {  // 2^r for |r| ≤ ½
  return 1.00000012f +
         r * (0.693146944f +
              r * (0.240221217f + r * (0.0555074252f + r * (0.00967545994f + r * 0.00132669706f))));
}
inline Vec exp2_16(Vec x) {
  const Vec xc = min_of(x, splat(kExp2Max));  // 2^128 is already ∞
#if defined(__AVX512F__)
  // (the maskz_ forms: the plain ones trip GCC 12's -Wmaybe-uninitialized on the undefined
  // source register they pass; the mask of scalef is the "exactly 0 below" select)
  const Vec n = (Vec)_mm512_maskz_roundscale_ps(0xFFFF, (__m512)xc,
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 kept = _mm512_cmp_ps_mask((__m512)x, (__m512)splat(kExp2Min), _CMP_NLT_UQ);
  return (Vec)_mm512_maskz_scalef_ps(kept, (__m512)exp2_poly5(xc - n), (__m512)n);
#else
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  const Vec t = max_of(xc, splat(kExp2Min - 1.0f)) + kRound;
  const Vec n = t - kRound;                                 // in [−127, 128]
  const IVec ni = (IVec)t - (IVec)splat(kRound);
  const IVec top = ni > 127;                                // 2^128 = 2·2^127: no float's bits
  const IVec bits = ((top ? ni - 1 : ni) + 127) << 23;      // 2^n, or 2^127 where n = 128
  const Vec e = exp2_poly5(xc - n) * (top ? splat(2.0f) : splat(1.0f)) * (Vec)bits;
  return x < kExp2Min ? Vec{} : e;
#endif
}

// log2 x on 16 lanes, for x a positive normal float (other lanes: anything; the caller
// takes those apart): x = 2^e·f with f in [√½, √2) — the bits of √½ subtracted, the
// exponent field rolls over at √2 — and ln f = 2·atanh(u), u = (f − 1)/(f + 1) in
// [−0.172, 0.172], by its series to u⁹ (truncation < 1e-9). The forward's lse, one per
// query: std::log2 per row was ~1.5% of the forward at head dim 64.
inline Vec log2_16(Vec x) {
  const IVec bits = (IVec)x;
  const IVec e = (bits - 0x3F3504F3) >> 23;  // 0x3F3504F3: the bits of √½
  const Vec f = (Vec)(bits - (e << 23));     // x / 2^e
  const Vec u = (f - 1.0f) / (f + 1.0f), u2 = u * u;
  const Vec ln_f = 2.0f * u * (1.0f + u2 * (1.0f / 3 + u2 * (1.0f / 5 + u2 * (1.0f / 7 + u2 / 9))));
  return __builtin_convertvector(e, Vec) + ln_f * math::kLog2e;
}

// for_each_width<D>(f): f.template operator()<W>(c0) over the features [0, D) in pieces of
// W = 16 (the last one narrower), W a compile-time constant.
template <int D, typename F>
void for_each_width(F&& f) {
  for (int c0 = 0; c0 + kLanes <= D; c0 += kLanes) f.template operator()<kLanes>(c0);
  if constexpr (D % kLanes != 0) f.template operator()<D % kLanes>(D / kLanes * kLanes);
}

// Rows [0, n) of x (row stride ld, n ≤ 16), D features, into t[c] lane i = scale·x[i, c];
// lanes past n are 0. And back: x[i, c] = scale[i]·t[c] lane i for i < n (a factor per
// lane, each position's own: the forward's 1/l per query).
// 16 features at a time, as a 16 × 16 block transposed in registers: 64 two-vector
// shuffles for 256 floats (with AVX-512 each one instruction: vunpck*, vshuff32x4),
// instead of 256 scalar moves. Left out, the scalar moves were worth 4–6% of the forward
// each way (kernel only, data in cache, causal T = 512, d = 64 and 128); shuffled, the
// kernel runs 4–6% faster there, 1–2% at 64 heads, where each head comes from memory.
//
// r[i] = row i of a 16 × 16 block; on return r[c] = column c. In 128-bit quarters (4
// floats): pairs of rows interleaved, then pairs of pairs, so that quarter L of u[4g + m]
// holds column 4L + m of rows 4g … 4g + 3; then the quarters moved across, 4 × 4.
[[gnu::always_inline]] inline void transpose16(Vec (&r)[kLanes]) {
  Vec t[kLanes], u[kLanes];
  for (int i = 0; i < kLanes; i += 2) {  // quarter L: r_i[4L] r_i+1[4L] r_i[4L+1] r_i+1[4L+1]
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12,
                                   28, 13, 29);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11,
                                       27, 14, 30, 15, 31);
  }
  for (int i = 0; i < kLanes; i += 4)  // pairs of floats: quarter L of u[i + m] is column 4L + m
    for (int h = 0; h < 2; ++h) {
      u[i + 2 * h] = __builtin_shufflevector(t[i + h], t[i + h + 2], 0, 1, 16, 17, 4, 5, 20, 21, 8,
                                             9, 24, 25, 12, 13, 28, 29);
      u[i + 2 * h + 1] = __builtin_shufflevector(t[i + h], t[i + h + 2], 2, 3, 18, 19, 6, 7, 22,
                                                 23, 10, 11, 26, 27, 14, 15, 30, 31);
    }
  for (int m = 0; m < 4; ++m) {  // column 4L + m: quarter L of u[m], u[4 + m], u[8 + m], u[12 + m]
    const Vec lo1 = __builtin_shufflevector(u[m], u[4 + m], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                            20, 21, 22, 23);  // quarters A0 A1 B0 B1
    const Vec hi1 = __builtin_shufflevector(u[m], u[4 + m], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25,
                                            26, 27, 28, 29, 30, 31);  // A2 A3 B2 B3
    const Vec lo2 = __builtin_shufflevector(u[8 + m], u[12 + m], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17,
                                            18, 19, 20, 21, 22, 23);  // C0 C1 E0 E1
    const Vec hi2 = __builtin_shufflevector(u[8 + m], u[12 + m], 8, 9, 10, 11, 12, 13, 14, 15, 24,
                                            25, 26, 27, 28, 29, 30, 31);  // C2 C3 E2 E3
    r[m] = __builtin_shufflevector(lo1, lo2, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26,
                                   27);  // A0 B0 C0 E0
    r[4 + m] = __builtin_shufflevector(lo1, lo2, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28,
                                       29, 30, 31);  // A1 B1 C1 E1
    r[8 + m] = __builtin_shufflevector(hi1, hi2, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25,
                                       26, 27);
    r[12 + m] = __builtin_shufflevector(hi1, hi2, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28,
                                        29, 30, 31);
  }
}
template <int D>
void transpose_in(float (&t)[D][kLanes], const float* x, int64_t ld, int n, float scale) {
  for_each_width<D>([&]<int W>(int c0) {
    Vec r[kLanes];
    for (int i = 0; i < kLanes; ++i) r[i] = i < n ? load_n(x + i * ld + c0, W) : Vec{};
    transpose16(r);
    for (int c = 0; c < W; ++c) store(t[c0 + c], r[c] * scale);
  });
}
template <int D>
void transpose_out(const float (&t)[D][kLanes], float* x, int64_t ld, int n, Vec scale) {
  for_each_width<D>([&]<int W>(int c0) {
    Vec r[kLanes];
    for (int c = 0; c < kLanes; ++c) r[c] = c < W ? load(t[c0 + c]) * scale : Vec{};
    transpose16(r);
    for (int i = 0; i < n; ++i) store_n(x + i * ld + c0, r[i], W);
  });
}

// acc[c] = factor·acc[c] + Σ_r w[r]·x[r, c] for r < nr, c < D: acc (D, 16) transposed, x
// (nr, D) row-major with rows ldx apart. fresh: acc holds nothing yet (not even zeros) and
// is written, not added to — the group's first chunk, which so needs no zeroing pass.
// The forward's Oᵀ += P̃ᵀ·V (lanes: queries), the backward's dVᵀ += Pᵀ·dO and dKᵀ += dSᵀ·Q
// (lanes: keys).
template <int D>
void lane_accumulate(float (*acc)[kLanes], const float (*w)[kLanes], const float* x,
                     int64_t ldx, int64_t nr, bool fresh, Vec factor = splat(1.0f)) {
  for_each_width<D>([&]<int W>(int c0) {
    Vec a[W];
    for (int c = 0; c < W; ++c) a[c] = fresh ? Vec{} : load(acc[c0 + c]) * factor;
    for (int64_t r = 0; r < nr; ++r) {
      const Vec wr = load(w[r]);
      const float* xr = x + r * ldx + c0;
      for (int c = 0; c < W; ++c) a[c] += wr * xr[c];
    }
    for (int c = 0; c < W; ++c) store(acc[c0 + c], a[c]);
  });
}

// The products, for one group of 16 positions or two at once (G = 1, 2): each pass below
// takes its groups in pairs where both take the chunk. A loop that broadcasts an element of
// a row for a single FMA is held back by the loads: with AVX-512 a core here sustains less
// than two loads a cycle beside its two FMAs (a loop of FMAs each with a broadcast operand
// ran at 0.86 of the FMA peak; broadcasts shared by two FMAs, 0.94), and every other load
// (partial sums, weights) comes on top. Two groups share each broadcast: at d = 128, data in
// the L1 cache, the dots ran at 0.83–0.93 of the peak against 0.70–0.79 for the two groups
// one after the other (16–24 rows), the accumulation at 0.73–0.84 against 0.70–0.76.
// Each sum is accumulated in the same order for G = 1 and 2: a group's numbers are the same
// bits paired or alone.
template <int G>
using Each = std::array<LaneRows, G>;
template <int G>
using EachConst = std::array<ConstLaneRows, G>;

// out_g[r] = Σ_c bt_g[c]·a[r, c] for r < nr: a (nr, D) row-major, rows lda apart; bt_g
// (D, 16) transposed — group g's 16 lanes. Scores either way round: the forward's
// s_j = K[j, ·]·Q̂ᵀ (lanes: queries), the backward's p_i = Q[i, ·]·K̂ᵀ and dp_i = dO[i, ·]·Vᵀ
// (lanes: keys). Each sum is one chain over c in order: J rows at a time, their J·G sums
// in registers over all D features, a[r, c] broadcast once for the G groups.
template <int D, int G, int J>
[[gnu::always_inline]] inline void group_dots_tile(const Each<G>& out, const float* a,
                                                   int64_t lda, int64_t r0,
                                                   const EachConst<G>& bt) {
  Vec sum[J][G];
  for (int j = 0; j < J; ++j)
    for (int g = 0; g < G; ++g) sum[j][g] = Vec{};
  for (int c = 0; c < D; ++c) {
    Vec b[G];
    for (int g = 0; g < G; ++g) b[g] = load(bt[g][c]);
    for (int j = 0; j < J; ++j) {
      const Vec x = broadcast(a + (r0 + j) * lda + c);
      for (int g = 0; g < G; ++g) sum[j][g] += b[g] * x;
    }
  }
  for (int j = 0; j < J; ++j)
    for (int g = 0; g < G; ++g) store(out[g][r0 + j], sum[j][g]);
}
template <int D, int G>
void group_dots(const Each<G>& out, const float* a, int64_t lda, int64_t nr,
                const EachConst<G>& bt) {
  int64_t r = 0;
  for (; r + 8 <= nr; r += 8) group_dots_tile<D, G, 8>(out, a, lda, r, bt);
  for (; r + 4 <= nr; r += 4) group_dots_tile<D, G, 4>(out, a, lda, r, bt);
  for (; r < nr; ++r) group_dots_tile<D, G, 1>(out, a, lda, r, bt);
}

// acc_g[c] = factor_g·acc_g[c] + Σ_r w_g[r]·x[r, c] for r < nr, c < D (fresh_g: acc_g holds
// nothing yet), each sum in r order as lane_accumulate's: one group is lane_accumulate; two
// take 8 features of both at a time, x[r, c] broadcast once for the two.
template <int D, int G>
void group_accumulate(const Each<G>& acc, const EachConst<G>& w, const float* x, int64_t ldx,
                      int64_t nr, const std::array<bool, G>& fresh,
                      const std::array<Vec, G>& factor) {
  if constexpr (G == 1) {
    lane_accumulate<D>(acc[0], w[0], x, ldx, nr, fresh[0], factor[0]);
  } else {
    constexpr int C = 8;
    static_assert(D % C == 0, "the head dims compiled are multiples of 8");
    for (int c0 = 0; c0 < D; c0 += C) {
      Vec a[C][G];
      for (int c = 0; c < C; ++c)
        for (int g = 0; g < G; ++g) a[c][g] = fresh[g] ? Vec{} : load(acc[g][c0 + c]) * factor[g];
      for (int64_t r = 0; r < nr; ++r) {
        Vec wr[G];
        for (int g = 0; g < G; ++g) wr[g] = load(w[g][r]);
        for (int c = 0; c < C; ++c) {
          const Vec xc = broadcast(x + r * ldx + c0 + c);
          for (int g = 0; g < G; ++g) a[c][g] += wr[g] * xc;
        }
      }
      for (int c = 0; c < C; ++c)
        for (int g = 0; g < G; ++g) store(acc[g][c0 + c], a[c][g]);
    }
  }
}

// x[i, ·] += Σ_g Σ_j w_g[i][j]·rows_g[·][j] for i < n, G (1 or 2) groups of 16 positions
// in order: x (n, D) row-major, rows D apart; rows_g (D/16 blocks × 16 positions × 16
// features) the positions' rows, 16 features at a time — the backward's dQ_i += dS·K̂ (w:
// dS, lanes keys; rows: K̂'s), for a group or a pair (each x[i, c] gets the first group's
// 16 terms, then the second's, in order, as from two calls one after the other).
// As a GEMM's inner kernel does it: a tile of 4 rows of x × 4 blocks of 16 features (16
// sums) held in registers over the 16·G positions, each w[i][j] broadcast once for 4
// blocks and each rows[b][j] loaded once for 4 rows: 8 loads per 16 FMAs.
template <int D>
using BlockRows = float[(D + kLanes - 1) / kLanes][kLanes][kLanes];
constexpr int block_width(int d, int b) { return std::min(kLanes, d - b * kLanes); }
template <int D, int G, int I, int B>
[[gnu::always_inline]] inline void rows_accumulate_tile(
    float* x, const EachConst<G>& w, int b0, const std::array<const BlockRows<D>*, G>& rows) {
  Vec acc[I][B];
  for (int i = 0; i < I; ++i)
    for (int b = 0; b < B; ++b)
      acc[i][b] = load_n(x + i * D + (b0 + b) * kLanes, block_width(D, b0 + b));
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < kLanes; ++j) {
      Vec wi[I];
      for (int i = 0; i < I; ++i) wi[i] = broadcast(&w[g][i][j]);
      for (int b = 0; b < B; ++b) {
        const Vec r = load((*rows[g])[b0 + b][j]);
        for (int i = 0; i < I; ++i) acc[i][b] += wi[i] * r;
      }
    }
  for (int i = 0; i < I; ++i)
    for (int b = 0; b < B; ++b)
      store_n(x + i * D + (b0 + b) * kLanes, acc[i][b], block_width(D, b0 + b));
}
template <int D, int G>
void rows_accumulate(float* x, EachConst<G> w, int64_t n,
                     const std::array<const BlockRows<D>*, G>& rows) {
  constexpr int kBlocks = (D + kLanes - 1) / kLanes;
  if constexpr (kBlocks == 1) {
    // One block (d ≤ 16): a tile would load a row vector per 4 FMAs. Instead a group's 16
    // rows stay in registers and each x row takes its 16 terms in two chains (bench_attention
    // d = 16, causal, T = 2048, one thread, the backward: 138.9 GFLOP/s against 135.2 with
    // the 4 × 1 tile).
    for (int g = 0; g < G; ++g) {
      Vec r[kLanes];
      for (int j = 0; j < kLanes; ++j) r[j] = load((*rows[g])[0][j]);
      for (int64_t i = 0; i < n; ++i) {
        Vec acc0 = load_n(x + i * D, D), acc1{};
        for (int j = 0; j < kLanes; j += 2) {
          acc0 += w[g][i][j] * r[j];
          acc1 += w[g][i][j + 1] * r[j + 1];
        }
        store_n(x + i * D, acc0 + acc1, D);
      }
    }
    return;
  }
  constexpr int B = kBlocks % 4 == 0 ? 4 : kBlocks % 3 == 0 ? 3 : kBlocks % 2 == 0 ? 2 : 1;
  for (int b0 = 0; b0 < kBlocks; b0 += B) {
    EachConst<G> wi = w;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      rows_accumulate_tile<D, G, 4, B>(x + i * D, wi, b0, rows);
      for (auto& r : wi) r += 4;
    }
    for (; i < n; ++i) {
      rows_accumulate_tile<D, G, 1, B>(x + i * D, wi, b0, rows);
      for (auto& r : wi) r += 1;
    }
  }
}

}  // namespace ringgrad::cpu::lanes
