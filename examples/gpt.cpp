// gpt.cpp — a character-level GPT, trained with any of ringgrad's data-parallel
// strategies, composed with context, tensor and pipeline parallelism: all of parallel/
// in one model.
//
//   scripts/rgrun -n 2 build/bin/gpt                            DDP on the fortunes text
//   scripts/rgrun -n 2 build/bin/gpt --strategy fsdp            the same, fully sharded
//   scripts/rgrun -n 4 build/bin/gpt --dp 2 --cp 2 --strategy zero2
//   scripts/rgrun -n 8 build/bin/gpt --dp 2 --pp 2 --tp 2      all four dimensions
//   build/bin/gpt --data book.txt --steps 3000 --save gpt.ckpt
//
// The model (examples/gpt/model.h; GPT-2's shape, small): bytes as tokens (a vocabulary of 256, so any text
// works), token and learned position embeddings, pre-norm blocks of causal
// self-attention and a GELU MLP, a final LayerNorm, and an LM head tied to the token
// embedding. AdamW with linear warmup and cosine decay, gradients clipped to norm 1.
// --norm rmsnorm --pos rope --mlp swiglu --kv-heads K swap in Llama's pieces, each on its own:
// RMSNorm, rotary q/k at the tokens' global positions (under --cp each shard's own; no wpe),
// the SwiGLU MLP, grouped-query attention (the ring carries the K K/V heads); with --tp
// each rank keeps its share of the query and K/V heads and of SwiGLU's hidden units.
//
// The ranks form a (dp, cp) mesh (parallel/device_mesh.h): each of the dp replicas
// takes --batch-size sequences of every step's batch, and the cp ranks of a replica
// share each sequence (context parallelism: every attention is ring attention over
// the cp group, the sequence cut zigzag). The gradient is the mean over all tokens,
// so it is averaged over all dp·cp ranks, by the chosen strategy (parallel/README.md):
//   ddp    DistributedDataParallel: every rank holds everything, gradients all-reduced
//   zero1  DDP + ZeroRedundancyOptimizer: each rank keeps the AdamW state of 1/N
//   zero2  ZeroRedundancyOptimizer stage 2: gradients reduced to their owners too
//   fsdp   FullyShardedDataParallel, one unit per block: parameters sharded as well
// All four compute the same training run, up to the order of floating-point sums.
// --tp and --pp add the mesh's other two axes (dp, pp, cp, tp; tp varying fastest):
// each pipeline stage (Stage below) holds a contiguous run of blocks, cut from the GPT's
// blocks as they are made (no rank holds the whole model) with their heads, MLP and
// vocabulary split over the tp ranks (Megatron's layout); 1F1B over --micro-batches moves activations between stages (--schedule
// gpipe, interleaved [--virtual-stages V: each rank holds V chunks of blocks] or zb-h1:
// the other schedules of parallel/pipeline.h, the same gradients). Then the
// strategy is ddp or zero1: the gradient is all-reduced over (dp, cp) after each pipeline
// step, and under zero1 each of those ranks steps (and keeps AdamW's state for) its share
// of the stage's parameters, then broadcasts them (Megatron's distributed optimizer).
// --sequence-parallel (with --tp): between the split layers each tp rank keeps 1/tp of the
// positions (norms, residuals, a stage's sends and a recomputed block's input: 1/tp of the
// bytes), each split layer all-gathering the positions before it and reduce-scattering
// after it instead of the all-reduce (Megatron's sequence parallelism, gpt/parallel.h).
// It is still the same training run (the ctest of every strategy and layout compares
// the losses at step 20).
//
// Data: --data FILE, or by default the fortune files of Debian's `fortunes` package
// (scripts/setup installs it), concatenated: the first 90% trains, the last 10% is
// for validation. Every eval interval prints the train and validation loss; the end
// prints a sample from --prompt, then
//   RESULT example=gpt world=N strategy=S dp=… cp=… tp=… pp=… val_loss=… unigram_loss=… tokens_per_s=…
//          … recompute=… grad_accum=… params_mb=… grads_mb=… optim_mb=… peak_mb=…
//          model_gflops=… mfu=… gemm_gflops=… step_s=… save_s=… sent=…
// where unigram_loss is the entropy (nats/char) of the validation text's byte
// frequencies: the loss of a model that learned nothing but how often each byte occurs;
// params_mb, grads_mb and optim_mb the bytes (/1e6) of parameters, gradients and optimizer
// state a rank held in the second step, and peak_mb the most tensor memory it held at once
// during training (rg::memory_stats), each the largest rank's: `gpt --plan` predicts them;
// model_gflops each rank's share of the model's FLOPs per second (gpt/budget.h's count),
// mfu that over gemm_gflops, the float32 GEMM rate one rank reaches here (examples/mfu.h);
// step_s the mean seconds of a step after the first (saves not counted), save_s the mean
// seconds rank 0's training stood still for a --save-every save (--save-async: the copy
// only; 0 without saves), and sent what the second step sent.
// --plan [--world N] prints, without training or launching, what each rank of the run the
// other flags describe (at world N) will hold: gpt/plan.h's formulas, per pipeline stage,
// then RESULT plan … params_mb= grads_mb= optim_mb= activations_mb= peak_mb= sent=, the last the
// bytes and operations of each kind of collective ("all_reduce:MB/operations,…"), as a run's
// RESULT line prints what it sent in its measured step. --machine here|h100|h200 adds the
// step's predicted time (gpt/step_time.h): `here` probes this machine on the ranks rgrun
// started (rgrun -n N gpt ... --plan --machine here), a100, h100 and h200 are GPU clusters from
// their datasheets; RESULT plan then ends machine=… step_s=… compute_s=… comm_s=… mfu=….
// --check-plan trains as usual, then prints the plan beside what the largest rank held,
// one CHECK line each (tests/check_gpt_plan.sh, docs/learn chapters 0 and 2).
// The train loss printed is the mean over every rank and every step since the last line.
// --log-every N also prints it every N steps; --log FILE.jsonl writes a JSON line at each
// of those and at each evaluation (step, loss, val_loss, tokens/s, lr, elapsed_s:
// examples/metrics_log.h). On a terminal rank 0 shows a progress bar under the lines.
//
// --save PATH writes one checkpoint file (optim/checkpoint.h): the model (whole, from any
// strategy), the optimizer state (whole, in the form a plain AdamW writes), the schedule,
// under --precision fp16 the GradScaler's state, and the step reached, at the end and
// every --save-every steps; --resume PATH continues from it under any strategy, layout
// (--dp/--pp/--cp/--tp: gpt/stage_state.h puts the stages' slices together and cuts them
// again; --ep: every expert gathered from its ep rank) and world size, and under the same
// ones ends with the same bits as a run never stopped (each step's batch is drawn from the
// seed and the step). --save DIR/ (a path ending in '/', or a directory) writes a sharded
// checkpoint instead: each rank the pieces it holds, nothing gathered, rank 0 a manifest
// last (optim/sharded_checkpoint.h, gpt/sharded_state.h); --resume DIR reads, on each rank,
// the pieces it needs, under any layout. build/bin/convert_checkpoint turns one form into
// the other.
// --max-steps N stops after step N (the schedule still spans --steps), to resume later.
// --trace FILE.json writes a Chrome trace of one step: FSDP's all-gathers and
// reduce-scatters, DDP's buckets or the ring's K/V transfers on each rank's comm track.
// --budget prints, for the second step, each rank's parameters and the bytes it sent on
// each axis of the mesh (tp, pp, the data-parallel group, the gradient norm's group)
// beside gpt/budget.h's formulas, one CHECK line each (--strategy ddp, --cp 1; with
// --precision and --comm-hook too).
//
// --grad-accum N: each step takes N micro-batches of --batch-size sequences per replica,
// their gradients summed (each loss divided by N), and only the last backward
// communicates (no_sync; with --pp, the pipeline runs N times, then the all-reduce).
// --batch-size B --grad-accum N draws the same sequences as --batch-size N·B: the same
// training run up to the order of sums, holding one micro-batch's activations at a time.
// --recompute none|selective|full: activation recomputation (nn/checkpoint.h; what each
// keeps: GPTConfig in gpt/model.h): the MLP half of each block, or each whole block,
// recomputed in backward instead of kept. The same training run, bit for bit.
// --precision bf16|fp16: PyTorch's AMP recipe (examples/precision.h): forward and loss (and
// the validation loss) under rg::autocast, the float32 parameters as master weights; fp16
// adds a GradScaler, unscaled before clipping. Under zero1/zero2/fsdp each rank unscales
// only the gradients it steps on, so the ranks agree on skipping a step through
// parallel/grad_scaler_sync.h (an all-reduce of the inf/NaN flag); ddp's averaged
// gradients agree already. Not with --tp or --pp above 1 (the pipeline runs backward inside
// its schedule; refused). --comm-hook bf16|fp16 sends DDP's gradient buckets in 16 bits
// (ddp and zero1, which use DDP). Both are printed at the end of the RESULT line.
//
// --experts E: the MLP of every --moe-every-th block becomes a Mixture of Experts (nn/moe.h)
// of E experts of its shape, --experts-per-token k each (--shared-experts,
// --capacity-factor, --aux-loss-coef: the layer's options). Each sequence is one routing
// group, so every layout (strategies, --tp, --pp, --grad-accum, --recompute) routes and
// drops what one process does; the load-balance loss rides backward from each block
// (nn::with_aux_loss), so it needs no trainer to add it. --ep N splits the experts over N
// of the data-parallel ranks (parallel/expert_parallel.h; --strategy ddp; with --tp, --pp
// and --cp too: all five dimensions),
// and prints the ep group's all-to-all bytes beside gpt/budget.h's formula. Evaluation lines
// show the busiest expert's load over the mean; RESULT adds experts= ep= expert_balance=
// expert_dropped=. With --cp a sequence's routing statistics are summed over its cp ranks,
// and capacity drops what one process drops (nn::GroupPieces). Not with --plan or --budget.
#include <ringgrad/parallel/context_parallel.h>
#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/device_mesh.h>
#include <ringgrad/parallel/distributed_checkpoint.h>
#include <ringgrad/parallel/fsdp.h>
#include <ringgrad/parallel/grad_scaler_sync.h>
#include <ringgrad/parallel/pipeline.h>
#include <ringgrad/parallel/tensor_parallel.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/parallel/zero.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "checkpointing.h"
#include "gpt/budget.h"    // --budget: what a rank keeps and sends, as formulas
#include "gpt/model.h"     // the model: GPTConfig, Block, GPT
#include "gpt/parallel.h"  // its tensor- and pipeline-parallel pieces: ParallelBlock, Stage
#include "gpt/plan.h"      // --plan: what each rank will hold, before the run
#include "gpt/report.h"    // --budget, --plan, --check-plan: the formulas beside the measurements
#include "gpt/sharded_state.h"  // --save DIR/: each rank's own pieces of the state
#include "gpt/trainer.h"   // the model under a strategy: forward, backward, clip, step, save
#include "gpt/plan_options.h" // --plan, --world, --machine, --check-plan
#include "gpt_text.h"
#include "metrics_log.h"
#include "mfu.h"  // model FLOPs utilisation: the machine's yardstick
#include "parse_on_every_rank.h"
#include "precision.h"
#include "progress_bar.h"

namespace rg = ringgrad;
namespace par = rg::parallel;

namespace {

using gpt::Block;
using gpt::GPT;
using gpt::GPTConfig;
using gpt::print_budget;
using gpt::print_plan;
using gpt::print_plan_check;
using gpt::Groups;
using gpt::Stage;
using gpt::StageBlocks;
using gpt::Trainer;

// ---------------------------------------------------------------- generation

// Continues `prompt` by `length` bytes, sampling each from the softmax of the last
// logits / temperature over the top_k most likely bytes.
std::string generate(GPT& model, const std::string& prompt, int64_t length, double temperature,
                     int64_t top_k, int64_t seq, uint64_t seed) {
  rg::NoGradGuard no_grad;
  model.eval();
  std::mt19937_64 rng(seed);
  std::vector<int64_t> context(prompt.begin(), prompt.end());
  for (int64_t& c : context) c = static_cast<unsigned char>(c);
  std::string out = prompt;
  for (int64_t i = 0; i < length; ++i) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(context.size()), seq);
    std::vector<int64_t> window(context.end() - t, context.end());
    rg::Tensor logits = model(rg::from_vector(window, {1, t})).select(1, t - 1).reshape({-1});
    std::vector<double> l = logits.tolist<double>();
    std::vector<double> sorted = l;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[static_cast<size_t>(top_k - 1)], top = *std::max_element(l.begin(), l.end());
    std::vector<double> weights(l.size());
    for (size_t v = 0; v < l.size(); ++v)
      weights[v] = l[v] >= kth ? std::exp((l[v] - top) / temperature) : 0.0;
    const int64_t next = std::discrete_distribution<int64_t>(weights.begin(), weights.end())(rng);
    context.push_back(next);
    out += static_cast<char>(next);
  }
  model.train();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  par::World world(argc, argv);
  CLI::App app{"A character-level GPT on a (dp, pp, cp, tp) mesh: data-parallel (ddp, zero1, zero2, "
                "fsdp) x pipeline x context x tensor parallel"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // the last one counts
  GPTConfig config;
  std::string data, strategy = "ddp", trace_path, prompt = "The ";
  Checkpointing ckpt;  // --save --save-every --resume --max-steps (checkpointing.h)
  int dp = 0, cp = 1, tp = 1, pp = 1;
  int64_t micro_batches = 4, grad_accum = 1;
  int64_t steps = 2000, batch = 16, eval_every = 100, eval_batches = 8, sample_length = 300,
          top_k = 20;
  double lr = 3e-3, temperature = 0.8;
  uint64_t seed = 0;
  app.add_option("--data", data, "a text file (default: the fortunes package's files)");
  app.add_option("--strategy", strategy, "ddp | zero1 | zero2 | fsdp")
      ->check(CLI::IsMember({"ddp", "zero1", "zero2", "fsdp"}));
  app.add_option("--dp", dp, "data-parallel replicas (default: world size / cp)")->check(CLI::PositiveNumber);
  app.add_option("--cp", cp, "ranks sharing each sequence (context parallelism)")->check(CLI::PositiveNumber);
  app.add_option("--tp", tp, "ranks sharing each layer's weights (tensor parallelism)")->check(CLI::PositiveNumber);
  app.add_option("--pp", pp, "pipeline stages (the blocks cut evenly)")->check(CLI::PositiveNumber);
  bool sequence_parallel = false;
  app.add_flag("--sequence-parallel", sequence_parallel, "with --tp: between the split layers each tp rank "
               "keeps 1/tp of the positions (Megatron's sequence parallelism)");
  app.add_option("--micro-batches", micro_batches, "with --pp: micro-batches per step (dividing --batch-size)")
      ->check(CLI::PositiveNumber);
  std::string schedule_name = "1f1b";
  app.add_option("--schedule", schedule_name, "with --pp: gpipe | 1f1b | interleaved (--virtual-stages "
                 "chunks a rank) | zb-h1 (zero bubble: weight gradients fill the waits)")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  int virtual_stages = 2;
  app.add_option("--virtual-stages", virtual_stages, "with --schedule interleaved: model chunks per rank")
      ->check(CLI::PositiveNumber);
  app.add_option("--seq", config.seq, "context length")->check(CLI::PositiveNumber);
  app.add_option("--layers", config.layers, "Transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--d-model", config.d_model, "model width")->check(CLI::PositiveNumber);
  app.add_option("--heads", config.heads, "attention heads (dividing --d-model)")->check(CLI::PositiveNumber);
  app.add_option("--norm", config.norm, "layernorm (GPT-2's) or rmsnorm (Llama's)")
      ->check(CLI::IsMember({"layernorm", "rmsnorm"}));
  app.add_option("--pos", config.pos, "learned position embeddings (GPT-2's) or rope (rotary, on q and k)")
      ->check(CLI::IsMember({"learned", "rope"}));
  app.add_option("--mlp", config.mlp, "gelu (GPT-2's) or swiglu (Llama's gated MLP)")
      ->check(CLI::IsMember({"gelu", "swiglu"}));
  app.add_option("--ff", config.ff, "with --mlp swiglu: its hidden width (default: 8/3 --d-model, rounded up to 8)")
      ->check(CLI::PositiveNumber);
  app.add_option("--vocab", config.vocab, "with --plan: the vocabulary's size (a run reads bytes: 256)")
      ->check(CLI::PositiveNumber);
  app.add_option("--recompute", config.recompute,
                 "activation recomputation: none, selective (each block's MLP) or full (each block)")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  app.add_option("--kv-heads", config.kv_heads, "grouped-query attention: K/V heads, dividing --heads (0: --heads)")
      ->check(CLI::NonNegativeNumber);
  int ep = 1;
  app.add_option("--experts", config.experts, "Mixture of Experts: experts per MoE block (0: dense MLPs)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--experts-per-token", config.experts_per_token, "with --experts: experts each token goes to (k)")
      ->check(CLI::PositiveNumber);
  app.add_option("--shared-experts", config.shared_experts, "with --experts: experts every token goes through")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--capacity-factor", config.capacity_factor,
                 "with --experts: places per expert = factor x tokens x k / experts (0: dropless)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--aux-loss-coef", config.aux_loss_coef, "with --experts: the load-balance loss's weight")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--moe-every", config.moe_every, "with --experts: every Nth block is MoE (2: every other)")
      ->check(CLI::PositiveNumber);
  app.add_option("--ep", ep, "with --experts: ranks the experts are split over (expert parallelism, inside dp)")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "optimizer steps (in all, counting a resumed run's)")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch, "sequences per forward on each data-parallel replica")
      ->check(CLI::PositiveNumber);
  app.add_option("--grad-accum", grad_accum,
                 "micro-batches of --batch-size per step, gradients summed (a step takes N x --batch-size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "peak learning rate (AdamW; warmup 5% of the steps, then cosine)")
      ->check(CLI::PositiveNumber);
  app.add_option("--eval-every", eval_every, "steps between train/val loss lines")->check(CLI::PositiveNumber);
  app.add_option("--eval-batches", eval_batches, "validation batches per evaluation")->check(CLI::PositiveNumber);
  LogOptions log_options{.every = 0};  // --log FILE.jsonl --log-every N (metrics_log.h)
  log_options.add_options(app, "also print (and --log) the training loss every N steps (0: never)");
  app.add_option("--prompt", prompt, "the start of the generated sample");
  app.add_option("--sample-length", sample_length, "bytes to generate at the end (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", temperature, "sampling temperature")->check(CLI::PositiveNumber);
  app.add_option("--top-k", top_k, "sample among the k most likely bytes")->check(CLI::Range(1, 256));
  app.add_option("--seed", seed, "model initialisation and data order");
  ckpt.add_options(app);
  app.add_option("--trace", trace_path, "write a Chrome trace of the third step to FILE.json");
  gpt::PlanOptions plan;  // --plan, --world, --machine, --check-plan (gpt/plan_options.h)
  plan.add_options(app);
  bool budget = false;
  app.add_flag("--budget", budget, "print each rank's parameters and bytes sent per mesh axis in step 2, "
               "beside gpt/budget.h's formulas (--strategy ddp, --cp 1)");
  Precision precision;  // --precision fp32|bf16|fp16 (precision.h)
  precision.add_options(app);
  CommHookOption comm_hook;  // --comm-hook none|bf16|fp16 (precision.h)
  comm_hook.add_options(app);
  if (auto code = parse_on_every_rank(world, app, argc, argv)) return *code;  // all ranks agree

  return par::main_guard(world, [&] {
    const int world_size = plan.world_size(world);  // --world's with --plan, else rgrun's
    if (dp == 0) dp = world_size / (cp * tp * pp);
    RG_CHECK(dp * pp * cp * tp == world_size, "gpt", "expected --dp x --pp x --cp x --tp = the world size ",
             world_size, ", got ", dp, " x ", pp, " x ", cp, " x ", tp);
    RG_CHECK(pp <= config.layers && config.layers % pp == 0, "gpt", "expected --pp to divide --layers ",
             config.layers, ", got ", pp);
    RG_CHECK(config.heads % tp == 0 && config.vocab % tp == 0, "gpt", "expected --tp to divide --heads ",
             config.heads, " and the vocabulary ", config.vocab, ", got ", tp);
    RG_CHECK(pp == 1 || batch % micro_batches == 0, "gpt", "expected --micro-batches to divide --batch-size ",
             batch, ", got ", micro_batches);
    const par::PipelineSchedule schedule_kind = par::parse_schedule(schedule_name);
    const int chunks = schedule_kind == par::PipelineSchedule::Interleaved1F1B ? virtual_stages : 1;
    RG_CHECK(app.count("--virtual-stages") == 0 || schedule_kind == par::PipelineSchedule::Interleaved1F1B,
             "gpt", "expected --virtual-stages only with --schedule interleaved, got --schedule ", schedule_name);
    if (chunks > 1 || schedule_kind == par::PipelineSchedule::Interleaved1F1B)
      RG_CHECK(pp > 1 && micro_batches % pp == 0 && config.layers % (pp * chunks) == 0, "gpt",
               "expected --schedule interleaved with --pp above 1, --micro-batches a multiple of --pp and "
               "--layers a multiple of --pp x --virtual-stages, got --pp ", pp, ", --micro-batches ",
               micro_batches, ", --layers ", config.layers, ", --virtual-stages ", virtual_stages);
    RG_CHECK(config.d_model % config.heads == 0, "gpt", "expected --heads to divide --d-model ",
             config.d_model, ", got ", config.heads);
    RG_CHECK(cp == 1 || config.seq % (2 * cp) == 0, "gpt", "expected --seq divisible by 2 x --cp = ",
             2 * cp, " (the zigzag cut), got ", config.seq);
    RG_CHECK(config.ff == 0 || config.mlp == "swiglu", "gpt", "expected --ff only with --mlp swiglu (GELU's MLP "
             "is 4 x --d-model wide), got --ff ", config.ff);
    RG_CHECK(config.vocab == 256 || plan.plan_only, "gpt", "expected --vocab only with --plan (a run's tokens are "
             "bytes: a vocabulary of 256), got --vocab ", config.vocab);
    RG_CHECK(config.kv_heads == 0 || config.heads % config.kv_heads == 0, "gpt",
             "expected --kv-heads dividing --heads ", config.heads, ", got ", config.kv_heads);
    RG_CHECK(config.pos != "rope" || (config.d_model / config.heads) % 2 == 0, "gpt",
             "expected an even head dim (--d-model / --heads) for --pos rope, got ",
             config.d_model / config.heads);
    RG_CHECK(config.kv_heads == 0 || config.kv_heads % tp == 0, "gpt", "expected --tp to divide --kv-heads ",
             config.kv_heads, " (each rank keeps the K/V heads its query heads read), got ", tp);
    RG_CHECK(config.hidden() % tp == 0, "gpt", "expected --tp to divide the MLP's hidden width ", config.hidden(),
             " (--ff, or Llama's 8/3 x --d-model rounded up to a multiple of 8), got ", tp);
    RG_CHECK(!prompt.empty(), "gpt", "expected a non-empty --prompt");
    RG_CHECK(comm_hook.name == "none" || ((strategy == "ddp" || strategy == "zero1") && tp == 1 && pp == 1),
             "gpt", "expected --comm-hook none unless DDP averages the gradients (--strategy ddp or zero1, "
             "no --tp/--pp), got --comm-hook ", comm_hook.name, " with --strategy ", strategy);
    RG_CHECK((tp == 1 && pp == 1) || strategy == "ddp" || strategy == "zero1", "gpt",
             "expected --strategy ddp or zero1 with --tp or --pp above 1 (a stage's gradients are averaged "
             "over the (dp, cp) group after each pipeline step; zero1 then shares AdamW's state), got ", strategy);
    RG_CHECK(!sequence_parallel || (tp > 1 && (config.seq / cp) % tp == 0 && !budget),
             "gpt", "expected --sequence-parallel with --tp above 1 dividing each rank's --seq / --cp = ",
             config.seq / cp, " positions, without --budget (--plan counts it), got --tp ", tp,
             budget ? " with --budget" : "");
    RG_CHECK(!sequence_parallel || config.experts == 0 || config.seq % (2 * cp * tp) == 0, "gpt",
             "expected --seq divisible by 2 x --cp x --tp = ", 2 * cp * tp, " with --experts and "
             "--sequence-parallel (a sequence's routing sees it in 2 x cp x tp equal pieces), got ", config.seq);
    ckpt.check();
    RG_CHECK(!budget || (strategy == "ddp" && cp == 1 && steps >= 2 && grad_accum == 1),
             "gpt", "expected --budget with --strategy ddp, --cp 1, --grad-accum 1 and --steps >= 2 "
             "(its formulas count those; chapters 2 and 5 count the others), got --strategy ", strategy,
             " --cp ", cp, " --grad-accum ", grad_accum, " --steps ", steps);
    if (config.experts > 0) {
      RG_CHECK(config.experts_per_token <= config.experts, "gpt", "expected --experts-per-token at most --experts ",
               config.experts, ", got ", config.experts_per_token);
      RG_CHECK(!budget, "gpt", "expected no --budget with --experts (its formulas count dense blocks; "
               "--plan counts experts)");
    }
    RG_CHECK(ep == 1 || config.experts > 0, "gpt", "expected --ep only with --experts, got --ep ", ep);
    if (ep > 1) {
      RG_CHECK(strategy == "ddp", "gpt", "expected --strategy ddp with --ep above 1 (DDP leaves the experts to "
               "expert parallelism), got ", strategy);
      RG_CHECK(dp % ep == 0 && config.experts % ep == 0, "gpt", "expected --ep to divide --dp ", dp,
               " and --experts ", config.experts, ", got ", ep);
    }
    const gpt::PlanLayout layout{.dp = dp, .pp = pp, .cp = cp, .tp = tp, .ep = ep, .strategy = strategy, .batch = batch,
                                 .grad_accum = grad_accum, .micro_batches = pp > 1 ? micro_batches : 1,
                                 .schedule = schedule_kind, .virtual_stages = chunks,
                                 .precision = precision.name, .sequence_parallel = sequence_parallel,
                                 .merge_is_view = gpt::attention_merge_is_view(config),
                                 .gradient_bytes = comm_hook.name == "none" ? 4 : 2};
    if (plan.plan_only) {  // the plan for this run (with --machine, its step's time): printed, nothing trained
      plan.print(world, config, layout);
      return 0;
    }
    // The mesh, tp varying fastest (its ranks talk most: on a GPU host, the same node).
    par::DeviceMesh mesh(world.communicator(), {{"dp", dp}, {"pp", pp}, {"cp", cp}, {"tp", tp}});
    par::Communicator& everyone = mesh.group({"dp", "cp"});  // the gradient's average
    const int replica = mesh.rank("dp");
    // --ep: the data-parallel axis as (edp, ep), the same ranks the mesh lays out; each ep
    // group (one pp, cp and tp position) splits the experts, which the (edp, cp) ranks hold
    // alike (and the tp ranks: under --sequence-parallel each on its own positions).
    std::unique_ptr<par::DeviceMesh> experts_mesh;
    if (ep > 1)
      experts_mesh = std::make_unique<par::DeviceMesh>(
          world.communicator(),
          std::vector<std::pair<std::string, int>>{{"edp", dp / ep}, {"ep", ep}, {"pp", pp}, {"cp", cp}, {"tp", tp}});
    const Groups groups{everyone, mesh.group("pp"), mesh.group("tp"), mesh.group({"pp", "tp"}),
                        mesh.rank("pp"), mesh.rank("tp"), pp,
                        ep > 1 ? &experts_mesh->group("ep") : nullptr,
                        ep > 1 && dp / ep * cp > 1 ? &experts_mesh->group({"edp", "cp"}) : nullptr};

    const Text text = load_text(data, config.seq);
    // Every rank reads the text itself: the same sizes, or the ranks would train on different data.
    par::check_same_across_ranks(world.communicator(),
                                 {{"train bytes", std::to_string(text.train.size())},
                                  {"validation bytes", std::to_string(text.val.size())}},
                                 "the data (" + (data.empty() ? std::string("the fortunes files") : data) + ")");
    const double unigram = unigram_loss(text.val);
    rg::manual_seed(seed);  // the same initial model on every rank
    // --tp/--pp: each rank cuts its stage's blocks as they are made and keeps no whole model.
    std::optional<StageBlocks> cut;
    if (tp > 1 || pp > 1) cut.emplace(groups.pp_rank, pp, groups.tp, chunks, config.layers, sequence_parallel);
    GPT model(config, groups.ep, cut ? GPT::BlockHook(std::ref(*cut)) : GPT::BlockHook());
    // --cp: a sequence's tokens lie on the cp ranks, zigzag chunks c and 2cp−1−c of 2cp, and
    // under --sequence-parallel each chunk's tp parts on the tp ranks. Its routing statistics
    // are summed over them (over tp with the gradient as it is: the tp ranks' loss is one),
    // and capacity gives places in its whole order.
    if (cp > 1 || sequence_parallel)
      for (const auto& moe : model.moes) {
        moe->group_sum = [&cp_group = mesh.group("cp"), &tp_group = mesh.group("tp"),
                          sequence_parallel](const rg::Tensor& t) {
          const rg::Tensor s = sequence_parallel ? par::reduce_from_tp_region(t, tp_group) : t;
          return cp_group.size() > 1 ? par::sum_over_ranks(s, cp_group) : s;
        };
        // Local piece i of the 2·parts (chunk c's parts, then chunk 2cp−1−c's); a rank holds two.
        const int parts = sequence_parallel ? tp : 1, c = mesh.rank("cp");
        const int mine = sequence_parallel ? 2 * mesh.rank("tp") : 0;
        moe->group_piece_count = 2 * cp * parts;
        moe->group_pieces_held.clear();
        for (int i = mine; i < mine + 2; ++i)
          moe->group_pieces_held.push_back(i < parts ? c * parts + i : (2 * cp - 1 - c) * parts + i - parts);
      }
    Trainer trainer(strategy, model, everyone, lr, groups, {.micro_batches = pp > 1 ? micro_batches : 1,
                    .schedule = schedule_kind}, precision, comm_hook.hook(), grad_accum, chunks,
                    cut ? &*cut : nullptr);
    const int64_t per_replica = batch * grad_accum;  // sequences per step on each replica
    rg::optim::WarmupCosine schedule(trainer.optimizer(),
                                     {.warmup_steps = std::min<int64_t>(std::max<int64_t>(1, steps / 20), steps - 1),
                                      .total_steps = steps, .min_factor = 0.1});
    // What defines this run (not the strategy or the layout: a checkpoint moves between them).
    std::map<std::string, std::string> run{
        {"layers", std::to_string(config.layers)}, {"d_model", std::to_string(config.d_model)},
        {"heads", std::to_string(config.heads)},   {"seq", std::to_string(config.seq)},
        {"steps", std::to_string(steps)},          {"global_batch", std::to_string(per_replica * dp)},
        {"lr", std::to_string(lr)},                {"seed", std::to_string(seed)},
        {"data", data}};
    if (precision.mixed()) run["precision"] = precision.name;  // fp32 checkpoints stay as they were
    if (config.experts > 0) {  // a Mixture of Experts (dense runs' checkpoints stay as they were)
      run["experts"] = std::to_string(config.experts);
      run["experts_per_token"] = std::to_string(config.experts_per_token);
      run["shared_experts"] = std::to_string(config.shared_experts);
      run["moe_every"] = std::to_string(config.moe_every);
      run["capacity_factor"] = std::to_string(config.capacity_factor);
      run["aux_loss_coef"] = std::to_string(config.aux_loss_coef);
    }
    if (!config.gpt2()) {  // the architecture (only when not GPT-2's: older checkpoints still match)
      run["norm"] = config.norm, run["pos"] = config.pos, run["mlp"] = config.mlp;
      run["kv_heads"] = std::to_string(config.kv_heads == 0 ? config.heads : config.kv_heads);
    }
    int64_t start_step = 0;
    if (!ckpt.resume_path.empty()) {
      // One file (the whole state, cut here) or a directory of shards (each rank reads the
      // pieces it holds here, whatever layout wrote them: gpt/sharded_state.h).
      const bool sharded = std::filesystem::is_directory(ckpt.resume_path);
      std::optional<rg::ShardedCheckpoint> pieces;
      rg::Checkpoint c;
      if (sharded)
        pieces = rg::open_sharded_checkpoint(ckpt.resume_path), c = pieces->info;
      else
        c = rg::load_checkpoint(ckpt.resume_path);
      rg::check_run(c, c.world_size, run);  // any world size: the batch is drawn by step
      RG_CHECK(c.schedule_steps == c.progress.step, "gpt", "'", ckpt.resume_path,
               "': expected schedule.steps = step = ", c.progress.step, ", got ", c.schedule_steps);
      // fp16: the GradScaler's scale and growth tracker (checked before anything is loaded;
      // fp32/bf16, whose scaler is disabled, ignore it). The same on every rank.
      rg::restore_grad_scaler(c, trainer.scaler);
      if (sharded)
        gpt::load_shards(trainer, *pieces);
      else
        trainer.load(c.model, c.optimizer, c.optimizer_meta);
      start_step = c.progress.step;
      schedule.resume_at(start_step);
    }
    // What a checkpoint holds beside the tensors: the schedule, fp16's scaler (the same on
    // every rank: they agree on each skipped step; disabled under fp32/bf16, which write
    // nothing for it), the step, the world, the run's settings and the generator.
    auto checkpoint_info = [&](int64_t step) {
      rg::Checkpoint c;
      c.schedule_steps = schedule.steps();
      if (trainer.scaler.is_enabled()) c.grad_scaler = trainer.scaler.state_dict();
      c.progress = {.step = step};
      c.world_size = world.size();
      c.run = run;
      c.generators["default"] = rg::default_generator();
      return c;
    };
    // --save DIR/ (a directory): every rank writes the pieces it holds (gpt/sharded_state.h),
    // rank 0 the manifest, last (--save-async: the write in the background, the commit at the
    // next save or the end). The optimizer's metadata is rank 0's (the same on every
    // rank but for its parameter count), counted as a plain AdamW over the whole model.
    par::AsyncShardedSaver sharded_saver;  // --save DIR/ --save-async
    auto save_shards = [&](int64_t step) {
      rg::Checkpoint c = checkpoint_info(step);
      gpt::local_optimizer(trainer).state_dict(&c.optimizer_meta);
      c.optimizer_meta["group.0.size"] = std::to_string(trainer.whole_parameter_names().size());
      if (ckpt.save_async)  // the pieces copied now, written in the background, committed later
        sharded_saver.save(ckpt.save_path, c, gpt::shards(trainer), world.communicator(), world.device());
      else
        par::save_sharded(ckpt.save_path, c, gpt::shards(trainer), world.communicator(), world.device());
    };
    // --save FILE: rank 0 writes the whole state, gathered by gather_and_save (a collective
    // under ZeRO and FSDP: every rank calls it), as one checkpoint file.
    auto write = [&](int64_t step, rg::NamedTensors model_state, rg::NamedTensors optim_state,
                     std::map<std::string, std::string> optim_meta) {
      rg::Checkpoint c = checkpoint_info(step);
      c.model = std::move(model_state);
      c.optimizer = std::move(optim_state);
      c.optimizer_meta = std::move(optim_meta);
      if (world.is_main()) ckpt.write(std::move(c));  // --save-async: in the background
    };
    auto gather_and_save = [&](int64_t step) {
      if (ckpt.sharded()) return save_shards(step);
      std::map<std::string, std::string> optim_meta;
      rg::NamedTensors optim_state = trainer.optimizer_state(&optim_meta);
      write(step, trainer.model_state(), std::move(optim_state), std::move(optim_meta));
    };
    if (world.is_main())
      std::printf(
          "gpt: %lld parameters (%lld layers, d_model %lld, %lld heads, context %lld); world %d = "
          "dp %d x pp %d x cp %d x tp %d, strategy %s, %lld sequences per step (%lld per replica)\n"
          "data: %zu train / %zu validation bytes, unigram loss %.4f nats/char%s\n",
          static_cast<long long>(model.all_parameters()), static_cast<long long>(config.layers),
          static_cast<long long>(config.d_model), static_cast<long long>(config.heads),
          static_cast<long long>(config.seq), world.size(), dp, pp, cp, tp, strategy.c_str(),
          static_cast<long long>(per_replica * dp), static_cast<long long>(per_replica), text.train.size(),
          text.val.size(), unigram,
          start_step > 0 ? (", resumed at step " + std::to_string(start_step)).c_str() : "");
    if (world.is_main() && (grad_accum > 1 || config.recompute != "none"))
      std::printf("memory: %lld micro-batch%s of %lld sequences per step (--grad-accum), --recompute %s\n",
                  static_cast<long long>(grad_accum), grad_accum > 1 ? "es" : "", static_cast<long long>(batch),
                  config.recompute.c_str());
    char capacity[64] = "dropless";
    if (config.capacity_factor > 0) std::snprintf(capacity, sizeof capacity, "capacity factor %g", config.capacity_factor);
    if (world.is_main() && config.experts > 0)
      std::printf("experts: %lld per MoE block (%s), %lld per token, %lld shared, %s; "
                  "%lld parameters active per token; ep %d (%lld experts per rank)\n",
                  static_cast<long long>(config.experts),
                  config.moe_every == 1 ? "every block" : ("one block in " + std::to_string(config.moe_every)).c_str(),
                  static_cast<long long>(config.experts_per_token), static_cast<long long>(config.shared_experts),
                  capacity,
                  static_cast<long long>(model.active_parameters()), ep,
                  static_cast<long long>(config.experts / ep));
    if (world.is_main() && !config.gpt2())
      std::printf("blocks: --norm %s --pos %s --mlp %s --kv-heads %lld\n", config.norm.c_str(),
                  config.pos.c_str(), config.mlp.c_str(),
                  static_cast<long long>(config.kv_heads == 0 ? config.heads : config.kv_heads));

    // This rank's part of a batch of whole windows: its replica's rows, and under
    // context parallelism its shard of each sequence (and of the positions).
    // `body` runs inside the guard, where every attention is ring attention.
    auto on_my_part = [&](rg::Tensor tokens, rg::Tensor targets, const auto& body) {
      tokens = tokens.narrow(0, replica * per_replica, per_replica).contiguous();
      targets = targets.narrow(0, replica * per_replica, per_replica).contiguous();
      if (cp == 1) return body(tokens, targets);
      auto guard = par::context_parallel(mesh.group("cp"), {&tokens, &targets, &model.positions},
                                         /*seq_dims=*/{1}, {.causal = true});
      return body(tokens, targets);
    };
    // The mean loss over every rank's tokens (all shards are equal-sized).
    auto mean_over_ranks = [&](double local) {
      rg::Tensor t = rg::full({1}, local, {.dtype = rg::kFloat64});
      everyone.all_reduce(t, par::Reduce::Avg);
      return t.item();
    };
    // Validation: the same eval_batches x (batch·grad_accum·dp) windows every time, evenly
    // spread (so --batch-size 8 --grad-accum 2 is evaluated on --batch-size 16's windows).
    auto validation_loss = [&] {
      rg::NoGradGuard no_grad;
      const size_t rows = static_cast<size_t>(per_replica * dp), n = static_cast<size_t>(eval_batches) * rows;
      const size_t span = text.val.size() - static_cast<size_t>(config.seq) - 1;
      double sum = 0;
      for (int64_t b = 0; b < eval_batches; ++b) {
        std::vector<size_t> starts;
        for (size_t r = 0; r < rows; ++r) starts.push_back((static_cast<size_t>(b) * rows + r) * span / n);
        auto [x, y] = windows(text.val, starts, config.seq);
        sum += on_my_part(x, y, [&](const rg::Tensor& xs, const rg::Tensor& ys) {
          return trainer.eval_step(xs, ys);
        });
      }
      return mean_over_ranks(sum / double(eval_batches));
    };

    const int64_t end = ckpt.max_steps > 0 ? std::min(ckpt.max_steps, steps) : steps;
    double seconds = 0, train_loss = 0, window_loss = 0;
    double save_seconds = 0;  // training's time inside --save-every's saves (rank 0's)
    int64_t saves = 0;
    int64_t window_steps = 0, timed_tokens = 0;
    const int64_t tokens_per_step = per_replica * dp * config.seq;
    // Rank 0's bar (its lines above it) and JSON lines; a resumed run appends to the log.
    ProgressBar bar(world.is_main(), /*plain_lines=*/0);  // the loss lines say how far it is
    bar.start("gpt", steps, start_step, double(tokens_per_step), "tokens");
    MetricsLog log(log_options.path, world.is_main(), /*append=*/start_step > 0);
    RateMeter rate;
    std::array<int64_t, 3> held{};  // bytes of parameters, gradients, optimizer state
    int64_t sent = 0;               // bytes sent
    gpt::Traffic sent_by_kind;      // the same by kind of collective
    char line[200];
    for (int64_t step = start_step; step < end; ++step) {
      const bool traced = !trace_path.empty() && step == start_step + 2;
      if (traced) rg::trace::start(trace_path, world.rank(), world.size());
      auto start = std::chrono::steady_clock::now();
      // The step's batch, the same on every rank: dp · batch random windows.
      std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(step));
      std::uniform_int_distribution<size_t> pick(0, text.train.size() - static_cast<size_t>(config.seq) - 1);
      std::vector<size_t> starts(static_cast<size_t>(per_replica * dp));
      for (size_t& s : starts) s = pick(rng);
      auto [x, y] = windows(text.train, starts, config.seq);

      // --budget: the second step's bytes on each axis (the first may set things up).
      const bool budgeted = budget && step == start_step + 1;
      // What this rank holds and sends in the second step (the first creates the optimizer's state).
      const bool measured = step == std::min(start_step + 1, end - 1);
      // Every group a step sends on: budget.h's four axes, then ring attention's cp group.
      std::vector<par::Communicator*> axes{&groups.tp, &groups.pp, &everyone, &groups.pp_tp, &mesh.group("cp")};
      if (groups.ep) axes.push_back(groups.ep);  // expert parallelism's all-to-alls
      if (groups.expert_dp) axes.push_back(groups.expert_dp);  // and its experts' all-reduce
      if (budgeted || measured)
        for (par::Communicator* c : axes) c->reset_wire_bytes();
      trainer.zero_grad();
      const double local = on_my_part(x, y, [&](const rg::Tensor& xs, const rg::Tensor& ys) {
        return trainer.train_step(xs, ys);
      });
      if (measured) held = trainer.held_bytes();  // parameters and gradients, after backward
      trainer.clip(1.0);
      trainer.step();
      schedule.step();
      if (measured && groups.ep && world.is_main()) {  // the experts' all-to-alls against the formula
        std::snprintf(line, sizeof line, "CHECK moe_all_to_all_mb predicted=%.6f measured=%.6f",
                      gpt::moe_all_to_all_bytes(config, batch * config.seq / cp / (sequence_parallel ? tp : 1), ep,
                                                grad_accum) / 1e6,
                      double(groups.ep->wire_bytes(par::Collective::AllToAll)) / 1e6);
        bar.message(line);
      }
      if (measured) {
        held[2] = trainer.held_bytes()[2];  // the optimizer's state, after its step
        sent = 0;
        for (par::Communicator* c : axes) {  // every byte sent in the step
          sent += c->wire_bytes();
          for (int k = 0; k < par::kCollectives; ++k) {
            sent_by_kind.bytes[size_t(k)] += double(c->wire_bytes(par::Collective(k)));
            sent_by_kind.operations[size_t(k)] += double(c->operations(par::Collective(k)));
          }
        }
      }
      if (budgeted) {
        std::array<int64_t, 4> per_axis{};  // budget.h's axes: tp, pp, data, norm
        for (size_t a = 0; a < per_axis.size(); ++a) per_axis[a] = axes[a]->wire_bytes();
        print_budget(world, config, batch, {.dp = dp, .pp = pp, .tp = tp, .micro_batches = pp > 1 ? micro_batches : 1,
                                            .stage = groups.pp_rank,
                                            .gradient_bytes = comm_hook.name == "none" ? 4 : 2},
                     trainer.pipeline ? trainer.stage->parameters() : model.parameters(), per_axis);
      }
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (step > start_step) seconds += elapsed, timed_tokens += tokens_per_step;  // not the first: warm-up
      if (traced) {
        std::string where = par::stop_trace(world, trace_path);
        bar.message("trace of step " + std::to_string(step + 1) + " written to " + where);
      }
      window_loss += local, ++window_steps;
      if (ckpt.due(step + 1) && step + 1 < end) {  // (--save-async: the copy only)
        const auto save_start = std::chrono::steady_clock::now();
        gather_and_save(step + 1);
        save_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - save_start).count();
        ++saves;
      }
      const bool eval_now = (step + 1) % eval_every == 0 || step + 1 == end;
      const bool log_now = log_options.due(step + 1);
      MetricsLog::Line entry;
      if (eval_now || log_now) {  // the mean over every rank and every step since the last line
        train_loss = mean_over_ranks(window_loss / double(window_steps));
        window_loss = 0, window_steps = 0;
        bar.set_loss(train_loss);
        entry = {{"step", step + 1}, {"loss", train_loss},
                 {"tokens_per_s", std::round(rate.rate(double(tokens_per_step * (step + 1 - start_step))))},
                 {"lr", trainer.optimizer().param_groups()[0].lr}};
      }
      if (log_now) {
        std::snprintf(line, sizeof line, "step %5lld  train loss %.6f", static_cast<long long>(step + 1), train_loss);
        bar.message(line);
      }
      if (eval_now) {
        const double val = validation_loss();
        std::snprintf(line, sizeof line, "step %5lld/%lld  train loss %.4f  val loss %.4f  (%.2f of unigram)  %.0f tokens/s",
                      static_cast<long long>(step + 1), static_cast<long long>(steps), train_loss, val,
                      val / unigram, seconds > 0 ? double(timed_tokens) / seconds : 0.0);
        bar.message(line);
        entry["val_loss"] = val;
        if (config.experts > 0) {  // the last step's load on this rank's tokens (rank 0's)
          const auto [balance, dropped] = model.expert_load();
          std::snprintf(line, sizeof line, "            experts: busiest / mean %.2f, %.1f%% of choices dropped",
                        balance, 100 * dropped);
          bar.message(line);
          entry["expert_balance"] = balance, entry["expert_dropped"] = dropped;
        }
        rate.restart(double(tokens_per_step * (step + 1 - start_step)));  // not the evaluation's time
      }
      if (eval_now || log_now) log.write(std::move(entry));
      bar.update(step + 1);
    }
    bar.close();
    // Training's tensor memory, in MB, each the largest rank's: parameters, gradients and
    // optimizer state held in the second step, and the most held at once (rg::memory_stats).
    rg::Tensor memory = rg::from_vector(std::vector<double>{double(held[0]) / 1e6, double(held[1]) / 1e6,
                                                            double(held[2]) / 1e6,
                                                            double(rg::memory_stats().peak_bytes) / 1e6,
                                                            double(sent) / 1e6},
                                        {5}, {.dtype = rg::kFloat64});
    world.communicator().all_reduce(memory, par::Reduce::Max);
    const std::vector<double> mb = memory.tolist<double>();
    sent_by_kind = gpt::largest_over_ranks(world.communicator(), sent_by_kind);  // as the plan reports it
    if (plan.check_plan && world.is_main()) print_plan_check(config, layout, mb, sent_by_kind);  // CHECK lines
    const double val = validation_loss();

    // Saving: the whole model and optimizer state, gathered on rank 0 whatever the strategy
    // or layout (with --tp or --pp: put together from the tp slices and the stages).
    std::map<std::string, std::string> optim_meta;
    rg::NamedTensors optim_state, model_state;
    if (ckpt.sharded()) {  // each rank saves its own pieces; the sample's model gathered
      if (sample_length > 0) model_state = trainer.model_state();
    } else if (!trainer.pipeline || !ckpt.save_path.empty()) {
      optim_state = trainer.optimizer_state(&optim_meta);
      model_state = trainer.model_state();
    } else if (sample_length > 0) {
      model_state = trainer.whole_from_stages();  // each stage's part (every expert), on pp rank 0
    }
    if (!ckpt.save_path.empty()) {
      if (ckpt.sharded())
        save_shards(std::max(end, start_step));
      else
        write(std::max(end, start_step), model_state, optim_state, optim_meta);
      ckpt.finish();  // --save-async: on disk (and a directory committed) before saying so
      sharded_saver.finish();
      if (world.is_main())
        std::printf("saved %s (step %lld)\n", ckpt.save_path.c_str(),
                    static_cast<long long>(std::max(end, start_step)));
    }
    // A sample, on rank 0, from the whole model (sharded strategies: gathered above).
    if (world.is_main() && sample_length > 0 && !model_state.empty()) {
      GPT whole(config);
      whole.load_state_dict(model_state);
      std::printf("sample (temperature %.2f, top-k %lld):\n%s\n", temperature, static_cast<long long>(top_k),
                  generate(whole, prompt, sample_length, temperature, top_k, config.seq, seed).c_str());
    }
    // MFU (mfu.h): each rank's share of the model's FLOPs per second over one rank's
    // measured GEMM rate.
    const double tokens_per_s = seconds > 0 ? double(timed_tokens) / seconds : 0.0;
    const double flops = gpt::train_flops_per_token(config, model.active_parameters()) * tokens_per_s / world.size();
    const double peak_flops = mfu::rank_peak_flops(world);
    std::string experts_fields;  // the RESULT line's end, for MoE runs: the last step's load
    if (config.experts > 0) {
      const auto [balance, dropped] = model.expert_load();
      char fields[160];
      std::snprintf(fields, sizeof fields, " experts=%lld experts_per_token=%lld ep=%d expert_balance=%.3f "
                    "expert_dropped=%.4f", static_cast<long long>(config.experts),
                    static_cast<long long>(config.experts_per_token), ep, balance, dropped);
      experts_fields = fields;
    }
    if (world.is_main())
      std::printf("RESULT example=gpt world=%d strategy=%s dp=%d cp=%d tp=%d pp=%d val_loss=%.4f "
                  "unigram_loss=%.4f tokens_per_s=%.0f precision=%s comm_hook=%s recompute=%s grad_accum=%lld "
                  "params_mb=%.6f grads_mb=%.6f optim_mb=%.6f peak_mb=%.6f comm_mb=%.6f model_gflops=%.2f "
                  "mfu=%.3f gemm_gflops=%.1f step_s=%.4f save_s=%.4f sent=%s%s\n",
                  world.size(), strategy.c_str(), dp, cp, tp, pp, val, unigram, tokens_per_s, precision.name.c_str(),
                  comm_hook.name.c_str(), config.recompute.c_str(), static_cast<long long>(grad_accum), mb[0],
                  mb[1], mb[2], mb[3], mb[4], flops / 1e9, flops / peak_flops, peak_flops / 1e9,
                  timed_tokens > 0 ? seconds * double(tokens_per_step) / double(timed_tokens) : 0.0,
                  saves > 0 ? save_seconds / double(saves) : 0.0, gpt::by_kind(sent_by_kind).c_str(), experts_fields.c_str());
    return 0;
  });
}
