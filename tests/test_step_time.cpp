// test_step_time.cpp — examples/gpt/step_time.h's model of a step's time, on made-up plans
// and machines whose answers are worked out by hand, and the work plan.h counts for it.
// (How close the model comes to real steps is a benchmark's question:
// bench/bench_step_time.sh.)
#include <doctest/doctest.h>

#include "../examples/gpt/step_time.h"

namespace {

gpt::Machine simple_machine() {
  gpt::Machine m;
  m.name = "test";
  m.flops = 100, m.attention_flops = 50, m.memory_bw = 10;
  m.link_bw = 1000, m.link_latency = 0.5;
  m.network_bw = 100, m.network_latency = 2;
  m.ranks_per_host = 4;
  return m;
}

gpt::RankPlan rank_with_work(double flops, double attention, double traffic, double per_micro_batch = 1) {
  gpt::RankPlan r;
  r.flops = flops, r.attention_flops = attention, r.memory_traffic = traffic, r.per_micro_batch = per_micro_batch;
  return r;
}

}  // namespace

TEST_CASE("step_time: compute is each kind of work at its own rate; the slowest rank sets it") {
  gpt::Plan p;
  p.ranks = {rank_with_work(1000, 100, 50), rank_with_work(500, 100, 50)};
  const gpt::StepTime t = gpt::step_time(p, {.dp = 2}, simple_machine());
  CHECK(t.compute == doctest::Approx(1000.0 / 100 + 100.0 / 50 + 50.0 / 10));  // 17
  CHECK(t.comm == 0);
  CHECK(t.total == doctest::Approx(17));
}

TEST_CASE("step_time: each axis on its link, latency per operation plus bytes over bandwidth") {
  using K = ringgrad::parallel::Collective;
  gpt::Plan p;
  gpt::RankPlan r = rank_with_work(100, 0, 0);
  r.sent.add(gpt::Axis::Tp, K::AllReduce, 4, 250);  // 4 operations, 1000 bytes in all
  r.sent.add(gpt::Axis::Data, K::AllReduce, 2, 50);
  p.ranks = {r};
  // tp 4 within a host of 4: the link. The data group (dp 2, one member a host): the network.
  const gpt::StepTime within = gpt::step_time(p, {.dp = 2, .tp = 4}, simple_machine());
  CHECK(within.comm == doctest::Approx((4 * 0.5 + 1000.0 / 1000) + (2 * 2 + 100.0 / 100)));  // 3 + 5
  // tp 8 on hosts of 4: tp's group spans two hosts, 4 members on each: 4 adapters' worth.
  const gpt::StepTime across = gpt::step_time(p, {.dp = 2, .tp = 8}, simple_machine());
  CHECK(across.comm == doctest::Approx((4 * 2 + 1000.0 / 400) + (2 * 2 + 100.0 / 100)));  // 10.5 + 5
  CHECK(across.total == doctest::Approx(across.compute + across.comm));
  // dp 8 alone on hosts of 4, with faster adapters: 4 × 500 would pass the link's 1000, which caps it.
  gpt::Machine fast_network = simple_machine();
  fast_network.network_bw = 500;  // 4 × 500 > the link's 1000
  gpt::Plan q;
  gpt::RankPlan data_only = rank_with_work(100, 0, 0);
  data_only.sent.add(gpt::Axis::Data, K::AllReduce, 1, 1000);
  q.ranks = {data_only};
  CHECK(gpt::step_time(q, {.dp = 8}, fast_network).comm == doctest::Approx(2 + 1000.0 / 1000));
}

TEST_CASE("step_time: where the machine overlaps, the data group's traffic hides behind backward") {
  using K = ringgrad::parallel::Collective;
  gpt::Plan p;
  gpt::RankPlan r = rank_with_work(600, 0, 0);  // 6 s of compute: backward is 4 of them
  r.sent.add(gpt::Axis::Data, K::AllReduce, 1, 2000);  // 2 + 2000 / (4 × 100) = 7 s on the network
  p.ranks = {r};
  gpt::Machine m = simple_machine();
  CHECK(gpt::step_time(p, {.dp = 8}, m).comm == doctest::Approx(7));
  m.overlap = true;
  CHECK(gpt::step_time(p, {.dp = 8}, m).comm == doctest::Approx(3));  // what is longer than backward
  r.sent = {};
  r.sent.add(gpt::Axis::Data, K::AllReduce, 1, 400);  // 3 s: hidden whole
  p.ranks = {r};
  CHECK(gpt::step_time(p, {.dp = 8}, m).comm == 0);
}

TEST_CASE("step_time: a pipeline's m micro-batches take m + p - 1 slots of the slowest stage's") {
  gpt::Plan p;
  // Two stages, 4 micro-batches: stage 0 does 4 s a step (1 s a micro-batch), stage 1 8 s.
  p.ranks = {rank_with_work(400, 0, 0, 0.25), rank_with_work(800, 0, 0, 0.25)};
  const gpt::StepTime t = gpt::step_time(p, {.pp = 2, .micro_batches = 4}, simple_machine());
  CHECK(t.compute == doctest::Approx((4 + 2 - 1) * 2.0));
  const gpt::StepTime twice = gpt::step_time(p, {.pp = 2, .grad_accum = 2, .micro_batches = 4}, simple_machine());
  CHECK(twice.compute == doctest::Approx(2 * (4 + 2 - 1) * 2.0));
}

TEST_CASE("step_time: interleaving divides the pipeline's fill and drain by v, ZB-H1 by 3") {
  gpt::Plan p;
  p.ranks = {rank_with_work(400, 0, 0, 0.25), rank_with_work(800, 0, 0, 0.25)};  // 2 s a micro-batch
  using S = gpt::par::PipelineSchedule;
  const gpt::StepTime gpipe = gpt::step_time(p, {.pp = 2, .micro_batches = 4, .schedule = S::GPipe}, simple_machine());
  CHECK(gpipe.compute == doctest::Approx((4 + 1) * 2.0));
  const gpt::StepTime inter = gpt::step_time(
      p, {.pp = 2, .micro_batches = 4, .schedule = S::Interleaved1F1B, .virtual_stages = 2}, simple_machine());
  CHECK(inter.compute == doctest::Approx((4 + 1.0 / 2) * 2.0));
  const gpt::StepTime zb = gpt::step_time(p, {.pp = 2, .micro_batches = 4, .schedule = S::ZeroBubbleH1}, simple_machine());
  CHECK(zb.compute == doctest::Approx((4 + 1.0 / 3) * 2.0));
}

TEST_CASE("plan: what a pipeline stage holds is its schedule's, run on paper") {
  using S = gpt::par::PipelineSchedule;
  // Each micro-batch through chunk c keeps 1 + c (bytes, say): the peak is the schedule's sum.
  const auto held = [](S schedule, int64_t rank, int64_t v) {
    const gpt::PlanLayout l{.pp = 2, .micro_batches = 4, .schedule = schedule, .virtual_stages = v};
    return gpt::held_at_peak(l, rank, [](int64_t chunk) { return 1.0 + double(chunk); });
  };
  CHECK(held(S::GPipe, 0, 1) == 4);         // every micro-batch
  CHECK(held(S::OneFOneB, 0, 1) == 2);      // p − r
  CHECK(held(S::OneFOneB, 1, 1) == 1);
  CHECK(held(S::ZeroBubbleH1, 0, 1) == 2);  // 1F1B's count
  // Interleaved, v 2: rank 0's warm-up is (p − 1)·2 + (v − 1)·p = 4 forwards (chunk 0 for
  // micro-batches 0 and 1, then chunk 1 for them: 1 + 1 + 2 + 2), and its steady state's
  // next forward (chunk 0 of micro-batch 2) comes before the first backward: 7. Rank 1's
  // warm-up is 2 forwards (chunk 0, 0), then a third (chunk 1 of micro-batch 0): 4.
  CHECK(held(S::Interleaved1F1B, 0, 2) == 7);
  CHECK(held(S::Interleaved1F1B, 1, 2) == 4);
  // The plan: each chunk but the pipeline's last sends its output on, each but the first its
  // gradient back (a header before each activation): rank 0 of p 2, v 2, m 4 makes 20 sends.
  gpt::GPTConfig c;
  c.layers = 4, c.d_model = 64, c.heads = 4, c.seq = 32;
  const gpt::PlanLayout inter{.pp = 2, .batch = 8, .micro_batches = 4, .schedule = S::Interleaved1F1B, .virtual_stages = 2};
  const size_t send = size_t(gpt::par::Collective::Send);
  CHECK(gpt::plan(c, inter).ranks[0].sent.operations[send] == 20);
  CHECK(gpt::plan(c, {.pp = 2, .batch = 8, .micro_batches = 4}).ranks[0].sent.operations[send] == 8);
}

TEST_CASE("plan: under autocast a step's micro-batches share one copy of the weights, not under FSDP") {
  gpt::GPTConfig c;
  c.layers = 2, c.d_model = 64, c.heads = 4, c.seq = 32;
  // One block's GEMM weights and biases (q, k, v and out_proj; the MLP's two), the head's
  // weight (the tied embedding), in bfloat16.
  const double E = 64, copies = 2 * (2 * (12 * E * E + 3 * E + E + 4 * E + E) + 256 * E);
  const gpt::PlanLayout ddp{.batch = 4, .precision = "bf16"}, fsdp{.strategy = "fsdp", .batch = 4, .precision = "bf16"};
  CHECK(ddp.weights_cached());
  CHECK(!fsdp.weights_cached());
  // Without it, each block and the head keep their copies in the activations; with it, once.
  const double kept = 2 * 2 * 12 * E * E + 2 * 256 * E;
  CHECK(gpt::plan(c, ddp).largest.activations - gpt::plan(c, fsdp).largest.activations == doctest::Approx(copies - kept));
  // A pipeline's first stage (one block here) holds p = 2 micro-batches: its block's copies
  // once (weights and biases), not once in each micro-batch (the weights the GEMMs keep).
  const gpt::PlanLayout pipe{.pp = 2, .batch = 8, .micro_batches = 4, .precision = "bf16"};
  gpt::PlanLayout uncached = pipe;
  uncached.weight_cache = false;
  CHECK(pipe.weights_cached());
  const double once = 2 * (12 * E * E + 9 * E), each = 2 * 12 * E * E;
  CHECK(gpt::plan(c, uncached).ranks[0].activations - gpt::plan(c, pipe).ranks[0].activations ==
        doctest::Approx(2 * each - once));
}

TEST_CASE("plan: the work it counts for the step's time") {
  gpt::GPTConfig c;
  c.layers = 2, c.d_model = 64, c.heads = 4, c.seq = 32;
  const gpt::PlanLayout one{.batch = 4};
  const gpt::RankPlan none = gpt::plan(c, one).largest;
  // GEMMs: a block's q, k, v, out_proj and the MLP's two, 2·bT·12E² forward, 3 times with
  // backward; the head 2·bT·E·V, 3 times.
  const double bT = 4 * 32, E = 64, block = 3 * 2 * bT * 12 * E * E, head = 3 * 2 * bT * E * 256;
  CHECK(none.flops == doctest::Approx(2 * block + head));
  CHECK(none.attention_flops == doctest::Approx(2 * 3.5 * 2 * bT * 32 * E));
  // Full recomputation runs each block's forward once more; tp 2 halves each rank's share.
  c.recompute = "full";
  CHECK(gpt::plan(c, one).largest.flops == doctest::Approx(2 * block * 4 / 3 + head));
  c.recompute = "none";
  const gpt::RankPlan split = gpt::plan(c, {.tp = 2, .batch = 4}).largest;
  CHECK(split.flops == doctest::Approx(none.flops / 2));
  CHECK(split.attention_flops == doctest::Approx(none.attention_flops / 2));
  CHECK(none.memory_traffic > 0);
}
