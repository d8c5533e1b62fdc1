// gpt/step_time.h — how long a step will take: the plan's work (gpt/plan.h) over a machine's
// rates, measured here by a short probe or taken from a GPU cluster's datasheets.
//
//   gpt::Machine here = gpt::probe_machine(world, config, layout);  // every rank at once (a collective)
//   gpt::Machine h100 = gpt::published_machine("h100", "bf16");  // 8 GPUs a host, InfiniBand between
//   gpt::StepTime s = gpt::step_time(plan, layout, here);     // s.total, and its parts, in seconds
//
// The model, for each rank (the slowest sets the step):
//   compute   its GEMMs' FLOPs at the machine's GEMM rate, attention's at its attention rate,
//             plus the bytes its other ops move (norms, activations, residuals, the loss, the
//             optimizer) at its memory bandwidth;
//             a pipeline runs m micro-batches through p stages in m + p − 1 slots of the
//             slowest stage's micro-batch (1F1B's bubble: (p − 1)/m more; interleaving v
//             chunks a rank divides it by v, ZB-H1 by 3).
//   comm      per mesh axis, operations × latency + bytes / bandwidth, on the link the axis's
//             ranks share: within a host, or the network when the group spans hosts (the mesh
//             puts tp's ranks closest, then cp's, pp's, dp's), where the group's members on
//             one host share the traffic out of it over their adapters (wire_of).
//   total     compute + comm; where the machine overlaps them (a GPU: NCCL's kernels run beside
//             the compute), the data-parallel group's collectives hide behind backward and only
//             what is longer than backward shows. On a CPU the same cores do both: nothing hides.
#pragma once

#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "../mfu.h"
#include "plan.h"

namespace gpt {

struct Machine {
  std::string name;
  double flops = 0;            // FLOP/s one rank's GEMMs reach
  double attention_flops = 0;  // FLOP/s one rank's fused attention reaches (plan.h's count)
  double peak_flops = 0;       // what MFU divides by: the datasheet's dense peak (CPU: mfu.h's GEMM rate)
  double memory_bw = 0;        // bytes/s one rank's other ops read and write
  double memory_bytes = 0;  // one rank's memory (0: not known)
  double link_bw = 0, link_latency = 0;        // within a host: wire bytes/s one rank sends, s per operation
  double network_bw = 0, network_latency = 0;  // between hosts
  int64_t ranks_per_host = 1;
  bool overlap = false;  // data-parallel collectives run beside backward
};

// The seconds of one `run`, every rank running its own at once, timed from a barrier to the
// barrier after the slowest rank's: what a step, which waits for the slowest, sees. Each
// measurement repeats `run` for at least 50 ms, so that ranks sharing cores share them as
// over a step (a single short call may find a core free while the others wait); the fastest
// of `repeats` measurements (after one warm-up) is the figure.
template <class F>
double slowest_best_seconds(par::Communicator& comm, int repeats, F&& run) {
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point start) {
    rg::cuda::synchronize();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  auto start = Clock::now();
  run();
  rg::Tensor calls = rg::full({1}, std::ceil(0.05 / std::max(seconds_since(start), 1e-6)), {.dtype = rg::kFloat64});
  comm.all_reduce(calls, par::Reduce::Max);  // the same count on every rank
  const int64_t n = std::min<int64_t>(int64_t(calls.item()), 100000);
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    comm.barrier();
    start = Clock::now();
    for (int64_t k = 0; k < n; ++k) run();
    rg::cuda::synchronize();
    comm.barrier();  // until the slowest rank is done
    best = std::min(best, seconds_since(start) / double(n));
  }
  rg::Tensor t = rg::full({1}, best, {.dtype = rg::kFloat64});
  comm.all_reduce(t, par::Reduce::Max);
  return t.item();
}

// This machine, measured with every rank of `world` working at once, as in training (ranks that
// share cores slow each other down here as they will there), on the run's own shapes and
// precision (the configuration and layout `c`, `l`; plan.h): the GEMM rate of the MLP's first
// layer for one micro-batch, forward and backward's two (small GEMMs run slower than
// mfu.h's 1024³: a pipeline's micro-batches, tp's slices); the fused attention's rate, forward
// and backward, causal, in plan.h's count of its FLOPs; the memory bandwidth (STREAM's add);
// and the all-reduce's latency (8 bytes) and bandwidth (messages of one micro-batch's
// activation) among the ranks. One host: the network is the link.
inline Machine probe_machine(par::World& world, const GPTConfig& c, const PlanLayout& l) {
  par::Communicator& comm = world.communicator();
  Machine m;
  m.name = "here";
  const rg::DType dtype = l.precision == "fp32" ? rg::kFloat32 : l.precision == "fp16" ? rg::kFloat16 : rg::kBFloat16;
  const int64_t b = l.batch / (l.pp > 1 ? l.micro_batches : 1), T = c.seq / l.cp, E = c.d_model;
  const int64_t hidden = c.hidden() / l.tp, rows = b * T;
  comm.barrier();
  rg::Tensor rate = rg::full({1}, -mfu::peak_flops(), {.dtype = rg::kFloat64});  // MFU's yardstick,
  comm.all_reduce(rate, par::Reduce::Max);                                       // the slowest rank's
  m.peak_flops = -rate.item();
  {  // GEMMs as nn::linear runs them, W (hidden, E): y = x·Wᵀ, then dx = dy·W and dW = dyᵀ·x
    rg::Tensor x = rg::randn({rows, E}).to(dtype), w = rg::randn({hidden, E}).to(dtype);
    rg::Tensor dy = rg::randn({rows, hidden}).to(dtype), out;
    const double flops = 3 * 2.0 * double(rows) * double(E) * double(hidden);
    m.flops = flops / slowest_best_seconds(comm, 5, [&] {
      out = rg::matmul(x, w.t()), out = rg::matmul(dy, w), out = rg::matmul(dy.t(), x);
    });
  }
  {  // attention: (b, heads/tp, T, E/heads), causal; plan.h counts 3.5 · 2·b·T·T·E/tp for both passes
    const int64_t h = c.heads / l.tp, d = E / c.heads;
    rg::Tensor q = rg::randn({b, h, T, d}).to(dtype), k = rg::randn({b, h, T, d}).to(dtype);
    rg::Tensor v = rg::randn({b, h, T, d}).to(dtype), dout = rg::randn({b, h, T, d}).to(dtype);
    const double flops = 3.5 * 2.0 * double(b * T) * double(T) * double(h * d);
    m.attention_flops = flops / slowest_best_seconds(comm, 5, [&] {
      rg::AttentionOutput o = rg::attention_forward(q, k, v, {.causal = true});
      rg::attention_backward(q, k, v, o.out, o.lse, dout, {.causal = true});
    });
  }
  // Memory: STREAM's add over arrays of 64 MB, far beyond the caches, as a step's activations
  // (tens of MB and more, read back in backward long after forward wrote them) are.
  const int64_t big = int64_t(1) << 24;
  rg::Tensor x = rg::randn({big}), y = rg::randn({big}), z;
  m.memory_bw = 12.0 * double(big) / slowest_best_seconds(comm, 3, [&] { z = x + y; });
  x = y = z = rg::Tensor();
  if (world.size() > 1) {  // the link: messages of the run's size
    const int64_t n = std::max<int64_t>(rows * E, 1024);
    rg::Tensor a = rg::randn({n}), small = rg::zeros({2});
    m.link_latency = slowest_best_seconds(comm, 20, [&] { comm.all_reduce(small); });
    const double wire = 2.0 * double(world.size() - 1) / double(world.size()) * 4.0 * double(n);
    m.link_bw = wire / std::max(slowest_best_seconds(comm, 5, [&] { comm.all_reduce(a); }) - m.link_latency, 1e-9);
  }
  m.network_bw = m.link_bw, m.network_latency = m.link_latency;
  m.ranks_per_host = world.size();
  return m;
}

// A GPU cluster from published figures: "a100" (DGX A100: 8 A100 SXM 80 GB a host, NVLink 3
// within, one 200 Gb/s InfiniBand adapter a GPU between), "h100" (DGX H100: 8 H100 SXM, NVLink 4,
// 400 Gb/s a GPU) or "h200" (the same with H200's memory), running `precision`: bf16 and fp16
// on the tensor cores (312 and 989 TFLOP/s dense), fp32 on the CUDA cores (19.5 and 67: ringgrad's
// float32 GEMMs do not use TF32 unless a program allows it). The GEMM and attention rates are
// assumptions, said here: large GEMMs reach about 75% of the peak, fused attention forward and
// backward about 40% (FlashAttention-2's reported rates; FlashAttention-3's forward on H100
// reaches more); a link about 80% of its rate.
inline Machine published_machine(const std::string& name, const std::string& precision) {
  RG_CHECK(name == "a100" || name == "h100" || name == "h200", "published_machine",
           "expected a100, h100 or h200, got ", name);
  const bool a100 = name == "a100";
  Machine m;
  m.name = name;
  m.peak_flops = precision == "fp32" ? (a100 ? 19.5e12 : 67e12) : (a100 ? 312e12 : 989e12);  // SXM datasheets
  m.flops = 0.75 * m.peak_flops;
  m.attention_flops = 0.4 * m.peak_flops;
  m.memory_bw = a100 ? 2.039e12 : name == "h200" ? 4.8e12 : 3.35e12;
  m.memory_bytes = a100 ? 80e9 : name == "h200" ? 141e9 : 80e9;
  m.link_bw = (a100 ? 300e9 : 450e9) * 0.8, m.link_latency = 10e-6;  // NVLink 3 / 4, a direction
  m.network_bw = (a100 ? 25e9 : 50e9) * 0.8, m.network_latency = 25e-6;  // 200 / 400 Gb/s a GPU
  m.ranks_per_host = 8;
  m.overlap = true;
  return m;
}

struct StepTime {
  double compute = 0;  // the slowest rank's compute, the pipeline's bubble included
  double comm = 0;     // communication that does not hide behind compute
  double total = 0;    // seconds per step
};

// Rank 0's group on `axis`, in the mesh's order (dp, pp, cp, tp: tp varies fastest); the data
// group is dp × cp.
inline std::vector<int64_t> group_of_rank0(const PlanLayout& l, Axis axis) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < (axis == Axis::Data ? l.dp : 1); ++d)
    for (int64_t p = 0; p < (axis == Axis::Pp ? l.pp : 1); ++p)
      for (int64_t c = 0; c < (axis == Axis::Cp || axis == Axis::Data ? l.cp : 1); ++c)
        for (int64_t t = 0; t < (axis == Axis::Tp ? l.tp : 1); ++t) out.push_back(((d * l.pp + p) * l.cp + c) * l.tp + t);
  return out;
}

// How an axis's collectives move: within a host on its link; across hosts, each host's members
// of the group share the traffic that leaves it over their own network adapters (NCCL runs one
// ring per adapter, each crossing every host boundary once), so a rank sends at members-per-host
// times an adapter's rate, up to the link's.
struct Wire {
  double bandwidth = 0, latency = 0;
};

inline Wire wire_of(const PlanLayout& l, Axis axis, const Machine& m) {
  const std::vector<int64_t> group = group_of_rank0(l, axis);
  int64_t hosts = 0;  // how many hosts hold members (in increasing order: count the changes)
  for (size_t i = 0; i < group.size(); ++i)
    hosts += i == 0 || group[i] / m.ranks_per_host != group[i - 1] / m.ranks_per_host;
  if (hosts == 1) return {m.link_bw, m.link_latency};
  const double per_host = double(group.size()) / double(hosts);
  return {std::min(m.link_bw, per_host * m.network_bw), m.network_latency};
}

inline StepTime step_time(const Plan& p, const PlanLayout& l, const Machine& m) {
  const int64_t size[kAxes] = {l.tp, l.pp, l.cp, l.dp * l.cp};
  StepTime s;
  double slowest_micro_batch = 0, slowest_compute = 0;
  for (const RankPlan& r : p.ranks) {
    const double compute = r.flops / m.flops + r.attention_flops / m.attention_flops + r.memory_traffic / m.memory_bw;
    slowest_compute = std::max(slowest_compute, compute);
    slowest_micro_batch = std::max(slowest_micro_batch, compute * r.per_micro_batch);
    double comm = 0;
    for (int a = 0; a < kAxes; ++a) {
      if (size[a] <= 1) continue;
      const Wire w = wire_of(l, Axis(a), m);
      double t = r.sent.axis_operations[size_t(a)] * w.latency + r.sent.axis_bytes[size_t(a)] / w.bandwidth;
      if (a == int(Axis::Data) && m.overlap) t = std::max(0.0, t - 2.0 / 3.0 * compute);  // behind backward
      comm += t;
    }
    s.comm = std::max(s.comm, comm);
  }
  // A pipeline: m micro-batches of the slowest stage's, stretched by the schedule's bubble on
  // paper (parallel/pipeline.h's ideal_bubble): 1F1B's and GPipe's m + p − 1 slots, interleaving's
  // m + (p − 1)/v, ZB-H1's m + (p − 1)/3 (m >= p).
  const double bubble = l.pp > 1 ? par::ideal_bubble(l.schedule, l.pp, l.micro_batches, -1, l.virtual_stages) : 0;
  const double slots = double(l.grad_accum) * double(l.micro_batches) / (1 - bubble);
  s.compute = l.pp > 1 ? slots * slowest_micro_batch : slowest_compute;
  s.total = s.compute + s.comm;
  return s;
}

}  // namespace gpt
