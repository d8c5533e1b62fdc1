// gpt/plan_experts.h — what the planner (gpt/plan.h) counts for an MoE block (--experts):
// its parameters on a rank (moe_tensors), what it keeps for backward and its backward's
// gradients (moe_kept, moe_backward), and what it sends (moe_traffic). The router's choices
// are data: the figures take the tokens spread evenly over the experts, and under --ep the
// rows a rank's experts run as PlanLayout::expert_rows even shares (expert_rows_bound: the
// most). tests/check_gpt_plan.sh experts holds them to runs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "budget.h"  // all_reduce_bytes: the communicators' count
#include "model.h"
#include "plan_layout.h"

namespace gpt {

// An MoE block's parameters on one rank (nn::MoE, in its order): the router (E × d_model, no
// bias), this rank's E/ep experts, each the block's MLP (GELU's fc and proj with biases, or
// SwiGLU's w1, w2, w3), and the shared experts as one MLP S times as wide. Whole on every tp
// rank: tensor parallelism splits attention, expert parallelism the experts.
inline void moe_tensors(const GPTConfig& c, int64_t ep, int64_t unit, std::vector<ParamTensor>& out) {
  const int64_t E = c.d_model, h = c.hidden();
  out.push_back({c.experts * E, unit});
  auto mlp = [&](int64_t width, bool expert) {
    if (c.mlp == "swiglu") {
      for (int i = 0; i < 3; ++i) out.push_back({width * E, unit, true, expert});
    } else {
      out.push_back({width * E, unit, true, expert}), out.push_back({width, unit, true, expert});
      out.push_back({E * width, unit, true, expert}), out.push_back({E, unit, true, expert});
    }
  };
  for (int64_t e = 0; e < c.experts / ep; ++e) mlp(h, true);
  if (c.shared_experts > 0) mlp(c.shared_experts * h, false);
}

// The tokens an MoE layer on one rank routes for b sequences — b·T (T/cp under context
// parallelism), 1/tp of them under sequence parallelism, whole on every tp rank otherwise —
// and the rows it sends to the experts: k a token, at most a capacity factor below 1 of them.
struct MoERows {
  double tokens, routed;
};
inline MoERows moe_rows(const GPTConfig& c, const PlanLayout& l, double b) {
  const double N = b * double(c.seq / l.cp) / l.sequence_shards();
  const double kept = c.capacity_factor > 0 ? std::min(1.0, c.capacity_factor) : 1.0;
  return {N, double(c.experts_per_token) * N * kept};
}

// An MoE block's backward (bytes above what it frees): the gradients of the R rows' outputs
// and inputs, and one expert's hidden gradients at a time (R·ep/E rows each); recomputed, the
// MoE's whole activations are moe_kept's and the gradients those and one expert's weights'.
inline void moe_backward(const GPTConfig& c, const PlanLayout& l, double b, Kept& k) {
  const auto [N, R] = moe_rows(c, l, b);
  const double d = double(c.d_model), E = double(c.experts), h = double(c.hidden());
  const double computed = R * (l.ep > 1 ? l.expert_rows : 1);  // the rows this rank's experts run
  const double per_expert = computed * double(l.ep) / E, weights = (c.mlp == "swiglu" ? 3 : 2) * h * d;
  const double unit = l.precision == "fp32" ? (c.mlp == "swiglu" ? 8 : 5) : 7.5;
  k.backward = 4 * (R + computed) * d + unit * h * per_expert;
  k.mlp_grads = 4 * ((R + computed) * d + N * d + weights) + unit * h * per_expert;
}

// The most rows a rank's experts can compute under --ep, in even shares (PlanLayout::
// expert_rows): every token of the ep group routed to this rank's experts (ep shares), or
// under a capacity factor c each of them full (c shares, at least the one a rank sends).
inline double expert_rows_bound(const GPTConfig& c, const PlanLayout& l) {
  if (l.ep == 1) return 1;
  const double P = double(l.ep);
  return c.capacity_factor > 0 ? std::clamp(c.capacity_factor, 1.0, P) : P;
}

// What an MoE layer keeps for backward on one rank, in bytes (nn::MoE::forward_moe): the
// router's scores (N·E, softmax keeps its output), the gates and their sums (N·(k + 1)); for
// each of the R = k·N rows this rank routes (fewer under a capacity factor below 1) its
// experts' output and its gate, and for each row its experts compute the row and its hidden
// tensors (GELU's two of h, SwiGLU's five); the shared experts' hidden tensors for all N
// tokens (N, R: moe_rows). Without --ep a rank computes
// the rows it routes, however the router spreads them; under --ep the rows its experts were
// sent, R·expert_rows (1: the router spreading the tokens evenly, which the load-balance loss
// pushes it towards; expert_rows_bound: the most). Under autocast the experts' tensors are 16-bit
// (SwiGLU casts its input twice) and, where the step does not share one copy, each GEMM
// keeps a 16-bit copy of its weight; the scores, gates and sums stay float32.
inline double moe_kept(const GPTConfig& c, const PlanLayout& l, double b) {
  const auto [N, R] = moe_rows(c, l, b);
  const double d = double(c.d_model), E = double(c.experts), k = double(c.experts_per_token);
  const double h = double(c.hidden());
  const double Rx = R * (l.ep > 1 ? l.expert_rows : 1);  // the rows this rank's experts run
  const double units = (c.mlp == "swiglu" ? 5 : 2) * h, shared = double(c.shared_experts);
  const double routing = 4 * N * E + 4 * N * (k + 1) + 4 * R;
  if (l.precision == "fp32") return routing + 4 * (Rx * (d + units) + R * d + N * shared * units);
  const double casts = c.mlp == "swiglu" ? 2 : 1;  // copies of an expert's input
  const double mlp_weights = (c.mlp == "swiglu" ? 3 : 2) * h * d;  // one expert's
  // The weights' 16-bit copies, where each forward makes its own: the router's, this rank's
  // experts', the shared experts'.
  const double copies = l.weights_cached() ? 0 : 2 * (E * d + (E / double(l.ep) + shared) * mlp_weights);
  return routing + 2 * (Rx * (casts * d + units) + R * d + N * shared * (units + casts * d)) + copies;
}

// What a rank's MoE layers send, over `layers` MoE layers' forwards (each micro-batch's, b
// sequences), a recomputed block's forward run twice (by mesh axis: the ep group lies in the
// data-parallel ranks).
//   --ep P   per forward three all-to-alls (parallel/expert_parallel.cpp): the E row counts
//            (int64), the R = k·N rows to the experts (dispatch, float32) and their outputs
//            back (combine, 16-bit under autocast); backward both again, reversed. A rank
//            keeps (1/P) of the rows its router sends: (P−1)/P of them go out, where the
//            router spreads the tokens evenly (what the plan assumes; the measured bytes
//            follow the routing).
//   a group on several ranks  (--cp, or --tp under --sequence-parallel: nn::MoE::group_sum)
//            per forward all-reduces of each sequence's counts (float64) and score sums and
//            of the z-loss's sum, and under a capacity factor of the counts of its pieces
//            (G·k·pieces·E, float64); backward the score sums' gradient over cp (over tp the
//            gradient passes as it is: reduce_from_tp_region).
inline void moe_traffic(const GPTConfig& c, const PlanLayout& l, double b, double layers, Traffic& sent) {
  using K = par::Collective;
  const double forwards = layers * (c.recompute == "none" ? 1 : 2);
  const double R = moe_rows(c, l, b).routed, d = double(c.d_model);
  const double E = double(c.experts), k = double(c.experts_per_token);
  if (l.ep > 1) {
    const double away = double(l.ep - 1) / double(l.ep), out = l.precision == "fp32" ? 4 : 2;
    sent.add(Axis::Data, K::AllToAll, forwards, std::floor(away * 8 * E));  // the counts
    sent.add(Axis::Data, K::AllToAll, forwards + layers, away * R * 4 * d);  // dispatch, and its gradient
    sent.add(Axis::Data, K::AllToAll, forwards + layers, away * R * out * d);  // combine, and its gradient
  }
  const double G = b, pieces = 2 * double(l.cp) * l.sequence_shards();
  auto group_sums = [&](Axis axis, int64_t g, bool backward) {
    if (g == 1) return;
    sent.add(axis, K::AllReduce, forwards, all_reduce_bytes(8 * G * E, g));  // counts
    sent.add(axis, K::AllReduce, forwards + (backward ? layers : 0), all_reduce_bytes(4 * G * E, g));  // score sums
    sent.add(axis, K::AllReduce, forwards, all_reduce_bytes(4, g));  // z
    if (c.capacity_factor > 0) sent.add(axis, K::AllReduce, forwards, all_reduce_bytes(8 * G * k * pieces * E, g));
  };
  if (l.sequence_parallel) group_sums(Axis::Tp, l.tp, false);
  group_sums(Axis::Cp, l.cp, true);
}

}  // namespace gpt
