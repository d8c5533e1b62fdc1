// memory_budget.cpp — where the memory of training goes, on one device: predicted, then
// measured.
//
//   build/bin/memory_budget [--layers 4 --d-model 128 --heads 4 --seq 128 --batch-size 8]
//
// One training step of the GPT of examples/gpt/model.h (AdamW, float32) holds four
// kinds of memory. With P parameters, L blocks, batch B, context T, width E, H heads and
// the vocabulary V = 256:
//   parameters        4·P bytes                  (float32)
//   gradients         4·P bytes                  (one per parameter, after backward)
//   AdamW state       8·P bytes                  (m and v per parameter, from the first step)
//                     = 16 bytes per parameter for the training state, whatever the batch;
//   activations       what forward saves for backward, which grows with B·T:
//     per block  16·B·T·E + (4 + H)·B·T floats: the block's input and both norms'
//                outputs (3·BTE), q, k, v (3·BTE), attention's output (BTE), the residual
//                stream after attention (BTE), the MLP's hidden layer before and after
//                GELU (4·BTE each), the norms' mean and 1/std (4·BT) and attention's
//                log-sum-exp per head (H·BT: the T×T scores are never stored, the fused
//                kernel recomputes them in backward);
//                17·B·T·E where the CPU's attention takes the GEMM route (a CPU without
//                AVX-512, or RINGGRAD_CPU_ATTENTION=gemm): its output is laid out
//                (B, H, T, D), so merging the heads for out_proj is a copy that out_proj
//                keeps beside it; the fused kernel writes the output in the projection's
//                (B, T, H, D) layout and the merge is a view (rg::cpu_attention_kernel says
//                which route a head dim takes);
//     the head   2·B·T·E + 2·B·T floats (the final norm's input, output and statistics)
//                and the logits, B·T·V floats, which the loss keeps for its backward,
//                plus the loss's own B·T log-sum-exps.
// The program builds the model, then measures each with rg::memory_stats() (every live
// CPU tensor's bytes) around each phase of one step, and prints it beside the formula:
//   after building the model: + parameters;
//   after forward and the loss: + activations;
//   after backward: − activations + gradients (backward frees what it used);
//   after the optimizer's first step: + AdamW state;
// and the peak of the step, which the formulas do not cover: backward's temporary
// tensors, each gradient being made before its activations are freed.
// Ends with: RESULT example=memory_budget params=P state_mb=… activations_mb=… peak_mb=…
//
//   build/bin/memory_budget --precision fp32|bf16|autocast
// predicts and measures the same parts in 16 bits (fp32, the default, is the above):
//   bf16      the model cast to bfloat16 (model.to(kBFloat16)); AdamW keeps a float32
//             master copy of each parameter (optim/optimizer.h), so the state is
//             2·P + 2·P + (4 + 8)·P = 16·P bytes, as in float32. Every activation is
//             bfloat16 except the norms' statistics and attention's log-sum-exp (float32
//             by design), and attention's output is kept twice: 16-bit attention runs on
//             contiguous float32 copies of q, k, v, so its output comes out (B, H, T, D) and
//             merging the heads for out_proj is a copy (in float32 the fused kernel writes
//             it in the projection's (B, T, H, D) layout, and the merge is a view):
//     per block  2·17·BTE + 4·4·BT + 4·H·BT bytes;
//     the head   2·2·BTE + 4·2·BT + 2·BTV + 2·BT (logits and the loss's lse in bfloat16).
//   autocast  the float32 model under rg::autocast(kCPU, kBFloat16), as PyTorch's AMP: the
//             state is float32's 16·P. GEMMs (linear, matmul, attention) cast their inputs
//             to bfloat16 and keep those casts; layer_norm and cross_entropy run in float32
//             (core/autocast.h); the residual stream stays float32 (bf16 + f32 -> f32):
//     per block  4·2·BTE (the block's input and the residual after attention, float32)
//                + 2·15·BTE (both norms' outputs cast for their linears, q, k, v, attention's
//                output and its merged copy, the MLP's hidden layer before and after GELU)
//                + 4·4·BT + 4·H·BT + 2·12·E·E (each linear keeps its bfloat16 weight copy:
//                qkv 3·E·E, out_proj E·E, fc and proj 4·E·E each);
//     the head   4·BTE + 2·BTE (the final norm's float32 input; its output cast for the LM
//                head) + 4·2·BT + 2·V·E (the LM head's bfloat16 copy of the tied embedding)
//                + 4·BTV + 4·BT (cross_entropy casts the logits up and keeps them in float32).
// Each prints a CHECK line per part (memory_bf16_… / memory_autocast_…) and one for the state.
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "gpt/model.h"
#include "gpt/plan.h"  // the activations' formulas, shared with gpt --plan

namespace rg = ringgrad;

int64_t live() { return rg::memory_stats().live_bytes; }

int main(int argc, char** argv) {
  CLI::App app{"Where the memory of training goes: each part predicted, then measured"};
  gpt::GPTConfig c;
  int64_t batch = 8;
  std::string precision = "fp32";
  app.add_option("--layers", c.layers, "L: Transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--d-model", c.d_model, "E: model width")->check(CLI::PositiveNumber);
  app.add_option("--heads", c.heads, "H: attention heads (dividing --d-model)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seq", c.seq, "T: context length")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch, "B: sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--precision", precision,
                 "fp32; bf16 (the model in bfloat16, float32 master weights in AdamW); "
                 "autocast (the float32 model under rg::autocast(bfloat16))")
      ->check(CLI::IsMember({"fp32", "bf16", "autocast"}));
  CLI11_PARSE(app, argc, argv);
  try {
    RG_CHECK(c.d_model % c.heads == 0, "memory_budget", "expected --heads dividing --d-model ",
             c.d_model, ", got ", c.heads);
    const double B = double(batch), T = double(c.seq), E = double(c.d_model), H = double(c.heads),
                 L = double(c.layers), V = double(c.vocab);

    // The data first, so that it is not counted as model memory.
    rg::manual_seed(0);
    rg::Tensor tokens = rg::randint(0, 256, {batch, c.seq});
    rg::Tensor targets = rg::randint(0, 256, {batch, c.seq});

    const int64_t empty = live();
    const bool bf16 = precision == "bf16", amp = precision == "autocast";
    gpt::GPT model(c);
    if (bf16) model.to(rg::kBFloat16);  // the float32 weights are freed: 2 bytes each now
    const int64_t with_model = live();
    int64_t P = 0;
    for (const rg::Tensor& p : model.parameters()) P += p.numel();
    rg::optim::AdamW opt(model.parameters(), {.lr = 1e-3});

    rg::reset_peak_memory();
    const int64_t before_step = live();
    rg::Tensor loss;
    {
      rg::autocast region(rg::kCPU, rg::kBFloat16, amp);  // off unless --precision autocast
      loss = rg::nn::cross_entropy(model(tokens).reshape({-1, c.vocab}), targets.reshape({-1}));
    }
    const int64_t after_forward = live();
    loss.backward();
    loss = rg::Tensor();  // the graph and what it saved are gone with it
    const int64_t after_backward = live();
    opt.step();
    const int64_t after_step = live();
    const int64_t peak = rg::memory_stats().peak_bytes;

    struct Part {
      const char* name;
      const char* formula;
      double predicted, measured;
    };
    // The attention's route decides whether merging its heads costs a copy (see the top).
    const bool merge_is_view = gpt::attention_merge_is_view(c);
    // float32 and autocast: the planner's formulas (gpt/plan.h, the same ones, in bytes).
    // (One forward, no weight cache: each GEMM's weight copy is in its block's activations.)
    const gpt::Kept kept = gpt::bytes_kept(c, {.batch = batch, .precision = amp ? "bf16" : "fp32",
                                               .merge_is_view = merge_is_view, .weight_cache = false}, B);
    const double Pd = double(P), BTE = B * T * E, BT = B * T, BTV = B * T * V;
    // The model in bfloat16 (see the top of the file), in bytes.
    const double bf16_block = 2 * 17 * BTE + 4 * 4 * BT + 4 * H * BT;
    const double bf16_head = 2 * 2 * BTE + 4 * 2 * BT + 2 * BTV + 2 * BT;
    std::vector<Part> parts;
    if (bf16) {
      parts = {
          {"parameters", "2*P", 2 * Pd + 8 * T, double(with_model - empty)},
          {"activations", "L*(34BTE+16BT+4HBT) + 4BTE+8BT+2BTV+2BT",
           L * bf16_block + bf16_head, double(after_forward - before_step)},
          {"gradients", "2*P", 2 * Pd, double(after_backward - before_step)},
          {"AdamW state", "12*P (m, v and the float32 master copy)", 12 * Pd,
           double(after_step - after_backward)},
      };
    } else if (amp) {
      parts = {
          {"parameters", "4*P", 4 * Pd + 8 * T, double(with_model - empty)},
          {"activations", "L*(38BTE+16BT+4HBT+24EE) + 6BTE+8BT+2VE+4BTV+4BT",
           L * kept.block + kept.head, double(after_forward - before_step)},
          {"gradients", "4*P", 4 * Pd, double(after_backward - before_step)},
          {"AdamW state", "8*P", 8 * Pd, double(after_step - after_backward)},
      };
    } else {
      parts = {
          // (the model also keeps its positions 0..T−1 as int64: 8·T bytes)
          {"parameters", "4*P", 4.0 * double(P) + 8 * T, double(with_model - empty)},
          {"activations",
           merge_is_view ? "4*(L*(16*BTE + (4+H)*BT) + 2*BTE + 2*BT + BTV + BT)"
                         : "4*(L*(17*BTE + (4+H)*BT) + 2*BTE + 2*BT + BTV + BT)",
           L * kept.block + kept.head, double(after_forward - before_step)},
          {"gradients", "4*P", 4.0 * double(P), double(after_backward - before_step)},
          {"AdamW state", "8*P", 8.0 * double(P), double(after_step - after_backward)},
      };
    }
    std::printf("GPT: %ld blocks, d_model %ld, %ld heads, context %ld, batch %ld: P = %ld "
                "parameters\n",
                long(c.layers), long(c.d_model), long(c.heads), long(c.seq), long(batch), long(P));
    if (bf16) std::printf("precision bf16: the model in bfloat16, AdamW's float32 master weights\n");
    if (amp) std::printf("precision autocast: the float32 model under rg::autocast(bfloat16)\n");
    std::printf("%-13s %-54s %12s %12s\n", "", "formula (bytes)", "predicted MB", "measured MB");
    for (const Part& p : parts)
      std::printf("%-13s %-54s %12.3f %12.3f\n", p.name, p.formula, p.predicted / 1e6,
                  p.measured / 1e6);
    const double state = double(after_step - empty);
    std::printf("%-13s %-54s %12.3f %12.3f\n", "state", "16*P (parameters, gradients, AdamW)",
                16.0 * double(P) / 1e6, state / 1e6);
    std::printf("%-13s %-54s %12s %12.3f\n", "step's peak", "above: backward's temporaries", "",
                double(peak - empty) / 1e6);
    const std::string prefix = bf16 ? "bf16_" : amp ? "autocast_" : "";
    for (const Part& p : parts)
      std::printf("CHECK memory_%s%s predicted=%.0f measured=%.0f\n", prefix.c_str(),
                  std::string(p.name) == "AdamW state" ? "adamw" : p.name, p.predicted, p.measured);
    if (bf16 || amp)  // 16 bits do not shrink the training state
      std::printf("CHECK memory_%sstate predicted=%.0f measured=%.0f\n", prefix.c_str(),
                  16.0 * double(P), state);
    std::printf("RESULT example=memory_budget params=%ld state_mb=%.3f activations_mb=%.3f "
                "peak_mb=%.3f%s%s\n",
                long(P), state / 1e6, parts[1].measured / 1e6, double(peak - empty) / 1e6,
                bf16 || amp ? " precision=" : "", bf16 || amp ? precision.c_str() : "");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_budget: error: %s\n", e.what());
    return 1;
  }
}
