// attention_fused.cpp — blockwise attention in one fused pass per work item, for head
// dims 8, 16, 24, 32, 48, 64 and 128.
//
// The tile loop (core/ops_attention.cpp) computes a tile as GEMMs and row passes: S = Q·Kᵀ
// written out, the online-softmax pass over it, then P̃·V. At head dim 16 or 32 that is slow
// on a CPU: the products are too thin for a BLAS (S = Q·Kᵀ has an inner dimension of d, so
// every call packs its operands and writes a score tile for very little arithmetic), and
// the row passes then read and write the whole tile again. Here the same math runs with
// the scores kept in registers and the L1 cache, the way FlashAttention keeps them in a
// GPU's shared memory.
//
// The layout: 16 positions ride in the 16 lanes of a vector (one AVX-512 register) — the
// positions the work item owns, so that what it accumulates never leaves its lanes:
//  - forward, an item is a query block: 16 queries per vector. Query group × key j is one
//    vector, s_j = Σ_c Q̂ᵀ[c]·K[j, c], with Q̂ᵀ[c] (feature c of the 16 queries, times the
//    softmax scale) in a register and K[j, c] broadcast from memory. The online softmax
//    needs no horizontal work: the running max m and sum l of the 16 queries are vectors,
//    compared and added lane by lane, and so is Oᵀ (dv features × 16 queries):
//      s_j = Q̂·K_jᵀ + mask (causal: −∞ past the diagonal)  m_new = max(m, max_j s_j)
//      p_j = exp(s_j − m_new)                           l = c·l + Σ_j p_j, c = exp(m − m_new)
//      Oᵀ[c] = c·Oᵀ[c] + Σ_j p_j·V[j, c]
//    (the scores in base 2, and exp(x) taken as 2^(x·log2 e): exp2_16, attention_lanes.h)
//  - backward, an item is a key block: 16 keys per vector. Key group × query i:
//      p_i  = exp(Q[i, ·]·K̂ᵀ + mask − lse_i)           K̂ = scale·K
//      ds_i = p_i·(dO[i, ·]·Vᵀ − D_i)                   D = rowsum(dO ⊙ O)
//      dVᵀ[c] += Σ_i p_i·dO[i, c],  dKᵀ[c] += scale·Σ_i ds_i·Q[i, c]   (per lane: its key)
//      dQ[i, ·] += Σ_j ds_i[j]·K̂[j, ·]                  (lanes: features; K̂'s rows kept per group)
// Q, dO, lse and D are read as they lie (row by row, a broadcast per element); only the
// item's own 16 positions are transposed, once, and written back once at the end. D is
// computed by the call itself from dO and O (row_dots), unless the caller passes it.
// dK and dV are written whole: the item is its keys' whole column of queries; dQ is added
// to, or written where the call is the first to touch it (dq_fresh).
// The products run as a GEMM's inner kernel does, a tile of sums held in registers (the
// compiler keeps them all there) — and two groups of 16 positions at a time where both
// take a chunk, so that each element broadcast from memory serves two FMAs (group_dots,
// group_accumulate, rows_accumulate in core/cpu/attention_lanes.h, with the vectors,
// exp2 and the transposes).
// Every operand's rows lie a stride apart (AttentionRows, backend.h): a head split off a
// (B, T, H·D) projection is read, and its gradient written, in place — no head is copied
// out of the projection's layout or back into it.
//
// The vectors are GCC/clang vector extensions, not intrinsics: the same code compiles
// for any x86 (and elsewhere); only with AVX-512 is each vector one register, and only
// then (kWorthIt) does the CPU backend take this path unless told to
// (RINGGRAD_CPU_ATTENTION, below). float32 only, with or without a mask (additive;
// torch's bool masks arrive as 0/−∞); a tile with dropout, or head dims not compiled
// (compiled() below), goes the GEMM route. Same math as row_math.h's
// passes, up to the order of float additions and exp's last bit
// (tests/test_attention_fused.cpp).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "ringgrad/core/cpu/attention_lanes.h"
#include "ringgrad/core/cpu/cpu_backend.h"
#include "ringgrad/core/kernel_math.h"
#include "ringgrad/core/threads.h"

namespace ringgrad::cpu {
namespace {

using namespace lanes;  // Vec, load/store, exp2_16, the transposes and products

// Keys per forward chunk: K and V of a chunk (16–32 KB) are read from the L1 cache by each
// of the pass's groups, beside a group's Q̂ᵀ and Oᵀ (2–16 KB) and its score tile (2–8 KB).
// 48 keys at head dims 48–64, not 64: 64 keys' 32 KB of K and V plus the rest filled the
// 48 KB L1 cache (d = 64, T = 512–2048, three interleaved runs: 1–10% faster; at d ≤ 32,
// 64 keys instead of 128 gained nothing). At d = 128, 24 keys (24 KB of K and V).
template <int D>
constexpr int64_t kKeys = D <= 32 ? 128 : D <= 64 ? 48 : 24;
#if defined(__AVX512F__)
constexpr bool kWorthIt = true;  // a vector is one register
#else
constexpr bool kWorthIt = false;         // a vector is 2–4 registers: the GEMM route is faster
#endif

// Causal, lanes as positions: lane ℓ of row r is visible iff ℓ ≤ r + diag (and ℓ < lanes).
// Rows with r + diag ≥ 15 see every lane and are left alone.
void hide(float (*s)[kLanes], int64_t nr, int64_t diag, int lanes, bool causal) {
  if (!causal && lanes == kLanes) return;
  static const IVec lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t last = std::min<int64_t>(causal ? r + diag : kLanes, lanes - 1);
    if (last >= kLanes - 1) {
      if (causal) break;  // and so are all the rows after it
      continue;
    }
    const IVec visible = lane <= int32_t(std::max<int64_t>(last, -1));
    store(s[r], visible ? load(s[r]) : splat(-kInf));
  }
}

// The additive mask (AttentionTile::mask, float32), in base 2 as the scores are:
// s[r] lane ℓ += log2 e·mask[r·row_step + ℓ·lane_step], r < nr, lanes < n. A padding mask
// broadcasts along one of the two (step 0), and a contiguous one has lane_step 1: both are
// one vector per row; any other is gathered.
void add_mask(float (*s)[kLanes], int64_t nr, const float* mask, int64_t row_step,
              int64_t lane_step, int n) {
  for (int64_t r = 0; r < nr; ++r) {
    const float* mr = mask + r * row_step;
    Vec add;
    if (lane_step == 0) {
      add = splat(mr[0]);
    } else if (lane_step == 1) {
      add = load_n(mr, n);
    } else {
      alignas(64) float a[kLanes] = {};
      for (int l = 0; l < n; ++l) a[l] = mr[l * lane_step];
      add = load(a);
    }
    store(s[r], load(s[r]) + add * math::kLog2e);
  }
}

// An operand's row stride (AttentionRows): 0 means tightly packed, `width` apart.
constexpr int64_t row_stride(int64_t ld, int64_t width) { return ld ? ld : width; }

// Rows [0, n) of x (row stride ld, `width` floats each) packed tightly into buf, unless
// they already are; either way the rows returned lie `width` apart. These are the rows a
// pass reuses from the L1 cache: rows 512 bytes apart (a head of 16 in a (B, T, 8·16)
// projection) fall into 8 of the L1's 64 sets, so 128 of them cannot stay there; packed,
// they take 128 consecutive lines.
template <typename T>  // float or const float
T* packed(float* buf, T* x, int64_t ld, int64_t n, int64_t width) {
  if (ld == width) return x;
  for (int64_t r = 0; r < n; ++r) std::memcpy(buf + r * width, x + r * ld, width * sizeof(float));
  return buf;
}

// Rows [r0, r1) of x (rows ld apart, W floats each) asked for ahead of their use. Each pass
// below streams its operands chunk by chunk; the first group to read a chunk would wait on
// memory for every line of it (at 64 heads of T = 512 nothing but the current head stays in
// cache), so the chunk after it is asked for while this one is computed, a slice per group,
// spread over the groups that take the chunk so that the requests do not queue up at once.
//  - next_chunk: into the L2 cache (prefetcht1);
//  - soon: into the L1 cache (prefetcht0), rows the next few thousand cycles read;
//  - write: rows that will be written, owned for writing (prefetchw where the CPU has it;
//    which cache is the CPU's choice).
enum class Ahead { next_chunk, soon, write };
template <int W, Ahead how = Ahead::next_chunk>
void prefetch_rows(const float* x, int64_t ld, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int c = 0; c < W; c += kLanes) {
      if constexpr (how == Ahead::next_chunk) __builtin_prefetch(x + r * ld + c, 0, 2);
      if constexpr (how == Ahead::soon) __builtin_prefetch(x + r * ld + c, 0, 3);
      if constexpr (how == Ahead::write) __builtin_prefetch(x + r * ld + c, 1, 2);
    }
}
// The slice of n rows that the i-th of `of` groups asks for.
std::pair<int64_t, int64_t> slice_of(int64_t n, int i, int of) {
  return {n * i / of, n * (i + 1) / of};
}

// ---- forward: an item is a query block; lanes are its queries ----
// A pass takes up to kGroups groups of 16 queries (block_q = 128: the whole item) and runs
// over the keys chunk by chunk, each chunk of K and V read once (into the L1 cache) for
// all of its groups, whose running (Q̂ᵀ, Oᵀ, m, l) wait in `groups` meanwhile. Each group
// sees the same chunks in the same order as alone: the same sums, bit for bit. A group's
// own rows (Q forward, K and V backward) are read when it takes its first chunk, with the
// rows of the group two on asked for (the groups go in pairs: the next pair's), so that only
// the first pair of a pass waits on them.
constexpr int kGroups = 16;

template <int D, int DV>
void forward_item(const AttentionTileForward& a) {
  const AttentionTile& t = a.tile;
  const float* q = static_cast<const float*>(a.q);
  const float* k = static_cast<const float*>(a.k);
  const float* v = static_cast<const float*>(a.v);
  float* o = static_cast<float*>(a.o);
  float* lse = static_cast<float*>(a.lse);
  const float* mask = static_cast<const float*>(t.mask.data);  // null: none
  const int64_t lq = row_stride(a.ld.q, D), lk = row_stride(a.ld.k, D);
  const int64_t lv = row_stride(a.ld.v, DV), lo = row_stride(a.ld.o, DV);
  struct Group {
    alignas(64) float qt[D][kLanes], ot[DV][kLanes];
    Vec m, l;
    int64_t g0, diag, keys;  // first query; key j visible to query g0 + i iff j ≤ i + diag
    int nq;
  };
  thread_local std::vector<Group> groups(kGroups);  // per thread, once (too big for the stack)
  constexpr int64_t kChunk = kKeys<D>;
  alignas(64) float s[2][kChunk][kLanes], kbuf[kChunk * D], vbuf[kChunk * DV];
  for (int64_t b0 = 0; b0 < t.rows; b0 += kGroups * kLanes) {
    const int ng = int(std::min<int64_t>(kGroups, (t.rows - b0 + kLanes - 1) / kLanes));
    int64_t keys = 0;  // the most any group of the pass sees
    for (int gi = 0; gi < ng; ++gi) {
      Group& g = groups[gi];
      g.g0 = b0 + gi * kLanes;
      g.nq = int(std::min<int64_t>(kLanes, t.rows - g.g0));
      g.diag = t.row_pos + g.g0 - t.col_pos;
      g.keys = t.causal ? std::clamp<int64_t>(g.diag + g.nq, 0, t.cols) : t.cols;
      keys = std::max(keys, g.keys);
      // Oᵀ and Q̂ᵀ: written by the group's first chunk, below; a group that sees no key
      // takes none, and writes zeros
      if (g.keys == 0) std::memset(g.ot, 0, sizeof g.ot);
      g.m = splat(-kInf), g.l = Vec{};
    }
    // The pass's O rows, written at its end, owned for writing meanwhile: a slice per chunk
    // (at 64 heads of T = 512 they are not in cache, and stores to 32 KB of absent lines at
    // once stall the pass's end on memory).
    const int64_t pass_rows = std::min<int64_t>(kGroups * kLanes, t.rows - b0);
    const int chunks = int((keys + kChunk - 1) / kChunk);
    for (int64_t j0 = 0; j0 < keys; j0 += kChunk) {
      const int64_t chunk = std::min(kChunk, keys - j0);
      const auto [o0, o1] = slice_of(pass_rows, int(j0 / kChunk), chunks);
      prefetch_rows<DV, Ahead::write>(o, lo, b0 + o0, b0 + o1);
      const float* kc = packed(kbuf, k + j0 * lk, lk, chunk, D);  // rows D apart
      const float* vc = packed(vbuf, v + j0 * lv, lv, chunk, DV);  // rows DV apart
      // The groups that take this chunk: those after the ones whose keys end before it.
      int taking = 0;
      while (taking < ng && groups[taking].keys <= j0) ++taking;  // (the last group's: keys)
      const int64_t next = std::clamp<int64_t>(keys - j0 - kChunk, 0, kChunk);  // its keys
      // The chunk for G groups from g_first on (G = 2: both take it; the first's keys end no
      // later than the second's).
      auto take = [&]<int G>(int g_first) {
        std::array<Group*, G> gs;
        std::array<int64_t, G> nk;
        for (int u = 0; u < G; ++u) {
          const int gi = g_first + u;
          Group& g = *(gs[u] = &groups[gi]);
          const auto [p0, p1] = slice_of(next, gi - taking, ng - taking);
          prefetch_rows<D>(k, lk, j0 + kChunk + p0, j0 + kChunk + p1);
          prefetch_rows<DV>(v, lv, j0 + kChunk + p0, j0 + kChunk + p1);
          if (j0 == 0) {  // the group's first chunk: its queries read, the next pair's asked for
            if (gi + 2 < ng) {
              const Group& h = groups[gi + 2];
              prefetch_rows<D, Ahead::soon>(q, lq, h.g0, h.g0 + h.nq);
            }
            transpose_in(g.qt, q + g.g0 * lq, lq, g.nq, float(t.scale) * math::kLog2e);  // base 2
          }
          nk[u] = std::min(kChunk, g.keys - j0);
        }
        RG_ASSERT(nk[0] <= nk[G - 1]);  // (the groups' keys never decrease)
        // s_u[j] lane i = log2 e·scale·Q[i]·K[j] (a pair's over the second's keys: the first
        // reads only its own)
        Each<G> scores;
        EachConst<G> qt;
        for (int u = 0; u < G; ++u) scores[u] = s[u], qt[u] = gs[u]->qt;
        group_dots<D, G>(scores, kc, D, nk[G - 1], qt);
        std::array<Vec, G> correction;
        for (int u = 0; u < G; ++u) {
          Group& g = *gs[u];
          float(*su)[kLanes] = s[u];
          const int64_t n = nk[u], diag = g.diag;
          if (mask)  // s[j] lane i += log2 e·mask[g0 + i, j0 + j]: rows are keys, lanes queries
            add_mask(su, n, mask + g.g0 * t.mask.strides[2] + j0 * t.mask.strides[3],
                     t.mask.strides[3], t.mask.strides[2], g.nq);
          if (t.causal) {
            // key j0 + j hidden from query i when j0 + j > i + diag: per key, lanes i < j0 + j − diag
            for (int64_t j = std::max<int64_t>(0, diag + 1 - j0); j < n; ++j) {
              static const IVec lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
              const IVec hidden = lane < int32_t(std::min<int64_t>(j0 + j - diag, kLanes));
              store(su[j], hidden ? splat(-kInf) : load(su[j]));
            }
          }
          // The online-softmax step, 16 rows at once (row_math.h attention_row_forward).
          const Vec m_new = max_of(g.m, lane_max(su, n));
          const Vec m_use = m_new == -kInf ? Vec{} : m_new;  // a row that has seen only −∞
          Vec sum{};
          for (int64_t j = 0; j < n; ++j) {
            const Vec p = exp2_16(load(su[j]) - m_use);
            store(su[j], p);
            sum += p;
          }
          correction[u] = exp2_16(g.m - m_use);  // 0 on the row's first keys (m = −∞)
          g.l = g.l * correction[u] + sum;
          g.m = m_new;
        }
        // Oᵀ = c·Oᵀ + P̃ᵀ·V: over the keys all G see, then the second's own
        Each<G> ot;
        EachConst<G> p;
        for (int u = 0; u < G; ++u) ot[u] = gs[u]->ot, p[u] = s[u];
        std::array<bool, G> fresh;
        fresh.fill(j0 == 0);
        group_accumulate<DV, G>(ot, p, vc, DV, nk[0], fresh, correction);
        if (G == 2 && nk[G - 1] > nk[0])
          group_accumulate<DV, 1>({gs[G - 1]->ot}, {s[G - 1] + nk[0]}, vc + nk[0] * DV, DV,
                                  nk[G - 1] - nk[0], {false}, {splat(1.0f)});
      };
      // Two groups at a time, (0, 1), (2, 3), …: a pair where both take the chunk, the second
      // alone where only it does, the last alone where the count is odd.
      for (int gi = taking - taking % 2; gi < ng; gi += 2) {
        if (gi < taking)
          take.template operator()<1>(gi + 1);
        else if (gi + 1 < ng)
          take.template operator()<2>(gi);
        else
          take.template operator()<1>(gi);
      }
    }
    for (int gi = 0; gi < ng; ++gi) {
      Group& g = groups[gi];
      // O = Oᵀ / l (0 where the row saw no key: l = 0), lse = ln 2·(m + log2 l) (−∞ there)
      const Vec inv = g.l > 0.0f ? 1.0f / g.l : Vec{};
      transpose_out(g.ot, o + g.g0 * lo, lo, g.nq, inv);
      alignas(64) float ml[2][kLanes], lg[kLanes];
      store(ml[0], g.m), store(ml[1], g.l), store(lg, kLn2 * (g.m + log2_16(g.l)));
      for (int i = 0; i < g.nq; ++i) {  // (l is ≥ 1 where the row saw a key, 0 where none)
        const float l = ml[1][i];
        lse[g.g0 + i] = l > 0.0f && l < kInf ? lg[i] : kLn2 * (ml[0][i] + std::log2(l));
      }
    }
  }
}

// d[i] = Σ_c x[i, c]·y[i, c] for i < n: x, y (n, D) row-major, rows ldx, ldy apart.
// Lane-wise products summed in vectors first, then across the 16 lanes.
template <int D>
void row_dots(float* d, const float* x, int64_t ldx, const float* y, int64_t ldy, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    Vec acc{};
    for_each_width<D>([&]<int W>(int c0) {
      acc += load_n(x + i * ldx + c0, W) * load_n(y + i * ldy + c0, W);
    });
    alignas(64) float lanes[kLanes];
    store(lanes, acc);
    float sum = 0.0f;
    for (int l = 0; l < kLanes; l += 2) sum += lanes[l] + lanes[l + 1];
    d[i] = sum;
  }
}

// ---- backward: an item is a head's keys, 256 to a pass; lanes are its keys ----
// As the forward: a pass takes up to kGroups groups of 16 keys (256: one key block; the
// tile loop hands over a head's key blocks in one call) and runs over the queries kRows at
// a time, each chunk of Q, dO and dQ read once (into the L1 cache) for all of its groups,
// whose (K̂ᵀ, Vᵀ, dKᵀ, dVᵀ, K̂'s rows) wait in `groups` meanwhile. Each group sees the same
// query rows in the same order as alone, and each dQ row gets the groups' parts in key
// order: the same sums, bit for bit.
// Groups are taken two at a time (as the forward's; below), and a pair reads its 2 × 40 KB
// of state (d = 128) from the L2 cache at every chunk: at d = 64 and 128, 48 rows a chunk
// (the backward alone, not causal, T = 512, data in cache: d = 128 5–6% faster than with
// 16, 32 no better than 16 for single groups; d = 64 2–4% faster than with 32).
template <int D>
constexpr int64_t kRows = D <= 32 ? 64 : 48;  // Q, dO, dQ of a chunk: 6–72 KB

template <int D, int DV>
void backward_item(const AttentionTileBackward& a) {
  const AttentionTile& t = a.tile;
  const float* q = static_cast<const float*>(a.q);
  const float* k = static_cast<const float*>(a.k);
  const float* v = static_cast<const float*>(a.v);
  const float* dout = static_cast<const float*>(a.dout);
  const float* lse = static_cast<const float*>(a.lse);
  const float* dsum = static_cast<const float*>(a.dsum);
  float* dq = static_cast<float*>(a.dq);
  float* dk = static_cast<float*>(a.dk);
  float* dv = static_cast<float*>(a.dv_);
  const float* mask = static_cast<const float*>(t.mask.data);  // null: none
  const float scale = float(t.scale);
  const int64_t lq = row_stride(a.ld.q, D), lk = row_stride(a.ld.k, D);
  const int64_t lv = row_stride(a.ld.v, DV), lo = row_stride(a.ld.o, DV);
  const int64_t ldq = row_stride(a.ld.dq, D), ldk = row_stride(a.ld.dk, D);
  const int64_t ldv = row_stride(a.ld.dv, DV);
  // D = rowsum(dO ⊙ O), unless the caller passes it: computed by the first pass, a chunk at
  // a time as it takes the chunk (its dO rows then in the L1 cache, its O rows asked for
  // with the chunk's other rows), not by a sweep over the column before the passes, which
  // nothing overlaps (at 64 heads of T = 512 each head's O and dO stream from memory). The
  // first pass sees every query a later one does (causal: later passes' keys start later).
  const bool own_d = !dsum;
  const float* out = static_cast<const float*>(a.out);
  const int64_t lout = row_stride(a.ld.out, DV);
  thread_local std::vector<float> rows_d;
  if (own_d) {
    rows_d.resize(size_t(std::max<int64_t>(t.rows, 1)));
    dsum = rows_d.data();
  }
  constexpr int kWidths = (D + kLanes - 1) / kLanes;  // dQ's features, 16 at a time
  struct Group {
    alignas(64) float kt[D][kLanes], vt[DV][kLanes], dkt[D][kLanes], dvt[DV][kLanes];
    alignas(64) float krow[kWidths][kLanes][kLanes];  // K̂'s rows (lanes: features), 0 past nk
    int64_t kg0, diag, first;  // key lane j visible to query i iff j ≤ i + diag; i < first: none
    int nk;
    bool ready;  // kt, vt, krow filled
  };
  thread_local std::vector<Group> groups(kGroups);  // per thread, once (too big for the stack)
  constexpr int64_t R = kRows<D>;
  alignas(64) float p[2][R][kLanes], ds[2][R][kLanes], qbuf[R * D], obuf[R * DV], dqbuf[R * D];
  // dq_fresh: dQ holds nothing yet, and the first pass writes it — 0 in the rows before the
  // first query it sees, each chunk zeroed as it is taken — instead of the caller filling
  // it with zeros first (a pass over the whole tensor in memory, ~2% of the backward at 64
  // heads of T = 512).
  RG_ASSERT(!a.dq_fresh || t.cols > 0);  // (a call without keys would write nothing)
  for (int64_t b0 = 0; b0 < t.cols; b0 += kGroups * kLanes) {
    const bool fresh = a.dq_fresh && b0 == 0;  // this pass writes dQ rather than adds to it
    const bool finds_d = own_d && b0 == 0;     // this pass computes D
    const int ng = int(std::min<int64_t>(kGroups, (t.cols - b0 + kLanes - 1) / kLanes));
    int64_t first = t.rows;  // the first query any group of the pass sees
    for (int gi = 0; gi < ng; ++gi) {
      Group& g = groups[gi];
      g.kg0 = b0 + gi * kLanes;
      g.nk = int(std::min<int64_t>(kLanes, t.cols - g.kg0));
      g.diag = t.row_pos - t.col_pos - g.kg0;
      g.first = t.causal ? std::clamp<int64_t>(-g.diag, 0, t.rows) : 0;
      first = std::min(first, g.first);
      g.ready = false;  // K̂ᵀ, Vᵀ, K̂'s rows, dKᵀ, dVᵀ: at the group's first chunk, below
    }
    if (fresh)  // rows no group of the first pass sees
      for (int64_t r = 0; r < first; ++r) std::memset(dq + r * ldq, 0, D * sizeof(float));
    // A group's keys, read when the group takes its first chunk (the groups start in order,
    // later ones on the causal diagonal's later rows), with those of the group two on (the
    // next pair's) asked for.
    auto ready = [&](int gi) {
      Group& g = groups[gi];
      if (gi + 2 < ng) {
        const Group& h = groups[gi + 2];
        prefetch_rows<D, Ahead::soon>(k, lk, h.kg0, h.kg0 + h.nk);
        prefetch_rows<DV, Ahead::soon>(v, lv, h.kg0, h.kg0 + h.nk);
      }
      transpose_in(g.kt, k + g.kg0 * lk, lk, g.nk, scale * math::kLog2e);  // scores in base 2
      transpose_in(g.vt, v + g.kg0 * lv, lv, g.nk, 1.0f);
      for (int w = 0; w < kWidths; ++w)
        for (int j = 0; j < kLanes; ++j) {
          const int c0 = w * kLanes, width = std::min(kLanes, D - c0);
          store(g.krow[w][j], j < g.nk ? scale * load_n(k + (g.kg0 + j) * lk + c0, width) : Vec{});
        }
      g.ready = true;
    };
    // The pass's dK and dV rows, written at its end, read into the L2 cache meanwhile, a
    // slice per chunk: there the stores find them owned (a line read by one core alone is
    // held exclusive), not 2 × 64 KB of absent lines at once. (prefetchw, into the L1
    // cache, crowded out the chunk's rows there: no gain.)
    const int64_t pass_keys = std::min<int64_t>(kGroups * kLanes, t.cols - b0);
    const int chunks = int((t.rows - first + R - 1) / R);
    for (int64_t i0 = first; i0 < t.rows; i0 += R) {
      const int64_t rows = std::min(R, t.rows - i0);
      const auto [k0, k1] = slice_of(pass_keys, int((i0 - first) / R), chunks);
      prefetch_rows<D>(dk, ldk, b0 + k0, b0 + k1);
      prefetch_rows<DV>(dv, ldv, b0 + k0, b0 + k1);
      const float* qc = packed(qbuf, q + i0 * lq, lq, rows, D);       // rows D apart
      const float* oc = packed(obuf, dout + i0 * lo, lo, rows, DV);   // rows DV apart
      if (finds_d) row_dots<DV>(rows_d.data() + i0, oc, DV, out + i0 * lout, lout, rows);
      float* dqc = fresh ? (ldq == D ? dq + i0 * ldq : dqbuf)  // rows D apart; written back below
                         : packed(dqbuf, dq + i0 * ldq, ldq, rows, D);
      if (fresh) std::memset(dqc, 0, rows * D * sizeof(float));
      // The groups that take this chunk: those before the ones whose first query is past it.
      int taking = 0;
      while (taking < ng && groups[taking].first < i0 + rows) ++taking;
      const int64_t next = std::clamp<int64_t>(t.rows - i0 - R, 0, R);  // the next chunk's rows
      // The chunk for G groups from g_first on (G = 2: both take it; the first's rows start
      // no later than the second's). Rows [skip_u, rows) of the chunk are group u's: the
      // rows all G see are taken together, the first's own before them (each group's sums
      // in row order, whether paired or not).
      auto take = [&]<int G>(int g_first) {
        std::array<Group*, G> gs;
        std::array<int64_t, G> skip;
        std::array<bool, G> first_chunk;  // the group's first: dKᵀ, dVᵀ written, not added to
        for (int u = 0; u < G; ++u) {
          const int gi = g_first + u;
          Group& g = *(gs[u] = &groups[gi]);
          const auto [p0, p1] = slice_of(next, gi, taking);
          prefetch_rows<D>(q, lq, i0 + R + p0, i0 + R + p1);
          prefetch_rows<DV>(dout, lo, i0 + R + p0, i0 + R + p1);
          prefetch_rows<D, Ahead::write>(dq, ldq, i0 + R + p0, i0 + R + p1);
          if (finds_d) prefetch_rows<DV>(out, lout, i0 + R + p0, i0 + R + p1);
          first_chunk[u] = !g.ready;
          if (first_chunk[u]) ready(gi);
          skip[u] = std::max<int64_t>(g.first - i0, 0);  // causal: rows before first
        }
        const int64_t own = skip[0], both = skip[G - 1];  // the first's rows, the shared ones
        RG_ASSERT(own <= both && both < rows);  // (the groups' first queries never decrease)
        // dots<W>(dst, x, operand): dst_u[i] = Σ_c operand_u[c]·x[i, c] for group u's rows
        auto dots = [&]<int W>(float(*dst)[R][kLanes], const float* x, auto operand) {
          Each<G> o;
          EachConst<G> b;
          for (int u = 0; u < G; ++u) o[u] = dst[u] + both, b[u] = operand(*gs[u]);
          group_dots<W, G>(o, x + both * W, W, rows - both, b);
          if (G == 2 && both > own)
            group_dots<W, 1>({dst[0] + own}, x + own * W, W, both - own, {b[0]});
        };
        // P = 2^(Q_i·K̂ᵀ·log2 e − lse·log2 e), hidden keys (and lanes past the group) 0; dP =
        // dO_i·Vᵀ
        dots.template operator()<D>(p, qc, [](const Group& g) { return ConstLaneRows(g.kt); });
        dots.template operator()<DV>(ds, oc, [](const Group& g) { return ConstLaneRows(g.vt); });
        for (int u = 0; u < G; ++u) {
          const Group& g = *gs[u];
          float(*pu)[kLanes] = p[u] + skip[u];
          float(*dsu)[kLanes] = ds[u] + skip[u];
          const int64_t ni = rows - skip[u], r0 = i0 + skip[u];  // rows [r0, r0 + ni) of the column
          if (mask)  // p[i] lane j += log2 e·mask[r0 + i, kg0 + j]: rows are queries, lanes keys
            add_mask(pu, ni, mask + r0 * t.mask.strides[2] + g.kg0 * t.mask.strides[3],
                     t.mask.strides[2], t.mask.strides[3], g.nk);
          hide(pu, ni, r0 + g.diag, g.nk, t.causal);
          for (int64_t i = 0; i < ni; ++i) {
            const float row_lse =  // saw no key: P = 0
                lse[r0 + i] == -kInf ? kInf : lse[r0 + i] * math::kLog2e;
            store(pu[i], exp2_16(load(pu[i]) - row_lse));
          }
          // dS = P·(dP − D)   (the gradient of the scaled scores)
          for (int64_t i = 0; i < ni; ++i)
            store(dsu[i], load(pu[i]) * (load(dsu[i]) - dsum[r0 + i]));
        }
        // dVᵀ += Pᵀ·dO_i;  dKᵀ += dSᵀ·Q_i (scaled at the end): the first's own rows, then
        // the shared ones
        std::array<Vec, G> ones;
        ones.fill(splat(1.0f));
        if (G == 2 && both > own) {
          group_accumulate<DV, 1>({gs[0]->dvt}, {p[0] + own}, oc + own * DV, DV, both - own,
                                  {first_chunk[0]}, {ones[0]});
          group_accumulate<D, 1>({gs[0]->dkt}, {ds[0] + own}, qc + own * D, D, both - own,
                                 {first_chunk[0]}, {ones[0]});
          first_chunk[0] = false;
        }
        Each<G> dvt, dkt;
        EachConst<G> pb, dsb;
        for (int u = 0; u < G; ++u)
          dvt[u] = gs[u]->dvt, dkt[u] = gs[u]->dkt, pb[u] = p[u] + both, dsb[u] = ds[u] + both;
        group_accumulate<DV, G>(dvt, pb, oc + both * DV, DV, rows - both, first_chunk, ones);
        group_accumulate<D, G>(dkt, dsb, qc + both * D, D, rows - both, first_chunk, ones);
        // dQ_i += dS·K̂ (each dQ row gets the groups' parts in key order)
        if (G == 2 && both > own)
          rows_accumulate<D, 1>(dqc + own * D, {ds[0] + own}, both - own, {&gs[0]->krow});
        std::array<const BlockRows<D>*, G> krows;
        for (int u = 0; u < G; ++u) krows[u] = &gs[u]->krow;
        rows_accumulate<D, G>(dqc + both * D, dsb, rows - both, krows);
      };
      // Two groups at a time, (0, 1), (2, 3), …: a pair where both take the chunk, the first
      // alone where only it does (the second's queries start after the chunk).
      for (int gi = 0; gi < taking; gi += 2) {
        if (gi + 1 < taking)
          take.template operator()<2>(gi);
        else
          take.template operator()<1>(gi);
      }
      if (dqc == dqbuf)  // back where the rows lie
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(dq + (i0 + r) * ldq, dqbuf + r * D, D * sizeof(float));
    }
    for (int gi = 0; gi < ng; ++gi) {  // the whole column: written
      Group& g = groups[gi];
      if (!g.ready) {  // no query sees these keys: their gradients are 0
        std::memset(g.dkt, 0, sizeof g.dkt);
        std::memset(g.dvt, 0, sizeof g.dvt);
      }
      transpose_out(g.dkt, dk + g.kg0 * ldk, ldk, g.nk, splat(scale));
      transpose_out(g.dvt, dv + g.kg0 * ldv, ldv, g.nk, splat(1.0f));
    }
  }
}

// The head dims compiled, d = dv (a model's q, k and v heads are usually one width), up to
// 128. At 128 the backward holds 40 KB of K̂ᵀ, Vᵀ, dKᵀ, dVᵀ and K̂'s rows per 16 keys;
// until its groups were taken in pairs it was behind the GEMM route where the tile is not
// causal (whole 128 × 256 tiles keep a BLAS busy) and took only causal tiles. Paired, it is
// ahead there too (bench_attention, not causal, GFLOP/s of the backward, fused against the
// GEMM route: one thread T = 512 138–143 / 127–129, T = 2048 146–152 / 138–145, T = 8192
// 157 / 140; two threads T = 512 273 / 233, T = 2048 299 / 264), so it takes every tile.
template <int... Ds>
struct HeadDims {
  static constexpr bool has(int64_t d) { return ((d == Ds) || ...); }
  // f.operator()<d, d>() for a compiled d; nothing for another
  template <typename F>
  static void run(int64_t d, F&& f) {
    (void)((d == Ds && (f.template operator()<Ds, Ds>(), true)) || ...);
  }
};
using CompiledHeadDims = HeadDims<8, 16, 24, 32, 48, 64, 128>;
constexpr bool compiled(int64_t d, int64_t dv) { return d == dv && CompiledHeadDims::has(d); }

// RINGGRAD_CPU_ATTENTION=auto|fused|gemm, read once. auto (the default): the fused kernel
// where a vector is one register (kWorthIt); fused: wherever the kernel takes the tile, on
// any CPU (tests run it so on machines without AVX-512 too); gemm: never.
enum class Route { automatic, fused, gemm };
Route route_wanted() {
  static const Route route = [] {
    const char* env = std::getenv("RINGGRAD_CPU_ATTENTION");
    const std::string_view v = env ? env : "auto";
    RG_CHECK(v == "auto" || v == "fused" || v == "gemm", "RINGGRAD_CPU_ATTENTION",
             "expected auto, fused or gemm, got \"", v, "\"");
    return v == "fused" ? Route::fused : v == "gemm" ? Route::gemm : Route::automatic;
  }();
  return route;
}

// (Either pass, causal or not: the fused kernel is the faster way wherever it is compiled.)
bool fused_takes(const AttentionTile& t, int64_t d, int64_t dv) {
  const Route route = route_wanted();
  const bool wanted = route == Route::fused || (route == Route::automatic && kWorthIt);
  return wanted && t.dtype == kFloat32 && (!t.mask.data || t.mask.dtype == kFloat32) &&
         t.dropout_p == 0 && t.batch * t.heads == 1 && compiled(d, dv);
}

}  // namespace

bool CpuBackend::attention_tile_fused(const AttentionTile& t, int64_t d, int64_t dv, Pass) {
  return fused_takes(t, d, dv);
}

bool CpuBackend::attention_tile_fused_forward(const AttentionTileForward& a) {
  if (!fused_takes(a.tile, a.d, a.dv)) return false;
  CompiledHeadDims::run(a.d, [&]<int D, int DV>() { forward_item<D, DV>(a); });
  return true;
}

bool CpuBackend::attention_tile_fused_backward(const AttentionTileBackward& a) {
  if (!fused_takes(a.tile, a.d, a.dv)) return false;
  CompiledHeadDims::run(a.d, [&]<int D, int DV>() { backward_item<D, DV>(a); });
  return true;
}

}  // namespace ringgrad::cpu

std::string ringgrad::cpu_attention_kernel(int64_t d, int64_t dv, bool /*backward*/,
                                           bool /*causal*/) {
  const AttentionTile t;  // float32, no mask, no dropout
  return cpu::fused_takes(t, d, dv) ? "fused" : "gemm";
}
