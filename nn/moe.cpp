// moe.cpp — the Mixture of Experts layer (moe.h): routing on the host, experts grouped.
#include "ringgrad/nn/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "ringgrad/autograd/function.h"
#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/error.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/nn/functional.h"

namespace ringgrad::nn {

namespace {

int64_t default_hidden(int64_t dim, ExpertMLP mlp) {
  return mlp == ExpertMLP::GELU ? 4 * dim : (8 * dim / 3 + 7) / 8 * 8;
}

void check_options(int64_t dim, const MoEOptions& o) {
  RG_CHECK(dim > 0, "MoE", "expected dim > 0, got ", dim);
  RG_CHECK(o.num_experts >= 1, "MoE", "expected num_experts >= 1, got ", o.num_experts);
  RG_CHECK(o.top_k >= 1 && o.top_k <= o.num_experts, "MoE", "expected 1 <= top_k <= num_experts (",
           o.num_experts, "), got top_k = ", o.top_k);
  RG_CHECK(o.hidden >= 0, "MoE", "expected hidden >= 0 (0: the default width), got ", o.hidden);
  RG_CHECK(o.shared_experts >= 0, "MoE", "expected shared_experts >= 0, got ", o.shared_experts);
  RG_CHECK(std::isfinite(o.capacity_factor) && o.capacity_factor >= 0, "MoE",
           "expected capacity_factor >= 0 (0: dropless), got ", o.capacity_factor);
  RG_CHECK(std::isfinite(o.aux_loss_coef) && o.aux_loss_coef >= 0, "MoE",
           "expected aux_loss_coef >= 0, got ", o.aux_loss_coef);
  RG_CHECK(std::isfinite(o.z_loss_coef) && o.z_loss_coef >= 0, "MoE",
           "expected z_loss_coef >= 0, got ", o.z_loss_coef);
}

}  // namespace

// ---- one expert

Expert::Expert(int64_t dim, int64_t hidden, ExpertMLP kind) : mlp(kind) {
  if (mlp == ExpertMLP::GELU) {
    fc = register_module("fc", std::make_shared<Linear>(dim, hidden));
    proj = register_module("proj", std::make_shared<Linear>(hidden, dim));
  } else {
    swiglu = register_module("swiglu", std::make_shared<SwiGLU>(dim, hidden));
  }
}

Tensor Expert::forward(const Tensor& x) {
  if (mlp == ExpertMLP::SwiGLU) return (*swiglu)(x);
  return (*proj)(linear_gelu(x, fc->weight, fc->bias));
}

std::string Expert::describe() const {
  return mlp == ExpertMLP::GELU ? "Expert(mlp=gelu)" : "Expert(mlp=swiglu)";
}

// ---- routing

int64_t expert_capacity(double capacity_factor, int64_t tokens, int64_t top_k, int64_t experts) {
  if (capacity_factor <= 0) return 0;
  return static_cast<int64_t>(
      std::ceil(capacity_factor * double(tokens * top_k) / double(experts)));
}

namespace {

// For each group g, choice j, piece held here (local index h) and expert e, the places the
// whole group's assignments before these took: every choice before j in every piece, and
// choice j in the pieces before. Counted here, summed over the ranks holding the group.
std::vector<int64_t> places_before(const GroupPieces& pieces, const std::vector<int64_t>& choice,
                                   int64_t groups, int64_t per_group, int64_t k, int64_t experts) {
  const int64_t count = pieces.count, held = int64_t(pieces.held.size());
  const int64_t piece_len = per_group / held;
  std::vector<int64_t> counts(size_t(groups * k * count * experts), 0);  // (g, j, piece, e)
  for (int64_t t = 0; t < groups * per_group; ++t) {
    const int64_t g = t / per_group, p = pieces.held[size_t(t % per_group / piece_len)];
    for (int64_t j = 0; j < k; ++j)
      ++counts[size_t(((g * k + j) * count + p) * experts + choice[size_t(t * k + j)])];
  }
  counts = pieces.sum(counts);
  RG_CHECK(counts.size() == size_t(groups * k * count * experts), "route_tokens",
           "expected the pieces' sum to keep its ", groups * k * count * experts, " counts, got ",
           counts.size());
  std::vector<int64_t> start(size_t(groups * k * held * experts), 0);  // (g, j, h, e)
  std::vector<int64_t> before(static_cast<size_t>(count));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t e = 0; e < experts; ++e) {
      int64_t taken = 0;
      for (int64_t j = 0; j < k; ++j) {
        for (int64_t p = 0; p < count; ++p) {
          before[size_t(p)] = taken;
          taken += counts[size_t(((g * k + j) * count + p) * experts + e)];
        }
        for (int64_t h = 0; h < held; ++h)
          start[size_t(((g * k + j) * held + h) * experts + e)] =
              before[size_t(pieces.held[size_t(h)])];
      }
    }
  return start;
}

}  // namespace

Routing route_tokens(const std::vector<double>& scores, int64_t tokens, int64_t experts,
                     int64_t top_k, int64_t groups, double capacity_factor,
                     const GroupPieces* pieces) {
  RG_CHECK(experts >= 1 && top_k >= 1 && top_k <= experts, "route_tokens",
           "expected 1 <= top_k <= experts, got top_k = ", top_k, " of ", experts);
  RG_CHECK(int64_t(scores.size()) == tokens * experts, "route_tokens", "expected ",
           tokens * experts, " scores (", tokens, " tokens × ", experts, " experts), got ",
           scores.size());
  RG_CHECK(groups >= 1 && tokens % groups == 0, "route_tokens", "expected the ", tokens,
           " tokens to split into ", groups, " equal groups");
  Routing r;
  r.tokens = tokens, r.experts = experts, r.top_k = top_k, r.groups = groups;
  const int64_t k = top_k, per_group = tokens / groups;
  // Each token's k best experts, in order of score (ties: the lower index first).
  r.choice.resize(size_t(tokens * k));
  std::vector<int64_t> order(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const double* s = scores.data() + t * experts;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [s](int64_t a, int64_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    std::copy(order.begin(), order.begin() + k, r.choice.begin() + t * k);
  }
  // A group over several ranks: its pieces here, each piece_len tokens long.
  int64_t held = 1, piece_len = per_group, group_tokens = per_group;
  if (pieces) {
    held = int64_t(pieces->held.size());
    RG_CHECK(held >= 1 && held <= pieces->count && per_group % held == 0 && pieces->sum,
             "route_tokens", "expected 1 to ", pieces->count,
             " pieces of each group here, dividing its ", per_group,
             " tokens, and a sum over the ranks; got ", held, " pieces",
             pieces->sum ? "" : " and no sum");
    std::vector<int64_t> sorted = pieces->held;
    std::sort(sorted.begin(), sorted.end());
    RG_CHECK(sorted.front() >= 0 && sorted.back() < pieces->count &&
                 std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
             "route_tokens", "expected distinct pieces in [0, ", pieces->count, "), got ",
             shape_str(pieces->held));
    piece_len = per_group / held;
    group_tokens = piece_len * pieces->count;
  }
  // Places, group by group: first choices first, then seconds, …; in token order within.
  const int64_t capacity = expert_capacity(capacity_factor, group_tokens, k, experts);
  const std::vector<int64_t> start =
      pieces && capacity > 0 ? places_before(*pieces, r.choice, groups, per_group, k, experts)
                             : std::vector<int64_t>{};
  std::vector<char> kept(size_t(tokens * k), 1);
  r.chosen.assign(size_t(groups * experts), 0);
  for (int64_t g = 0; g < groups; ++g) {
    std::vector<int64_t> taken(size_t(experts), 0);
    for (int64_t j = 0; j < k; ++j)
      for (int64_t t = g * per_group; t < (g + 1) * per_group; ++t) {
        if (!start.empty() && (t - g * per_group) % piece_len == 0) {  // a piece begins
          const int64_t h = (t - g * per_group) / piece_len;
          std::copy_n(start.begin() + ((g * k + j) * held + h) * experts, experts, taken.begin());
        }
        const int64_t a = t * k + j, e = r.choice[size_t(a)];
        ++r.chosen[size_t(g * experts + e)];
        if (capacity > 0 && taken[size_t(e)] >= capacity) {
          kept[size_t(a)] = 0;
          ++r.dropped;
        } else {
          ++taken[size_t(e)];
        }
      }
  }
  // The kept assignments sorted by expert (a counting sort: stable, so by number within).
  r.rows_per_expert.assign(size_t(experts), 0);
  for (int64_t a = 0; a < tokens * k; ++a)
    if (kept[size_t(a)]) ++r.rows_per_expert[size_t(r.choice[size_t(a)])];
  std::vector<int64_t> next(size_t(experts), 0);
  for (int64_t e = 1; e < experts; ++e)
    next[size_t(e)] = next[size_t(e - 1)] + r.rows_per_expert[size_t(e - 1)];
  const int64_t rows = tokens * k - r.dropped;
  r.token_of_row.resize(size_t(rows));
  r.assignment_of_row.resize(size_t(rows));
  for (int64_t a = 0; a < tokens * k; ++a) {
    if (!kept[size_t(a)]) continue;
    const int64_t i = next[size_t(r.choice[size_t(a)])]++;
    r.token_of_row[size_t(i)] = a / k;
    r.assignment_of_row[size_t(i)] = a;
  }
  return r;
}

double MoEStats::max_over_mean() const {
  if (tokens_per_expert.empty()) return 0.0;
  const int64_t total =
      std::accumulate(tokens_per_expert.begin(), tokens_per_expert.end(), int64_t{0});
  if (total == 0) return 0.0;
  const int64_t most = *std::max_element(tokens_per_expert.begin(), tokens_per_expert.end());
  return double(most) * double(tokens_per_expert.size()) / double(total);
}

Tensor with_aux_loss(const Tensor& y, const Tensor& aux) {
  RG_CHECK(aux.defined() && aux.numel() == 1, "with_aux_loss", "expected a loss of one element, got ",
           aux.describe());
  Tensor out = y.detach();  // the same values: only backward differs
  autograd::record("with_aux_loss", out, {&y, &aux}, [one = ones_like(aux)](const Tensor& g) {
    return autograd::Grads{g, one};
  });
  return out;
}

// ---- the layer

MoE::MoE(int64_t dim, MoEOptions options) : MoE(dim, options, 0, options.num_experts) {}

MoE::MoE(int64_t dim, MoEOptions options, int64_t first_expert, int64_t expert_count, bool draw_all)
    : router(dim, std::max<int64_t>(options.num_experts, 1), /*bias=*/false),
      dim_(dim),
      options_(options),
      first_expert_(first_expert) {
  check_options(dim, options);
  if (options_.hidden == 0) options_.hidden = default_hidden(dim, options_.mlp);
  RG_CHECK(
      first_expert >= 0 && expert_count >= 0 && first_expert + expert_count <= options.num_experts,
      "MoE", "expected experts [", first_expert, ", ", first_expert + expert_count, ") within the ",
      options.num_experts, " experts");
  register_module("router", router);
  register_module("experts", experts);
  for (int64_t e = draw_all ? 0 : first_expert;
       e < (draw_all ? options_.num_experts : first_expert + expert_count); ++e) {
    auto made = std::make_shared<Expert>(dim, options_.hidden, options_.mlp);
    if (e < first_expert || e >= first_expert + expert_count) continue;  // drawn, not held
    local_.push_back(made);
    experts.add(std::to_string(e), local_.back());
  }
  if (options_.shared_experts > 0)
    shared = register_module(
        "shared",
        std::make_shared<Expert>(dim, options_.shared_experts * options_.hidden, options_.mlp));
}

Expert& MoE::expert(int64_t e) {
  RG_CHECK(e >= first_expert_ && e < first_expert_ + int64_t(local_.size()), "MoE", "expert ", e,
           " is not held here (experts [", first_expert_, ", ",
           first_expert_ + int64_t(local_.size()), ") are)");
  return *local_[size_t(e - first_expert_)];
}

Tensor MoE::run_experts(const Tensor& rows, const std::vector<int64_t>& rows_per_expert) {
  // Every expert held here runs, on no rows if none came: its parameters then get a zero
  // gradient rather than none, so that every rank's backward produces the same gradients
  // (what DDP, ZeRO-2 and FSDP reduce as backward makes them).
  std::vector<Tensor> outs;
  int64_t at = 0;
  const int64_t held = int64_t(local_.size());
  for (int64_t e = 0; e < int64_t(rows_per_expert.size()); ++e) {
    const int64_t n = rows_per_expert[size_t(e)];
    if (e >= first_expert_ && e < first_expert_ + held)
      outs.push_back(expert(e)(rows.narrow(0, at, n)));
    else
      RG_CHECK(n == 0, "MoE", "expected no rows for expert ", e, ", which is not held here; got ", n);
    at += n;
  }
  if (outs.empty()) return zeros({0, dim_}, {.dtype = rows.dtype(), .device = rows.device()});
  return outs.size() == 1 ? outs[0] : cat(outs, 0);
}

Tensor MoE::forward(const Tensor& x) {
  MoEOutput out = forward_moe(x);
  aux_loss_ = out.aux_loss;
  return out.output;
}

MoEOutput MoE::forward_moe(const Tensor& x, int64_t groups) {
  RG_CHECK(x.dim() >= 1 && x.size(-1) == dim_, "MoE", "expected input with last dim ", dim_,
           ", got shape ", shape_str(x.shape()));
  const int64_t E = options_.num_experts, k = options_.top_k;
  const int64_t N = x.numel() / dim_;
  RG_CHECK(groups >= 1 && N % groups == 0, "MoE", "expected the ", N, " tokens to split into ",
           groups, " equal groups");
  RG_CHECK(!group_sum || options_.capacity_factor == 0 || !group_pieces_held.empty(), "MoE",
           "expected capacity_factor 0 (dropless) where a routing group's tokens lie on several "
           "ranks (group_sum is set) without group_piece_count and group_pieces_held: which "
           "tokens to drop needs the whole group's order; got ",
           options_.capacity_factor);
  const Tensor tokens = x.reshape({N, dim_});
  const Tensor logits = router(tokens);  // (N, E)
  const Tensor scores =
      options_.score == RouterScore::Softmax ? softmax(logits, -1) : sigmoid(logits);

  // The decision, on the host: which expert each token goes to, and which are dropped.
  const Tensor host = scores.detach().to(Device::cpu()).to(kFloat64).contiguous();
  const double* s = host.data_ptr<double>();
  GroupPieces pieces;  // a group over several ranks: places in the whole group's order
  if (group_sum && !group_pieces_held.empty()) {
    pieces.count = group_piece_count;
    pieces.held = group_pieces_held;
    pieces.sum = [&](const std::vector<int64_t>& counts) {
      NoGradGuard no_grad;
      const std::vector<double> d(counts.begin(), counts.end());  // exact below 2^53
      const Tensor sum = group_sum(from_vector<double>(d, {int64_t(d.size())}).to(x.device()))
                             .to(Device::cpu())
                             .contiguous();
      std::vector<int64_t> out(counts.size());
      for (size_t i = 0; i < out.size(); ++i) out[i] = std::llround(sum.data_ptr<double>()[i]);
      return out;
    };
  }
  const Routing r = route_tokens(std::vector<double>(s, s + N * E), N, E, k, groups,
                                 options_.capacity_factor, pieces.sum ? &pieces : nullptr);
  const auto index = [&](const std::vector<int64_t>& v, Shape shape) {
    return from_vector<int64_t>(v, std::move(shape)).to(x.device());
  };

  // The gates: each token's k scores, renormalised over the k where asked.
  Tensor gates = gather(scores, 1, index(r.choice, {N, k}));  // (N, k)
  if (options_.normalize_top_k && k > 1) gates = gates / gates.sum(1, /*keepdim=*/true);

  // Dispatch (rows sorted by expert), the experts, and the weighted sum back per token.
  const Tensor token_of_row = index(r.token_of_row, {int64_t(r.token_of_row.size())});
  const Tensor rows = index_select(tokens, 0, token_of_row);
  const Tensor outs = run_experts(rows, r.rows_per_expert);
  const Tensor weights =
      index_select(gates.reshape({N * k}), 0, index(r.assignment_of_row, {outs.size(0)}))
          .unsqueeze(1);
  const Tensor weighted = outs * weights;  // (under autocast: the experts' 16 bits, gates' 32)
  Tensor y = index_add(zeros({N, dim_}, {.dtype = weighted.dtype(), .device = x.device()}), 0,
                       token_of_row, weighted);
  if (shared) y = y + (*shared)(tokens);

  // The losses: balance per group, E·Σ_e f_e·P_e, averaged over groups; the z-loss. A group
  // spread over ranks (group_sum) counts its choices, scores and z over all of them.
  std::vector<double> chosen(r.chosen.begin(), r.chosen.end());
  Tensor counts = from_vector<double>(chosen, {groups, E}).to(x.device());
  Tensor score_sum = scores.reshape({groups, N / groups, E}).sum(1);  // (G, E)
  double group_tokens = double(N / groups);
  if (group_sum) {
    {
      NoGradGuard no_grad;
      counts = group_sum(counts);
    }
    score_sum = group_sum(score_sum);
    // Every token of a group made k choices: the group's tokens on every rank, from the sums.
    group_tokens = counts[0].sum().item() / double(k);
  }
  const Tensor fraction = (counts / (group_tokens * double(k))).to(scores.dtype());  // f
  const Tensor mean_score = score_sum / group_tokens;                                // P
  const Tensor balance = (mean_score * fraction).sum() * (double(E) / double(groups));
  const Tensor lse = logsumexp(logits, {-1});
  Tensor z = (lse * lse).mean();  // over every rank's tokens where the groups are spread
  if (group_sum)
    z = group_sum((lse * lse).sum().reshape({1})).sum() / (group_tokens * double(groups));
  Tensor aux = balance * options_.aux_loss_coef;
  if (options_.z_loss_coef > 0) aux = aux + z * options_.z_loss_coef;

  stats_.tokens_per_expert = r.rows_per_expert;
  stats_.assignments = N * k;
  stats_.dropped = r.dropped;
  stats_.balance = balance.item();
  stats_.z = z.item();
  return {y.reshape(x.shape()), aux};
}

std::string MoE::describe() const {
  std::ostringstream os;
  os << "MoE(dim=" << dim_ << ", num_experts=" << options_.num_experts
     << ", top_k=" << options_.top_k << ", hidden=" << options_.hidden
     << ", mlp=" << (options_.mlp == ExpertMLP::GELU ? "gelu" : "swiglu")
     << ", shared_experts=" << options_.shared_experts
     << ", capacity_factor=" << options_.capacity_factor << ")";
  return os.str();
}

}  // namespace ringgrad::nn
