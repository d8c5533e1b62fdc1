// expert_parallel.cpp — experts split over an ep group (expert_parallel.h).
#include "ringgrad/parallel/expert_parallel.h"

#include <numeric>

#include "ringgrad/autograd/function.h"
#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/error.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/trace.h"

namespace ringgrad::parallel {

Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows, Communicator& comm, const char* name) {
  trace::Span span(name, "moe");
  RG_CHECK(x.dim() >= 1, "all_to_all_rows", "expected rows (a tensor of dim >= 1), got ",
           x.describe());
  Shape shape = x.shape();
  shape[0] = std::accumulate(recv_rows.begin(), recv_rows.end(), int64_t{0});
  Tensor out = empty(shape, {.dtype = x.dtype(), .device = x.device()});
  comm.all_to_all_async(out, x.contiguous(), send_rows, recv_rows)->wait();
  autograd::record(name, out, {&x}, [&comm, send_rows, recv_rows, name](const Tensor& g) {
    return autograd::Grads{all_to_all_rows(g, recv_rows, send_rows, comm, name)};
  });
  return out;
}

Tensor sum_over_ranks(const Tensor& x, Communicator& comm) {
  Tensor out = x.contiguous().clone();
  comm.all_reduce(out, Reduce::Sum);
  autograd::record("sum_over_ranks", out, {&x}, [&comm](const Tensor& g) {
    return autograd::Grads{sum_over_ranks(g, comm)};
  });
  return out;
}

namespace {

// How many experts each rank of `ep` holds, checked once for the constructors.
int64_t experts_per_rank(int64_t experts, const Communicator& ep) {
  RG_CHECK(experts % ep.size() == 0, "ExpertParallelMoE", "expected num_experts (", experts,
           ") divisible by the ep group's size ", ep.size(), " (each rank holds as many experts)");
  return experts / ep.size();
}

}  // namespace

ExpertParallelMoE::ExpertParallelMoE(const nn::MoE& whole, Communicator& ep)
    : ExpertParallelMoE(whole, ep, {default_generator().seed(), default_generator().offset()}) {}

ExpertParallelMoE::ExpertParallelMoE(const nn::MoE& whole, Communicator& ep, GeneratorState before)
    : nn::MoE(whole.dim(), whole.options(),
              ep.rank() * experts_per_rank(whole.options().num_experts, ep),
              experts_per_rank(whole.options().num_experts, ep)),
      ep_(ep),
      local_(experts_per_rank(whole.options().num_experts, ep)) {
  // The parameters made above drew random numbers that the copy below replaces: put the
  // generator back where `whole` left it, so that every rank's next draw is the same.
  default_generator().manual_seed(before.seed);
  default_generator().advance(before.offset);
  const Tensor& like = whole.router.weight;
  to(like.dtype());
  to(like.device());
  NamedTensors mine;
  const NamedTensors all = whole.state_dict();
  const NamedTensors own = state_dict();
  for (const auto& [name, value] : all)
    for (const auto& [own_name, unused] : own)
      if (own_name == name) mine.emplace_back(name, value);
  load_state_dict(mine);
}

ExpertParallelMoE::ExpertParallelMoE(int64_t dim, const nn::MoEOptions& options, Communicator& ep)
    : nn::MoE(dim, options, ep.rank() * experts_per_rank(options.num_experts, ep),
              experts_per_rank(options.num_experts, ep), /*draw_all=*/true),
      ep_(ep),
      local_(experts_per_rank(options.num_experts, ep)) {}

NamedTensors ExpertParallelMoE::full_state_dict() {
  NamedTensors own = state_dict(), whole;
  for (const auto& [name, t] : own)
    if (name.rfind("router.", 0) == 0) whole.emplace_back(name, t);
  // Every expert has the same tensors: this rank's first expert names them.
  const NamedTensors shapes = expert(first_expert()).state_dict();
  const int64_t experts_total = local_ * ep_.size();
  for (int64_t e = 0; e < experts_total; ++e) {
    const int owner = int(e / local_);
    const NamedTensors held = owner == ep_.rank() ? expert(e).state_dict() : NamedTensors{};
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor t = held.empty() ? empty_like(shapes[i].second) : held[i].second.clone();
      ep_.broadcast(t, owner);
      whole.emplace_back("experts." + std::to_string(e) + "." + shapes[i].first, t);
    }
  }
  for (const auto& [name, t] : own)
    if (name.rfind("shared.", 0) == 0) whole.emplace_back(name, t);
  return whole;
}

std::vector<Tensor> ExpertParallelMoE::expert_parameters() const { return experts.parameters(); }

std::vector<Tensor> ExpertParallelMoE::dense_parameters() const {
  std::vector<Tensor> dense = router.parameters();
  if (shared)
    for (const Tensor& p : shared->parameters()) dense.push_back(p);
  return dense;
}

Tensor ExpertParallelMoE::run_experts(const Tensor& rows,
                                      const std::vector<int64_t>& rows_per_expert) {
  const int64_t P = ep_.size(), L = local_, E = P * L;
  // 1. How many rows each rank gets from this one, expert by expert: E counts, chunk j
  //    being rank j's experts'. What comes back: chunk i, rank i's rows for this rank's.
  Tensor counts = from_vector<int64_t>(rows_per_expert, {E});
  Tensor incoming = empty({E}, {.dtype = kInt64});
  ep_.all_to_all(incoming, counts);
  const std::vector<int64_t> in = incoming.tolist<int64_t>();
  std::vector<int64_t> send_rows(size_t(P), 0), recv_rows(size_t(P), 0);
  for (int64_t j = 0; j < P; ++j)
    for (int64_t l = 0; l < L; ++l) {
      send_rows[size_t(j)] += rows_per_expert[size_t(j * L + l)];
      recv_rows[size_t(j)] += in[size_t(j * L + l)];
    }

  // 2. Dispatch: the rows travel to their experts' ranks, and arrive by source rank.
  const Tensor arrived = all_to_all_rows(rows, send_rows, recv_rows, ep_, "moe dispatch");

  // 3. Regroup by expert (source rank within), compute, and put back in arrival order.
  std::vector<int64_t> start(size_t(P * L));  // where block (source i, expert l) begins
  for (int64_t b = 0, at = 0; b < P * L; ++b) start[size_t(b)] = at, at += in[size_t(b)];
  std::vector<int64_t> by_expert, per_expert(size_t(E), 0);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < P; ++i) {
      const int64_t n = in[size_t(i * L + l)];
      for (int64_t q = 0; q < n; ++q) by_expert.push_back(start[size_t(i * L + l)] + q);
      per_expert[size_t(first_expert() + l)] += n;
    }
  rows_computed_ = int64_t(by_expert.size());
  std::vector<int64_t> back(by_expert.size());  // the inverse permutation
  for (size_t p = 0; p < by_expert.size(); ++p) back[size_t(by_expert[p])] = int64_t(p);
  const auto index = [&](const std::vector<int64_t>& v) {
    return from_vector<int64_t>(v, {int64_t(v.size())}).to(rows.device());
  };
  const Tensor grouped = index_select(arrived, 0, index(by_expert));
  Tensor computed;
  {
    trace::Span span("moe experts", "moe");
    computed = nn::MoE::run_experts(grouped, per_expert);
  }
  const Tensor answered = index_select(computed, 0, index(back));

  // 4. Combine: the outputs go back to the tokens' ranks, in the order they were sent.
  return all_to_all_rows(answered, recv_rows, send_rows, ep_, "moe combine");
}

void reduce_expert_grads(const std::vector<Tensor>& expert_params, Communicator* expert_dp,
                         int dp_size) {
  RG_CHECK(dp_size >= 1, "reduce_expert_grads", "expected dp_size >= 1, got ", dp_size);
  NoGradGuard no_grad;
  // Every expert a rank holds runs in every forward (nn::MoE::run_experts), on no rows if
  // none came: replicas hold gradients for the same experts, and the sums pair up.
  for (const Tensor& p : expert_params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (expert_dp && expert_dp->size() > 1) expert_dp->all_reduce(g, Reduce::Sum);
    g.mul_(1.0 / dp_size);
  }
}

}  // namespace ringgrad::parallel
