// gpt/plan_layout.h — the planner's words (gpt/plan.h): the layout it plans for, what it
// reports per rank, and the pieces it counts in (parameter tensors, kept activations).
#pragma once

#include <ringgrad/parallel/communicator.h>
#include <ringgrad/parallel/pipeline.h>

#include <array>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace gpt {

namespace par = ringgrad::parallel;

struct PlanLayout {
  int64_t dp = 1, pp = 1, cp = 1, tp = 1;
  int64_t ep = 1;                  // --ep: the experts split over ep of the dp ranks (gpt --experts)
  // Under --ep, the rows a rank's experts compute, in even shares (k·N: the router spreading
  // the tokens evenly); expert_rows_bound() gives the most they can be.
  double expert_rows = 1;
  std::string strategy = "ddp";    // ddp | zero1 | zero2 | fsdp (with tp or pp above 1: ddp or zero1)
  int64_t batch = 16;              // sequences per forward on each replica (--batch-size)
  int64_t grad_accum = 1;          // forwards per step
  int64_t micro_batches = 1;       // pipeline micro-batches per forward (pp > 1)
  par::PipelineSchedule schedule = par::PipelineSchedule::OneFOneB;  // --schedule (pp > 1)
  int64_t virtual_stages = 1;      // model chunks a rank holds (--schedule interleaved)
  std::string precision = "fp32";  // fp32 | bf16 | fp16: autocast over float32 parameters
  bool sequence_parallel = false;  // --sequence-parallel (with tp above 1)
  bool merge_is_view = true;       // attention's output already in out_proj's layout (fused kernel)
  int64_t gradient_bytes = 4;      // a gradient on DDP's wire: 4, or 2 (a 16-bit comm hook)
  int64_t world() const { return dp * pp * cp * tp; }
  // What the residual stream's positions are cut into on a tp rank: tp under sequence
  // parallelism, else 1 (every tp rank holds them all).
  double sequence_shards() const { return sequence_parallel ? double(tp) : 1; }
  // Whether a step's micro-batches share one 16-bit copy of each weight (autocast_weight_cache,
  // opened by gpt/trainer.h; `weight_cache` false for a program that does not): under autocast,
  // but not under FSDP.
  bool weight_cache = true;
  bool weights_cached() const { return weight_cache && precision != "fp32" && strategy != "fsdp"; }
};

// The mesh axes a rank sends on: tensor, pipeline and context parallelism, and the
// data-parallel group (dp·cp) that averages the gradients. gpt/step_time.h times each on
// the link its ranks share.
enum class Axis { Tp, Pp, Cp, Data };
inline constexpr int kAxes = 4;

// What one rank sends in a step, by kind of collective (parallel/communicator.h) and by axis:
// bytes as the communicators count them, and the number of operations.
struct Traffic {
  std::array<double, par::kCollectives> bytes{}, operations{};  // by kind
  std::array<double, kAxes> axis_bytes{}, axis_operations{};    // by axis
  void add(Axis axis, par::Collective kind, double ops, double each) {
    bytes[size_t(kind)] += ops * each, operations[size_t(kind)] += ops;
    axis_bytes[size_t(axis)] += ops * each, axis_operations[size_t(axis)] += ops;
  }
  double total() const { return std::accumulate(bytes.begin(), bytes.end(), 0.0); }
};

// One rank's figures, in bytes.
struct RankPlan {
  double params = 0, grads = 0, optim = 0, activations = 0, peak = 0;
  double comm = 0;  // bytes sent in one step, as the communicators count them
  Traffic sent;     // the same by kind and axis
  // The work of one step (gpt/step_time.h turns it into seconds): FLOPs of the GEMMs and of
  // attention, recomputation included (what the hardware runs; MFU counts the model's only),
  // and the bytes the other ops (norms, activations, residuals, loss, optimizer) read and write.
  double flops = 0, attention_flops = 0, memory_traffic = 0;
  double per_micro_batch = 0;  // the share of flops and traffic one pipeline micro-batch takes (1 without pp)
};

struct Plan {
  RankPlan largest;            // each figure the largest over the ranks
  std::vector<RankPlan> ranks;  // by pipeline stage (the ranks of a stage hold the same)
};

// One parameter tensor of a rank (gpt/plan.h, parameter_tensors), as numbers; `unit` names
// the FSDP unit it belongs to (0: the root unit, b + 1: block b).
struct ParamTensor {
  int64_t numel;
  int64_t unit;
  bool cast = true;  // a GEMM's operand, cast under autocast (not a norm's, nor an embedding's lookup)
  bool expert = false;  // one of an MoE block's experts (under --ep averaged over its own replicas)
};

// What forward keeps for backward, per block and for the head, for b sequences of T tokens
// on one rank, in bytes (gpt/plan.h, bytes_kept).
struct Kept {
  double block = 0, head = 0;  // bytes
  double block_whole = 0;      // bytes of one block without recomputation (its recomputation's peak)
  double mlp_grads = 0;        // bytes of the MLP's gradients alive at once in its backward
  double backward = 0;         // bytes a block's backward holds above what it frees (no recomputation)
};

}  // namespace gpt
