// gpt/plan.h — the planner: what each rank of a GPT training run will hold, before it runs.
//
//   gpt::Plan p = gpt::plan(config, {.dp = 2, .strategy = "fsdp", .batch = 16});
//   p.params, p.grads, p.optim, p.activations, p.peak     // bytes, the largest rank's
//
// `gpt --plan --world N` prints these for the run its other flags describe, without training
// (RESULT plan …); a real run prints the measured figures under the same names (RESULT
// example=gpt … params_mb= grads_mb= optim_mb= peak_mb= comm_mb= sent=), and
// tests/check_gpt_plan.sh holds the two to each other: parameters, gradients, optimizer state
// and the bytes sent (by kind of collective, and how many operations of each) to the byte,
// the peak within 10%.
//
// Every figure is one rank's, in bytes (float32 parameters: 4 per number), and the plan
// reports the largest over the mesh's ranks. With P the parameters a rank trains:
//   parameters  4·P. Every rank holds all of them under ddp, zero1 and zero2; under fsdp
//               its shard of each unit, ⌈n/N⌉ of a unit of n (padded, N = dp·cp); with
//               --tp/--pp its stage's slices (gpt/budget.h lists them).
//   gradients   what .grad holds after backward: 4·P, but under zero2 only the owner's
//               (each tensor owned by one rank: largest first, to the least loaded rank, as
//               parallel/zero.cpp assigns them) and under fsdp the shards.
//   optimizer   AdamW's exp_avg and exp_avg_sq (8 bytes a number) and its step counter
//               (one float64 per tensor), for the tensors this rank steps: all, the owned
//               ones (zero1, zero2), or one flat shard per unit (fsdp).
//   activations what forward keeps for backward (examples/memory_budget.cpp derives the
//               float32 counts for GPT-2's blocks; Llama's options, which keep more, are in
//               bytes_kept, in float32 and under autocast): per block 16·b·T·E + (4 + H)·b·T numbers for
//               b sequences of T tokens (T/cp under context parallelism), E wide, H heads;
//               with --tp t the attention's and MLP's inner tensors are split:
//               4·bTE + 12·bTE/t + (4 + H/t)·bT; --recompute selective keeps the attention
//               half only (7·bTE + (2 + H)·bT), full the block's input only (bTE).
//               --sequence-parallel: the four whole bTE (the block's input, its middle
//               residual, the two norms' outputs, which the split GEMMs keep as shards and
//               gather again in backward) are 1/t each: 4·bTE/t + 12·bTE/t + (4 + H)/t·bT;
//               full recomputation keeps bTE/t, and a stage's sends are 1/t. The head
//               keeps 2·bTE + 2·bT + bT·V/t + bT (the final norm, the logits, the loss's
//               log-sum-exp). A pipeline stage keeps the micro-batches in flight, each of
//               b = batch/m rows, as its --schedule runs them (held_at_peak): under 1F1B stage
//               s holds min(m, p − s) (ZB-H1 too, at least), under GPipe all m, interleaved
//               its v chunks' longer warm-up; a chunk that sends keeps its output
//               for backward. --grad-accum N: one micro-batch of --batch-size at a time.
//               Under autocast (not fsdp) the step's micro-batches share one bfloat16 copy of
//               each GEMM's weight and bias (autocast_weight_cache), 2 bytes a number from the
//               first forward to the last backward, counted once, not in each micro-batch.
//   sent        the bytes one step sends, as the communicators count them (an all-reduce of n
//               bytes over g ranks 2(g−1)/g·n, a broadcast or reduce (g−1)/g·n, an all-gather
//               (g−1)·its input, a reduce-scatter (g−1)/g·its whole input, a send all of it):
//               DDP's buckets; ZeRO-1's broadcasts and ZeRO-2's reduces; FSDP's gathers (each
//               block twice per micro-batch, the root once) and reduce-scatters; tp's and pp's
//               (gpt/budget.h, again for the recomputed forward's all-reduces; under
//               --sequence-parallel each all-reduce an all-gather and a reduce-scatter of the
//               same bytes, the split GEMMs' inputs gathered again in backward, and one
//               all-reduce of the norms' and row biases' gradients); ring attention's
//               K, V, dK, dV passes; the clipping norm's all-reduce. By kind of collective
//               and mesh axis, with the number of operations (Traffic): what a model of the
//               step's time needs, each operation's latency beside its bytes.
//   peak        the largest of the step's moments: the state between steps (parameters,
//               DDP's gradient buckets where DDP averages, optimizer state, the step's batch)
//               plus, at the start of backward, every activation and the logits' gradient;
//               or, in a block's backward, every activation (a stage's, beside the gradient
//               the next stage sent) and the MLP's hidden gradients (measured per option and
//               precision: Kept::backward), the pipeline's first stage's largest moment;
//               with recomputation, at the recomputed block's backward, the kept inputs plus
//               one block's whole activations; at the end of backward the gradients. Under
//               --tp/--pp, also the model's making: each rank cuts its stage's blocks as
//               they are made and holds no whole model (gpt/parallel.h, StageBlocks).
//   work        not memory: the step's FLOPs in GEMMs and in attention, recomputation's
//               included (what the hardware runs, where MFU counts the model's), and the
//               bytes its other ops read and write (RESULT plan … gflops= attention_gflops=
//               traffic_mb=). gpt/step_time.h turns them and the traffic into seconds.
//   experts     --experts E: an MoE block holds the router, its E/ep experts (whole on every
//               tp rank) and any shared experts (moe_tensors) where a dense one holds its MLP;
//               under --ep the experts' gradients are averaged over their own replicas.
//               What it keeps (moe_kept), its backward (moe_backward), what it sends
//               (moe_traffic: the all-to-alls, the routing statistics' sums; all three in
//               gpt/plan_experts.h) and its GEMMs (work) take the router to spread the
//               tokens evenly over the experts. Without --ep a rank's memory does not depend
//               on the routing; under --ep the plan also gives the peak where a rank's
//               experts are sent the most rows they can be (RESULT plan … peak_bound_mb=).
#pragma once

#include <ringgrad/parallel/communicator.h>
#include <ringgrad/parallel/pipeline.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "budget.h"  // all_reduce_bytes, broadcast_bytes: the communicators' count
#include "model.h"
#include "plan_experts.h"  // the MoE blocks' parameters, activations and traffic
#include "plan_layout.h"   // PlanLayout, Traffic, RankPlan, Plan, ParamTensor, Kept

namespace gpt {

// The blocks rank `stage` of a pipeline of `pp` holds, in order: its chunks (virtual stages)
// stage, stage + pp, …, of layers / (pp · virtual_stages) blocks each.
inline std::vector<int64_t> stage_blocks(const GPTConfig& c, int64_t stage, int64_t pp,
                                         int64_t virtual_stages = 1) {
  std::vector<int64_t> out;
  const int64_t per = c.layers / (pp * virtual_stages);
  for (int64_t chunk = 0; chunk < virtual_stages; ++chunk)
    for (int64_t b = (chunk * pp + stage) * per; b < (chunk * pp + stage + 1) * per; ++b)
      out.push_back(b);
  return out;
}

// The parameter tensors of one tp rank of pipeline stage `stage` of `pp` (each rank holding
// its chunks under interleaving), in the order the model registers them.
inline std::vector<ParamTensor> parameter_tensors(const GPTConfig& c, int64_t tp, int64_t stage,
                                                  int64_t pp, int64_t ep = 1,
                                                  int64_t virtual_stages = 1) {
  const int64_t E = c.d_model, V = c.vocab, t = tp;
  const int64_t kv = c.kv_heads == 0 ? c.heads : c.kv_heads, kvE = E / c.heads * kv;
  const bool first = stage == 0, last = stage == pp - 1, rms = c.norm == "rmsnorm";
  std::vector<ParamTensor> out;
  if (first) out.push_back({V / t * E, 0, pp == 1});  // (one stage: the head's weight too)
  if (first && c.pos != "rope") out.push_back({c.seq * E, 0, false});
  auto norm = [&](int64_t unit) {
    out.push_back({E, unit, false});
    if (!rms) out.push_back({E, unit, false});
  };
  for (int64_t b : stage_blocks(c, stage, pp, virtual_stages)) {
    const int64_t u = b + 1;
    norm(u);
    out.push_back({(E + 2 * kvE) / t * E, u});  // in_proj (q, k, v rows; split by heads)
    out.push_back({(E + 2 * kvE) / t, u});
    out.push_back({E * E / t, u});  // out_proj: its input split, its bias whole
    out.push_back({E, u});
    norm(u);
    if (c.moe_block(b)) {
      moe_tensors(c, ep, u, out);
    } else if (c.mlp == "swiglu") {  // w1 and w3 split by rows, w2 by columns
      const int64_t h = c.hidden();
      for (int i = 0; i < 3; ++i) out.push_back({h / t * E, u});
    } else {
      out.push_back({4 * E / t * E, u});
      out.push_back({4 * E / t, u});
      out.push_back({4 * E / t * E, u});
      out.push_back({E, u});
    }
  }
  if (last) {
    norm(0);
    if (pp > 1) out.push_back({V / t * E, 0});  // the last stage's copy of the tied embedding
  }
  return out;
}

// Under sequence parallelism, the numbers of stage `stage`'s parameters whose gradients are
// summed over tp (gpt/parallel.h): the norms, the row layers' biases, the learned positions,
// and every parameter of an MoE block's MoE (each tp rank routes its own positions).
inline int64_t sequence_parallel_numel(const GPTConfig& c, int64_t stage, int64_t pp,
                                       int64_t ep = 1, int64_t virtual_stages = 1) {
  const int64_t E = c.d_model, norm = c.norm == "rmsnorm" ? E : 2 * E;
  int64_t n = 0;
  for (int64_t b : stage_blocks(c, stage, pp, virtual_stages)) {
    n += 2 * norm + E;  // the norms, out_proj's bias
    if (c.moe_block(b)) {
      std::vector<ParamTensor> moe;
      moe_tensors(c, ep, 0, moe);
      for (const ParamTensor& p : moe) n += p.numel;
    } else if (c.mlp != "swiglu") {
      n += E;  // GELU's proj's bias
    }
  }
  if (stage == 0 && c.pos != "rope") n += c.seq * E;
  if (stage == pp - 1) n += norm;
  return n;
}

// The whole model's parameters (numbers), every expert's included.
inline int64_t parameter_count(const GPTConfig& c) {
  int64_t n = 0;
  for (const ParamTensor& p : parameter_tensors(c, 1, 0, 1)) n += p.numel;
  return n;
}

// The parameters one token's computation uses (what MFU counts): all but the experts, and k
// experts of each MoE block.
inline int64_t active_parameter_count(const GPTConfig& c) {
  int64_t n = 0;
  for (const ParamTensor& p : parameter_tensors(c, 1, 0, 1)) n += p.expert ? 0 : p.numel;
  std::vector<ParamTensor> one;  // one expert's tensors
  if (c.experts > 0) moe_tensors(c, c.experts, 0, one);
  int64_t expert = 0;
  for (const ParamTensor& p : one) expert += p.expert ? p.numel : 0;
  for (int64_t b = 0; b < c.layers; ++b) n += c.moe_block(b) ? c.experts_per_token * expert : 0;
  return n;
}

// How many of blocks [first, first + count) are MoE blocks.
inline int64_t moe_blocks(const GPTConfig& c, int64_t first, int64_t count) {
  int64_t n = 0;
  for (int64_t b = first; b < first + count; ++b) n += c.moe_block(b) ? 1 : 0;
  return n;
}

// Whether merging attention's heads for out_proj is a view (this CPU's fused kernel writes
// them in its layout, for both passes) or a copy that out_proj keeps (the GEMM route).
inline bool attention_merge_is_view(const GPTConfig& c) {
  const int64_t d = c.d_model / c.heads;
  return rg::cpu_attention_kernel(d, d, false, true) == "fused" && rg::cpu_attention_kernel(d, d, true, true) == "fused";
}

// ZeRO's owners (parallel/zero.cpp): largest first, each to the least loaded rank (ties:
// the lower); returns each tensor's owner.
inline std::vector<int64_t> zero_owners(const std::vector<ParamTensor>& ts, int64_t n) {
  std::vector<size_t> order(ts.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ts[a].numel > ts[b].numel; });
  std::vector<int64_t> load(size_t(n), 0), owner(ts.size(), 0);
  for (size_t i : order) {
    const int64_t r = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = r;
    load[size_t(r)] += ts[i].numel;
  }
  return owner;
}

// `moe`: an MoE block's figures (its MLP half an nn::MoE) instead of a dense one's.
inline Kept bytes_kept(const GPTConfig& c, const PlanLayout& l, double b, bool moe = false) {
  const double T = double(c.seq / l.cp), E = double(c.d_model), H = double(c.heads), t = double(l.tp);
  const double V = double(c.vocab), bTE = b * T * E, bT = b * T;
  // Sequence parallelism: what was whole on every tp rank between the split layers (the
  // residual stream, the norms' inputs, outputs and statistics) is 1/t of it; the split layers
  // keep their shard of the input and gather it again in backward (sequence_parallel_linear).
  const double s = l.sequence_shards();
  const double merge = l.merge_is_view ? 0 : bTE / t;  // the heads merged by a copy (the GEMM route)
  Kept k;
  double mlp = 0;  // bytes of the dense MLP's kept tensors: what an MoE block keeps instead
  // The MLP's backward: the hidden layer's gradients before and after GELU, the block input's,
  // fc's weight's (SwiGLU: those of w1's, w3's and the product, and their weights').
  const double hidden = double(c.hidden());
  k.mlp_grads = c.mlp == "swiglu" ? 4 * (3 * b * T * hidden / t + bTE + 2 * hidden * E / t)
                                  : 4 * (6 * bTE / t + bTE + 4 * E * E / t);
  // A block's backward, measured (the pipeline's first stage, where no loss gradient hides
  // it): the MLP's hidden gradients, 5 bytes a hidden unit of GELU's, 8 of SwiGLU's (its three
  // hidden tensors' gradients) in float32; under autocast 7.5 for either, and the block's
  // output gradient cast to 16 bits beside its float32 self (6 bytes a number, whole on every
  // tp rank). Rotary embeddings, RMSNorm and grouped-query attention change none of it.
  k.backward = l.precision == "fp32" ? (c.mlp == "swiglu" ? 8 : 5) * hidden * bT / t : 6 * bTE / s + 7.5 * hidden * bT / t;
  if (l.precision == "fp32") {
    // Llama's options, measured per block beside GPT-2's (numbers): RMSNorm keeps its
    // normalised input beside its input, and one statistic a row instead of two (whole on
    // every tp rank); grouped-query attention smaller k and v, and (where a rank holds more
    // than one of the K < H K/V heads: K/t > 1) k and v repeated for the heads; rotary
    // embeddings rotated q and k and contiguous copies of q, k and v; SwiGLU five hidden-sized
    // tensors (w1's and w3's outputs, silu's input and output, their product) instead of
    // GELU's two of 4E. Under --tp the heads' and the hidden units' tensors are this rank's
    // share (1/t).
    const double kv = c.kv_heads == 0 ? H : double(c.kv_heads), r = kv / H;
    double attention_extra = 0, mlp_extra = 0;
    if (c.norm == "rmsnorm") attention_extra += (bTE - bT) / s, mlp_extra += (bTE - bT) / s;
    if (kv < H) attention_extra += (-2 * (1 - r) * bTE + (kv / t > 1 ? 2 * bTE : 0)) / t;
    if (c.pos == "rope") attention_extra += (2 + 3 * r) * bTE / t;
    if (c.mlp == "swiglu") mlp_extra += (5 * hidden * bT - 8 * bTE) / t;
    // (x, y and the norms' two outputs, as their GEMMs keep them; each norm's two statistics)
    const double whole = 4 * (4 * bTE / s + 12 * bTE / t + merge + (4 / s + H / t) * bT + attention_extra + mlp_extra);
    mlp = 4 * (c.mlp == "swiglu" ? 5 * hidden * bT : 8 * bTE) / t;  // the hidden tensors
    k.block_whole = whole;
    if (c.recompute == "full")
      k.block = 4 * bTE / s;
    else if (c.recompute == "selective")
      k.block = 4 * (3 * bTE / s + 4 * bTE / t + merge + (2 / s + H / t) * bT + attention_extra);
    else
      k.block = whole;
    k.head = 4 * (2 * bTE / s + 2 * bT / s + bT * V / t + bT);
  } else {  // autocast (memory_budget.cpp): the residual stream float32, GEMM inputs bfloat16
    // Llama's options in bytes, measured beside GPT-2's: RMSNorm keeps its float32 normalised
    // input and one statistic a row (as in float32); rotary embeddings the rotated q and k and
    // contiguous copies of q, k and v in bfloat16; SwiGLU its five hidden-sized tensors in
    // bfloat16, and one more bfloat16 copy of the norm's output (w1 and w3 each cast their
    // input), for GELU's two of 4E. Grouped-query attention's activations are left out:
    // measured with 1 and 2 K/V heads of 4, at two widths and two lengths, the peak moved by
    // under 1% (why its smaller k and v save nothing here is not derived yet). Under --tp the
    // residual stream, the norms and their outputs' bfloat16 copies (each GEMM's whole input)
    // are whole on every rank; the heads' and hidden units' tensors are this rank's share (1/t).
    const double kv = c.kv_heads == 0 ? H : double(c.kv_heads), r = kv / H;
    double attention_extra = 0, mlp_extra = 0, head_extra = 0;
    if (c.norm == "rmsnorm")
      attention_extra += 4 * (bTE - bT) / s, mlp_extra += 4 * (bTE - bT) / s, head_extra += 4 * (bTE - bT) / s;
    if (c.pos == "rope") attention_extra += 2 * (2 + 3 * r) * bTE / t;
    // (w1 and w3 share sequence_parallel_linear's one cast)
    if (c.mlp == "swiglu") mlp_extra += 2 * (5 * hidden * bT - 8 * bTE) / t + (l.sequence_parallel ? 0 : 2 * bTE);
    // The weights' bfloat16 copies the GEMMs keep for backward (this rank's share): attention's
    // q, k, v and out_proj, the MLP's, the head's. Where a step's micro-batches share one copy
    // (weights_cached) the plan counts them once a step instead (plan()).
    double attention_copies = 2 * (4 - 2 * (1 - r)) * E * E / t;
    double mlp_copies = c.mlp == "swiglu" ? 2 * 3 * hidden * E / t : 2 * 8 * E * E / t;
    double head_copies = 2 * V / t * E;
    if (l.weights_cached()) attention_copies = mlp_copies = head_copies = 0;
    const double whole = 4 * 2 * bTE / s + 2 * 2 * bTE / s + 2 * 13 * bTE / t + 4 * 4 * bT / s + 4 * H / t * bT +
                         attention_copies + mlp_copies + attention_extra + mlp_extra;
    // (the hidden tensors, the weights' copies, SwiGLU's second cast of its input)
    mlp = 2 * (c.mlp == "swiglu" ? 5 * hidden * bT : 8 * bTE) / t + mlp_copies +
          (c.mlp == "swiglu" && !l.sequence_parallel ? 2 * bTE : 0);
    k.block_whole = whole;
    if (c.recompute == "full")
      k.block = 4 * bTE / s;
    else if (c.recompute == "selective")  // x, y float32; ln1's output, q, k, v, attention's two
      k.block = 4 * 2 * bTE / s + 2 * bTE / s + 2 * 5 * bTE / t + 4 * 2 * bT / s + 4 * H / t * bT + attention_copies +
                attention_extra;
    else
      k.block = whole;
    k.head = 4 * bTE / s + 2 * bTE / s + 4 * 2 * bT / s + head_copies + 4 * bT * V / t + 4 * bT + head_extra;
  }
  if (moe) {
    // The dense MLP's kept tensors give way to the MoE's (moe_kept); a recomputed block keeps
    // the same either way.
    const double delta = moe_kept(c, l, b) - mlp;
    k.block_whole += delta;
    if (c.recompute == "none") k.block += delta;
    moe_backward(c, l, b, k);
  }
  return k;
}

// DDP's buckets (parallel/ddp.cpp): the gradients in reverse order, the first bucket up to
// 1 MB, the others up to 25 MB; returns how many.
inline int64_t ddp_bucket_count(const std::vector<ParamTensor>& ts) {
  int64_t buckets = 0;
  double bytes = 0, cap = 1e6;
  for (size_t k = ts.size(); k-- > 0;) {
    const double nbytes = 4 * double(ts[k].numel);
    if (buckets == 0) {
      buckets = 1, bytes = 0, cap = 1e6;
    } else if (bytes + nbytes > cap) {
      ++buckets, bytes = 0, cap = 25e6;
    }
    bytes += nbytes;
  }
  return buckets;
}

// One micro-batch's work on one rank of a stage of `blocks` blocks, b sequences of T tokens:
// the FLOPs of its GEMMs and of its attention (recomputation's included), and the bytes its
// other ops move.
struct Work {
  double flops = 0, attention_flops = 0, traffic = 0;
};

// `moe` of the `blocks` are MoE blocks: the router's GEMM, each row's k experts' (R = k·N rows
// of the N tokens this rank routes, whole on every tp rank) and the shared experts' for every
// token, in place of the dense MLP's.
inline Work work(const GPTConfig& c, const PlanLayout& l, double b, double blocks, bool last,
                 double moe = 0) {
  const double T = double(c.seq / l.cp), E = double(c.d_model), t = double(l.tp), bT = b * T;
  const double kv = c.kv_heads == 0 ? double(c.heads) : double(c.kv_heads), kvE = E / double(c.heads) * kv;
  const double hidden = double(c.hidden());
  // A block's forward GEMMs (2 FLOPs a multiply-add): q, k and v, out_proj, the MLP's two
  // (SwiGLU's three); attention's scores and weighted sum, causal: each query meets half the
  // sequence's keys on average (under context parallelism too: T/cp queries, all T keys).
  const double attention_gemms = 2 * bT * E * (E + 2 * kvE) / t + 2 * bT * E * E / t;
  const double mlp_gemms = (c.mlp == "swiglu" ? 3 : 2) * 2 * bT * E * hidden / t;
  const double scores = 2 * bT * double(c.seq) * E / t;
  // Backward: a GEMM twice over (its input's gradient and its weight's); the fused attention
  // recomputes its scores first (five products to forward's two). Recomputation: the
  // forward again, whole (full) or the MLP half (selective).
  auto gemms = [&](double mlp) {
    double block = 3 * (attention_gemms + mlp);
    if (c.recompute == "full") block += attention_gemms + mlp;
    if (c.recompute == "selective") block += mlp;
    return block;
  };
  const auto [N, rows] = moe_rows(c, l, b);
  const double moe_gemms =
      2 * N * E * double(c.experts) +
      (c.mlp == "swiglu" ? 3 : 2) * 2 * E * hidden * (rows + N * double(c.shared_experts));
  double attention = 3.5 * scores;
  if (c.recompute == "full") attention += scores;
  Work w;
  w.flops = (blocks - moe) * gemms(mlp_gemms) + moe * gemms(moe_gemms) +
            (last ? 3 * 2 * bT * E * double(c.vocab) / t : 0);  // the head
  w.attention_flops = blocks * attention;
  // The other ops: forward writes each tensor a block keeps and the next op reads it (twice
  // what it keeps); backward reads it, writes its gradient and reads that (three times);
  // recomputing writes and reads again what it recomputes. The head's likewise.
  auto traffic = [&](const Kept& k) {
    double bytes = 5 * k.block_whole;
    if (c.recompute == "full") bytes += 2 * k.block_whole;
    if (c.recompute == "selective") bytes += 2 * (k.block_whole - k.block);
    return bytes;
  };
  const Kept k = bytes_kept(c, l, b);
  w.traffic = (blocks - moe) * traffic(k) +
              (moe > 0 ? moe * traffic(bytes_kept(c, l, b, true)) : 0) + (last ? 5 * k.head : 0);
  return w;
}

// The optimizer's bytes over `param_bytes` of float32 parameters it steps: clipping reads each
// gradient and scales it (12 bytes a number), AdamW reads the parameter, gradient and both
// moments and writes the parameter and moments (28).
inline double optimizer_traffic(double param_bytes) { return 10 * param_bytes; }

// The most activations pipeline stage s holds at once, `keeps(chunk)` being what a micro-batch
// leaves in one of its chunks until its backward: the schedule's steps (parallel/pipeline.h's
// pipeline_order) run on paper, a forward adding, a backward freeing. GPipe holds all m
// micro-batches, 1F1B min(m, p − s), interleaving the longer warm-up's (p − s − 1)·2 + (v − 1)·p
// + 1 chunks. ZB-H1 runs 1F1B's order and is planned as 1F1B. That is exact for its first
// stage, which holds min(m, p) either way, and a floor for the others: a micro-batch whose W
// waits keeps its GEMMs' inputs and output gradients, and a stage runs the W's where it would
// wait, or before a forward that would make p held, so what it holds depends on the timing.
// Measured, check_gpt_plan's model at p 2, m 4: the last stage 0.39 MB over 1F1B's in float32
// on an idle machine; under bfloat16, 5.85 to 7.41 MB from run to run on a busy one.
template <class Keeps>
double held_at_peak(const PlanLayout& l, int64_t s, const Keeps& keeps) {
  if (l.pp == 1) return keeps(0);
  double held = 0, most = 0;
  for (const par::PipelineStep& step : par::pipeline_order(l.schedule, l.pp, s, l.micro_batches, l.virtual_stages)) {
    held += step.forward ? keeps(step.chunk) : -keeps(step.chunk);
    most = std::max(most, held);
  }
  return most;
}

inline Plan plan(const GPTConfig& c, const PlanLayout& l) {
  Plan result;
  const int64_t n = l.dp * l.cp;  // the data-parallel group: the gradient's average
  const bool sharded = l.strategy == "fsdp", zero = l.strategy == "zero1" || l.strategy == "zero2";
  const bool four_d = l.tp > 1 || l.pp > 1;  // gpt.cpp's stages (Stage, gpt/parallel.h)
  const bool ddp_buckets = (l.strategy == "ddp" || l.strategy == "zero1") && !four_d && n > 1;
  const double whole = double(parameter_count(c));  // the whole model's numbers
  const double m = double(l.pp > 1 ? l.micro_batches : 1);
  const double b = double(l.batch) / m;  // rows per forward (per micro-batch)
  const double V = double(c.vocab), T = double(c.seq / l.cp), E = double(c.d_model);
  // The step's batch as int64 tokens and targets: every rank builds the whole global batch's
  // windows, then its replica's rows (contiguous copies), then its cp shard.
  const double data = 2 * 8 * (double(l.dp * l.batch * l.grad_accum) * double(c.seq) +
                               double(l.batch * l.grad_accum) * double(c.seq) * (l.cp > 1 ? 1 + 1.0 / double(l.cp) : 1));
  // The whole model's units (0: the embeddings and final norm; 1…L: the blocks, each with its
  // rank's experts only: ExpertParallelMoE makes them in place), and its largest block.
  std::vector<double> whole_units(size_t(c.layers + 1), 0);
  for (const ParamTensor& p : parameter_tensors(c, 1, 0, 1, l.ep))
    whole_units[size_t(p.unit)] += double(p.numel);
  const double whole_block = *std::max_element(whole_units.begin() + 1, whole_units.end());
  for (int64_t s = 0; s < l.pp; ++s) {
    const std::vector<ParamTensor> ts = parameter_tensors(c, l.tp, s, l.pp, l.ep, l.virtual_stages);
    RankPlan r;
    double numel = 0, gathered = 0;  // fsdp: the units gathered at the peak
    double unit_numel = 0, root_numel = 0;  // fsdp: a block unit's numbers (padded to n) and the root's
    double unit_shards = 0, root_shard = 0;  // fsdp: numbers of the block units' shards, and the root's
    for (const ParamTensor& p : ts) numel += double(p.numel);
    if (sharded) {
      std::vector<double> unit(size_t(c.layers + 1), 0);
      for (const ParamTensor& p : ts) unit[size_t(p.unit)] += double(p.numel);
      double shards = 0;
      for (double u : unit) shards += std::ceil(u / double(n));
      root_shard = std::ceil(unit[0] / double(n));
      unit_shards = shards - root_shard;
      // At the start of backward: the root unit (gathered for the whole step), the last block
      // (gathered again for its backward) and the one before it (prefetched).
      const double block = *std::max_element(unit.begin() + 1, unit.end());
      gathered = 4 * (unit[0] + std::min(2.0, double(c.layers)) * block);
      unit_numel = std::ceil(block / double(n)) * double(n), root_numel = unit[0];
      r.params = 4 * shards;
      r.grads = 4 * shards;
      r.optim = 8 * shards + 8 * double(unit.size());
    } else {
      r.params = 4 * numel;
      r.grads = 4 * numel;
      r.optim = 8 * numel + 8 * double(ts.size());
      if (zero) {  // the largest rank's share
        const std::vector<int64_t> owner = zero_owners(ts, n);
        double worst_numel = 0, worst_tensors = 0;
        for (int64_t rank = 0; rank < n; ++rank) {
          double mine = 0, count = 0;
          for (size_t i = 0; i < ts.size(); ++i)
            if (owner[i] == rank) mine += double(ts[i].numel), ++count;
          if (8 * mine + 8 * count > 8 * worst_numel + 8 * worst_tensors) worst_numel = mine, worst_tensors = count;
        }
        r.optim = 8 * worst_numel + 8 * worst_tensors;
        if (l.strategy == "zero2") r.grads = 4 * worst_numel;
      }
    }
    // Activations: the micro-batches in flight (the schedule's; 1F1B: min(m, p − s)), each b
    // rows, through each of the rank's chunks (the pipeline's stages s, s + p, …).
    const Kept k = bytes_kept(c, l, b), km = c.experts > 0 ? bytes_kept(c, l, b, /*moe=*/true) : k;
    const double blocks = double(c.layers / l.pp);
    int64_t stage_moe = 0;  // the rank's MoE blocks
    for (int64_t block : stage_blocks(c, s, l.pp, l.virtual_stages))
      stage_moe += c.moe_block(block) ? 1 : 0;
    const bool first = s == 0, last = s == l.pp - 1;
    const double bTE = b * T * E, bT = b * T, logits = b * T * V / double(l.tp);
    const double shard = l.sequence_shards();
    const int64_t v = l.virtual_stages, stages = l.pp * v;
    auto keeps = [&](int64_t chunk) {  // what one micro-batch leaves in a chunk until its backward
      const int64_t g = chunk * l.pp + s;  // the pipeline's stage
      // (a chunk that sends keeps its output)
      const int64_t per = c.layers / stages, moe = moe_blocks(c, g * per, per);
      double one = double(per - moe) * k.block + double(moe) * km.block +
                   (g == stages - 1 ? k.head : 4 * bTE / shard);
      // VocabParallelEmbedding: the rows' partial sum, before the all-reduce
      if (four_d && g == 0) one += 4 * bTE;
      // vocab_parallel_cross_entropy keeps its softmax
      if (four_d && g == stages - 1) one += 4 * (logits + 6 * bT);
      return one;
    };
    r.activations = held_at_peak(l, s, keeps);
    // Under autocast (not FSDP) one bfloat16 copy of each GEMM's weight and bias for the whole
    // step, from the first forward to the last backward, however many micro-batches are in flight.
    double copies = 0;
    if (l.weights_cached())
      for (const ParamTensor& p : ts) copies += p.cast ? 2 * double(p.numel) : 0;
    r.activations += copies;
    // The peak (see the top): the state, then the largest moment of the step.
    double state = r.params + (ddp_buckets ? r.grads : 0) + r.optim + data;
    // Accumulating (--grad-accum, or a pipeline's micro-batches): the whole local gradients
    // live through the later micro-batches (every strategy's no_sync keeps them unsharded,
    // beside DDP's buckets, until the last backward).
    if (l.grad_accum > 1 || m > 1) state += 4 * (sharded ? whole : numel);
    // The start of backward: the logits' gradient (and the loss's own, under tp/pp).
    // (Under autocast the loss's float32 gradient is cast to bfloat16 for the head's GEMM.)
    const double logits_grad = !last ? 0 : four_d ? 2 * 4 * logits : l.precision == "fp32" ? 4 * logits : 6 * logits;
    // Ring attention's buffers in flight (context parallelism): K and V received, dK and dV
    // travelling with them.
    const double ring = l.cp > 1 ? 4 * 4 * bTE / double(l.tp) : 0;
    double moment = r.activations + logits_grad + gathered + ring;
    // Or a block's backward: the last stage's after the head's (its tensors gone), another's
    // beside the gradient the next stage sent (float32: the residual stream's).
    // (An MoE block's backward, where the stage has one: the experts' gradients.)
    const Kept& worst = stage_moe > 0 && km.backward > k.backward ? km : k;
    moment = std::max(moment, r.activations + (last ? -k.head : 4 * bTE / shard) + worst.backward +
                                  gathered + ring);
    // A recomputed block's backward: its whole activations at once, and the MLP's gradients.
    if (c.recompute != "none")
      for (const Kept* kind : {&k, &km})
        if (kind == &k ? stage_moe < c.layers / l.pp : stage_moe > 0)
          moment = std::max(moment, r.activations - (last ? k.head : 0) + kind->block_whole -
                                        kind->block + ring + kind->mlp_grads);
    if (sharded) {
      // FSDP's backward, unit by unit (parallel/fsdp.cpp): as block j of L (in backward's order)
      // is flattened, the shards of the blocks reduced before it, the whole flat gradients of
      // the two before it (their reduce-scatters in flight), its own .grad and flat copy, the
      // root gathered for the step and the next block prefetched, and the blocks still to come
      // keeping their activations; then the root's own, the same way.
      const double L = double(c.layers), B = 4 * unit_numel, S = B / double(n), R = 4 * root_numel;
      for (double j = 0; j < L; ++j) {
        const double flight = std::min(2.0, j);
        moment = std::max(
            moment, (j - flight) * S + flight * (B + S) + 2 * B + S + R + (j + 1 < L ? B : 0) +
                        (L - 1 - j) * (k.block + (km.block - k.block) * double(stage_moe) / L));
      }
      const double flight = std::min(2.0, L);
      moment = std::max(moment, (L - flight) * S + flight * (B + S) + 3 * R + R / double(n));
    } else {
      moment = std::max(moment, ddp_buckets ? 0.0 : 4 * numel + copies);  // the end of backward: the gradients
    }
    r.peak = state + moment;
    // Under --tp/--pp the model's making (StageBlocks, gpt/parallel.h): the stage's parameters
    // so far, the whole embeddings and final norm, and one whole block being cut.
    if (four_d) r.peak = std::max(r.peak, r.params + 4 * (whole_units.front() + whole_block));

    // Bytes sent in one step (parallel/communicator.h counts an all-reduce of n bytes over g
    // ranks as 2(g−1)/g·n, a broadcast or reduce (g−1)/g·n, an all-gather (g−1)·its input,
    // a reduce-scatter (g−1)/g·its whole input, a send all of it), per mesh axis:
    using K = par::Collective;
    Traffic& sent = r.sent;
    const double forwards = double(l.grad_accum);  // forward_backward calls (pipeline) / micro-batches
    const double act = 4 * b * T * E;               // one micro-batch's activation, in bytes
    const int64_t t = l.tp;
    if (t > 1) {  // tp: per block f's backward and g's forward, for attention and the MLP (budget.h)
      const double extra = c.recompute == "full" ? 2 : c.recompute == "selective" ? 1 : 0;  // g again
      // Under autocast g sums the row-parallel GEMMs' 16-bit outputs; f's gradients, the
      // embedding's rows and the head's input stay float32.
      const double g_bytes = l.precision == "fp32" ? act : act / 2;
      const double tf = double(t), times = forwards * m;
      // The split halves of the stage's blocks, and those run again by recomputation: an MoE
      // block's MLP half is whole on every tp rank, and sends nothing on tp.
      const double moe = double(stage_moe), halves = 2 * blocks - moe;
      const double again = extra * (blocks - moe) + (c.recompute == "full" ? 1 : 0) * moe;
      if (!l.sequence_parallel) {
        sent.add(Axis::Tp, K::AllReduce, times * (halves + first + last), all_reduce_bytes(act, t));
        sent.add(Axis::Tp, K::AllReduce, times * (halves + again), all_reduce_bytes(g_bytes, t));
      } else {
        // Each f an all-gather of the GEMMs' input forward, again in backward for the weights'
        // gradients, and a reduce-scatter of the input's gradient; each g the other way round.
        // Under autocast all of them carry 16-bit numbers but the embedding's (float32 sums).
        const double gather = (tf - 1) * g_bytes / tf, scatter = (tf - 1) / tf * g_bytes;
        sent.add(Axis::Tp, K::AllGather, times * (halves + again + last), gather);  // f forward
        sent.add(Axis::Tp, K::AllGather, times * (halves + last), gather);          // f backward
        sent.add(Axis::Tp, K::ReduceScatter, times * (halves + last), scatter);     // f backward
        sent.add(Axis::Tp, K::ReduceScatter, times * (halves + again), scatter);    // g forward
        sent.add(Axis::Tp, K::AllGather, times * halves, gather);                   // g backward
        if (first)
          sent.add(Axis::Tp, K::ReduceScatter, times, (tf - 1) / tf * act), sent.add(Axis::Tp, K::AllGather, times, (tf - 1) * act / tf);
        // The norms', row biases' and learned positions' gradients, summed in one all-reduce.
        sent.add(
            Axis::Tp, K::AllReduce, 1,
            all_reduce_bytes(4 * sequence_parallel_numel(c, s, l.pp, l.ep, l.virtual_stages), t));
      }
      if (last) sent.add(Axis::Tp, K::AllReduce, times * 3, all_reduce_bytes(4 * b * T, t));  // the loss
    }
    if (l.pp > 1) {  // pp: activations forward (after a header) and gradients back, the loss, the tied embedding
      for (int64_t chunk = 0; chunk < v; ++chunk) {  // each chunk but the last sends on, each but the first back
        const int64_t g = chunk * l.pp + s;
        if (g < stages - 1)
          sent.add(Axis::Pp, K::Send, forwards * m, 80), sent.add(Axis::Pp, K::Send, forwards * m, act / shard);
        if (g > 0) sent.add(Axis::Pp, K::Send, forwards * m, act / shard);
      }
      sent.add(Axis::Pp, K::Broadcast, forwards, broadcast_bytes(8, l.pp));
      sent.add(Axis::Pp, K::AllReduce, 1, all_reduce_bytes(4 * V / double(t) * E, l.pp));
    }
    if (l.cp > 1) {  // ring attention, per block: K, V around the ring forward and backward, dK, dV all the way
      const int64_t kv = c.kv_heads == 0 ? c.heads : c.kv_heads;
      const double chunk = 4 * b * T * double(c.d_model / c.heads * kv) / double(t), p = double(l.cp);
      const double sends = 4 * (p - 1) + 2 * p + (c.recompute == "full" ? 2 * (p - 1) : 0);
      sent.add(Axis::Cp, K::Send, forwards * m * blocks * sends, chunk);
    }
    if (stage_moe > 0) moe_traffic(c, l, b, double(stage_moe) * forwards * m, sent);
    // The data-parallel group (dp·cp): the gradients' average, as each strategy makes it.
    const double grads = 4 * numel, tensors = double(ts.size());
    // Under --ep (strategy ddp) the experts are left out of it (parallel/expert_parallel.h):
    // each expert tensor is averaged over the (dp/ep, cp) ranks that hold the same experts,
    // tensor by tensor, and the clipping norm sums the experts' squares over the ep group.
    std::vector<ParamTensor> dense;
    double expert_numel = 0, expert_tensors = 0;
    for (const ParamTensor& p : ts)
      if (l.ep > 1 && p.expert)
        expert_numel += double(p.numel), ++expert_tensors;
      else
        dense.push_back(p);
    const int64_t replicas = l.dp / l.ep * l.cp;  // of each expert
    if (expert_tensors > 0) {
      if (replicas > 1)
        sent.add(Axis::Data, K::AllReduce, expert_tensors,
                 all_reduce_bytes(4 * expert_numel, replicas) / expert_tensors);
      sent.add(Axis::Data, K::AllReduce, 1, all_reduce_bytes(8, l.ep));
    }
    const double dense_numel = numel - expert_numel;
    if (n == 1) {  // nothing to average
    } else if (sharded) {  // fsdp: each block unit gathered for forward and backward, the root once; reduce-scattered
      const double units = double(c.layers / l.pp);
      sent.add(Axis::Data, K::AllGather, forwards, double(n - 1) * 4 * root_shard);
      sent.add(Axis::Data, K::AllGather, 2 * forwards * units, double(n - 1) * 4 * unit_shards / units);
      sent.add(Axis::Data, K::ReduceScatter, 1, double(n - 1) * 4 * root_shard);
      sent.add(Axis::Data, K::ReduceScatter, units, double(n - 1) * 4 * unit_shards / units);
      sent.add(Axis::Data, K::AllReduce, 1, all_reduce_bytes(8, n));  // the gradient norm
    } else if (l.strategy == "zero2") {  // each gradient reduced to its owner; each parameter broadcast back
      sent.add(Axis::Data, K::Reduce, tensors, broadcast_bytes(grads, n) / tensors);
      sent.add(Axis::Data, K::Broadcast, tensors, broadcast_bytes(grads, n) / tensors);
      sent.add(Axis::Data, K::AllReduce, 1, all_reduce_bytes(8, n));
    } else {
      // gpt.cpp averages a pipeline stage's gradients tensor by tensor, DDP by buckets
      const double ops = four_d ? double(dense.size()) : double(ddp_bucket_count(dense));
      sent.add(Axis::Data, K::AllReduce, ops,
               all_reduce_bytes(double(l.gradient_bytes) * dense_numel, n) / ops);
      if (l.strategy == "zero1") {
        sent.add(Axis::Data, K::Broadcast, tensors, broadcast_bytes(grads, n) / tensors);
        sent.add(Axis::Data, K::AllReduce, 1, all_reduce_bytes(8, n));
      }
    }
    if (four_d) sent.add(Axis::Data, K::AllReduce, 1, all_reduce_bytes(8, l.pp * t));  // the gradient norm over one whole model
    r.comm = sent.total();

    // The step's work: GEMM and attention FLOPs, and the other ops' bytes (gpt/step_time.h).
    const Work w = work(c, l, b, blocks, last, double(stage_moe));
    r.per_micro_batch = 1 / (forwards * m);
    r.flops = forwards * m * w.flops;
    r.attention_flops = forwards * m * w.attention_flops;
    r.memory_traffic = forwards * m * w.traffic + optimizer_traffic(sharded ? 4 * (root_shard + unit_shards) : 4 * numel);
    result.ranks.push_back(r);
  }
  for (const RankPlan& r : result.ranks) {
    result.largest.params = std::max(result.largest.params, r.params);
    result.largest.grads = std::max(result.largest.grads, r.grads);
    result.largest.optim = std::max(result.largest.optim, r.optim);
    result.largest.activations = std::max(result.largest.activations, r.activations);
    result.largest.peak = std::max(result.largest.peak, r.peak);
    result.largest.comm = std::max(result.largest.comm, r.comm);
    for (size_t k = 0; k < par::kCollectives; ++k) {  // each kind's largest
      result.largest.sent.bytes[k] = std::max(result.largest.sent.bytes[k], r.sent.bytes[k]);
      result.largest.sent.operations[k] = std::max(result.largest.sent.operations[k], r.sent.operations[k]);
    }
    result.largest.flops = std::max(result.largest.flops, r.flops);
    result.largest.attention_flops = std::max(result.largest.attention_flops, r.attention_flops);
    result.largest.memory_traffic = std::max(result.largest.memory_traffic, r.memory_traffic);
  }
  return result;
}

}  // namespace gpt
