// gpt/parallel.h — the GPT's tensor- and pipeline-parallel pieces (Megatron's layout),
// built from the whole model of gpt/model.h, and the mesh groups training needs.
#pragma once

#include <ringgrad/parallel/communicator.h>
#include <ringgrad/parallel/tensor_parallel.h>
#include <ringgrad/ringgrad.h>

#include <memory>
#include <string>

#include "model.h"

namespace gpt {

namespace par = ringgrad::parallel;


// A Block with its heads and MLP split across the tp group (Megatron's layout). GPT-2's
// blocks only: --norm/--pos/--mlp/--kv-heads other than the defaults are refused with
// --tp or --pp above 1 (ParallelSelfAttention splits a full-head in_proj, LayerNorm only).
// An MoE block keeps its MoE whole on every tp rank (the plain block's own layer): its
// input, after attention's all-reduce, is the same on each, so each computes it alike.
class ParallelBlock : public rg::nn::Module {
 public:
  ParallelBlock(const Block& plain, par::Communicator& tp)
      : ln1(plain.d_model), ln2(plain.d_model), attn(plain.attn, tp, /*causal=*/true),
        moe(plain.moe), recompute(plain.recompute), aux_scale(plain.aux_scale) {
    ln1.load_state_dict(plain.ln1->state_dict());
    ln2.load_state_dict(plain.ln2->state_dict());
    register_module("ln1", ln1);
    register_module("attn", attn);
    register_module("ln2", ln2);
    if (moe) {
      register_module("moe", moe);
    } else {
      fc = std::make_shared<par::ColumnParallelLinear>(*plain.fc, tp);
      proj = std::make_shared<par::RowParallelLinear>(*plain.proj, tp,
                                                      par::RowParallelOptions{.input_is_parallel = true});
      register_module("fc", fc);
      register_module("proj", proj);
    }
  }
  rg::Tensor forward(const rg::Tensor& x) override {
    return block_forward(
        recompute, x, [this](const rg::Tensor& in) { return attn(ln1(in)); },
        [this](const rg::Tensor& y) {
          rg::Tensor z = ln2(y);
          return moe ? moe_forward(*moe, z, aux_scale) : (*proj)(rg::gelu((*fc)(z)));
        });
  }

  rg::nn::LayerNorm ln1, ln2;
  par::ParallelSelfAttention attn;
  std::shared_ptr<par::ColumnParallelLinear> fc;  // the split MLP, or
  std::shared_ptr<rg::nn::MoE> moe;               // the whole MoE
  std::shared_ptr<par::RowParallelLinear> proj;
  std::string recompute;     // GPTConfig::recompute
  const double* aux_scale;   // the GPT's (Block::aux_scale)
};

// Pipeline stage s of p over a tp group, built from the whole GPT: blocks
// [s·L/p, (s+1)·L/p); the embeddings (vocabulary split over tp) on the first stage; the
// final norm and the LM head on the last, which reads this rank's vocabulary rows of the
// token embedding (tied: with p > 1 the last stage keeps its own copy, and the two
// copies' gradients are summed every step, as Megatron does). Parameter names are the GPT's.
class Stage : public rg::nn::Module {
 public:
  Stage(GPT& gpt, int s, int p, par::Communicator& tp) : first_(s == 0), last_(s == p - 1), gpt_(gpt), tp_(tp) {
    if (first_ || last_) {
      wte = std::make_unique<par::VocabParallelEmbedding>(gpt.wte, tp);
      register_module("wte", *wte);
    }
    if (first_) {
      wpe = std::make_unique<rg::nn::Embedding>(gpt.wpe->num_embeddings, gpt.wpe->embedding_dim);
      wpe->load_state_dict(gpt.wpe->state_dict());
      register_module("wpe", *wpe);
    }
    // Blocks named by their index in the whole model, so that names match the GPT's.
    blocks_ = register_module("blocks", std::make_shared<rg::nn::Sequential>());
    const int64_t layers = static_cast<int64_t>(gpt.blocks->size());
    for (int64_t b = s * layers / p; b < (s + 1) * layers / p; ++b)
      blocks_->add(std::to_string(b), std::make_shared<ParallelBlock>(
                                          static_cast<Block&>((*gpt.blocks)[static_cast<size_t>(b)]), tp));
    if (last_) {
      ln_f = std::make_unique<rg::nn::LayerNorm>(gpt.wte.embedding_dim);
      ln_f->load_state_dict(gpt.ln_f->state_dict());
      register_module("ln_f", *ln_f);
    }
  }
  // first: tokens -> hidden; last: -> this rank's slice of the vocabulary's logits.
  rg::Tensor forward(const rg::Tensor& x) override {
    rg::Tensor h = first_ ? (*wte)(x) + (*wpe)(gpt_.positions.narrow(1, 0, x.size(1))) : x;
    h = (*blocks_)(h);
    if (!last_) return h;
    return rg::matmul(par::copy_to_tp_region((*ln_f)(h), tp_), wte->weight.t());
  }
  bool first() const { return first_; }
  bool last() const { return last_; }

  std::unique_ptr<par::VocabParallelEmbedding> wte;
  std::unique_ptr<rg::nn::Embedding> wpe;
  std::unique_ptr<rg::nn::LayerNorm> ln_f;

 private:
  bool first_, last_;
  GPT& gpt_;  // its positions (context_parallel shards them)
  par::Communicator& tp_;
  std::shared_ptr<rg::nn::Sequential> blocks_;
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
