// gpt/model.h — the GPT of examples/gpt.cpp: GPT-2's shape, small, and its Llama options.
//
//   GPTConfig config{.seq = 128, .layers = 4, .d_model = 128, .heads = 4};
//   GPT model(config);
//   rg::Tensor logits = model(tokens);        // tokens (B, T) int64 -> logits (B, T, 256)
//
// Bytes as tokens (a vocabulary of 256, so any text works), token and learned position
// embeddings, pre-norm blocks of causal self-attention and a GELU MLP, a final norm, and
// an LM head tied to the token embedding. The options swap in Llama's pieces, each on
// its own: RMSNorm, rotary q/k at the tokens' global positions (no wpe), the SwiGLU MLP,
// grouped-query attention. With experts > 0 the MLP of every moe_every-th block is a
// Mixture of Experts (nn/moe.h), each sequence of a batch one routing group (its own
// capacity and load statistics), so that any data-parallel layout routes as one process
// does; given an ep group, its experts are split over it (parallel/expert_parallel.h).
// Nothing else here knows about parallelism: context parallelism shards `positions` with the
// tokens and reroutes attention (parallel/context_parallel.h); gpt/parallel.h builds the
// tensor- and pipeline-parallel pieces from this model.
#pragma once

#include <ringgrad/ringgrad.h>

#include <ringgrad/nn/checkpoint.h>
#include <ringgrad/parallel/expert_parallel.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpt {

namespace rg = ringgrad;


struct GPTConfig {
  int64_t seq = 128, layers = 4, d_model = 128, heads = 4;
  int64_t vocab = 256;  // bytes (training reads bytes; another vocabulary only for --plan)
  // The modern (Llama's) blocks, each an option; the defaults are GPT-2's.
  std::string norm = "layernorm";  // or rmsnorm (nn::RMSNorm, torch's default eps)
  std::string pos = "learned";     // or rope: rotary embeddings on q and k, no wpe
  std::string mlp = "gelu";        // or swiglu: w2(silu(w1 x) · w3 x), hidden ≈ 8/3 d_model
  int64_t ff = 0;                  // SwiGLU's hidden width (0: Llama's rule, below)
  int64_t kv_heads = 0;            // grouped-query attention: K/V heads (0: --heads)
  // Mixture of Experts (0: a dense MLP in every block): E experts of the block's MLP shape,
  // k per token, S shared; in blocks moe_every−1, 2·moe_every−1, … (2: every other block).
  int64_t experts = 0, experts_per_token = 2, shared_experts = 0, moe_every = 1;
  double capacity_factor = 0.0, aux_loss_coef = 0.01;  // 0: dropless
  bool moe_block(int64_t index) const { return experts > 0 && index % moe_every == moe_every - 1; }
  rg::nn::MoEOptions moe_options() const {
    return {.num_experts = experts, .top_k = experts_per_token, .hidden = hidden(),
            .mlp = mlp == "swiglu" ? rg::nn::ExpertMLP::SwiGLU : rg::nn::ExpertMLP::GELU,
            .shared_experts = shared_experts, .capacity_factor = capacity_factor,
            .aux_loss_coef = aux_loss_coef};
  }
  // What each block keeps for backward (activation recomputation, nn/checkpoint.h):
  //   none       everything its ops save: about 16·B·T·E numbers a block. The fused attention
  //              already recomputes its T×T scores in backward instead of keeping them
  //              (Megatron's "selective recomputation" of the core attention, built in).
  //   selective  the MLP half recomputed in backward from its input: the hidden layer before
  //              and after GELU and the second norm's output (9·B·T·E) are not kept, for one
  //              more pass of the MLP's two GEMMs; attention's tensors, whose recomputation
  //              costs O(T²), are kept (7·B·T·E).
  //   full       the whole block recomputed from its input: one B·T·E tensor a block kept,
  //              for one more forward of every block (about a third more compute).
  std::string recompute = "none";
  // The MLP's hidden width: GELU's 4·d_model, SwiGLU's --ff or Llama's 2/3 of 4·d_model
  // rounded up to a multiple of 8.
  int64_t hidden() const {
    if (mlp != "swiglu") return 4 * d_model;
    return ff > 0 ? ff : (8 * d_model / 3 + 7) / 8 * 8;
  }
  bool gpt2() const {
    return norm == "layernorm" && pos == "learned" && mlp == "gelu" && (kv_heads == 0 || kv_heads == heads);
  }
};

// A pre-norm block's forward, y = x + attention_half(x), then y + mlp_half(y), with what it
// keeps for backward chosen by `recompute` (GPTConfig::recompute). Block and the
// tensor-parallel ParallelBlock (gpt/parallel.h) both run through here.
template <typename Attention, typename MLP>
rg::Tensor block_forward(const std::string& recompute, const rg::Tensor& x, Attention attention_half,
                         MLP mlp_half) {
  // Copies of the halves (they capture only their module), kept by a checkpoint for backward.
  auto both = [attention_half, mlp_half](const rg::Tensor& in) {
    rg::Tensor y = in + attention_half(in);
    return y + mlp_half(y);
  };
  if (recompute == "full")
    return rg::nn::checkpoint([both](const std::vector<rg::Tensor>& in) { return both(in[0]); }, {x});
  if (recompute == "selective") {
    rg::Tensor y = x + attention_half(x);
    return rg::nn::checkpoint([mlp_half](const std::vector<rg::Tensor>& in) { return in[0] + mlp_half(in[0]); },
                              {y});
  }
  return both(x);
}

std::shared_ptr<rg::nn::Module> make_norm(const GPTConfig& c) {
  if (c.norm == "rmsnorm") return std::make_shared<rg::nn::RMSNorm>(c.d_model);
  return std::make_shared<rg::nn::LayerNorm>(c.d_model);
}

// A new norm of the same kind and width holding a copy of `norm`'s weights (a tensor- or
// pipeline-parallel stage's own, gpt/parallel.h).
inline std::shared_ptr<rg::nn::Module> copy_norm(const rg::nn::Module& norm) {
  std::shared_ptr<rg::nn::Module> copy;
  if (auto* rms = dynamic_cast<const rg::nn::RMSNorm*>(&norm)) {
    copy = std::make_shared<rg::nn::RMSNorm>(rms->normalized_shape, rms->eps);
  } else {
    const auto& ln = dynamic_cast<const rg::nn::LayerNorm&>(norm);
    copy = std::make_shared<rg::nn::LayerNorm>(ln.normalized_shape, ln.eps);
  }
  copy->load_state_dict(norm.state_dict());
  return copy;
}

// An MoE block's MLP half: each sequence (row of z) routed as a group of its own; the
// load-balance loss rides on the output into backward (nn::with_aux_loss), scaled as the
// trainer scales its loss, so it also reaches the router from inside a recomputed block or
// a pipeline stage. Through the layer's call(), so that traces show it.
inline rg::Tensor moe_forward(rg::nn::MoE& moe, const rg::Tensor& z, const double* aux_scale) {
  return moe.call(z, [&] {
    rg::nn::MoEOutput out = moe.forward_moe(z, z.size(0));
    return rg::nn::with_aux_loss(out.output, out.aux_loss * (aux_scale ? *aux_scale : 1.0));
  });
}

// x + attention(norm(x)), then x + mlp(norm(x)): the pre-norm block of GPT-2 (or, by the
// options, of Llama: RMSNorm, rotary q/k, grouped-query attention, SwiGLU).
class Block : public rg::nn::Module {
 public:
  // positions: the GPT's (1, seq) global positions, read at every forward (rope). index:
  // the block's place in the model (which blocks are MoE); ep: the group its experts are
  // split over (null: all here).
  // aux_scale: what the trainer multiplies its loss by, read at every forward (the MoE's
  // load-balance loss joins backward scaled alike; null: 1).
  Block(const GPTConfig& c, const rg::Tensor* positions, int64_t index = 0,
        rg::parallel::Communicator* ep = nullptr, const double* aux_scale = nullptr)
      : d_model(c.d_model), ln1(make_norm(c)), ln2(make_norm(c)),
        attn(c.d_model, c.heads, {.batch_first = true, .kv_heads = c.kv_heads, .rotary = c.pos == "rope"}),
        recompute(c.recompute), aux_scale(aux_scale), positions_(positions), rope_(c.pos == "rope") {
    if (c.moe_block(index)) {
      // Under ep this rank's experts only, made as the whole layer's would be.
      if (ep)
        moe = std::make_shared<rg::parallel::ExpertParallelMoE>(c.d_model, c.moe_options(), *ep);
      else
        moe = std::make_shared<rg::nn::MoE>(c.d_model, c.moe_options());
    } else if (c.mlp == "swiglu") {
      mlp = std::make_shared<rg::nn::SwiGLU>(c.d_model, c.hidden());
    } else {
      fc = std::make_shared<rg::nn::Linear>(c.d_model, 4 * c.d_model);
      proj = std::make_shared<rg::nn::Linear>(4 * c.d_model, c.d_model);
    }
    register_module("ln1", ln1);
    register_module("attn", attn);
    register_module("ln2", ln2);
    if (moe) {
      register_module("moe", moe);
    } else if (mlp) {
      register_module("mlp", mlp);
    } else {
      register_module("fc", fc);
      register_module("proj", proj);
    }
  }
  rg::Tensor forward(const rg::Tensor& x) override {
    auto attention_half = [this](const rg::Tensor& in) {
      rg::Tensor h = (*ln1)(in);
      rg::nn::AttentionMasks masks{.is_causal = true};
      if (rope_) masks.positions = positions_->narrow(1, 0, in.size(1));  // global positions
      return attn(h, h, h, masks);  // ring attention under context_parallel
    };
    auto mlp_half = [this](const rg::Tensor& y) {
      rg::Tensor z = (*ln2)(y);
      if (moe) return moe_forward(*moe, z, aux_scale);
      return mlp ? (*mlp)(z) : (*proj)(fc_gelu(z));
    };
    return block_forward(recompute, x, attention_half, mlp_half);
  }
  // gelu(fc(z)) as one op, GELU applied inside fc's GEMM (nn::linear_gelu); through fc's
  // call() so that traces show fc, and not where fc has hooks (they must see fc's output).
  rg::Tensor fc_gelu(const rg::Tensor& z) {
    if (fc->has_hooks()) return rg::gelu((*fc)(z));
    return fc->call(z, [&] { return rg::nn::linear_gelu(z, fc->weight, fc->bias); });
  }

  // The global positions rope reads (null without rope): the GPT's `positions`.
  const rg::Tensor* rope_positions() const { return rope_ ? positions_ : nullptr; }

  int64_t d_model;
  std::shared_ptr<rg::nn::Module> ln1, ln2;  // LayerNorm or RMSNorm
  rg::nn::MultiheadAttention attn;
  std::shared_ptr<rg::nn::Linear> fc, proj;  // the GELU MLP, or
  std::shared_ptr<rg::nn::SwiGLU> mlp;       // the SwiGLU one, or
  std::shared_ptr<rg::nn::MoE> moe;          // experts (an ExpertParallelMoE under ep)
  std::string recompute;                     // GPTConfig::recompute
  const double* aux_scale;                   // the GPT's aux_scale (null: 1)

 private:
  const rg::Tensor* positions_;
  bool rope_;
};

// Lets go of a module's numbers, keeping its parameters' names, shapes and dtypes (each
// becomes a broadcast view of one zero): what a rank of a 4D layout does with the parts of the
// whole model that its stage does not hold or has made its own copies of (gpt/parallel.h).
inline void release_numbers(rg::nn::Module& m) {
  for (auto& [name, t] : m.named_parameters())
    if (t.dim() > 0) t.set_data(rg::zeros({1}, {.dtype = t.dtype()}).expand(t.shape()));
}

class GPT : public rg::nn::Module {
 public:
  // What becomes of block i once it is made (its random numbers drawn, as one process draws
  // them): under --tp/--pp a rank cuts its stage's share and releases the rest
  // (gpt/parallel.h, StageBlocks), so that it never holds the whole model.
  using BlockHook = std::function<void(int64_t, Block&)>;
  // ep: the group the MoE blocks' experts are split over (null: every expert here).
  explicit GPT(const GPTConfig& c, rg::parallel::Communicator* ep = nullptr, const BlockHook& made = {})
      : wte(c.vocab, c.d_model) {
    register_module("wte", wte);
    if (c.pos != "rope") {  // learned positions; with rope the blocks rotate q and k instead
      wpe = std::make_unique<rg::nn::Embedding>(c.seq, c.d_model);
      register_module("wpe", *wpe);
    }
    blocks = register_module("blocks", std::make_shared<rg::nn::Sequential>());
    for (int64_t i = 0; i < c.layers; ++i) {
      auto block = std::make_shared<Block>(c, &positions, i, ep, &aux_scale);
      if (block->moe) moes.push_back(block->moe);
      if (made) made(i, *block);
      blocks->add(block);
    }
    ln_f = make_norm(c);
    register_module("ln_f", ln_f);
    rg::NoGradGuard no_grad;  // GPT-2's embedding init: small, as the head shares it
    rg::nn::init::normal_(wte.weight, 0.0, 0.02);
    if (wpe) rg::nn::init::normal_(wpe->weight, 0.0, 0.02);
    positions = rg::arange(c.seq, {.dtype = rg::kInt64}).unsqueeze(0);
  }

  // tokens (B, T) -> logits (B, T, 256). Token t sits at positions[0, t]: 0..T−1, or
  // under context parallelism this rank's global positions (the guard shards
  // `positions` with the tokens).
  rg::Tensor forward(const rg::Tensor& tokens) override {
    rg::Tensor pos = positions.narrow(1, 0, tokens.size(1));
    rg::Tensor x = wpe ? wte(tokens) + (*wpe)(pos) : wte(tokens);
    x = (*ln_f)((*blocks)(x));
    return rg::matmul(x, wte.weight.t());  // the LM head, tied to the token embedding
  }

  // The last forward's load over the MoE blocks: the mean of each block's busiest expert's
  // rows over its mean, and the fraction of choices dropped.
  std::pair<double, double> expert_load() const {
    double balance = 0, dropped = 0;
    for (const auto& m : moes)
      balance += m->stats().max_over_mean(), dropped += m->stats().dropped_fraction();
    const double n = std::max<double>(1.0, double(moes.size()));
    return {balance / n, dropped / n};
  }
  // Every parameter of the whole model, the experts other ranks hold included.
  int64_t all_parameters() const {
    return counting_experts([](const rg::nn::MoEOptions& o) { return o.num_experts; });
  }
  // The parameters one token's computation uses: all but the experts, and k experts of
  // every MoE block (the count FLOPs per token are made of).
  int64_t active_parameters() const {
    return counting_experts([](const rg::nn::MoEOptions& o) { return o.top_k; });
  }
  // This rank's parameters with each MoE block's experts counted as experts(its options)
  // experts' worth instead of the ones held here.
  template <typename F>
  int64_t counting_experts(F experts) const {
    int64_t total = num_parameters();
    for (const auto& m : moes) {
      const int64_t local = m->experts.num_parameters(), held = int64_t(m->experts.size());
      total += held ? local / held * experts(m->options()) - local : 0;
    }
    return total;
  }

  rg::nn::Embedding wte;
  std::unique_ptr<rg::nn::Embedding> wpe;  // null with --pos rope
  std::shared_ptr<rg::nn::Sequential> blocks;
  std::shared_ptr<rg::nn::Module> ln_f;  // LayerNorm or RMSNorm
  rg::Tensor positions;  // (1, seq) int64; not a parameter or buffer
  std::vector<std::shared_ptr<rg::nn::MoE>> moes;  // the MoE blocks' layers
  // What the trainer multiplies the next forward's loss by (1/micro-batches, the fp16
  // GradScaler's scale): the MoE blocks scale their load-balance losses alike.
  double aux_scale = 1.0;
};

}  // namespace gpt
