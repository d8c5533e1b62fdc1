// gpt/parallel.h — the GPT's tensor- and pipeline-parallel pieces (Megatron's layout),
// cut from the model of gpt/model.h as it is made, and the mesh groups training needs.
#pragma once

#include <ringgrad/parallel/communicator.h>
#include <ringgrad/parallel/tensor_parallel.h>
#include <ringgrad/ringgrad.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model.h"

namespace gpt {

namespace par = ringgrad::parallel;


// A Block with its heads and MLP split across the tp group (Megatron's layout): attention's
// heads (and grouped-query K/V heads, rotated at the GPT's positions under rope), the GELU
// MLP's or SwiGLU's hidden units; the norms whole on every rank (LayerNorm or RMSNorm).
// An MoE block keeps its MoE whole on every tp rank (the plain block's own layer): its
// input, after attention's all-reduce, is the same on each, so each computes it alike
// (under sequence parallelism each routes its own positions: the MoE's group_sum and
// pieces, set by gpt.cpp, make the routing the whole sequence's).
// Sequence parallelism (Megatron's, --sequence-parallel): the block's input and output are
// this rank's 1/t of the positions, (b, T/t, E); the norms and residual adds run on them, each
// split layer all-gathers the positions before it and reduce-scatters its partial sums after
// it (the bytes of the all-reduce it replaces). The norms' and row biases' gradients are then
// partial sums over the tp ranks' positions: sequence_parallel_parameters() lists them.
class ParallelBlock : public rg::nn::Module {
 public:
  ParallelBlock(const Block& plain, par::Communicator& tp, bool sequence_parallel = false)
      : ln1(copy_norm(*plain.ln1)), ln2(copy_norm(*plain.ln2)),
        attn(plain.attn, tp, /*causal=*/true, sequence_parallel), moe(plain.moe), recompute(plain.recompute),
        aux_scale(plain.aux_scale), sequence_parallel(sequence_parallel), positions_(plain.rope_positions()),
        tp_size_(tp.size()) {
    register_module("ln1", ln1);
    register_module("attn", attn);
    register_module("ln2", ln2);
    if (moe) {
      register_module("moe", moe);
    } else if (plain.mlp) {
      mlp = std::make_shared<par::ParallelSwiGLU>(*plain.mlp, tp, sequence_parallel);
      register_module("mlp", mlp);
    } else {
      fc = std::make_shared<par::ColumnParallelLinear>(
          *plain.fc, tp, par::ColumnParallelOptions{.sequence_parallel = sequence_parallel});
      proj = std::make_shared<par::RowParallelLinear>(
          *plain.proj, tp,
          par::RowParallelOptions{.input_is_parallel = true, .sequence_parallel = sequence_parallel});
      register_module("fc", fc);
      register_module("proj", proj);
    }
  }
  rg::Tensor forward(const rg::Tensor& x) override {
    return block_forward(
        recompute, x,
        [this](const rg::Tensor& in) {
          // rope: attention sees the gathered positions under sequence parallelism.
          const int64_t T = in.size(1) * (sequence_parallel ? tp_size_ : 1);
          return positions_ ? attn((*ln1)(in), positions_->narrow(1, 0, T)) : attn((*ln1)(in));
        },
        [this](const rg::Tensor& y) {
          rg::Tensor z = (*ln2)(y);
          if (moe) return moe_forward(*moe, z, aux_scale);
          return mlp ? (*mlp)(z) : (*proj)(rg::gelu((*fc)(z)));
        });
  }
  // The parameters every tp rank holds whole but, under sequence parallelism, applies to its
  // own positions only: the norms, the row-parallel layers' biases, an MoE's every parameter.
  std::vector<rg::Tensor> sequence_parallel_parameters() {
    std::vector<rg::Tensor> out = ln1->parameters();
    for (const rg::Tensor& p : ln2->parameters()) out.push_back(p);
    if (moe)
      for (const rg::Tensor& p : moe->parameters()) out.push_back(p);
    for (const rg::Tensor& b : {attn.out_proj.bias, proj ? proj->bias : rg::Tensor(), mlp ? mlp->w2.bias : rg::Tensor()})
      if (b.defined()) out.push_back(b);
    return out;
  }

  std::shared_ptr<rg::nn::Module> ln1, ln2;  // LayerNorm or RMSNorm, whole
  par::ParallelSelfAttention attn;
  std::shared_ptr<par::ColumnParallelLinear> fc;  // the split GELU MLP, or
  std::shared_ptr<par::ParallelSwiGLU> mlp;       // the split SwiGLU, or
  std::shared_ptr<rg::nn::MoE> moe;               // the whole MoE
  std::shared_ptr<par::RowParallelLinear> proj;
  std::string recompute;     // GPTConfig::recompute
  const double* aux_scale;   // the GPT's (Block::aux_scale)
  const bool sequence_parallel;

 private:
  const rg::Tensor* positions_;  // rope: the GPT's global positions (null: learned positions)
  int64_t tp_size_;
};

// The blocks of pipeline rank r's stage (of p, v chunks a rank) cut over the tp group as the
// GPT makes them: the GPT's BlockHook. Each whole block lives only until its cut is made;
// then its numbers are released (a block of another stage's at once), so that a rank holds
// its stage and at most one whole block, never the whole model, while drawing the same
// random numbers one process draws. An MoE block's layer is its ParallelBlock's (shared).
class StageBlocks {
 public:
  StageBlocks(int r, int p, par::Communicator& tp, int v, int64_t layers, bool sequence_parallel = false)
      : rank(r), ranks(p), chunks(v), sequence_parallel(sequence_parallel), tp_(tp) {
    for (int c = 0; c < v; ++c) {
      const int64_t s = int64_t(c) * p + r;
      ranges.push_back({first_block(s, int64_t(v) * p, layers), first_block(s + 1, int64_t(v) * p, layers)});
      for (int64_t b = ranges.back().first; b < ranges.back().second; ++b) cut_[b] = nullptr;
    }
  }
  void operator()(int64_t i, Block& whole) {
    auto it = cut_.find(i);
    if (it != cut_.end()) it->second = std::make_shared<ParallelBlock>(whole, tp_, sequence_parallel);
    std::vector<rg::nn::Module*> parts{whole.ln1.get(), whole.ln2.get(), &whole.attn,
                                       whole.fc.get(),  whole.proj.get(), whole.mlp.get()};
    if (it == cut_.end()) parts.push_back(whole.moe.get());  // (held: the ParallelBlock's too)
    for (rg::nn::Module* m : parts)
      if (m) release_numbers(*m);
  }
  // Block b, cut (Stage's constructor takes each once).
  std::shared_ptr<ParallelBlock> take(int64_t b) {
    auto it = cut_.find(b);
    RG_CHECK(it != cut_.end() && it->second, "gpt", "expected block ", b, " to be cut for this stage");
    return std::move(it->second);
  }
  // The cut: stage s of S holds blocks [first_block(s), first_block(s + 1)) of L; stage s
  // lives on rank s mod p.
  static int64_t first_block(int64_t s, int64_t stages, int64_t layers) { return s * layers / stages; }

  const int rank, ranks, chunks;  // pipeline rank r of p, v chunks a rank
  const bool sequence_parallel;   // the blocks' (ParallelBlock), and so the stage's
  par::Communicator& tp() const { return tp_; }
  std::vector<std::pair<int64_t, int64_t>> ranges;  // chunk c's blocks [first, second) of the GPT's

 private:
  par::Communicator& tp_;
  std::map<int64_t, std::shared_ptr<ParallelBlock>> cut_;
};

// Pipeline rank r of p over a tp group, cut from the GPT. Without virtual stages
// (v = 1) it is stage r: blocks [r·L/p, (r+1)·L/p). With v chunks (interleaved 1F1B) it
// holds stages r, r + p, …, r + (v−1)·p of v·p, stage s being blocks [s·L/S, (s+1)·L/S),
// and chunk(c) runs stage c·p + r. The embeddings (vocabulary split over tp) go with the
// first stage (rank 0), the final norm and the LM head with the last (rank p − 1), which
// reads this rank's vocabulary rows of the token embedding (tied: with p > 1 the last
// stage keeps its own copy, and the two copies' gradients are summed every step, as
// Megatron does). Parameter names are the GPT's. It takes the blocks cut as the GPT was made
// (StageBlocks, which says r, p and v), then releases the GPT's embeddings and final norm:
// the GPT is left a skeleton (names and shapes) beside the stage.
class Stage : public rg::nn::Module {
 public:
  Stage(GPT& gpt, StageBlocks& cut)
      : first_(cut.rank == 0), last_(cut.rank == cut.ranks - 1), sequence_parallel_(cut.sequence_parallel),
        gpt_(gpt), tp_(cut.tp()) {
    par::Communicator& tp = tp_;
    if (first_ || last_) {
      wte = std::make_unique<par::VocabParallelEmbedding>(gpt.wte, tp, sequence_parallel_);
      register_module("wte", *wte);
    }
    if (first_ && gpt.wpe) {  // learned positions (with rope the blocks rotate q and k)
      wpe = std::make_unique<rg::nn::Embedding>(gpt.wpe->num_embeddings, gpt.wpe->embedding_dim);
      wpe->load_state_dict(gpt.wpe->state_dict());
      register_module("wpe", *wpe);
    }
    // Blocks named by their index in the whole model, so that names match the GPT's.
    blocks_ = register_module("blocks", std::make_shared<rg::nn::Sequential>());
    const int v = cut.chunks;
    for (int c = 0; c < v; ++c) {
      const auto [begin, end] = cut.ranges[size_t(c)];
      ranges_.push_back({int64_t(blocks_->size()), int64_t(blocks_->size()) + end - begin});
      for (int64_t b = begin; b < end; ++b) blocks_->add(std::to_string(b), cut.take(b));
      chunks_.push_back(std::make_shared<Chunk>(*this, c, c == 0 && first_, c == v - 1 && last_));
    }
    if (last_) {
      ln_f = copy_norm(*gpt.ln_f);
      register_module("ln_f", ln_f);
    }
    release_numbers(gpt.wte), release_numbers(*gpt.ln_f);
    if (gpt.wpe) release_numbers(*gpt.wpe);
  }
  // first: tokens -> hidden; last: -> this rank's slice of the vocabulary's logits.
  rg::Tensor forward(const rg::Tensor& x) override { return run(0, first_, last_, x); }
  bool first() const { return first_; }
  bool last() const { return last_; }
  static int64_t first_block(int64_t s, int64_t stages, int64_t layers) {  // StageBlocks'
    return StageBlocks::first_block(s, stages, layers);
  }
  // Under sequence parallelism, the parameters whose gradients are partial sums over the tp
  // ranks' positions (the norms, the row biases, the learned positions): the trainer sums them.
  std::vector<rg::Tensor> sequence_parallel_parameters() {
    std::vector<rg::Tensor> out;
    if (!sequence_parallel_) return out;
    for (size_t b = 0; b < blocks_->size(); ++b)
      for (const rg::Tensor& p : dynamic_cast<ParallelBlock&>((*blocks_)[b]).sequence_parallel_parameters())
        out.push_back(p);
    if (ln_f)
      for (const rg::Tensor& p : ln_f->parameters()) out.push_back(p);
    if (wpe) out.push_back(wpe->weight);
    return out;
  }
  // The model chunks for parallel::Pipeline (this stage's v; chunk 0 alone is forward()).
  std::vector<rg::nn::Module*> chunks() {
    std::vector<rg::nn::Module*> out;
    for (auto& c : chunks_) out.push_back(c.get());
    return out;
  }

  std::unique_ptr<par::VocabParallelEmbedding> wte;
  std::unique_ptr<rg::nn::Embedding> wpe;  // null with --pos rope
  std::shared_ptr<rg::nn::Module> ln_f;     // LayerNorm or RMSNorm
  // --precision bf16/fp16: every chunk's forward runs under autocast to this dtype (the
  // pipeline's backward, run by its schedule, then outside it, as a plain backward is).
  rg::DType autocast_dtype = rg::kFloat32;
  bool autocast = false;

 private:
  // One chunk: a view of the stage's modules (its parameters are the stage's, not its own).
  struct Chunk : rg::nn::Module {
    Chunk(Stage& s, int c, bool first, bool last) : stage(s), index(c), first(first), last(last) {}
    rg::Tensor forward(const rg::Tensor& x) override { return stage.run(index, first, last, x); }
    Stage& stage;
    int index;
    bool first, last;
  };
  rg::Tensor run(int chunk, bool first, bool last, const rg::Tensor& x) {
    rg::autocast amp(rg::kCPU, autocast_dtype, autocast);  // off for fp32
    rg::Tensor h = x;
    if (first) {  // under sequence parallelism this rank's positions only: (b, T/t, E)
      h = (*wte)(x);
      const int64_t start = sequence_parallel_ ? tp_.rank() * h.size(1) : 0;
      if (wpe) h = h + (*wpe)(gpt_.positions.narrow(1, start, h.size(1)));
    }
    for (int64_t b = ranges_[size_t(chunk)].first; b < ranges_[size_t(chunk)].second; ++b)
      h = (*blocks_)[static_cast<size_t>(b)](h);
    if (!last) return h;
    // The LM head (vocabulary split): every position's final norm on every rank.
    rg::Tensor z = (*ln_f)(h);
    if (sequence_parallel_) return par::sequence_parallel_linear(z, {wte->weight}, {rg::Tensor()}, tp_);
    return rg::matmul(par::copy_to_tp_region(z, tp_), wte->weight.t());
  }

  bool first_, last_, sequence_parallel_;
  GPT& gpt_;  // its positions (context_parallel shards them)
  par::Communicator& tp_;
  std::shared_ptr<rg::nn::Sequential> blocks_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // each chunk's blocks in blocks_
  std::vector<std::shared_ptr<Chunk>> chunks_;
};

// The groups of a (dp, pp, cp, tp) mesh that training needs.
struct Groups {
  par::Communicator& data;  // (dp, cp): the gradient's average
  par::Communicator& pp;
  par::Communicator& tp;
  par::Communicator& pp_tp;  // (pp, tp): one whole model's parameters, for the gradient norm
  int pp_rank, tp_rank, pp_size;
  // --ep above 1: the group the experts are split over, and the ranks holding the same
  // experts (null when dp = ep: each expert on one rank).
  par::Communicator* ep = nullptr;
  par::Communicator* expert_dp = nullptr;
};

}  // namespace gpt
