// test_4d.cpp — data, tensor, pipeline and context parallelism on one mesh give one
// process's training run.
//
//   scripts/rgrun -n 4 build/bin/test_4d          (then -n 1, 2, 8: ctest runs them all)
//
// A tiny GPT in float64 (vocab 16, d_model 8, 4 heads, 2 blocks, 8 positions; token and
// position embeddings, pre-norm blocks of causal self-attention and a GELU MLP, a final
// LayerNorm, an LM head) trains 3 AdamW steps on a batch of 4 sequences, once in one
// process with plain nn layers (every rank computes it), and once for every
// (dp, pp, cp, tp) with each size in {1, 2} whose product is the world size, on a mesh
// with those axes (tp varying fastest):
//   dp  each replica takes 4/dp of the sequences;
//   pp  the blocks are cut into pp stages (the embeddings on the first, the final norm,
//       head and loss on the last), 2 micro-batches under 1F1B, and again under ZB-H1
//       (each backward split into input and weight gradients; the ring's and the tp
//       all-reduces' backward inside B, DDP-style averaging after W), and under
//       interleaved 1F1B (a model of 4 blocks, each rank holding 2 chunks of one block:
//       stages r and r + 2);
//   cp  each sequence's positions are shared by the cp ranks (zigzag, ring attention);
//   tp  attention heads, the MLP, the vocabulary of the embedding and of the head
//       (vocab-parallel cross-entropy) are split across the tp ranks.
// The gradients are averaged over the flattened (dp, cp) group (cp ranks hold different
// tokens of the same sequences). Every configuration runs twice: as is, and with each
// block recomputed in backward (nn::checkpoint around the block: the tp all-reduces and
// the ring's K/V passes run again inside the pipeline's backward). The contract: the same
// loss at every step and the same final parameters (gathered whole from the tp slices,
// compared by name) as one process, to 1e-10. Then all of it again with the fifth
// dimension: every block's MLP a Mixture of Experts whose experts are split over the
// data-parallel ranks (ep = dp; parallel/expert_parallel.h) — (dp/ep, pp, cp, tp, ep).
// Each rank compares the experts it holds.
// Prints "rank R/N: P passed, F failed" per rank (checks.h); exits non-zero on a failure.
#include <ringgrad/nn/checkpoint.h>
#include <ringgrad/parallel/context_parallel.h>
#include <ringgrad/parallel/device_mesh.h>
#include <ringgrad/parallel/expert_parallel.h>
#include <ringgrad/parallel/pipeline.h>
#include <ringgrad/parallel/tensor_parallel.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checks.h"

namespace rg = ringgrad;
namespace par = rg::parallel;

namespace {

int rank = 0, N = 1;
void check(bool ok, const std::string& what) { mpi_test::check(ok, what, rank); }

constexpr int64_t kVocab = 16, kModel = 8, kHeads = 4, kSeq = 8, kBatch = 4;
// Blocks in the model: 2, and 4 for interleaved 1F1B (2 chunks on each of 2 stages).
int64_t blocks_count = 2;
constexpr int kSteps = 3;

// ---- the plain model (one process)

// The fifth dimension: with experts on, every block's MLP is a Mixture of Experts (4
// experts of the MLP's shape, 2 per token, capacity factor 1: some assignments dropped, the
// same ones on every layout), each sequence one routing group, its
// load-balance loss carried into backward on its output (nn::with_aux_loss) scaled as the
// loss is: 1 in one process, 1/micro-batches on a pipeline stage.
bool experts = false;
constexpr int64_t kExperts = 4;

rg::Tensor moe_mlp(rg::nn::MoE& moe, const rg::Tensor& z, double aux_scale) {
  rg::nn::MoEOutput out = moe.forward_moe(z, z.size(0));
  return rg::nn::with_aux_loss(out.output, out.aux_loss * aux_scale);
}

struct PlainBlock : rg::nn::Module {
  rg::nn::LayerNorm ln1{kModel}, ln2{kModel};
  rg::nn::MultiheadAttention attn{kModel, kHeads, {.batch_first = true}};
  rg::nn::Linear up{kModel, 4 * kModel}, down{4 * kModel, kModel};
  std::shared_ptr<rg::nn::MoE> moe;  // with experts: in place of up and down
  PlainBlock() {
    register_module("ln1", ln1);
    register_module("attn", attn);
    register_module("ln2", ln2);
    if (experts) {
      moe = std::make_shared<rg::nn::MoE>(kModel, rg::nn::MoEOptions{.num_experts = kExperts, .top_k = 2,
                                                                      .hidden = 4 * kModel,
                                                                      .capacity_factor = 1.0});
      register_module("moe", moe);
    } else {
      register_module("up", up);
      register_module("down", down);
    }
  }
  rg::Tensor forward(const rg::Tensor& x) override {
    rg::Tensor h = ln1(x);
    rg::Tensor y = x + attn(h, h, h, {.is_causal = true});
    return y + (moe ? moe_mlp(*moe, ln2(y), 1.0) : down(rg::gelu(up(ln2(y)))));
  }
};

struct PlainGPT : rg::nn::Module {
  rg::nn::Embedding wte{kVocab, kModel}, wpe{kSeq, kModel};
  std::shared_ptr<rg::nn::Sequential> blocks = std::make_shared<rg::nn::Sequential>();
  rg::nn::LayerNorm ln_f{kModel};
  rg::nn::Linear head{kModel, kVocab, /*bias=*/false};
  PlainGPT() {
    register_module("wte", wte);
    register_module("wpe", wpe);
    register_module("blocks", blocks);
    for (int64_t b = 0; b < blocks_count; ++b) blocks->add(std::make_shared<PlainBlock>());
    register_module("ln_f", ln_f);
    register_module("head", head);
    to(rg::kFloat64);
  }
  rg::Tensor forward(const rg::Tensor& tokens) override {
    rg::Tensor pos = rg::arange(tokens.size(1), {.dtype = rg::kInt64}).unsqueeze(0);
    return head(ln_f((*blocks)(wte(tokens) + wpe(pos))));
  }
};

// ---- the parallel model: one pipeline stage, tensor-parallel layers

// With experts: the MoE whole on every tp rank (its input is the same on each), its experts
// split over the ep group when there is one.
struct ParallelBlock : rg::nn::Module {
  rg::nn::LayerNorm ln1{kModel}, ln2{kModel};
  par::ParallelSelfAttention attn;
  par::ColumnParallelLinear up;
  par::RowParallelLinear down;
  std::shared_ptr<rg::nn::MoE> moe;
  ParallelBlock(PlainBlock& plain, par::Communicator& tp, par::Communicator* ep)
      : attn(plain.attn, tp, /*causal=*/true), up(plain.up, tp),
        down(plain.down, tp, {.input_is_parallel = true}) {
    ln1.to(rg::kFloat64), ln2.to(rg::kFloat64);
    ln1.load_state_dict(plain.ln1.state_dict()), ln2.load_state_dict(plain.ln2.state_dict());
    register_module("ln1", ln1);
    register_module("attn", attn);
    register_module("ln2", ln2);
    if (plain.moe) {
      moe = ep ? std::make_shared<par::ExpertParallelMoE>(*plain.moe, *ep) : plain.moe;
      register_module("moe", moe);
    } else {
      register_module("up", up);
      register_module("down", down);
    }
  }
  rg::Tensor forward(const rg::Tensor& x) override {
    auto body = [this](const std::vector<rg::Tensor>& in) {
      rg::Tensor y = in[0] + attn(ln1(in[0]));
      return y + (moe ? moe_mlp(*moe, ln2(y), aux_scale) : down(rg::gelu(up(ln2(y)))));
    };
    return recompute ? rg::nn::checkpoint(body, {x}) : body({x});
  }
  bool recompute = false;
  double aux_scale = 1.0;
};

// Pipeline rank `s` of `p`, holding `v` chunks (v > 1: interleaved 1F1B): chunk c is stage
// c·p + s of v·p, blocks [st·L/(v·p), (st+1)·L/(v·p)); the embeddings on the first stage,
// the final norm and the head (its vocabulary split over tp) on the last.
struct Stage : rg::nn::Module {
  bool first, last;
  std::unique_ptr<par::VocabParallelEmbedding> wte;
  std::unique_ptr<rg::nn::Embedding> wpe;
  std::shared_ptr<rg::nn::Sequential> blocks = std::make_shared<rg::nn::Sequential>();  // global names
  std::unique_ptr<rg::nn::LayerNorm> ln_f;
  std::unique_ptr<par::ColumnParallelLinear> head;
  rg::Tensor positions = rg::arange(kSeq, {.dtype = rg::kInt64}).unsqueeze(0);  // cp shards it
  // One chunk for parallel::Pipeline: a view of the stage's modules.
  struct Chunk : rg::nn::Module {
    Chunk(Stage& s, int c) : stage(s), index(c) {}
    rg::Tensor forward(const rg::Tensor& x) override { return stage.run(index, x); }
    Stage& stage;
    int index;
  };
  std::vector<std::pair<int64_t, int64_t>> ranges;  // each chunk's blocks in `blocks`
  std::vector<std::shared_ptr<Chunk>> chunk_modules;

  Stage(PlainGPT& plain, int s, int p, par::Communicator& tp, par::Communicator* ep, int v = 1)
      : first(s == 0), last(s == p - 1) {
    if (first) {
      wte = std::make_unique<par::VocabParallelEmbedding>(plain.wte, tp);
      wpe = std::make_unique<rg::nn::Embedding>(kSeq, kModel);
      wpe->to(rg::kFloat64);
      wpe->load_state_dict(plain.wpe.state_dict());
      register_module("wte", *wte);
      register_module("wpe", *wpe);
    }
    register_module("blocks", blocks);
    const int64_t stages = int64_t(v) * p;
    for (int c = 0; c < v; ++c) {
      const int64_t st = int64_t(c) * p + s, begin = st * blocks_count / stages, end = (st + 1) * blocks_count / stages;
      ranges.push_back({int64_t(blocks->size()), int64_t(blocks->size()) + end - begin});
      for (int64_t b = begin; b < end; ++b)
        blocks->add(std::to_string(b), std::make_shared<ParallelBlock>(
                                           static_cast<PlainBlock&>((*plain.blocks)[static_cast<size_t>(b)]), tp, ep));
      chunk_modules.push_back(std::make_shared<Chunk>(*this, c));
    }
    if (last) {
      ln_f = std::make_unique<rg::nn::LayerNorm>(kModel);
      ln_f->to(rg::kFloat64);
      ln_f->load_state_dict(plain.ln_f.state_dict());
      head = std::make_unique<par::ColumnParallelLinear>(plain.head, tp);
      register_module("ln_f", *ln_f);
      register_module("head", *head);
    }
  }
  // Chunk c: the first chunk of the first stage embeds tokens (B, T); the last chunk of the
  // last stage ends in this rank's logits; the others map hidden to hidden.
  rg::Tensor run(int c, const rg::Tensor& x) {
    const int v = int(ranges.size());
    rg::Tensor h = c == 0 && first ? (*wte)(x) + (*wpe)(positions.narrow(1, 0, x.size(1))) : x;
    for (int64_t b = ranges[size_t(c)].first; b < ranges[size_t(c)].second; ++b) h = (*blocks)[size_t(b)](h);
    return c == v - 1 && last ? (*head)((*ln_f)(h)) : h;
  }
  rg::Tensor forward(const rg::Tensor& x) override { return run(0, x); }
  std::vector<rg::nn::Module*> chunks() {
    std::vector<rg::nn::Module*> out;
    for (auto& c : chunk_modules) out.push_back(c.get());
    return out;
  }
};

// ---- the data and the reference run

struct Batch {
  rg::Tensor tokens, targets;
};
Batch batch(int step) {
  rg::Generator gen(200 + static_cast<uint64_t>(step));
  rg::Tensor seq = rg::randint(0, kVocab, {kBatch, kSeq + 1}, &gen);
  return {seq.narrow(1, 0, kSeq).contiguous(), seq.narrow(1, 1, kSeq).contiguous()};
}

std::unique_ptr<PlainGPT> make_plain() {
  rg::manual_seed(42);  // the same weights on every rank
  return std::make_unique<PlainGPT>();
}

// One process: the losses of each step and the final state.
std::pair<std::vector<double>, rg::NamedTensors> reference_run() {
  auto model = make_plain();
  rg::optim::AdamW opt(model->parameters(), {.lr = 1e-2});
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    Batch b = batch(step);
    opt.zero_grad();
    rg::Tensor loss = rg::nn::cross_entropy((*model)(b.tokens).reshape({-1, kVocab}), b.targets.reshape({-1}));
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  rg::NamedTensors state;
  for (auto& [name, t] : model->state_dict()) state.emplace_back(name, t.detach().clone());
  return {losses, state};
}

// ---- one (dp, pp, cp, tp) configuration

void run(int dp, int pp, int cp, int tp, bool recompute, par::PipelineSchedule schedule,
         const std::vector<double>& want_losses, const rg::NamedTensors& want_state,
         par::Communicator& world) {
  const int ep = experts ? dp : 1;  // with experts: split over the data-parallel ranks
  const std::string name = "dp" + std::to_string(dp) + " pp" + std::to_string(pp) + " cp" +
                           std::to_string(cp) + " tp" + std::to_string(tp) +
                           (experts ? " ep" + std::to_string(ep) : "") + (recompute ? " recompute" : "") +
                           (schedule != par::PipelineSchedule::OneFOneB
                                ? std::string(" ") + par::schedule_name(schedule)
                                : std::string());
  par::DeviceMesh mesh(world, {{"dp", dp}, {"pp", pp}, {"cp", cp}, {"tp", tp}});
  // The same ranks as (edp, ep, pp, cp, tp): an ep group splits the experts, the (edp, cp)
  // ranks hold the same ones.
  par::DeviceMesh experts_mesh(world, {{"edp", dp / ep}, {"ep", ep}, {"pp", pp}, {"cp", cp}, {"tp", tp}});
  par::Communicator* ep_group = ep > 1 ? &experts_mesh.group("ep") : nullptr;
  par::Communicator* expert_dp = dp / ep * cp > 1 ? &experts_mesh.group({"edp", "cp"}) : nullptr;
  par::Communicator& tp_group = mesh.group("tp");
  par::Communicator& pp_group = mesh.group("pp");
  par::Communicator& cp_group = mesh.group("cp");
  par::Communicator& data_group = mesh.group({"dp", "cp"});  // the gradient is averaged here
  auto plain = make_plain();
  const int v = schedule == par::PipelineSchedule::Interleaved1F1B ? 2 : 1;
  Stage stage(*plain, mesh.rank("pp"), pp, tp_group, ep_group, v);
  for (size_t b = 0; b < stage.blocks->size(); ++b) {
    auto& block = static_cast<ParallelBlock&>((*stage.blocks)[b]);
    block.recompute = recompute;
    block.aux_scale = 0.5;  // the pipeline's 2 micro-batches: each loss is halved
    if (block.moe && cp > 1) {  // a sequence's tokens on the cp ranks: its statistics summed,
      // its places given in its whole order (zigzag: pieces c and 2cp − 1 − c of 2cp)
      block.moe->group_sum = [&cp_group](const rg::Tensor& t) { return par::sum_over_ranks(t, cp_group); };
      block.moe->group_piece_count = 2 * cp;
      block.moe->group_pieces_held = {cp_group.rank(), 2 * cp - 1 - cp_group.rank()};
    }
  }
  std::vector<rg::Tensor> dense, expert_params;
  for (auto& [pname, t] : stage.named_parameters())
    (pname.find(".moe.experts.") != std::string::npos ? expert_params : dense).push_back(t);
  rg::optim::AdamW opt(stage.parameters(), {.lr = 1e-2});
  par::Pipeline pipe(stage.chunks(), pp_group, {.micro_batches = 2, .schedule = schedule});
  auto loss_fn = [&](const rg::Tensor& logits, const rg::Tensor& targets) {
    return par::vocab_parallel_cross_entropy(logits, targets, tp_group);
  };
  const int64_t rows = kBatch / dp, first_row = mesh.rank("dp") * rows;
  double worst_loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    Batch b = batch(step);
    rg::Tensor tokens = b.tokens.narrow(0, first_row, rows).contiguous();
    rg::Tensor targets = b.targets.narrow(0, first_row, rows).contiguous();
    opt.zero_grad();
    double loss = 0;
    {
      auto region = par::context_parallel(cp_group, {&tokens, &targets, &stage.positions},
                                          /*seq_dims=*/{1}, {.causal = true});
      loss = pipe.forward_backward(tokens, targets, loss_fn);
    }
    par::all_reduce_grads(dense, data_group, par::Reduce::Avg);  // the mean over every token
    par::reduce_expert_grads(expert_params, expert_dp, data_group.size());  // experts: their replicas'
    opt.step();
    rg::Tensor l = rg::full({1}, loss, {.dtype = rg::kFloat64});
    data_group.all_reduce(l, par::Reduce::Avg);
    worst_loss = std::max(worst_loss, std::abs(l.item() - want_losses[static_cast<size_t>(step)]));
  }
  check(worst_loss <= 1e-10, name + ": the loss of every step (max diff " + std::to_string(worst_loss) + ")");
  // The final parameters: this stage's, whole, against one process's by name.
  std::map<std::string, rg::Tensor> want(want_state.begin(), want_state.end());
  double worst = 0;
  size_t compared = 0;
  for (auto& [pname, t] : par::tp_full_state_dict(stage)) {
    auto it = want.find(pname);
    check(it != want.end(), name + ": " + pname + " is one of the plain model's parameters");
    if (it == want.end()) continue;
    ++compared;
    worst = std::max(worst, rg::amax(rg::abs(t - it->second)).item());
  }
  check(compared > 0 && worst <= 1e-10, name + ": the final parameters (" + std::to_string(compared) +
                                            " on this stage, max diff " + std::to_string(worst) + ")");
  if (rank == 0)
    std::printf("N=%d %s: max |loss - one process| %.2g, max |parameter - one process| %.2g\n", N,
                name.c_str(), worst_loss, worst);
}

}  // namespace

int main(int argc, char** argv) {
  par::World world(argc, argv);
  rank = world.rank();
  N = world.size();
  return par::main_guard(world, [&] {
    int configs = 0;
    using S = par::PipelineSchedule;
    for (bool with_experts : {false, true})
      for (auto schedule : {S::OneFOneB, S::ZeroBubbleH1, S::Interleaved1F1B}) {
        experts = with_experts;
        blocks_count = schedule == S::Interleaved1F1B ? 4 : 2;  // 2 chunks on each of 2 stages
        auto [losses, state] = reference_run();
        for (int dp : {1, 2})
          for (int pp : {1, 2})
            for (int cp : {1, 2})
              for (int tp : {1, 2})
                if (dp * pp * cp * tp == N && (pp > 1 || schedule == S::OneFOneB))
                  for (bool recompute : {false, true})
                    run(dp, pp, cp, tp, recompute, schedule, losses, state, world.communicator()), ++configs;
      }
    check(configs > 0, "at least one (dp, pp, cp, tp) multiplies to the world size");
    return mpi_test::report(rank, N);
  });
}
