// moe.h — a Mixture of Experts layer: a drop-in for a transformer block's MLP.
//
//   rg::nn::MoE moe(512, {.num_experts = 8, .top_k = 2, .capacity_factor = 1.25});
//   rg::Tensor y = moe(x);                       // x (…, 512) -> y (…, 512)
//   rg::Tensor loss = criterion(y) + moe.aux_loss();   // the router's losses, weighted
//
// Each token goes to k of E expert MLPs, picked by a router, and its output is their
// outputs weighted by the router's scores — so a model holds E MLPs' parameters but each
// token pays for k of them (DeepSeek V2: 236B parameters, 21B active per token).
//
//   router     a Linear dim -> E (no bias): logits; softmax (or sigmoid) gives scores.
//   top-k      each token's k highest scores; equal scores go to the lower expert index.
//              The gates are those k scores, renormalised to sum to 1 (normalize_top_k).
//   capacity   with capacity_factor c > 0 each expert takes at most ceil(c·n·k/E) of a
//              group's n tokens (Switch, GShard). Tokens claim places first choices first,
//              then second choices, …; within a choice, in token order. An assignment that
//              finds its expert full is dropped: it adds nothing (the block's residual
//              carries the token). c = 0: dropless, every assignment kept. A group spread
//              over ranks (group_sum, group_pieces_held) drops the same assignments.
//   experts    tokens sorted by expert, one GEMM pair per expert over all its rows (not a
//              loop over tokens); outputs weighted by their gates and added back per token.
//              An expert no token chose runs on no rows: its gradient is zero, not absent,
//              so every replica's backward makes the same gradients.
//   shared     optional experts every token passes through, unweighted (DeepSeek's);
//              S of them are one MLP of S·hidden units.
//   losses     load balance, Switch's E·Σ_e f_e·P_e: f_e the fraction of the group's k·n
//              choices that picked expert e (before dropping), P_e the mean score the router
//              gave e; 1 when the load is even, E when one expert takes everything. Only P
//              carries a gradient. The router z-loss: the mean over tokens of
//              logsumexp(logits)², which keeps the logits small (ST-MoE). aux_loss() is
//              aux_loss_coef·balance + z_loss_coef·z for the trainer to add to its loss.
//
// Groups: forward_moe(x, groups) routes the N tokens as `groups` equal groups of
// consecutive tokens, each with its own capacity and load statistics (GShard's groups);
// the losses are the mean over groups. A data-parallel rank's batch is its group, so one
// process with groups = ranks drops the same tokens as the ranks do
// (parallel/expert_parallel.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ringgrad/nn/layers.h"

namespace ringgrad::nn {

enum class ExpertMLP { GELU, SwiGLU };  // GELU: fc, gelu, proj (biases); SwiGLU: Llama's
enum class RouterScore { Softmax, Sigmoid };

struct MoEOptions {
  int64_t num_experts = 8;
  int64_t top_k = 2;
  int64_t hidden = 0;  // each expert's hidden width; 0: 4·dim (GELU) or Llama's 8/3·dim
  ExpertMLP mlp = ExpertMLP::GELU;
  int64_t shared_experts = 0;
  RouterScore score = RouterScore::Softmax;
  bool normalize_top_k = true;
  double capacity_factor = 0.0;  // 0: dropless
  double aux_loss_coef = 0.01;
  double z_loss_coef = 0.0;
};

// One expert: the GPT's GELU MLP or Llama's SwiGLU, dim -> hidden -> dim.
class Expert : public Module {
 public:
  Expert(int64_t dim, int64_t hidden, ExpertMLP mlp);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  ExpertMLP mlp;
  std::shared_ptr<Linear> fc, proj;  // GELU
  std::shared_ptr<SwiGLU> swiglu;    // SwiGLU
};

// What the router decided for one forward, worked out on the host from the scores.
// An assignment is (token t, choice j), numbered t·k + j.
struct Routing {
  int64_t tokens = 0, experts = 0, top_k = 0, groups = 1;
  std::vector<int64_t> choice;  // tokens·k: the expert of each assignment
  // The kept assignments sorted by expert (then by assignment number): row i of the
  // dispatched batch copies token token_of_row[i] and is weighted by gate
  // assignment_of_row[i]; rows_per_expert[e] of them go to expert e.
  std::vector<int64_t> token_of_row, assignment_of_row, rows_per_expert;
  std::vector<int64_t> chosen;  // groups·experts: choices per group and expert, before dropping
  int64_t dropped = 0;          // assignments dropped for capacity
};

// Where each routing group's tokens lie on several ranks (context parallelism cuts a
// sequence into pieces), what capacity needs to give places in the whole group's order:
// the group is cut into `count` equal pieces in token order, this rank holds pieces `held`
// (their indices, in the order its tokens of each group lie), and `sum` adds a vector
// elementwise over the ranks that hold the group (every rank gets the sum). Each rank then
// learns how many places the pieces before its own took, choice by choice.
struct GroupPieces {
  int64_t count = 0;
  std::vector<int64_t> held;
  std::function<std::vector<int64_t>(const std::vector<int64_t>&)> sum;
};

// Top-k of each token's scores (tokens × experts, row-major), capacity per group of
// tokens/groups consecutive tokens (capacity_factor 0: none). Deterministic: ties go to the
// lower expert index, places to earlier choices, then earlier tokens. With `pieces` the
// tokens here are this rank's pieces of each group: capacity is the whole group's, and
// places go as they would with the whole group here (a collective over pieces->sum when
// there is a capacity).
Routing route_tokens(const std::vector<double>& scores, int64_t tokens, int64_t experts,
                     int64_t top_k, int64_t groups, double capacity_factor,
                     const GroupPieces* pieces = nullptr);
// ceil(capacity_factor · tokens · top_k / experts) for a group of `tokens`; 0 for dropless.
int64_t expert_capacity(double capacity_factor, int64_t tokens, int64_t top_k, int64_t experts);

// What a user logs: rows each expert computed, choices dropped, the losses' values.
struct MoEStats {
  std::vector<int64_t> tokens_per_expert;  // kept rows per expert (all groups)
  int64_t assignments = 0, dropped = 0;
  double balance = 0, z = 0;  // the unweighted losses
  double dropped_fraction() const { return assignments ? double(dropped) / assignments : 0.0; }
  double max_over_mean() const;  // the busiest expert's rows over the mean: 1 is even
};

struct MoEOutput {
  Tensor output;    // x's shape
  Tensor aux_loss;  // 0-d: aux_loss_coef·balance + z_loss_coef·z, in the graph
};

// y itself, except that backward also sends a gradient of 1 into `aux` (a 0-d loss), as if
// aux had been added to the loss that y's gradient comes from (Megatron's
// MoEAuxLossAutoScaler). A block that returns with_aux_loss(moe_out, aux · scale) needs no
// trainer to add its loss: that works inside a recomputed region (the recomputation makes
// the node again) and on a pipeline stage that never sees the loss. `scale` is what the
// trainer multiplies its own loss by (1/micro-batches, a GradScaler's scale).
Tensor with_aux_loss(const Tensor& y, const Tensor& aux);

class MoE : public Module {
 public:
  MoE(int64_t dim, MoEOptions options = {});
  Tensor forward(const Tensor& x) override;  // forward_moe(x).output; keeps aux_loss()
  // The output and the loss, keeping nothing: the caller holds the loss's graph, so a
  // recomputed region (nn::checkpoint) frees what its first forward made, the router's
  // input included, instead of keeping it until the next forward.
  MoEOutput forward_moe(const Tensor& x, int64_t groups = 1);
  // The last forward()'s weighted auxiliary loss (undefined before any), for the trainer to add.
  Tensor aux_loss() const { return aux_loss_; }
  const MoEStats& stats() const { return stats_; }
  const MoEOptions& options() const { return options_; }
  int64_t dim() const { return dim_; }
  std::string describe() const override;

  // Where each routing group's tokens lie on several ranks (context parallelism: a
  // sequence's shards), the sum over those ranks — forward the sum, backward the sum of the
  // ranks' gradients (parallel::sum_over_ranks) — so that the load statistics, the balance
  // loss and the z-loss are the whole group's. (Where those ranks' losses are one loss
  // computed alike, as sequence parallelism's tp ranks compute theirs, the backward is the
  // gradient as it is: parallel::reduce_from_tp_region.) Null: each group is here whole.
  std::function<Tensor(const Tensor&)> group_sum;
  // With group_sum and a capacity: how a group lies over those ranks (GroupPieces' count
  // and held), so that the same tokens are dropped as with the whole group in one place.
  // Without them such routing must be dropless.
  int64_t group_piece_count = 0;
  std::vector<int64_t> group_pieces_held;

  Linear router;
  // The experts this module computes, named by their global index ("experts.3.fc.weight"):
  // all of them here; an expert-parallel rank's share there.
  Sequential experts;
  std::shared_ptr<Expert> shared;  // null without shared experts

 protected:
  // A module of the same options holding experts [first, first + count) only:
  // parallel::ExpertParallelMoE's. The others' parameters are never made, or with
  // `draw_all` made one at a time and dropped, so that the random numbers drawn are the
  // whole layer's: every rank's share is then the one the whole layer would hold.
  MoE(int64_t dim, MoEOptions options, int64_t first_expert, int64_t expert_count,
      bool draw_all = false);
  // The experts' outputs for `rows` (sorted by expert, rows_per_expert[e] for expert e of
  // all num_experts). Here: each local expert on its rows; expert parallelism sends the
  // rows to the ranks that hold their experts first.
  virtual Tensor run_experts(const Tensor& rows, const std::vector<int64_t>& rows_per_expert);
  // Expert e (global index) of this module's share.
  Expert& expert(int64_t e);
  int64_t first_expert() const { return first_expert_; }

 private:
  int64_t dim_;
  MoEOptions options_;
  int64_t first_expert_ = 0;
  std::vector<std::shared_ptr<Expert>> local_;
  Tensor aux_loss_;
  MoEStats stats_;
};

}  // namespace ringgrad::nn
