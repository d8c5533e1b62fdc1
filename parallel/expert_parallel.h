// expert_parallel.h — expert parallelism: a Mixture of Experts layer's experts split over
// the ranks of an "ep" group, tokens sent to their experts' ranks and back.
//
//   rg::nn::MoE whole(512, {.num_experts = 8, .top_k = 2});     // every rank: the same seed
//   rg::parallel::ExpertParallelMoE moe(whole, mesh.group("ep"));  // rank r: experts of its share
//   rg::Tensor y = moe(x);          // x: this rank's own tokens, as in data parallelism
//   ... loss.backward();
//   rg::parallel::all_reduce_grads(moe.dense_parameters(), dp, rg::parallel::Reduce::Avg);
//   rg::parallel::reduce_expert_grads(moe.expert_parameters(), expert_dp, dp.size());
//
// Each of the P ranks of the ep group holds E/P experts (rank r: [r·E/P, (r+1)·E/P)), and the
// router and shared experts whole. A forward on a rank's own tokens:
//   1. routes them (nn::MoE: top-k, capacity over this rank's tokens) and sorts the chosen
//      rows by expert — which is by the rank that holds the expert;
//   2. tells every rank how many rows it will get for each of its experts (an all-to-all of
//      E counts), then sends the rows (an all-to-all with those counts: dispatch);
//   3. computes its experts on every rank's rows for them, grouped by expert;
//   4. sends the outputs back the way they came (the reverse all-to-all: combine), where
//      they are weighted by their gates and summed per token as in one process.
// Backward runs the same two all-to-alls in reverse order. Nothing but rows moves: the
// router, the gates and the sums stay on the token's own rank.
//
// Gradients. The dense parameters (router, shared experts, and the rest of the model) are
// replicated: average them over the data-parallel ranks as always. An expert's gradient on
// its rank already sums what every ep rank's tokens gave it, so the data-parallel mean
// needs only the ranks that hold the same expert (expert_dp: the replicas of this ep rank,
// of size dp/P; none when dp = P) summed, then a division by dp's size:
// reduce_expert_grads. Then any optimizer step equals one process's on the whole batch
// (nn::MoE::forward_moe with groups = the ranks: each rank's tokens are one routing group).
// The communicator must outlive the layer and every graph it records.
#pragma once

#include <vector>

#include "ringgrad/nn/moe.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

// Rows of x to the ranks of `comm` (send_rows[j] rows to rank j, in rank order) and rows from
// them (recv_rows[i] from rank i, in rank order): an autograd function whose backward is the
// same exchange with the counts swapped. `name` labels it in traces (a static string:
// "moe dispatch", "moe combine").
Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows, Communicator& comm,
                       const char* name = "all_to_all_rows");

// The sum of every rank's x (same shape), each rank getting it; backward the sum of every
// rank's gradient: for a value that each rank's loss uses alike (an MoE's load statistics
// over a sequence context parallelism splits: nn::MoE::group_sum), so that data
// parallelism's mean over the ranks gives each contribution its whole gradient.
Tensor sum_over_ranks(const Tensor& x, Communicator& comm);

class ExpertParallelMoE : public nn::MoE {
 public:
  // From the whole layer (the same on every rank): its router and shared experts, and this
  // rank's experts. num_experts must divide by ep's size. The default random generator is
  // left as `whole` left it, the same on every rank.
  ExpertParallelMoE(const nn::MoE& whole, Communicator& ep);
  // Made in place: the module ExpertParallelMoE(nn::MoE(dim, options), ep) would be, the
  // same random numbers drawn, without the whole layer: the other ranks' experts exist one
  // at a time while they are made (what a model too big for one rank needs).
  ExpertParallelMoE(int64_t dim, const nn::MoEOptions& options, Communicator& ep);

  // The whole layer's state (nn::MoE's names and order: router, experts 0..E−1, shared),
  // every expert fetched from the rank that holds it: a collective over ep, the result
  // the same on every ep rank.
  NamedTensors full_state_dict();
  std::vector<Tensor> expert_parameters() const;  // this rank's experts'
  std::vector<Tensor> dense_parameters() const;   // the router's and shared experts'
  int64_t local_experts() const { return local_; }
  // Rows this rank's experts computed in the last forward, all ranks' tokens together.
  int64_t rows_computed() const { return rows_computed_; }

 protected:
  Tensor run_experts(const Tensor& rows, const std::vector<int64_t>& rows_per_expert) override;

 private:
  struct GeneratorState {
    uint64_t seed, offset;
  };
  ExpertParallelMoE(const nn::MoE& whole, Communicator& ep, GeneratorState before);
  Communicator& ep_;
  int64_t local_;
  int64_t rows_computed_ = 0;
};

// The experts' gradients as data parallelism over dp_size ranks wants them: summed over
// `expert_dp` (the ranks holding the same experts; nullptr when there are none) and divided
// by dp_size (a collective over expert_dp). Each replica holds gradients for the same
// experts: every expert held runs in every forward, on no rows if no token chose it.
void reduce_expert_grads(const std::vector<Tensor>& expert_params, Communicator* expert_dp,
                         int dp_size);

}  // namespace ringgrad::parallel
