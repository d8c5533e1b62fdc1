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
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "gpt/model.h"

namespace rg = ringgrad;

int64_t live() { return rg::memory_stats().live_bytes; }

int main(int argc, char** argv) {
  CLI::App app{"Where the memory of training goes: each part predicted, then measured"};
  gpt::GPTConfig c;
  int64_t batch = 8;
  app.add_option("--layers", c.layers, "L: Transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--d-model", c.d_model, "E: model width")->check(CLI::PositiveNumber);
  app.add_option("--heads", c.heads, "H: attention heads (dividing --d-model)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seq", c.seq, "T: context length")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch, "B: sequences per step")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    RG_CHECK(c.d_model % c.heads == 0, "memory_budget", "expected --heads dividing --d-model ",
             c.d_model, ", got ", c.heads);
    const double B = double(batch), T = double(c.seq), E = double(c.d_model), H = double(c.heads),
                 L = double(c.layers), V = double(gpt::GPTConfig::vocab);

    // The data first, so that it is not counted as model memory.
    rg::manual_seed(0);
    rg::Tensor tokens = rg::randint(0, 256, {batch, c.seq});
    rg::Tensor targets = rg::randint(0, 256, {batch, c.seq});

    const int64_t empty = live();
    gpt::GPT model(c);
    const int64_t with_model = live();
    int64_t P = 0;
    for (const rg::Tensor& p : model.parameters()) P += p.numel();
    rg::optim::AdamW opt(model.parameters(), {.lr = 1e-3});

    rg::reset_peak_memory();
    const int64_t before_step = live();
    rg::Tensor loss =
        rg::nn::cross_entropy(model(tokens).reshape({-1, c.vocab}), targets.reshape({-1}));
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
    const double per_block = 16 * B * T * E + (4 + H) * B * T;
    const double head = 2 * B * T * E + 2 * B * T + B * T * V + B * T;
    const Part parts[] = {
        // (the model also keeps its positions 0..T−1 as int64: 8·T bytes)
        {"parameters", "4*P", 4.0 * double(P) + 8 * T, double(with_model - empty)},
        {"activations", "4*(L*(16*BTE + (4+H)*BT) + 2*BTE + 2*BT + BTV + BT)",
         4 * (L * per_block + head), double(after_forward - before_step)},
        {"gradients", "4*P", 4.0 * double(P), double(after_backward - before_step)},
        {"AdamW state", "8*P", 8.0 * double(P), double(after_step - after_backward)},
    };
    std::printf("GPT: %ld blocks, d_model %ld, %ld heads, context %ld, batch %ld: P = %ld "
                "parameters\n",
                long(c.layers), long(c.d_model), long(c.heads), long(c.seq), long(batch), long(P));
    std::printf("%-13s %-54s %12s %12s\n", "", "formula (bytes)", "predicted MB", "measured MB");
    for (const Part& p : parts)
      std::printf("%-13s %-54s %12.3f %12.3f\n", p.name, p.formula, p.predicted / 1e6,
                  p.measured / 1e6);
    const double state = double(after_step - empty);
    std::printf("%-13s %-54s %12.3f %12.3f\n", "state", "16*P (parameters, gradients, AdamW)",
                16.0 * double(P) / 1e6, state / 1e6);
    std::printf("%-13s %-54s %12s %12.3f\n", "step's peak", "above: backward's temporaries", "",
                double(peak - empty) / 1e6);
    for (const Part& p : parts)
      std::printf("CHECK memory_%s predicted=%.0f measured=%.0f\n",
                  std::string(p.name) == "AdamW state" ? "adamw" : p.name, p.predicted, p.measured);
    std::printf("RESULT example=memory_budget params=%ld state_mb=%.3f activations_mb=%.3f "
                "peak_mb=%.3f\n",
                long(P), state / 1e6, parts[1].measured / 1e6, double(peak - empty) / 1e6);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_budget: error: %s\n", e.what());
    return 1;
  }
}
