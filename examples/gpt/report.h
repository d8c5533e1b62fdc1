// gpt/report.h — what examples/gpt.cpp prints about each rank's memory and traffic: the
// formulas of gpt/budget.h (--budget) and gpt/plan.h (--plan) beside, or instead of, what
// the run measured.
#pragma once

#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "budget.h"
#include "model.h"
#include "plan.h"
#include "step_time.h"

namespace gpt {

namespace par = ringgrad::parallel;

// Every rank's parameters and bytes sent per axis (tp, pp, data, norm) in one step, gathered
// on rank 0 and printed beside gpt/budget.h's predictions: a table, then one CHECK line
// per rank and quantity. A collective: every rank calls it.
inline void print_budget(par::World& world, const GPTConfig& config, int64_t batch, const BudgetLayout& layout,
                  const std::vector<rg::Tensor>& params, const std::array<int64_t, 4>& sent) {
  const Budget p = predict_budget(config, batch, layout);
  int64_t held = 0;
  for (const rg::Tensor& t : params) held += t.numel();
  const std::vector<double> mine{double(layout.stage), p.params, double(held), p.tp_bytes, double(sent[0]),
                                 p.pp_bytes, double(sent[1]), p.data_bytes, double(sent[2]), p.norm_bytes,
                                 double(sent[3])};
  constexpr size_t kFields = 11;
  std::vector<double> all = world.communicator()
                                .all_gather(rg::from_vector(mine, {int64_t(kFields)}, {.dtype = rg::kFloat64}))
                                .tolist<double>();
  if (!world.is_main()) return;
  std::printf("budget of step 2, per rank: parameters held and bytes sent on each axis, predicted / measured\n"
              "%4s %5s %22s %24s %24s %24s %14s\n", "rank", "stage", "parameters", "tp bytes", "pp bytes",
              "data bytes", "norm bytes");
  const char* names[] = {"params", "tp_bytes", "pp_bytes", "data_bytes", "norm_bytes"};
  for (int r = 0; r < world.size(); ++r) {
    const double* v = &all[size_t(r) * kFields];
    std::printf("%4d %5.0f %10.0f /%10.0f %11.0f /%11.0f %11.0f /%11.0f %11.0f /%11.0f %6.0f /%6.0f\n", r, v[0],
                v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]);
  }
  for (int r = 0; r < world.size(); ++r)
    for (size_t q = 0; q < 5; ++q)
      std::printf("CHECK budget_rank%d_%s predicted=%.0f measured=%.0f\n", r, names[q],
                  all[size_t(r) * kFields + 1 + 2 * q], all[size_t(r) * kFields + 2 + 2 * q]);
}

// What each rank will hold (gpt/plan.h), per pipeline stage, then the largest rank's as
// RESULT plan …, in the fields a run's RESULT line measures.

// A step's traffic by kind of collective, the kinds it uses in parallel/communicator.h's
// order: "all_reduce:MB/operations,send:MB/operations" (MB to the byte), or "none".
inline std::string by_kind(const Traffic& t) {
  std::string out;
  char item[96];
  for (int k = 0; k < par::kCollectives; ++k) {
    if (t.operations[size_t(k)] == 0) continue;
    std::snprintf(item, sizeof item, "%s%s:%.6f/%.0f", out.empty() ? "" : ",", par::collective_name(par::Collective(k)),
                  t.bytes[size_t(k)] / 1e6, t.operations[size_t(k)]);
    out += item;
  }
  return out.empty() ? "none" : out;
}

// Each kind's bytes and operations, the largest over the ranks of `comm` (a collective).
inline Traffic largest_over_ranks(par::Communicator& comm, const Traffic& mine) {
  std::vector<double> v(mine.bytes.begin(), mine.bytes.end());
  v.insert(v.end(), mine.operations.begin(), mine.operations.end());
  rg::Tensor t = rg::from_vector(v, {int64_t(v.size())}, {.dtype = rg::kFloat64});
  comm.all_reduce(t, par::Reduce::Max);
  v = t.tolist<double>();
  Traffic out;
  for (size_t k = 0; k < par::kCollectives; ++k)
    out.bytes[k] = v[k], out.operations[k] = v[par::kCollectives + k];
  return out;
}

// --check-plan: the plan's largest rank beside what the run's largest rank held and sent
// (`held`: parameters, gradients, optimizer state, peak and bytes sent, in MB; `sent`: by kind),
// one CHECK line each, and for each kind of collective its bytes and operations.
inline void print_plan_check(const GPTConfig& config, const PlanLayout& layout, const std::vector<double>& held,
                             const Traffic& sent) {
  const RankPlan p = plan(config, layout).largest;
  std::printf("memory of the largest rank, planned / held: parameters %.3f / %.3f MB, gradients %.3f / %.3f "
              "MB, optimizer %.3f / %.3f MB, peak %.3f / %.3f MB; sent in step 2: %.3f / %.3f MB\n",
              p.params / 1e6, held[0], p.grads / 1e6, held[1], p.optim / 1e6, held[2], p.peak / 1e6, held[3],
              p.comm / 1e6, held[4]);
  const char* names[] = {"params", "grads", "optim", "peak", "comm"};
  const double planned[] = {p.params, p.grads, p.optim, p.peak, p.comm};
  for (int q = 0; q < 5; ++q)
    std::printf("CHECK plan_%s_mb predicted=%.6f measured=%.6f\n", names[q], planned[q] / 1e6, held[size_t(q)]);
  for (size_t k = 0; k < par::kCollectives; ++k) {  // by kind: the bytes and the operations
    const char* kind = par::collective_name(par::Collective(k));
    if (p.sent.operations[k] == 0 && sent.operations[k] == 0) continue;
    std::printf("CHECK plan_sent_%s_mb predicted=%.6f measured=%.6f\nCHECK plan_%s_operations predicted=%.0f "
                "measured=%.0f\n", kind, p.sent.bytes[k] / 1e6, sent.bytes[k] / 1e6, kind, p.sent.operations[k],
                sent.operations[k]);
  }
}

// The plan, and with a machine (gpt/step_time.h) the step's time: what --plan prints.
inline void print_plan(const GPTConfig& config, const PlanLayout& layout, const Machine* machine) {
  const Plan p = plan(config, layout);
  std::string pipeline;  // the schedule, where there is a pipeline
  if (layout.pp > 1)
    pipeline = std::string(", ") + par::schedule_name(layout.schedule) +
               (layout.virtual_stages > 1 ? " v " + std::to_string(layout.virtual_stages) : "") + " over " +
               std::to_string(layout.micro_batches) + " micro-batches";
  std::printf("plan: world %lld = dp %lld x pp %lld x cp %lld x tp %lld%s%s, strategy %s, %lld x %lld sequences per "
              "replica, precision %s, recompute %s\n%5s %14s %14s %14s %14s %14s %14s\n",
              static_cast<long long>(layout.world()), static_cast<long long>(layout.dp),
              static_cast<long long>(layout.pp), static_cast<long long>(layout.cp), static_cast<long long>(layout.tp),
              layout.sequence_parallel ? " (sequence parallel)" : "", pipeline.c_str(), layout.strategy.c_str(), static_cast<long long>(layout.grad_accum),
              static_cast<long long>(layout.batch), layout.precision.c_str(), config.recompute.c_str(), "stage",
              "params MB", "grads MB", "optimizer MB", "activations MB", "peak MB", "sent MB");
  for (size_t s = 0; s < p.ranks.size(); ++s) {
    const RankPlan& r = p.ranks[s];
    std::printf("%5zu %14.3f %14.3f %14.3f %14.3f %14.3f %14.3f\n", s, r.params / 1e6, r.grads / 1e6,
                r.optim / 1e6, r.activations / 1e6, r.peak / 1e6, r.comm / 1e6);
  }
  const RankPlan& r = p.largest;
  if (machine)
    std::printf("machine %s, one rank: GEMMs %.1f GFLOP/s (MFU against %.1f), attention %.1f GFLOP/s, memory %.2f "
                "GB/s; links %.2f GB/s and %.1f us an operation within a host of %lld, %.2f GB/s and %.1f us between "
                "hosts\n",
                machine->name.c_str(), machine->flops / 1e9, machine->peak_flops / 1e9,
                machine->attention_flops / 1e9, machine->memory_bw / 1e9,
                machine->link_bw / 1e9, machine->link_latency * 1e6, static_cast<long long>(machine->ranks_per_host),
                machine->network_bw / 1e9, machine->network_latency * 1e6);
  std::printf("RESULT plan world=%lld strategy=%s dp=%lld cp=%lld tp=%lld pp=%lld recompute=%s grad_accum=%lld "
              "params_mb=%.6f grads_mb=%.6f optim_mb=%.6f comm_mb=%.6f",
              static_cast<long long>(layout.world()), layout.strategy.c_str(), static_cast<long long>(layout.dp),
              static_cast<long long>(layout.cp), static_cast<long long>(layout.tp), static_cast<long long>(layout.pp),
              config.recompute.c_str(), static_cast<long long>(layout.grad_accum), r.params / 1e6, r.grads / 1e6,
              r.optim / 1e6, r.comm / 1e6);
  std::printf(" activations_mb=%.6f peak_mb=%.6f", r.activations / 1e6, r.peak / 1e6);
  // Under --ep the experts' rows follow the routing: also the peak with the most a rank can get.
  if (layout.ep > 1) {
    PlanLayout most = layout;
    most.expert_rows = expert_rows_bound(config, layout);
    std::printf(" peak_bound_mb=%.6f", plan(config, most).largest.peak / 1e6);
  }
  std::printf(" sent=%s gflops=%.3f attention_gflops=%.3f traffic_mb=%.1f", by_kind(r.sent).c_str(), r.flops / 1e9,
              r.attention_flops / 1e9, r.memory_traffic / 1e6);
  if (machine) {
    const StepTime t = step_time(p, layout, *machine);
    const double model_flops = train_flops_per_token(config, active_parameter_count(config)) *
                               double(layout.batch * layout.grad_accum * layout.dp * config.seq);
    std::printf(" machine=%s step_s=%.4f compute_s=%.4f comm_s=%.4f mfu=%.3f", machine->name.c_str(), t.total, t.compute,
                t.comm, model_flops / t.total / double(layout.world()) / machine->peak_flops);
    if (machine->memory_bytes > 0)  // the peak against one GPU's memory
      std::printf(" fits=%s", r.peak <= machine->memory_bytes ? "yes" : "no");
  }
  std::printf("\n");
}

}  // namespace gpt
