// test_ring_attention.cpp — the ring attention contract, run by ctest under mpirun
// with N = 1, 2, 3, 4 ranks.
//
// Every rank draws the same whole-sequence q, k, v (B, H, T, D) in float64 and computes
// single-process scaled_dot_product_attention and its gradients on all T positions
// (the reference). Then each rank takes its shard — contiguous, or zigzag chunks
// r and 2N−1−r — runs parallel::ring_attention over the world, and backward with its
// shard of the same upstream gradient. Its output and dq/dk/dv must equal the
// matching slices of the reference to 1e-9: non-causal and causal, both layouts,
// and with dropout (same generator state: the same mask).
// Then context_parallel: a small nn::MultiheadAttention (same weights everywhere)
// inside the region gives this rank's slice of the full-sequence output, and the
// parameter gradients summed over ranks equal the full-sequence ones; the guard
// restores the buffers and the attention implementation; and its errors.
// Also the modern blocks (issue 16): rotary embeddings at each shard's global positions and
// grouped-query attention (the ring carries the fewer K/V heads), alone and together, and
// an MHA with both inside context_parallel under each method.
// Prints "rank R/N: X passed, M failed" (one line per rank); exit code 1 on failure.
#include <ringgrad/parallel/context_parallel.h>
#include <ringgrad/parallel/ring_attention.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include "checks.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace rg = ringgrad;
using rg::parallel::SequenceLayout;

namespace {

using mpi_test::check;

double max_abs_diff(const rg::Tensor& a, const rg::Tensor& b) {
  if (a.shape() != b.shape()) return 1e300;
  return rg::amax(rg::abs(a - b)).item();
}

// The worst value over all ranks (so rank 0 can print it).
double max_over_ranks(rg::parallel::Communicator& comm, double x) {
  rg::Tensor t = rg::full({1}, x, {.dtype = rg::kFloat64});
  comm.all_reduce(t, rg::parallel::Reduce::Max);
  return t.item();
}

// Rank r's shard of t along dim `d`, written independently of the library:
// contiguous [r·T/N, (r+1)·T/N), or zigzag chunks r and 2N−1−r of 2N.
rg::Tensor shard(const rg::Tensor& t, int64_t d, SequenceLayout layout, int r, int n) {
  if (layout == SequenceLayout::Contiguous) {
    int64_t len = t.size(d) / n;
    return t.narrow(d, r * len, len).contiguous();
  }
  int64_t c = t.size(d) / (2 * n);
  return rg::cat({t.narrow(d, r * c, c), t.narrow(d, (2 * n - 1 - r) * c, c)}, d);
}

rg::Tensor leaf(const rg::Tensor& t) {
  rg::Tensor x = t.detach().clone();
  x.requires_grad_();
  return x;
}

struct Case {
  const char* name;
  bool causal;
  SequenceLayout layout;
  double dropout_p;
};

}  // namespace

int main(int argc, char** argv) {
  rg::parallel::World world(argc, argv);
  rg::parallel::Communicator& comm = world.communicator();
  const int rank = world.rank(), n = world.size();
  rg::set_num_threads(1);
  return rg::parallel::main_guard(world, [&] {
    // ---- ring_attention against one process on the whole sequence ----
    const int64_t B = 2, H = 2, D = 4, c = 3, T = 2 * n * c;  // 2N chunks of 3 positions
    const rg::TensorOptions f64{.dtype = rg::kFloat64};
    rg::Generator data_gen(7);  // the same data on every rank
    rg::Tensor q = rg::randn({B, H, T, D}, f64, &data_gen);
    rg::Tensor k = rg::randn({B, H, T, D}, f64, &data_gen);
    rg::Tensor v = rg::randn({B, H, T, D}, f64, &data_gen);
    rg::Tensor dout = rg::randn({B, H, T, D}, f64, &data_gen);

    const Case cases[] = {
        {"non-causal, contiguous", false, SequenceLayout::Contiguous, 0.0},
        {"causal, zigzag", true, SequenceLayout::Zigzag, 0.0},
        {"causal, contiguous", true, SequenceLayout::Contiguous, 0.0},
        {"non-causal, zigzag", false, SequenceLayout::Zigzag, 0.0},
        {"causal, zigzag, dropout 0.3", true, SequenceLayout::Zigzag, 0.3},
    };
    for (const Case& cs : cases) {
      // Reference: the whole sequence in one process.
      rg::Generator ref_gen(99);
      rg::Tensor qf = leaf(q), kf = leaf(k), vf = leaf(v);
      rg::Tensor ref = rg::scaled_dot_product_attention(
          qf, kf, vf, {.causal = cs.causal, .dropout_p = cs.dropout_p, .generator = &ref_gen});
      ref.backward(dout);
      if (cs.dropout_p > 0) {  // the mask really dropped something
        rg::NoGradGuard no_grad;
        rg::Tensor plain = rg::scaled_dot_product_attention(q, k, v, {.causal = cs.causal});
        check(max_abs_diff(ref, plain) > 1e-3, "dropout changes the reference", rank);
      }

      // This rank's shards through the ring (small tiles, so several per block).
      rg::Generator ring_gen(99);
      auto sh = [&](const rg::Tensor& t) { return shard(t, 2, cs.layout, rank, n); };
      rg::Tensor qs = leaf(sh(q)), ks = leaf(sh(k)), vs = leaf(sh(v));
      rg::Tensor out = rg::parallel::ring_attention(qs, ks, vs, comm,
                                                    {.causal = cs.causal,
                                                     .dropout_p = cs.dropout_p,
                                                     .generator = &ring_gen,
                                                     .block_q = 2,
                                                     .block_k = 4,
                                                     .layout = cs.layout});
      out.backward(sh(dout));

      double d_out = max_abs_diff(out, sh(ref));
      double d_q = max_abs_diff(qs.grad(), sh(qf.grad()));
      double d_k = max_abs_diff(ks.grad(), sh(kf.grad()));
      double d_v = max_abs_diff(vs.grad(), sh(vf.grad()));
      std::string what = std::string(cs.name) + ": ";
      check(d_out <= 1e-9, what + "output (max diff " + std::to_string(d_out) + ")", rank);
      check(d_q <= 1e-9, what + "dq (max diff " + std::to_string(d_q) + ")", rank);
      check(d_k <= 1e-9, what + "dk (max diff " + std::to_string(d_k) + ")", rank);
      check(d_v <= 1e-9, what + "dv (max diff " + std::to_string(d_v) + ")", rank);
      double worst_out = max_over_ranks(comm, d_out);
      double worst_grad = max_over_ranks(comm, std::max({d_q, d_k, d_v}));
      if (rank == 0)
        std::printf("N=%d %-28s max |ring - single| out %.3g, dq/dk/dv %.3g\n", n, cs.name,
                    worst_out, worst_grad);
    }

    // ---- RoPE and grouped-query attention through the ring (causal zigzag) ----
    // RoPE: each rank rotates its q/k shard by its *global* positions (its zigzag chunks of
    // arange(T)) before the ring; GQA: the ring carries the Hkv = 2 K/V heads of H = 4.
    // Gradients are taken w.r.t. the un-rotated q, k (through the rotation).
    for (auto [rope, gqa] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
      const int64_t Hq = 4, Hkv = gqa ? 2 : 4, Dr = 6;
      rg::Generator g2(11);
      rg::Tensor q4 = rg::randn({B, Hq, T, Dr}, f64, &g2);
      rg::Tensor k4 = rg::randn({B, Hkv, T, Dr}, f64, &g2);
      rg::Tensor v4 = rg::randn({B, Hkv, T, Dr}, f64, &g2);
      rg::Tensor d4 = rg::randn({B, Hq, T, Dr}, f64, &g2);
      rg::Tensor pos = rg::arange(double(T), {.dtype = rg::kInt64});
      auto rot = [&](const rg::Tensor& t, const rg::Tensor& p) {
        return rope ? rg::nn::rotary_embedding(t, p) : t;
      };
      rg::Tensor qf = leaf(q4), kf = leaf(k4), vf = leaf(v4);
      rg::Tensor ref = rg::scaled_dot_product_attention(rot(qf, pos), rot(kf, pos), vf,
                                                        {.causal = true, .enable_gqa = gqa});
      ref.backward(d4);

      auto sh = [&](const rg::Tensor& t, int64_t d) { return shard(t, d, SequenceLayout::Zigzag, rank, n); };
      rg::Tensor my_pos = sh(pos, 0);  // this rank's global positions
      rg::Tensor qs = leaf(sh(q4, 2)), ks = leaf(sh(k4, 2)), vs = leaf(sh(v4, 2));
      rg::Tensor out = rg::parallel::ring_attention(
          rot(qs, my_pos), rot(ks, my_pos), vs, comm,
          {.causal = true, .block_q = 2, .block_k = 4, .layout = SequenceLayout::Zigzag});
      out.backward(sh(d4, 2));
      double d_out = max_abs_diff(out, sh(ref, 2));
      double d_grad = std::max({max_abs_diff(qs.grad(), sh(qf.grad(), 2)),
                                max_abs_diff(ks.grad(), sh(kf.grad(), 2)),
                                max_abs_diff(vs.grad(), sh(vf.grad(), 2))});
      std::string what = std::string(rope ? "rope" : "") + (rope && gqa ? " + " : "") +
                         (gqa ? "gqa (4 q heads, 2 kv)" : "") + ", causal zigzag: ";
      check(d_out <= 1e-9, what + "output (max diff " + std::to_string(d_out) + ")", rank);
      check(d_grad <= 1e-9, what + "dq/dk/dv (max diff " + std::to_string(d_grad) + ")", rank);
      double worst_out = max_over_ranks(comm, d_out), worst_grad = max_over_ranks(comm, d_grad);
      if (rank == 0)
        std::printf("N=%d %-44s max |ring - single| out %.3g, dq/dk/dv %.3g\n", n, what.c_str(),
                    worst_out, worst_grad);
    }

    {  // shapes: zigzag needs two chunks per rank
      std::string msg;
      try {
        rg::Tensor odd = rg::randn({1, 1, 3, 2}, f64);
        rg::parallel::ring_attention(odd, odd, odd, comm, {.causal = true});
      } catch (const rg::Error& e) {
        msg = e.what();
      }
      check(msg.find("[ring_attention] expected even local lengths") != std::string::npos,
            "odd zigzag shard is an error: '" + msg + "'", rank);
    }

    // ---- context_parallel with a tiny nn::MultiheadAttention ----
    using Method = rg::parallel::ContextParallelMethod;
    for (Method method : {Method::Ring, Method::AllGather, Method::Ulysses})
    for (bool causal : {false, true}) {
      const int64_t E = 24;  // 12 heads: Ulysses needs them divisible by N = 1..4
      rg::manual_seed(3);  // the same weights on every rank
      rg::nn::MultiheadAttention mha(E, 12, {.batch_first = true});
      mha.to(rg::kFloat64);
      rg::Tensor x = rg::randn({B, T, E}, f64, &data_gen);
      rg::Tensor w = rg::randn({B, T, E}, f64, &data_gen);  // loss = Σ y ⊙ w

      // Reference: the whole sequence.
      mha.zero_grad();
      rg::Tensor y_ref = mha(x, x, x, {.is_causal = causal});
      (y_ref * w).sum().backward();
      std::vector<rg::Tensor> ref_grads;
      for (const rg::Tensor& p : mha.parameters()) ref_grads.push_back(p.grad().clone());

      mha.zero_grad();
      rg::Tensor xs = x, ws = w;
      const char* method_name = method == Method::Ring        ? "ring"
                                : method == Method::AllGather ? "all-gather"
                                                              : "ulysses";
      const std::string tag = std::string(method_name) + (causal ? ", causal: " : ", non-causal: ");
      {
        auto cp = rg::parallel::context_parallel(world, {&xs, &ws}, /*seq_dims=*/{1},
                                                 {.causal = causal, .method = method});
        check(xs.size(1) == T / n && ws.size(1) == T / n, tag + "buffers sharded in place", rank);
        check(max_abs_diff(xs, cp.shard_sequence(x, 1)) == 0, tag + "shard is this rank's", rank);
        rg::nn::AttentionImpl inside = rg::nn::set_attention_impl({});
        check(static_cast<bool>(inside), tag + "ring attention installed", rank);
        rg::nn::set_attention_impl(inside);

        rg::Tensor y = mha(xs, xs, xs, {.is_causal = causal});
        (y * ws).sum().backward();
        double d_y = max_abs_diff(y, cp.shard_sequence(y_ref, 1));
        double d_gather = max_abs_diff(cp.gather_sequence(y, 1), y_ref);
        // Each rank's parameter gradients cover its positions: their sum is the whole.
        double d_grad = 0;
        auto params = mha.parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          rg::Tensor g = params[i].grad().clone();
          comm.all_reduce(g, rg::parallel::Reduce::Sum);
          d_grad = std::max(d_grad, max_abs_diff(g, ref_grads[i]));
        }
        check(d_y <= 1e-9, tag + "MHA in the region = full slice (" + std::to_string(d_y) + ")",
              rank);
        check(d_gather <= 1e-9, tag + "gather_sequence = full output", rank);
        check(d_grad <= 1e-9, tag + "Σ_ranks param grads = full (" + std::to_string(d_grad) + ")",
              rank);
        double worst = max_over_ranks(comm, std::max({d_y, d_gather, d_grad}));
        if (rank == 0)
          std::printf("N=%d context_parallel %-10s MHA %-11s max |cp - full| (out, gather, grads) %.3g\n",
                      n, method_name, causal ? "causal" : "non-causal", worst);
        if (method == Method::Ulysses && n > 1) {  // heads that do not divide by N
          std::string err;
          try {
            rg::Tensor odd = rg::randn({1, n + 1, T / n, 2}, f64);
            rg::nn::attention(odd, odd, odd);
          } catch (const rg::Error& e) {
            err = e.what();
          }
          check(err.find("divisible by the " + std::to_string(n) + " ranks for the Ulysses method") !=
                    std::string::npos,
                tag + "heads not divisible by N: '" + err + "'", rank);
        }

        std::string msg;  // additive masks are not supported in the region (yet)
        try {
          rg::Tensor qh = rg::randn({B, 2, T / n, 4}, f64);
          rg::nn::attention(qh, qh, qh, {.mask = rg::zeros({T / n, T / n}, f64)});
        } catch (const rg::Error& e) {
          msg = e.what();
        }
        check(msg.find("[context_parallel]") != std::string::npos &&
                  msg.find("masks are not supported") != std::string::npos,
              tag + "mask in the region is an error: '" + msg + "'", rank);
      }
      check(xs.impl_ptr() == x.impl_ptr() && ws.impl_ptr() == w.impl_ptr(),
            tag + "buffers restored", rank);
      rg::nn::AttentionImpl after = rg::nn::set_attention_impl({});
      check(!after, tag + "attention implementation restored", rank);
    }

    // ---- context_parallel: MultiheadAttention with GQA and rotary (the GPT's modern block) ----
    // The positions buffer is sharded with the input, so each rank rotates by global positions.
    for (Method method : {Method::Ring, Method::AllGather, Method::Ulysses}) {
      const int64_t E = 24;  // 12 query heads, 4 K/V heads, head dim 2
      rg::manual_seed(5);
      rg::nn::MultiheadAttention mha(E, 12, {.batch_first = true, .kv_heads = 4, .rotary = true});
      mha.to(rg::kFloat64);
      rg::Generator g3(13);
      rg::Tensor x = rg::randn({B, T, E}, f64, &g3), w = rg::randn({B, T, E}, f64, &g3);
      rg::Tensor pos = rg::arange(double(T), {.dtype = rg::kInt64}).unsqueeze(0);  // (1, T)
      mha.zero_grad();
      rg::Tensor y_ref = mha(x, x, x, {.is_causal = true, .positions = pos});
      (y_ref * w).sum().backward();
      std::vector<rg::Tensor> ref_grads;
      for (const rg::Tensor& p : mha.parameters()) ref_grads.push_back(p.grad().clone());
      mha.zero_grad();
      rg::Tensor xs = x, ws = w, ps = pos;
      const char* method_name = method == Method::Ring ? "ring" : method == Method::AllGather ? "all-gather" : "ulysses";
      double d_y = 0, d_grad = 0;
      {
        auto cp = rg::parallel::context_parallel(world, {&xs, &ws, &ps}, /*seq_dims=*/{1},
                                                 {.causal = true, .method = method});
        rg::Tensor y = mha(xs, xs, xs, {.is_causal = true, .positions = ps});
        (y * ws).sum().backward();
        d_y = max_abs_diff(y, cp.shard_sequence(y_ref, 1));
        auto params = mha.parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          rg::Tensor g = params[i].grad().clone();
          comm.all_reduce(g, rg::parallel::Reduce::Sum);
          d_grad = std::max(d_grad, max_abs_diff(g, ref_grads[i]));
        }
      }
      const std::string tag = std::string(method_name) + ", MHA gqa + rope, causal: ";
      check(d_y <= 1e-9, tag + "output = full slice (" + std::to_string(d_y) + ")", rank);
      check(d_grad <= 1e-9, tag + "Σ_ranks param grads = full (" + std::to_string(d_grad) + ")", rank);
      double worst = max_over_ranks(comm, std::max(d_y, d_grad));
      if (rank == 0)
        std::printf("N=%d context_parallel %-10s MHA gqa(12 q, 4 kv) + rope, causal: max |cp - full| %.3g\n",
                    n, method_name, worst);
    }

    {  // a length that does not divide: an error naming the buffer, nothing changed
      rg::Tensor a = rg::zeros({2, 2 * n}), b = rg::zeros({2, 2 * n + 1});
      rg::Tensor a0 = a;
      std::string msg;
      try {
        auto cp = rg::parallel::context_parallel(world, {&a, &b}, {1}, {.causal = true});
      } catch (const rg::Error& e) {
        msg = e.what();
      }
      check(msg.find("[context_parallel] expected buffer 1's sequence dim 1 (length " +
                     std::to_string(2 * n + 1) + ")") != std::string::npos,
            "indivisible length is an error: '" + msg + "'", rank);
      check(a.impl_ptr() == a0.impl_ptr() && a.size(1) == 2 * n, "no buffer changed on error",
            rank);
    }

    return mpi_test::report(rank, n);
  });
}
