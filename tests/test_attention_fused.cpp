// test_attention_fused.cpp — float32 attention at head dims 8 to 64 and 128, the CPU's fused tile
// kernel (core/cpu/attention_fused.cpp), against the same problem in float64 (which always
// goes the GEMM route): every compiled head dim, sequence lengths that fill neither a
// 16-query group nor a key chunk, causal with ring attention's offsets, masks (padding,
// per query, additive and strided), a negative scale, large scores, fully hidden rows and NaN.
// ctest runs this file three ways: as built (RINGGRAD_CPU_ATTENTION=auto: fused where the CPU has
// AVX-512), attention_fused_forced (fused on any CPU) and attention_gemm_route (the GEMM route), so
// both routes meet the same bounds on every machine.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "test_helpers.h"

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// How many elements of a bool tensor are true.
double count(const rg::Tensor& t) { return t.to(rg::kFloat64).sum().item(); }

// The largest |a − b| / (atol + rtol·|b|) over the elements: ≤ 1 passes.
double worst(const rg::Tensor& a, const rg::Tensor& b, double atol, double rtol) {
  rg::Tensor x = a.to(rg::kFloat64), y = b.to(rg::kFloat64);
  return ((x - y).abs() / ((y.abs() * rtol) + atol)).max().item();
}

// Leave NaN in the CPU allocator's cached blocks of q's and k's sizes (float32), so that
// an output the kernel must write whole but skips (the fused backward's dK and dV start
// uninitialised, and so does dQ where one call takes all of a head's keys) shows up as
// NaN instead of reading a fresh page's zeros.
void dirty_cached_blocks(const rg::Tensor& q, const rg::Tensor& k) {
  std::vector<rg::Tensor> junk;
  for (int64_t numel : {q.numel(), k.numel()})
    for (int i = 0; i < 4; ++i) junk.push_back(rg::full({numel}, std::nan("")));
}

// Forward and backward in float32 against float64 on the same (rounded) inputs. With
// `interleaved`, every operand is a (1, T, heads, d) tensor seen as (1, heads, T, d), the
// layout of heads split off a projection: rows heads·d apart.
void check_against_float64(int64_t heads, int64_t tq, int64_t tk, int64_t d,
                           const rg::AttentionOptions& o, double q_gain = 1.0,
                           bool interleaved = false) {
  auto make = [&](int64_t t, double gain = 1.0) {
    return interleaved ? (rg::uniform({1, t, heads, d}, -1, 1) * gain).transpose(1, 2)
                       : (rg::uniform({1, heads, t, d}, -1, 1) * gain).contiguous();
  };
  rg::Tensor q = make(tq, q_gain), k = make(tk), v = make(tk), dout = make(tq);
  auto f64 = [](const rg::Tensor& t) { return t.to(rg::kFloat64); };
  rg::AttentionOutput got = rg::attention_forward(q, k, v, o);
  rg::AttentionOutput want = rg::attention_forward(f64(q), f64(k), f64(v), o);
  CHECK(got.out.dtype() == rg::kFloat32);
  CHECK(worst(got.out, want.out, 1e-5, 1e-4) <= 1.0);
  // lse is −∞ exactly where every key is hidden; elsewhere close.
  rg::Tensor hidden = want.lse == -kInf;
  CHECK(count((got.lse == -kInf) != hidden) == 0);
  rg::Tensor finite_got = rg::where(hidden, rg::zeros_like(got.lse), got.lse);
  rg::Tensor finite_want = rg::where(hidden, rg::zeros_like(want.lse), want.lse);
  CHECK(worst(finite_got, finite_want, 1e-5, 1e-5) <= 1.0);

  dirty_cached_blocks(q, k);
  rg::AttentionGrads g = rg::attention_backward(q, k, v, got.out, got.lse, dout, o);
  rg::AttentionGrads h =
      rg::attention_backward(f64(q), f64(k), f64(v), want.out, want.lse, f64(dout), o);
  // Gradients sum over up to tk keys (dq) or tq queries (dk, dv): bounds grow with them.
  const double atol = 2e-5 * std::sqrt(double(std::max(tq, tk)));
  CHECK(worst(g.dq, h.dq, atol, 1e-3) <= 1.0);
  CHECK(worst(g.dk, h.dk, atol, 1e-3) <= 1.0);
  CHECK(worst(g.dv, h.dv, atol, 1e-3) <= 1.0);
}

std::string route_env() {
  const char* e = std::getenv("RINGGRAD_CPU_ATTENTION");
  return e ? e : "auto";
}

}  // namespace

TEST_CASE("attention fused: the route is what RINGGRAD_CPU_ATTENTION asks for") {
  const std::string env = route_env();
  MESSAGE("RINGGRAD_CPU_ATTENTION=" << env << ": head dim 16 goes "
                                    << rg::cpu_attention_kernel(16, 16));
  for (int64_t d : {8, 16, 24, 32, 48, 64, 128}) {
    CAPTURE(d);
    for (bool backward : {false, true})
      for (bool causal : {false, true}) {
        CAPTURE(backward);
        CAPTURE(causal);
        const std::string got = rg::cpu_attention_kernel(d, d, backward, causal);
        if (env == "fused") CHECK(got == "fused");  // every compiled dim, either pass
        if (env == "gemm") CHECK(got == "gemm");
        // auto, on AVX-512: every compiled dim, either pass
        if (env == "auto" && rg::cpu_attention_kernel(16, 16) == "fused") CHECK(got == "fused");
      }
  }
  // Head dims the kernel is not compiled for, and q/k heads of another width than v's.
  CHECK(rg::cpu_attention_kernel(256, 256, /*backward=*/true, /*causal=*/true) == "gemm");
  CHECK(rg::cpu_attention_kernel(96, 96) == "gemm");
  CHECK(rg::cpu_attention_kernel(12, 12) == "gemm");
  CHECK(rg::cpu_attention_kernel(16, 32) == "gemm");
}

TEST_CASE("attention fused: every compiled head dim equals float64, forward and backward") {
  rg::manual_seed(11);
  for (int64_t d : {8, 16, 24, 32, 48, 64, 128}) {
    CAPTURE(d);
    // 37 queries: two full 16-query groups and a partial one; 300 keys: a 256-key tile
    // and a short one, the first tile two 128-key chunks at d ≤ 32 (the forward's chunks
    // are 48 keys at 48 and 64, 24 at 128: the 300 keys end inside a chunk at every d).
    check_against_float64(2, 37, 300, d, {});
    check_against_float64(2, 37, 300, d, {.causal = true, .q_offset = 263});
    // 100 queries: the backward's chunks of 48 rows (64 at d ≤ 32) three or two, the last
    // partial; causal, its key groups' first queries inside them
    check_against_float64(1, 100, 300, d, {});
    check_against_float64(1, 100, 300, d, {.causal = true, .q_offset = 230});
  }
}

TEST_CASE("attention fused: a group's numbers are the same bits whether paired or alone") {
  // The kernel takes its groups of 16 queries (forward) or keys (backward) two at a time
  // where both take a chunk, and accumulates each sum in the same order either way. Forward:
  // query blocks of 16 (every group alone) against the default 128 (in pairs). Backward:
  // keys 0–15 alone (a 16-key call) against the same keys paired with keys 16–31, given the
  // same out and lse: their dK and dV rows must match exactly. (The GEMM route's sums
  // depend on its tiles: this is the fused kernel's promise only.)
  rg::manual_seed(15);
  auto same = [](const rg::Tensor& a, const rg::Tensor& b) {
    return (a - b).abs().max().item() == 0.0;
  };
  for (int64_t d : {16, 64, 128})
    for (bool causal : {false, true}) {
      CAPTURE(d);
      CAPTURE(causal);
      if (rg::cpu_attention_kernel(d, d, false, causal) != "fused" ||
          rg::cpu_attention_kernel(d, d, true, causal) != "fused")
        continue;
      rg::Tensor q = rg::uniform({1, 2, 70, d}, -1, 1), k = rg::uniform({1, 2, 70, d}, -1, 1),
                 v = rg::uniform({1, 2, 70, d}, -1, 1), dout = rg::uniform({1, 2, 70, d}, -1, 1);
      rg::AttentionOptions paired{.causal = causal}, alone{.causal = causal, .block_q = 16};
      rg::AttentionOutput a = rg::attention_forward(q, k, v, paired),
                          b = rg::attention_forward(q, k, v, alone);
      CHECK(same(a.out, b.out));
      CHECK(same(a.lse, b.lse));
      // causal with keys 0–31 at the end of the queries (k_offset 38): queries 38… see them
      rg::AttentionOptions o{.causal = causal, .k_offset = causal ? 38 : 0};
      rg::Tensor k32 = k.narrow(2, 0, 32).contiguous(), v32 = v.narrow(2, 0, 32).contiguous();
      rg::AttentionOutput r = rg::attention_forward(q, k32, v32, o);
      rg::AttentionGrads two = rg::attention_backward(q, k32, v32, r.out, r.lse, dout, o);
      rg::AttentionGrads one =
          rg::attention_backward(q, k32.narrow(2, 0, 16).contiguous(),
                                 v32.narrow(2, 0, 16).contiguous(), r.out, r.lse, dout, o);
      CHECK(same(two.dk.narrow(2, 0, 16), one.dk));
      CHECK(same(two.dv.narrow(2, 0, 16), one.dv));
    }
}

TEST_CASE("attention fused: causal, tiles and offsets as ring attention makes them") {
  rg::manual_seed(12);
  for (auto [tq, tk, q_offset, k_offset] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{300, 300, 0, 0},
        {129, 257, 128, 0},
        {64, 64, 64, 0},
        {100, 80, 0, 50},
        {50, 200, 10, 0}}) {
    CAPTURE(tq);
    CAPTURE(tk);
    CAPTURE(q_offset);
    CAPTURE(k_offset);
    rg::AttentionOptions o{.causal = true, .q_offset = q_offset, .k_offset = k_offset};
    check_against_float64(1, tq, tk, 16, o);
    o.block_q = 40, o.block_k = 24;  // tiles that cut 16-query groups and key chunks
    check_against_float64(1, tq, tk, 32, o);
    check_against_float64(1, tq, tk, 128, o);  // and the forward's 24-key chunks at d = 128
  }
}

TEST_CASE("attention fused: many groups per pass, rows far apart, chunks cut by causal starts") {
  // Tiles of 300 queries and 300 keys: 19 groups of 16, so the forward runs two passes over
  // its keys and the backward two over its queries; rows heads·d apart are packed into
  // chunks (and dQ, written in place with one key block per head and 4 heads on 1 or 2
  // threads, back); with causal
  // offsets the groups of one pass start seeing keys (forward) or queries (backward) at
  // different rows, inside chunks.
  rg::manual_seed(14);
  for (int64_t d : {16, 64})
    for (bool causal : {false, true})
      for (bool interleaved : {false, true}) {
        CAPTURE(d);
        CAPTURE(causal);
        CAPTURE(interleaved);
        rg::AttentionOptions o{.causal = causal, .block_q = 300, .block_k = 300,
                               .q_offset = causal ? 250 : 0};
        check_against_float64(4, 620, 300, d, o, 1.0, interleaved);
      }
}

TEST_CASE("attention fused: masks (padding, per query, additive with -inf), with causal") {
  rg::manual_seed(15);
  const int64_t tq = 37, tk = 300;  // keys: more than one 128-key chunk
  // A key padding mask, broadcast over the queries as MultiheadAttention builds it (here
  // per head, (1, H, 1, Tk)): true = may attend.
  rg::Tensor pad = rg::ones({1, 2, 1, tk}, {.dtype = rg::kBool});
  pad.narrow(3, 250, 50).fill_(0.0);
  pad.select(1, 1).narrow(2, 3, 5).fill_(0.0);
  // A general (Tq, Tk) mask, a few rows hidden entirely.
  rg::Tensor any = rg::uniform({tq, tk}, 0, 1) > 0.3;
  any.narrow(0, 5, 2).fill_(0.0);
  for (const rg::Tensor& mask : {pad, any}) {
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      check_against_float64(2, tq, tk, 16, {.mask = mask, .causal = causal, .q_offset = 33});
      rg::AttentionOptions o{.mask = mask, .causal = causal, .q_offset = 33};
      o.block_q = 20, o.block_k = 24;
      check_against_float64(2, tq, tk, 32, o);
    }
  }
  // An additive float mask, strided (a transposed view): -inf hides, other values shift.
  rg::Tensor add64 = rg::uniform({tk, tq}, -2, 2, {.dtype = rg::kFloat64});
  add64 = rg::where(add64 > 1.5, rg::full({}, -kInf, {.dtype = rg::kFloat64}), add64).t();
  rg::Tensor q = rg::uniform({1, 2, tq, 16}, -1, 1), k = rg::uniform({1, 2, tk, 16}, -1, 1),
             v = rg::uniform({1, 2, tk, 16}, -1, 1);
  auto f64 = [](const rg::Tensor& t) { return t.to(rg::kFloat64); };
  rg::AttentionOutput got = rg::attention_forward(q, k, v, {.mask = add64.to(rg::kFloat32)});
  rg::AttentionOutput want = rg::attention_forward(f64(q), f64(k), f64(v), {.mask = add64});
  CHECK(worst(got.out, want.out, 1e-5, 1e-4) <= 1.0);
  rg::Tensor dout = rg::uniform(got.out.shape(), -1, 1);
  rg::AttentionGrads g =
      rg::attention_backward(q, k, v, got.out, got.lse, dout, {.mask = add64.to(rg::kFloat32)});
  rg::AttentionGrads h = rg::attention_backward(f64(q), f64(k), f64(v), want.out, want.lse,
                                                f64(dout), {.mask = add64});
  CHECK(worst(g.dq, h.dq, 2e-4, 1e-3) <= 1.0);
  CHECK(worst(g.dk, h.dk, 2e-4, 1e-3) <= 1.0);
  CHECK(worst(g.dv, h.dv, 2e-4, 1e-3) <= 1.0);
}

TEST_CASE("attention fused: a negative scale, and scores far beyond exp's range") {
  rg::manual_seed(13);
  check_against_float64(2, 40, 70, 16, {.scale = -0.7});
  // |scores| up to ~200: only the online max keeps exp in range.
  check_against_float64(2, 40, 70, 16, {}, 50.0);
  check_against_float64(1, 40, 70, 32, {.causal = true}, 50.0);
}

TEST_CASE("attention fused: hidden rows give 0 and lse = -inf; a NaN reaches the output") {
  rg::Tensor q = rg::uniform({1, 1, 20, 16}, -1, 1), k = rg::uniform({1, 1, 30, 16}, -1, 1),
             v = rg::uniform({1, 1, 30, 16}, -1, 1);
  // Every key after every query: nothing visible. One head (on two threads the backward
  // splits the key blocks and dQ starts at 0) and two (each head one call, which writes
  // dQ's rows itself: 0 here).
  for (int64_t heads : {1, 2}) {
    CAPTURE(heads);
    rg::Tensor qh = rg::uniform({1, heads, 20, 16}, -1, 1),
               kh = rg::uniform({1, heads, 30, 16}, -1, 1),
               vh = rg::uniform({1, heads, 30, 16}, -1, 1);
    rg::AttentionOutput r = rg::attention_forward(qh, kh, vh, {.causal = true, .k_offset = 100});
    CHECK(r.out.abs().max().item() == 0.0);
    CHECK(count(r.lse == -kInf) == 20 * heads);
    dirty_cached_blocks(qh, kh);
    rg::AttentionGrads g = rg::attention_backward(qh, kh, vh, r.out, r.lse, rg::ones_like(r.out),
                                                  {.causal = true, .k_offset = 100});
    CHECK(g.dq.abs().max().item() == 0.0);
    CHECK(g.dk.abs().max().item() == 0.0);
    CHECK(g.dv.abs().max().item() == 0.0);
    // Keys 10… start where query 10 is: rows 0–9 see nothing, the rest a few keys.
    check_against_float64(heads, 20, 30, 16, {.causal = true, .k_offset = 10});
  }

  // A NaN in one query row makes that row NaN and leaves the others alone.
  rg::Tensor qn = q.clone();
  qn.select(2, 3).select(-1, 5).fill_(std::nan(""));
  rg::AttentionOutput n = rg::attention_forward(qn, k, v);
  rg::Tensor nan_per_row = (n.out != n.out).to(rg::kFloat64).sum(-1).view({20});
  CHECK(nan_per_row.select(0, 3).item() == 16);
  CHECK(nan_per_row.sum().item() == 16);

  // The kernel's per-thread scratch carries nothing from one call to the next: on one thread,
  // a call that leaves NaN in it, then one where no query sees a key, still gives 0.
  const int saved_threads = rg::get_num_threads();
  rg::set_num_threads(1);
  rg::Tensor all_nan = rg::full({1, 1, 20, 16}, std::nan(""));
  rg::AttentionOutput after = rg::attention_forward(all_nan, all_nan, all_nan);
  CHECK(count(after.out != after.out) == 20 * 16);
  after = rg::attention_forward(q, k, v, {.causal = true, .k_offset = 100});
  CHECK(after.out.abs().max().item() == 0.0);
  rg::AttentionGrads g_after = rg::attention_backward(all_nan, all_nan, all_nan, after.out, after.lse,
                                                      rg::ones_like(after.out));
  g_after = rg::attention_backward(q, k, v, after.out, after.lse, rg::ones_like(after.out),
                                   {.causal = true, .k_offset = 100});
  CHECK(g_after.dk.abs().max().item() == 0.0);
  CHECK(g_after.dv.abs().max().item() == 0.0);
  rg::set_num_threads(saved_threads);
}

TEST_CASE("attention fused: float32 through scaled_dot_product_attention with autograd") {
  // The path a model takes: (B, T, E) heads split as transposed views, gradients by autograd.
  rg::manual_seed(14);
  rg::Tensor x = rg::uniform({2, 50, 64}, -1, 1).requires_grad_();
  rg::Tensor x64 = x.detach().to(rg::kFloat64).requires_grad_();
  auto attend = [](const rg::Tensor& t) {
    rg::Tensor h = t.view({2, 50, 4, 16}).transpose(1, 2);  // (B, H, T, D), a view
    return rg::scaled_dot_product_attention(h, h, h, {.causal = true});
  };
  rg::Tensor out = attend(x), out64 = attend(x64);
  CHECK(worst(out, out64, 1e-5, 1e-4) <= 1.0);
  out.sum().backward();
  out64.sum().backward();
  CHECK(worst(x.grad(), x64.grad(), 1e-4, 1e-3) <= 1.0);
}

TEST_CASE("attention fused: d = 128 read in place exactly where both passes are fused") {
  // q, k, v are read where they lie only when both passes are fused (auto on AVX-512: at
  // d = 128 both, causal or not), and only then is the output laid out as (B, T, H, D)
  // underneath: what scaled_dot_product_attention decided shows.
  rg::manual_seed(21);
  const int64_t b = 1, t = 40, h = 2, d = 128, e = h * d;
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    rg::Tensor qkv = rg::uniform({b, t, 3 * e}, -1, 1).requires_grad_();
    rg::Tensor qkv64 = qkv.detach().to(rg::kFloat64).requires_grad_();
    auto attend = [&](const rg::Tensor& x) {
      auto head = [&](int64_t i) { return x.narrow(-1, i * e, e).view({b, t, h, d}).transpose(1, 2); };
      return rg::scaled_dot_product_attention(head(0), head(1), head(2), {.causal = causal});
    };
    rg::Tensor out = attend(qkv), out64 = attend(qkv64);
    const bool in_place = rg::cpu_attention_kernel(d, d, false, causal) == "fused" &&
                          rg::cpu_attention_kernel(d, d, true, causal) == "fused";
    CHECK(out.is_contiguous() == !in_place);
    if (route_env() == "auto" && rg::cpu_attention_kernel(16, 16) == "fused") CHECK(in_place);
    CHECK(worst(out, out64, 1e-5, 1e-4) <= 1.0);
    out.sum().backward();
    out64.sum().backward();
    CHECK(worst(qkv.grad(), qkv64.grad(), 1e-4, 1e-3) <= 1.0);
  }
}

TEST_CASE("attention fused: heads read and written in a (B, T, H, D) projection's layout") {
  // Q, K, V cut from one (B, T, 3E) projection, as MultiheadAttention does: each head's rows
  // lie 3E elements apart. The fused route reads them there, gives the output laid out as
  // (B, T, H, D) underneath (the merge back to (B, T, E) is then a view) and the gradients
  // in their inputs' layout; every value as the float64 GEMM route gives it. With one pair
  // and two threads the backward splits its two key blocks (300 keys) between the threads
  // and sums dQ from per-thread parts; with eight pairs each head is one call.
  const int saved_threads = rg::get_num_threads();
  for (int threads : {1, 2})
    for (int64_t b : {1, 2}) {
      CAPTURE(threads);
      CAPTURE(b);
      rg::set_num_threads(threads);
      rg::manual_seed(15 + b);
      const int64_t t = b == 1 ? 300 : 70, h = b == 1 ? 1 : 4, d = 16, e = h * d;
      rg::Tensor qkv = rg::uniform({b, t, 3 * e}, -1, 1).requires_grad_();
      rg::Tensor qkv64 = qkv.detach().to(rg::kFloat64).requires_grad_();
      rg::Tensor upstream = rg::uniform({b, t, e}, -1, 1);
      auto attend = [&](const rg::Tensor& x) {
        auto head = [&](int64_t i) { return x.narrow(-1, i * e, e).view({b, t, h, d}).transpose(1, 2); };
        rg::Tensor o = rg::scaled_dot_product_attention(head(0), head(1), head(2), {.causal = true});
        return o;
      };
      auto merged = [&](const rg::Tensor& o) { return o.transpose(1, 2).reshape({b, t, e}); };
      // The reference on one thread: the float64 route splits key blocks the same way.
      rg::set_num_threads(1);
      rg::Tensor out64 = attend(qkv64);
      (merged(out64) * upstream.to(rg::kFloat64)).sum().backward();
      rg::set_num_threads(threads);
      rg::Tensor out = attend(qkv);
      if (rg::cpu_attention_kernel(d, d) == "fused" && h > 1) {
        CHECK_FALSE(out.is_contiguous());
        CHECK(out.transpose(1, 2).is_contiguous());  // (B, T, H, D) underneath
      }
      CHECK(worst(out, out64, 1e-5, 1e-4) <= 1.0);
      (merged(out) * upstream).sum().backward();
      CHECK(worst(qkv.grad(), qkv64.grad(), 1e-4, 1e-3) <= 1.0);
    }
  rg::set_num_threads(saved_threads);
}
