// gpt/budget.h — what one rank of the GPT keeps and sends in a training step, as formulas.
//
//   gpt::Budget b = gpt::predict_budget(config, batch, {.dp = 2, .pp = 2, .tp = 2,
//                                                       .micro_batches = 4, .stage = 0});
//
// `gpt --budget` prints these beside what each rank really holds and what its
// communicators counted (Communicator::wire_bytes) in one step; docs/learn/07-mesh.md
// derives them. The layout is gpt.cpp's: a (dp, pp, cp, tp) mesh under --strategy ddp,
// here with cp = 1 (chapter 5 counts the ring's bytes). With L blocks of width E, context
// T, a vocabulary of V = 256 and B sequences per replica, split into m micro-batches:
//
// Parameters on a rank of pipeline stage s (of p), tensor-parallel size t:
//   each block   ln1, ln2 (2E each, whole), qkv 3E·E/t + 3E/t, out_proj E·E/t + E (its bias
//                whole: added after the sum), fc 4E·E/t + 4E/t, proj 4E·E/t + E
//                = 12E²/t + 7E/t + 6E, and a stage has L/p blocks;
//   first stage  the token embedding's V/t rows (V/t·E) and the positions (T·E);
//   last stage   ln_f (2E) and, when p > 1, its own copy of the tied embedding (V/t·E).
//
// Bytes one rank sends in one step (the communicator's count: an all-reduce of n bytes
// over a group of g ranks costs 2(g−1)/g·n, a send n, a broadcast (g−1)/g·n):
//   tp    per block: 4 all-reduces of B·T·E floats (f's backward and g's forward, for
//         attention and for the MLP); the first stage 1 more (the embedding's rows are
//         summed); the last stage 1 more (f before the LM head) and the vocabulary-parallel
//         cross-entropy's 3 of B·T (the max, Σ exp, the target's logit)
//   pp    m micro-batches of B/m·T·E floats forward (each after an 80-byte header: the
//         shape) unless last, and as many gradients backward unless first; the loss
//         broadcast from the last stage (8 bytes); the tied embedding's gradient summed
//         over the stages (V/t·E floats)
//   data  the all-reduce of every gradient this rank holds over the dp ranks (4·P_rank;
//         2·P_rank with a 16-bit --comm-hook: DDP rounds each bucket to 16 bits to send it)
//   norm  the gradient norm's Σg² over one whole model, the (pp, tp) group (8 bytes)
#pragma once

#include <cstdint>

#include "model.h"

namespace gpt {

struct BudgetLayout {
  int64_t dp = 1, pp = 1, tp = 1, micro_batches = 1;
  int64_t stage = 0;  // this rank's pipeline stage, 0..pp−1
  int64_t gradient_bytes = 4;  // a gradient on the data-parallel wire: 4, or 2 (a comm hook)
};

struct Budget {
  double params = 0;                                       // numbers this rank holds
  double tp_bytes = 0, pp_bytes = 0, data_bytes = 0, norm_bytes = 0;  // sent in one step
};

// The bytes one rank sends in an all-reduce of n bytes over g ranks, a broadcast, as counted.
inline double all_reduce_bytes(double n, int64_t g) { return 2.0 * double(g - 1) / double(g) * n; }
inline double broadcast_bytes(double n, int64_t g) { return double(g - 1) / double(g) * n; }

inline Budget predict_budget(const GPTConfig& c, int64_t batch, const BudgetLayout& l) {
  const double E = double(c.d_model), T = double(c.seq), V = double(c.vocab);
  const double B = double(batch), t = double(l.tp), blocks = double(c.layers / l.pp);
  const bool first = l.stage == 0, last = l.stage == l.pp - 1;
  const bool pipeline = l.pp > 1 || l.tp > 1;  // gpt.cpp's 4D path (else plain DDP)
  Budget b;
  b.params = blocks * (12 * E * E / t + 7 * E / t + 6 * E);
  if (first) b.params += V / t * E + T * E;
  if (last) b.params += 2 * E + (l.pp > 1 ? V / t * E : 0);

  const double activation = 4 * B * T * E;  // one all-reduce's tensor, summed over micro-batches
  b.tp_bytes = all_reduce_bytes(activation, l.tp) * (4 * blocks + first + last) +
               (last ? 3 * all_reduce_bytes(4 * B * T, l.tp) : 0);
  const double m = double(l.micro_batches);
  if (l.pp > 1) {
    if (!last) b.pp_bytes += m * 80 + activation;  // a header: 10 int64 (ndim, dtype, 8 sizes)
    if (!first) b.pp_bytes += activation;
    b.pp_bytes += broadcast_bytes(8, l.pp) + all_reduce_bytes(4 * V / t * E, l.pp);
  }
  b.data_bytes = all_reduce_bytes(double(l.gradient_bytes) * b.params, l.dp);
  b.norm_bytes = pipeline ? all_reduce_bytes(8, l.pp * l.tp) : 0;
  return b;
}

// Training FLOPs per token (forward + backward), counted as nanoGPT and the PaLM paper do,
// for MFU (model FLOPs utilisation):
//   6 per parameter that multiplies an activation: 2 forward (a multiply-add), 4 backward
//     (the input's gradient and the weight's). Every parameter but the learned positions,
//     which are only added; the tied token embedding counts once, as the LM head's weight.
//   12·E·T per layer for attention's two products, QKᵀ and PV: each a multiply-add per key
//     and feature, 2·2·T·E FLOPs forward, three times that with backward. The causal half
//     the kernel skips is counted anyway, as nanoGPT does, so that figures compare.
inline double train_flops_per_token(const GPTConfig& c, int64_t parameters) {
  const double positions = c.pos == "rope" ? 0 : double(c.seq * c.d_model);
  return 6 * (double(parameters) - positions) + 12.0 * double(c.layers * c.d_model * c.seq);
}

// Bytes one rank sends through all-to-alls in a training step under expert parallelism
// (--experts E --experts-per-token k --ep P), each MoE layer's tokens spread evenly over
// the experts: every forward the counts (E int64, (P−1)/P of them to other ranks), then
// k·n rows of E_model floats go out to the experts (dispatch) and as many come back
// (combine), (P−1)/P of them to other ranks; backward sends both again, reversed. n: the
// tokens of one micro-batch on this rank. Dropped tokens (a capacity factor) and uneven
// routing move the measurement away from this.
inline double moe_all_to_all_bytes(const GPTConfig& c, int64_t tokens, int ep, int64_t micro_batches) {
  if (c.experts == 0 || ep == 1) return 0;
  int64_t moe_layers = 0;
  for (int64_t i = 0; i < c.layers; ++i) moe_layers += c.moe_block(i) ? 1 : 0;
  const double away = double(ep - 1) / ep;
  const double rows = double(c.experts_per_token * tokens) * away;
  return double(micro_batches * moe_layers) * (8.0 * double(c.experts) * away + 4 * rows * 4.0 * double(c.d_model));
}

}  // namespace gpt
