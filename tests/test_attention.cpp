// test_attention.cpp — blockwise attention against the plain reference formula
// (masks, causal, dropout, fully masked rows), the block pieces ring attention
// builds on (attention_forward per key block, merge_attention_, backward with
// global out/lse), float32 against float64, and the errors. Its finite-difference
// gradients are cases of the op table (test_op_cases_nn.cpp, run by test_gradcheck.cpp).
#include <cmath>
#include <limits>
#include <tuple>

#include "test_helpers.h"

using test::check_close;
using test::error_of;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// softmax(scale·q·kᵀ + mask)·v, the whole T×T matrix at once, with ordinary ops.
rg::Tensor reference_attention(const rg::Tensor& q, const rg::Tensor& k, const rg::Tensor& v,
                               const rg::Tensor& mask = {}, bool causal = false) {
  double scale = 1.0 / std::sqrt(double(q.size(-1)));
  rg::Tensor s = rg::matmul(q, k.transpose(-2, -1)) * scale;
  if (mask.defined()) s = s + mask;
  if (causal) {
    int64_t tq = q.size(-2), tk = k.size(-2);
    rg::Tensor i = rg::arange(double(tq), {.dtype = rg::kInt64}).view({tq, 1});
    rg::Tensor j = rg::arange(double(tk), {.dtype = rg::kInt64}).view({1, tk});
    s = rg::masked_fill(s, j > i, -kInf);
  }
  return rg::matmul(rg::softmax(s, -1), v);
}

rg::Tensor rand64(const rg::Shape& s) { return rg::uniform(s, -1, 1, {.dtype = rg::kFloat64}); }

// Small tiles so that every test crosses several query and key blocks.
rg::AttentionOptions tiny_tiles(rg::AttentionOptions o = {}) {
  o.block_q = 3;
  o.block_k = 4;
  return o;
}

}  // namespace

TEST_CASE("attention: blockwise forward equals softmax(QKᵀ/√d)·V, with masks and causal") {
  rg::Tensor q = rand64({2, 3, 7, 5}), k = rand64({2, 3, 9, 5}), v = rand64({2, 3, 9, 4});
  rg::Tensor out = rg::scaled_dot_product_attention(q, k, v, tiny_tiles());
  CHECK_SHAPE(out, {2, 3, 7, 4});
  check_close(out, reference_attention(q, k, v), 1e-10);

  // Additive mask broadcast over batch and heads (a padding mask: last two keys hidden).
  std::vector<double> pad(9, 0.0);
  pad[7] = pad[8] = -kInf;
  rg::Tensor mask = test::f64(pad, {1, 1, 1, 9});
  check_close(rg::scaled_dot_product_attention(q, k, v, tiny_tiles({.mask = mask})),
              reference_attention(q, k, v, mask), 1e-10);

  // Causal, square.
  rg::Tensor kq = rand64({2, 3, 7, 5}), vq = rand64({2, 3, 7, 4});
  check_close(rg::scaled_dot_product_attention(q, kq, vq, tiny_tiles({.causal = true})),
              reference_attention(q, kq, vq, {}, true), 1e-10);

  // Default tiles (one tile) and 3-D input (one head) give the same.
  check_close(rg::scaled_dot_product_attention(q[0], k[0], v[0]),
              reference_attention(q[0], k[0], v[0]), 1e-10);
}

TEST_CASE("attention: dropout is seeded and scaled by 1/(1-p)") {
  rg::Tensor q = rand64({1, 2, 6, 4}), k = rand64({1, 2, 6, 4}), v = rand64({1, 2, 6, 4});
  auto run = [&](uint64_t seed) {
    rg::Generator g(seed);
    return rg::scaled_dot_product_attention(q, k, v, tiny_tiles({.dropout_p = 0.3, .generator = &g}));
  };
  check_close(run(5), run(5), 0);
  CHECK_FALSE(rg::allclose(run(5), run(6)));
  // E[dropout(P)] = P: averaged over many seeds the output approaches the plain one.
  rg::Tensor avg = rg::zeros_like(q);
  for (uint64_t s = 0; s < 400; ++s) avg = avg + run(s);
  CHECK(rg::allclose(avg / 400.0, reference_attention(q, k, v), 0, 0.05));
  // Its gradient with a fixed mask: the op table's case attention:dropout (test_gradcheck.cpp).
}

TEST_CASE("attention: fully masked rows give 0 and lse = -inf, without NaN") {
  rg::Tensor q = rand64({1, 1, 3, 2}), k = rand64({1, 1, 4, 2}), v = rand64({1, 1, 4, 2});
  rg::Tensor mask = rg::zeros({1, 1, 3, 4}, {.dtype = rg::kFloat64});
  mask.select(2, 1).fill_(-kInf);  // query 1 sees nothing
  rg::AttentionOutput r = rg::attention_forward(q, k, v, tiny_tiles({.mask = mask}));
  check_close(r.out.select(2, 1), {0.0, 0.0});
  CHECK(r.lse.select(2, 1).item() == -kInf);
  check_close(r.out.select(2, 0), reference_attention(q, k, v).select(2, 0), 1e-10);
  // A causal block entirely in the future of every query.
  rg::AttentionOutput f =
      rg::attention_forward(q, k, v, tiny_tiles({.causal = true, .q_offset = 0, .k_offset = 10}));
  check_close(f.out, std::vector<double>(6, 0.0));
}

TEST_CASE("attention: a NaN in a query row makes that row NaN, not a masked row's 0") {
  // Every score of row 1 is NaN: the row pass's max skips NaN, which once read as "every
  // key masked" and gave 0 (torch gives NaN, and a GradScaler must see it).
  rg::Tensor q = rand64({1, 1, 3, 2}), k = rand64({1, 1, 5, 2}), v = rand64({1, 1, 5, 2});
  q.select(2, 1).select(-1, 0).fill_(std::nan(""));
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    rg::AttentionOutput r = rg::attention_forward(q, k, v, tiny_tiles({.causal = causal}));
    rg::Tensor nan_rows = (r.out != r.out).to(rg::kFloat64).sum(-1).view({3});
    check_close(nan_rows, {0.0, 2.0, 0.0});
    CHECK(std::isnan(r.lse.view({3}).select(0, 1).item()));
    check_close(r.out.select(2, 0), reference_attention(q, k, v, {}, causal).select(2, 0), 1e-10);
  }
}

TEST_CASE("attention: per key block + merge_attention_ == whole; backward with global out/lse") {
  // What ring attention does: each key block separately, merged; then each block's
  // dk/dv from the global (out, lse).
  rg::Tensor q = rand64({2, 2, 6, 3}), k = rand64({2, 2, 8, 3}), v = rand64({2, 2, 8, 4});
  rg::AttentionOptions causal = tiny_tiles({.causal = true, .q_offset = 2});
  rg::AttentionOutput whole = rg::attention_forward(q, k, v, causal);
  rg::AttentionOptions first = causal, second = causal;
  second.k_offset = 4;
  rg::AttentionOutput a = rg::attention_forward(q, k.narrow(2, 0, 4), v.narrow(2, 0, 4), first);
  rg::AttentionOutput b = rg::attention_forward(q, k.narrow(2, 4, 4), v.narrow(2, 4, 4), second);
  rg::merge_attention_(a.out, a.lse, b.out, b.lse);
  check_close(a.out, whole.out, 1e-10);
  check_close(a.lse, whole.lse, 1e-10);

  rg::Tensor dout = rand64({2, 2, 6, 4});
  rg::AttentionGrads g = rg::attention_backward(q, k, v, whole.out, whole.lse, dout, causal);
  rg::AttentionGrads g1 = rg::attention_backward(q, k.narrow(2, 0, 4), v.narrow(2, 0, 4),
                                                 whole.out, whole.lse, dout, first);
  rg::AttentionGrads g2 = rg::attention_backward(q, k.narrow(2, 4, 4), v.narrow(2, 4, 4),
                                                 whole.out, whole.lse, dout, second);
  check_close(g1.dq + g2.dq, g.dq, 1e-10);
  check_close(rg::cat({g1.dk, g2.dk}, 2), g.dk, 1e-10);
  check_close(rg::cat({g1.dv, g2.dv}, 2), g.dv, 1e-10);

  // And those equal autograd through the reference formula (with the offsets' causal mask).
  rg::Tensor ql = q.clone().requires_grad_(), kl = k.clone().requires_grad_(),
             vl = v.clone().requires_grad_();
  rg::Tensor i = rg::arange(6.0, {.dtype = rg::kInt64}).view({6, 1}) + 2;
  rg::Tensor j = rg::arange(8.0, {.dtype = rg::kInt64}).view({1, 8});
  rg::Tensor mask = rg::masked_fill(rg::zeros({6, 8}, {.dtype = rg::kFloat64}), j > i, -kInf);
  (reference_attention(ql, kl, vl, mask) * dout).sum().backward();
  check_close(g.dq, ql.grad(), 1e-10);
  check_close(g.dk, kl.grad(), 1e-10);
  check_close(g.dv, vl.grad(), 1e-10);
}

// Causal tiles of more than 64 rows that cross the diagonal are computed in row slices
// (Problem::for_each_part): forward and gradients still equal the reference, with the
// default 128-wide tiles, a block size that does not divide T, and ring attention's offsets.
TEST_CASE("attention: causal diagonal tiles in row slices equal the reference, forward and backward") {
  for (auto [tq, bq, q_offset] : {std::tuple<int64_t, int64_t, int64_t>{300, 128, 0},
                                  {200, 96, 0}, {150, 100, 40}}) {
    CAPTURE(tq);
    CAPTURE(bq);
    const int64_t tk = tq + q_offset;  // keys [0, tk): queries sit at positions q_offset…
    rg::Tensor q = rand64({1, 2, tq, 8}).requires_grad_(), k = rand64({1, 2, tk, 8}).requires_grad_(),
               v = rand64({1, 2, tk, 8}).requires_grad_();
    rg::AttentionOptions o{.causal = true, .q_offset = q_offset};
    o.block_q = bq, o.block_k = bq;
    rg::Tensor got = rg::scaled_dot_product_attention(q, k, v, o);
    rg::Tensor i = rg::arange(double(tq), {.dtype = rg::kInt64}).view({tq, 1}) + q_offset;
    rg::Tensor j = rg::arange(double(tk), {.dtype = rg::kInt64}).view({1, tk});
    rg::Tensor mask = rg::masked_fill(rg::zeros({tq, tk}, {.dtype = rg::kFloat64}), j > i, -kInf);
    rg::Tensor want = reference_attention(q, k, v, mask);
    check_close(got, want, 1e-10);
    rg::Tensor dout = rand64(got.shape());
    got.backward(dout);
    std::vector<rg::Tensor> grads;
    for (rg::Tensor* t : {&q, &k, &v}) {
      grads.push_back(t->grad().clone());
      t->set_grad(rg::Tensor());
    }
    want.backward(dout);
    check_close(grads[0], q.grad(), 1e-10);
    check_close(grads[1], k.grad(), 1e-10);
    check_close(grads[2], v.grad(), 1e-10);
  }
}

TEST_CASE("attention: float32 matches float64") {
  rg::Tensor q = rand64({2, 4, 33, 16}), k = rand64({2, 4, 40, 16}), v = rand64({2, 4, 40, 16});
  rg::Tensor want = rg::scaled_dot_product_attention(q, k, v, {.causal = true});
  rg::Tensor got = rg::scaled_dot_product_attention(q.to(rg::kFloat32), k.to(rg::kFloat32),
                                                    v.to(rg::kFloat32), {.causal = true});
  CHECK(rg::allclose(got.to(rg::kFloat64), want, 1e-4, 1e-5));
}

TEST_CASE("attention: 1024-row tiles on the GEMM route match float64 (GEMMs that accumulate)") {
  // Head dim 80 has no fused kernel: GEMMs and row passes. With 1024 × 1024 tiles the
  // backward's dV += Pᵀ·dO and dK += dSᵀ·Q read a transposed A 1024 floats wide over an
  // inner dim of 1024 and add into what the last tile left (beta = 1): the GEMM's
  // computed-the-other-way-round route (core/cpu/gemm.cpp) with its accumulation.
  rg::manual_seed(9);
  rg::Tensor q = rand64({1, 1, 2048, 80}), k = rand64({1, 1, 2048, 80}), v = rand64({1, 1, 2048, 80});
  rg::AttentionOptions o{.causal = true};
  o.block_q = o.block_k = 1024;
  std::vector<rg::Tensor> want, got;
  for (rg::DType dt : {rg::kFloat64, rg::kFloat32}) {
    auto leaf = [dt](const rg::Tensor& t) { return t.to(dt).detach().requires_grad_(true); };
    rg::Tensor qd = leaf(q), kd = leaf(k), vd = leaf(v);
    rg::Tensor out = rg::scaled_dot_product_attention(qd, kd, vd, o);
    (out * out).sum().backward();
    auto& into = dt == rg::kFloat64 ? want : got;
    for (const rg::Tensor& t : {out, qd.grad(), kd.grad(), vd.grad()}) into.push_back(t.to(rg::kFloat64));
  }
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(rg::allclose(got[i], want[i], 1e-3, 1e-4));
  }
}

TEST_CASE("attention: errors name the shapes") {
  rg::Tensor q = rg::zeros({1, 2, 3, 4}), k = rg::zeros({1, 2, 5, 4}), v = rg::zeros({1, 2, 5, 6});
  CHECK_CONTAINS(error_of([&] { rg::scaled_dot_product_attention(q, k.narrow(3, 0, 3), v); }),
                 "expected q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv), got q [1, 2, 3, 4], k [1, 2, 5, 3]");
  CHECK_CONTAINS(error_of([&] { rg::scaled_dot_product_attention(q, k, v, {.mask = rg::zeros({3, 4})}); }),
                 "expected broadcastable shapes, got [3, 4] and [1, 2, 3, 5]");
  CHECK_CONTAINS(error_of([&] {
                   rg::scaled_dot_product_attention(q, k, v, {.mask = rg::zeros({3, 5}, {.dtype = rg::kFloat64})});
                 }),
                 "expected a bool mask (true = may attend) or an additive one of dtype float32, got float64");
  CHECK_CONTAINS(error_of([&] { rg::scaled_dot_product_attention(q, k, rg::zeros({5})); }),
                 "expected q (…, Tq, D), k (…, Tk, D), v (…, Tk, Dv), got q [1, 2, 3, 4], k [1, 2, 5, 4], v [5]");
  CHECK_CONTAINS(error_of([&] { rg::scaled_dot_product_attention(rg::zeros({2, 1, 3, 3, 4}), k, v); }),
                 "expected q (…, H, Tq, D), k (…, H, Tk, D), v (…, H, Tk, Dv), got q [2, 1, 3, 3, 4], k [1, 2, 5, 4], v [1, 2, 5, 6]");
  CHECK_CONTAINS(error_of([&] { rg::scaled_dot_product_attention(rg::zeros({3, 2, 3, 4}), rg::zeros({2, 2, 5, 4}), rg::zeros({2, 2, 5, 6})); }),
                 "broadcast");
  CHECK_CONTAINS(error_of([&] { rg::scaled_dot_product_attention(q, k, v, {.dropout_p = 1.0}); }),
                 "expected 0 <= dropout_p < 1, got 1");
}

TEST_CASE("attention: the backward gives the same bits on every run, whichever way work is split") {
  // With 2 threads: one or three pairs split the backward by key blocks (dQ summed from
  // per-item buffers), four pairs by pairs; one thread runs everything in order.
  const int threads = rg::get_num_threads();
  for (int64_t heads : {1, 3, 4}) {
    CAPTURE(heads);
    rg::manual_seed(40 + heads);
    rg::Tensor q = rand64({1, heads, 37, 8}), k = rand64({1, heads, 45, 8}),
               v = rand64({1, heads, 45, 8}), dout = rand64({1, heads, 37, 8});
    const rg::AttentionOptions o = tiny_tiles({.causal = true});
    auto grads = [&](int n) {
      rg::set_num_threads(n);
      rg::AttentionOutput r = rg::attention_forward(q, k, v, o);
      return rg::attention_backward(q, k, v, r.out, r.lse, dout, o);
    };
    rg::AttentionGrads a = grads(2), b = grads(2), one = grads(1);
    for (auto [x, y, z] : {std::tuple{a.dq, b.dq, one.dq}, std::tuple{a.dk, b.dk, one.dk},
                           std::tuple{a.dv, b.dv, one.dv}}) {
      CHECK((x - y).abs().max().item() == 0.0);
      check_close(x, z, 1e-12);
    }
  }
  rg::set_num_threads(threads);
}
