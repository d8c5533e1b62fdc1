// gpt/trainer.h — the GPT under one data-parallel strategy (ddp, zero1, zero2, fsdp) or
// the 4D layout (--tp/--pp): the forward to call, the backward of a step (gradient
// accumulation, autocast, GradScaler), clipping, the optimizer's step, and the whole state
// to save and load — the only places the strategies differ. Used by examples/gpt.cpp.
#pragma once

#include <ringgrad/parallel/ddp.h>
#include <ringgrad/parallel/expert_parallel.h>
#include <ringgrad/parallel/fsdp.h>
#include <ringgrad/parallel/grad_scaler_sync.h>
#include <ringgrad/parallel/pipeline.h>
#include <ringgrad/parallel/tensor_parallel.h>
#include <ringgrad/parallel/zero.h>
#include <ringgrad/ringgrad.h>

#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../precision.h"
#include "model.h"
#include "parallel.h"
#include "stage_state.h"

namespace gpt {

// The model under one strategy: the forward to call, the optimizer to step, and
// how to clip, save and load — the only places the four differ.
struct Trainer {
  std::string strategy;
  GPT& model;
  par::Communicator& comm;  // every rank: the gradient is averaged over dp and cp
  std::unique_ptr<par::DistributedDataParallel> ddp;
  std::unique_ptr<par::ZeroRedundancyOptimizer> zero;
  std::unique_ptr<par::FullyShardedDataParallel> fsdp;
  std::unique_ptr<rg::optim::Optimizer> adamw;  // ddp, fsdp, 4D (ZeRO has its own)
  // 4D (--tp or --pp above 1): this rank's stage, its pipeline, and per parameter whether
  // this rank counts it in the gradient norm (once per whole model).
  std::unique_ptr<Stage> stage;
  std::unique_ptr<par::Pipeline> pipeline;
  std::vector<std::pair<rg::Tensor, bool>> counted;
  std::vector<rg::Tensor> counted_experts;  // --ep: this rank's experts, counted on tp rank 0
  const Groups* groups = nullptr;
  // --precision: the autocast region of forward and loss; fp16's GradScaler (disabled
  // otherwise). Where each rank unscales only its own gradients (zero1, zero2, fsdp) the
  // ranks agree on skipping a step: an all-reduce of the inf/NaN flag.
  Precision precision;
  rg::optim::GradScaler scaler;
  std::unique_ptr<ZeroStep> zero_step;  // fp16 under ZeRO: its step, as an Optimizer
  // --grad-accum: a step's rows on this rank are taken in this many micro-batches.
  int64_t accumulation = 1;
  int64_t pipeline_micro_batches = 1;  // --micro-batches under --pp: each one's loss is 1/m
  int virtual_stages = 1;              // --schedule interleaved: chunks a rank

  Trainer(const std::string& s, GPT& m, par::Communicator& c, double lr, const Groups& g,
          par::PipelineOptions pipe, const Precision& p, par::DDPCommHook comm_hook, int64_t accum,
          int virtual_stages = 1, StageBlocks* cut = nullptr)
      : strategy(s), model(m), comm(c), precision(p),
        scaler(rg::optim::GradScalerOptions{.enabled = p.scaled(), .agree = agreement(s, c, g)}),
        accumulation(accum), virtual_stages(virtual_stages) {
    auto make = [lr](std::vector<rg::Tensor> p) -> std::unique_ptr<rg::optim::Optimizer> {
      return std::make_unique<rg::optim::AdamW>(p, rg::optim::AdamOptions{.lr = lr, .weight_decay = 0.01});
    };
    if (g.tp.size() > 1 || g.pp_size > 1) {
      RG_CHECK(s == "ddp" || s == "zero1", "gpt", "expected --strategy ddp or zero1 with --tp or --pp above 1, got ", s);
      RG_CHECK(cut, "gpt", "expected the stage's blocks cut as the GPT was made (StageBlocks) under --tp or --pp");
      groups = &g;
      stage = std::make_unique<Stage>(m, *cut);
      stage->autocast_dtype = p.dtype(), stage->autocast = p.mixed();
      pipeline = std::make_unique<par::Pipeline>(stage->chunks(), g.pp, pipe);
      pipeline_micro_batches = pipe.micro_batches;
      // zero1 (Megatron's distributed optimizer, by whole tensors): each of the (dp, cp)
      // ranks keeps the AdamW state of its share of the stage's parameters, steps them from
      // the averaged gradients and broadcasts them back.
      if (s == "zero1")
        zero = std::make_unique<par::ZeroRedundancyOptimizer>(stage->parameters(), c, make, par::ZeroOptions{});
      else
        adamw = make(stage->parameters());
      if (zero && p.scaled()) zero_step = std::make_unique<ZeroStep>(*zero);
      // Counted once: a slice of a split parameter on every tp rank; a parameter every tp
      // rank holds whole on tp rank 0; the tied embedding on the first stage only.
      std::map<std::string, int64_t> whole;
      for (auto& [name, p] : m.named_parameters()) whole[name] = p.numel();
      // (Under --ep an expert is counted apart: its rank's share of the ep group's experts.)
      for (auto& [name, p] : stage->named_parameters()) {
        const bool split = p.numel() != whole.at(name);
        const bool tied_copy = name == "wte.weight" && !stage->first();
        const bool count = !tied_copy && (split || g.tp_rank == 0);
        if (g.ep && is_expert(name)) {
          if (count) counted_experts.push_back(p);
        } else {
          counted.emplace_back(p, count);
        }
      }
      return;
    }
    // Under expert parallelism each rank's experts are its own, averaged by reduce_expert_grads.
    groups = &g;
    par::DDPOptions ddp_options{.comm_hook = comm_hook};
    if (g.ep)
      for (const auto& [name, p] : m.named_parameters())
        if (is_expert(name)) ddp_options.ignored_parameters.push_back(name);
    if (s == "ddp" || s == "zero1") ddp = std::make_unique<par::DistributedDataParallel>(m, c, ddp_options);
    if (s == "ddp") adamw = make(m.parameters());
    if (s == "zero1" || s == "zero2")
      zero = std::make_unique<par::ZeroRedundancyOptimizer>(m.parameters(), c, make,
                                                            par::ZeroOptions{.stage = s == "zero1" ? 1 : 2});
    if (zero && p.scaled()) zero_step = std::make_unique<ZeroStep>(*zero);
    if (s == "fsdp") {
      fsdp = std::make_unique<par::FullyShardedDataParallel>(
          m, c, par::FSDPOptions{.auto_wrap_policy = par::wrap_modules_of_type<Block>()});
      adamw = make(fsdp->parameters());
    }
  }

  // How the ranks agree on skipping an fp16 step. Under plain DDP every rank unscales the
  // same averaged gradients: nothing to agree. Where ranks hold different gradients (ZeRO's
  // and FSDP's shards, experts, a stage's or a tp slice's parameters) any rank's inf or NaN
  // skips the step everywhere: a Max over the data group, then over (pp, tp).
  static rg::optim::GradScalerOptions::Agree agreement(const std::string& s, par::Communicator& c, const Groups& g) {
    const bool pipelined = g.tp.size() > 1 || g.pp_size > 1;
    if (s == "ddp" && !g.ep && !pipelined) return {};
    if (!pipelined) return par::found_inf_all_reduce(c);
    return [data = par::found_inf_all_reduce(c), stages = par::found_inf_all_reduce(g.pp_tp)](bool found) {
      return stages(data(found));
    };
  }
  static bool is_expert(const std::string& name) { return name.find(".moe.experts.") != std::string::npos; }
  // This rank's experts' parameters (every MoE block's).
  std::vector<rg::Tensor> expert_parameters() const {
    std::vector<rg::Tensor> out;  // (a pipeline stage's: its blocks' only)
    for (const auto& [name, p] : (pipeline ? stage->named_parameters() : model.named_parameters()))
      if (is_expert(name)) out.push_back(p);
    return out;
  }
  rg::optim::Optimizer& optimizer() { return zero ? zero->local_optimizer() : *adamw; }
  // The parameters this rank holds between steps: FSDP's shards, a stage's slices, or all.
  std::vector<rg::Tensor> held_parameters() {
    return fsdp ? fsdp->parameters() : pipeline ? stage->parameters() : model.parameters();
  }
  // Bytes this rank holds of parameters, of gradients (after backward), of optimizer state.
  std::array<int64_t, 3> held_bytes() {
    std::array<int64_t, 3> bytes{};
    for (const rg::Tensor& p : held_parameters()) {
      bytes[0] += int64_t(p.nbytes());
      if (p.grad().defined()) bytes[1] += int64_t(p.grad().nbytes());
    }
    std::map<std::string, std::string> meta;
    for (const auto& [name, t] : optimizer().state_dict(&meta)) bytes[2] += int64_t(t.nbytes());
    return bytes;
  }
  rg::Tensor forward(const rg::Tensor& tokens) {
    return fsdp ? (*fsdp)(tokens) : ddp ? (*ddp)(tokens) : model(tokens);
  }
  rg::Tensor loss_of(const rg::Tensor& tokens, const rg::Tensor& targets) {
    rg::Tensor logits = forward(tokens);
    return rg::nn::cross_entropy(logits.reshape({-1, model.wte.num_embeddings}), targets.reshape({-1}));
  }
  par::Pipeline::LossFn vocab_parallel_loss() {
    return [this](const rg::Tensor& logits, const rg::Tensor& targets) {
      return par::vocab_parallel_cross_entropy(logits, targets, groups->tp);
    };
  }
  // Micro-batch k of the `accumulation` this rank's rows are cut into.
  rg::Tensor micro(const rg::Tensor& rows, int64_t k) const {
    const int64_t n = rows.size(0) / accumulation;
    return rows.narrow(0, k * n, n);
  }
  // Forward and backward of this rank's part of a batch; its mean loss. Under
  // --grad-accum N, N micro-batches, each loss divided by N so that the gradients add up
  // to the whole batch's; only the last backward communicates (the strategy's no_sync()).
  double train_step(const rg::Tensor& tokens, const rg::Tensor& targets) {
    double sum = 0;
    const double share = 1.0 / double(accumulation);
    // Under autocast, one 16-bit copy of each weight for the step's micro-batches (a
    // pipeline's in flight, the accumulated ones), not one each (core/autocast.h); not under
    // FSDP, whose gathered units it would keep gathered.
    std::optional<rg::autocast_weight_cache> weight_copies;
    if (precision.mixed() && !fsdp) weight_copies.emplace();
    for (int64_t k = 0; k < accumulation; ++k) {
      const bool quiet = k + 1 < accumulation;
      if (pipeline) {  // gradients accumulate in the stage; the all-reduces come after the last
        // (The stage's chunks run under autocast; the loss, scaled for fp16, as a plain step's.)
        model.aux_scale = share / double(pipeline_micro_batches) * scaler.get_scale();
        sum += pipeline->forward_backward(micro(tokens, k), micro(targets, k),
                                          [this, share](const rg::Tensor& logits, const rg::Tensor& t) {
                                            rg::autocast amp(rg::kCPU, precision.dtype(), precision.mixed());
                                            return scaler.scale(vocab_parallel_loss()(logits, t) * share);
                                          }) /
               scaler.get_scale();  // (a power of two: exact)
        continue;
      }
      std::optional<par::DistributedDataParallel::NoSync> ddp_quiet;
      std::optional<par::ZeroRedundancyOptimizer::NoSync> zero_quiet;
      std::optional<par::FullyShardedDataParallel::NoSync> fsdp_quiet;
      if (quiet && ddp) ddp_quiet.emplace(*ddp);
      if (quiet && zero && !ddp) zero_quiet.emplace(*zero);  // zero2 (zero1 is DDP's)
      if (quiet && fsdp) fsdp_quiet.emplace(*fsdp);
      rg::Tensor loss;
      // The experts' load-balance losses join backward scaled as the loss is (gpt/model.h).
      model.aux_scale = share * scaler.get_scale();
      {
        rg::autocast amp(rg::kCPU, precision.dtype(), precision.mixed());  // off for fp32
        loss = loss_of(micro(tokens, k), micro(targets, k));
      }
      scaler.scale(loss * share).backward();  // fp32/bf16: (loss / N).backward()
      sum += loss.item() * share;
    }
    weight_copies.reset();  // before the parameters change
    if (!pipeline) {
      if (groups->ep) par::reduce_expert_grads(expert_parameters(), groups->expert_dp, comm.size());
      return sum;
    }
    // Sequence parallelism: the norms', row biases' and positions' gradients are each tp
    // rank's positions' part: summed over the tp group, in one all-reduce (Megatron's).
    sum_over_tp(stage->sequence_parallel_parameters());
    // The tied embedding's two copies (first and last stage): their gradients summed.
    if (groups->pp_size > 1) {
      rg::Tensor g = stage->wte ? stage->wte->weight.grad()
                                : rg::Tensor();
      rg::Tensor total = g.defined() ? g : rg::zeros({model.wte.num_embeddings / groups->tp.size(), model.wte.embedding_dim});
      if (stage->wte && !g.defined()) stage->wte->weight.set_grad(total);
      groups->pp.all_reduce(total, par::Reduce::Sum);
    }
    if (!groups->ep) {
      par::all_reduce_grads(stage->parameters(), comm, par::Reduce::Avg);  // the mean over every token
      return sum;
    }
    std::vector<rg::Tensor> dense;  // --ep: the experts are averaged over their own replicas
    for (const auto& [name, p] : stage->named_parameters())
      if (!is_expert(name)) dense.push_back(p);
    par::all_reduce_grads(dense, comm, par::Reduce::Avg);
    par::reduce_expert_grads(expert_parameters(), groups->expert_dp, comm.size());
    return sum;
  }
  // The gradients of `params` summed over the tp group, flattened into one buffer.
  void sum_over_tp(const std::vector<rg::Tensor>& params) {
    if (params.empty()) return;
    rg::NoGradGuard no_grad;
    std::vector<rg::Tensor> flat;
    for (const rg::Tensor& p : params)
      flat.push_back(p.grad().defined() ? p.grad().reshape({-1}) : rg::zeros({p.numel()}, {.dtype = p.dtype()}));
    rg::Tensor buffer = rg::cat(flat, 0);
    groups->tp.all_reduce(buffer, par::Reduce::Sum);
    int64_t at = 0;
    for (const rg::Tensor& p : params) {
      rg::Tensor g = buffer.narrow(0, at, p.numel()).reshape(p.shape());
      rg::Tensor held = p.grad(), param = p;
      if (held.defined()) held.copy_(g); else param.set_grad(g.clone());
      at += p.numel();
    }
  }
  // The mean loss over this rank's rows, in the training step's micro-batches.
  double eval_step(const rg::Tensor& tokens, const rg::Tensor& targets) {
    double sum = 0;
    for (int64_t k = 0; k < accumulation; ++k) {
      if (pipeline) {
        sum += pipeline->evaluate(micro(tokens, k), micro(targets, k), [this](const rg::Tensor& logits, const rg::Tensor& t) {
          rg::autocast amp(rg::kCPU, precision.dtype(), precision.mixed());
          return vocab_parallel_loss()(logits, t);
        });
        continue;
      }
      rg::NoGradGuard no_grad;
      rg::autocast amp(rg::kCPU, precision.dtype(), precision.mixed());
      sum += loss_of(micro(tokens, k), micro(targets, k)).item();
    }
    return sum / double(accumulation);
  }
  double clip(double max_norm) {
    scaler.unscale_(zero_step ? *zero_step : zero ? zero->local_optimizer() : *adamw);  // fp16 only
    if (pipeline) {  // Σ g² over one whole model: each parameter counted once, then summed
      rg::NoGradGuard no_grad;
      // zero1: each parameter by its owner only (the one that unscaled it), summed over (dp, cp).
      std::set<const void*> owned;
      if (zero)
        for (const rg::Tensor& p : zero->local_parameters()) owned.insert(p.impl_ptr().get());
      std::vector<rg::Tensor> mine;
      for (auto& [p, count] : counted)
        if (count && (!zero || owned.count(p.impl_ptr().get()))) mine.push_back(p);
      double experts = 0;  // --ep: every expert of the stage once, over the ep group
      if (groups->ep) {
        rg::Tensor e = rg::full({1}, rg::optim::grad_norm_squared(counted_experts), {.dtype = rg::kFloat64});
        groups->ep->all_reduce(e, par::Reduce::Sum);
        experts = e.item();
      }
      rg::Tensor total = rg::full({1}, rg::optim::grad_norm_squared(mine) + experts, {.dtype = rg::kFloat64});
      if (zero) comm.all_reduce(total, par::Reduce::Sum);
      groups->pp_tp.all_reduce(total, par::Reduce::Sum);
      const double norm = std::sqrt(total.item());
      rg::optim::scale_grads_to_norm(zero ? zero->local_parameters() : stage->parameters(), norm, max_norm);
      return norm;
    }
    if (fsdp) return fsdp->clip_grad_norm_(max_norm);
    if (zero) return zero->clip_grad_norm_(max_norm);
    if (groups->ep) {  // Σ g²: the dense parameters here, every expert once over the ep group
      rg::NoGradGuard no_grad;
      const std::vector<rg::Tensor> experts = expert_parameters();
      std::vector<rg::Tensor> dense;
      for (const auto& [name, p] : model.named_parameters())
        if (!is_expert(name)) dense.push_back(p);
      rg::Tensor expert_sq = rg::full({1}, rg::optim::grad_norm_squared(experts), {.dtype = rg::kFloat64});
      groups->ep->all_reduce(expert_sq, par::Reduce::Sum);
      const double norm = std::sqrt(rg::optim::grad_norm_squared(dense) + expert_sq.item());
      rg::optim::scale_grads_to_norm(model.parameters(), norm, max_norm);
      return norm;
    }
    return rg::optim::clip_grad_norm(model.parameters(), max_norm);
  }
  // fp32/bf16 (scaler disabled): zero->step() or adamw->step(); fp16: skipped on inf/NaN.
  void step() {
    if (zero_step) scaler.step(*zero_step);
    else if (zero) zero->step();
    else scaler.step(*adamw);
    scaler.update();
  }
  void zero_grad() { zero ? zero->zero_grad() : adamw->zero_grad(); }

  // The whole model and optimizer state, on rank 0, in the form an unsharded model
  // and a plain AdamW over model.parameters() write (collectives: every rank calls).
  rg::NamedTensors model_state() {
    if (pipeline) return whole_from_stages();
    if (fsdp) return fsdp->full_state_dict(0);
    if (groups->ep) {  // every rank takes part in the gathering; rank 0 keeps the result
      rg::NamedTensors whole = with_every_expert(model.state_dict());
      return comm.rank() == 0 ? whole : rg::NamedTensors{};
    }
    return comm.rank() == 0 ? model.state_dict() : rg::NamedTensors{};
  }
  // --tp/--pp: the whole model's state on pp rank 0 of the first replica (world rank 0
  // samples from it and writes it), gpt/stage_state.h: collectives over each replica's
  // (pp, tp) ranks, and under --ep over every ep group (its ranks hold the other experts).
  rg::NamedTensors whole_from_stages() {
    if (comm.rank() != 0 && !groups->ep) return {};  // another replica, holding the same model
    rg::NamedTensors mine = par::tp_full_state_dict(*stage);
    if (groups->ep) mine = with_every_expert(mine);
    return comm.rank() == 0 ? whole_model(mine, model, *groups, virtual_stages) : rg::NamedTensors{};
  }
  // A model's state (this rank's, or its stage's, tp slices put together) with each MoE
  // block's experts gathered from the ranks of its ep group (a collective over every ep
  // group): the whole model's names and order.
  rg::NamedTensors with_every_expert(const rg::NamedTensors& state) {
    rg::NamedTensors whole;
    std::string block;  // the MoE block being replaced: "blocks.3.moe."
    for (const auto& [name, t] : state) {
      const size_t at = name.find(".moe.");
      if (at == std::string::npos) {
        whole.emplace_back(name, t);
        continue;
      }
      const std::string prefix = name.substr(0, at + 5);
      if (prefix == block) continue;  // already put in whole
      block = prefix;
      const int64_t b = std::stoll(name.substr(7, at - 7));  // "blocks.<b>.moe."
      auto& moe = static_cast<par::ExpertParallelMoE&>(*dynamic_cast<Block&>((*model.blocks)[size_t(b)]).moe);
      for (const auto& [inner, value] : moe.full_state_dict()) whole.emplace_back(prefix + inner, value);
    }
    return whole;
  }
  rg::NamedTensors optimizer_state(std::map<std::string, std::string>* meta) {
    if (pipeline) {  // the first replica's (pp, tp) ranks put it together, as whole_from_stages
      std::map<std::string, std::string> local_meta;  // zero1: first gathered over (dp, cp)
      const rg::NamedTensors local = zero ? zero->consolidate_state_dict(&local_meta, 0) : adamw->state_dict(&local_meta);
      std::map<std::string, rg::NamedTensors> held;  // made whole over tp (--ep: on every replica)
      if (comm.rank() == 0 || groups->ep) held = whole_buffers(*stage, local);
      if (groups->ep) held = with_every_experts_buffers(std::move(held), stage->named_parameters());
      return comm.rank() == 0 ? whole_optimizer_state(held, model, *groups, local_meta, meta, virtual_stages)
                              : rg::NamedTensors{};
    }
    if (zero) return zero->consolidate_state_dict(meta, 0);
    if (fsdp) return fsdp->full_optim_state_dict(*adamw, meta, 0);
    if (groups->ep) {  // every rank takes part in the gathering; rank 0 keeps the result
      rg::NamedTensors whole = with_every_experts_state(meta);
      return comm.rank() == 0 ? whole : rg::NamedTensors{};
    }
    return comm.rank() == 0 ? adamw->state_dict(meta) : rg::NamedTensors{};
  }
  // Under --ep: AdamW's state in the form a plain AdamW over the whole model writes
  // ("state.0.<index in the whole model>.<buffer>"), each expert's from the rank that holds
  // it (a collective over every ep group).
  rg::NamedTensors with_every_experts_state(std::map<std::string, std::string>* meta) {
    std::map<std::string, std::string> local_meta;
    const rg::NamedTensors local = adamw->state_dict(&local_meta);
    const rg::NamedTensors params = model.named_parameters();
    std::map<std::string, rg::NamedTensors> held;  // this rank's state, by its parameter's name
    for (const auto& [key, t] : local) {
      const auto k = rg::optim::parse_state_key(key);
      held[params.at(k->index).first].emplace_back(k->name, t);
    }
    held = with_every_experts_buffers(std::move(held), params);
    const std::vector<std::string> whole = whole_parameter_names();
    rg::NamedTensors out;
    if (!held.empty())
      for (size_t j = 0; j < whole.size(); ++j)
        for (const auto& [buffer, t] : held.at(whole[j]))
          out.emplace_back("state.0." + std::to_string(j) + "." + buffer, t);
    if (meta) {
      *meta = local_meta;
      (*meta)["group.0.size"] = std::to_string(whole.size());
    }
    return out;
  }
  // Under --ep: `held` (optimizer buffers by their parameter's name, for `params`, a rank's
  // parameters) with every expert of the MoE blocks among them, each expert's from the ep
  // rank that holds it (a collective over every ep group). Nothing before the first step.
  std::map<std::string, rg::NamedTensors> with_every_experts_buffers(std::map<std::string, rg::NamedTensors> held,
                                                                      const rg::NamedTensors& params) {
    if (held.empty()) return held;
    const int64_t per_rank = int64_t(model.moes.front()->experts.size());
    const int me = groups->ep->rank();
    for (const auto& [name, p] : every_expert_named(params, experts_per_block(model))) {
      if (!is_expert(name)) continue;
      const size_t at = name.find(".moe.experts.") + 13, dot = name.find('.', at);
      const int64_t e = std::stoll(name.substr(at, dot - at));
      const int owner = int(e / per_rank);
      const std::string like_name = name.substr(0, at) + std::to_string(me * per_rank) + name.substr(dot);
      rg::NamedTensors buffers;
      for (const auto& [buffer, like] : held.at(like_name)) {
        rg::Tensor t = owner == me ? held_buffer(held.at(name), buffer).clone() : rg::empty_like(like);
        groups->ep->broadcast(t, owner);
        buffers.emplace_back(buffer, t);
      }
      held[name] = std::move(buffers);
    }
    return held;
  }
  // The whole model's parameter names in its order (a plain AdamW's numbering): each MoE
  // block's experts 0..E−1 where this rank holds its share.
  std::vector<std::string> whole_parameter_names() const {
    std::vector<std::string> names;
    for (const auto& [name, p] : every_expert_named(model.named_parameters(), experts_per_block(model)))
      names.push_back(name);
    return names;
  }
  static rg::Tensor held_buffer(const rg::NamedTensors& buffers, const std::string& name) {
    for (const auto& [n, t] : buffers)
      if (n == name) return t;
    RG_CHECK(false, "gpt", "expected an optimizer buffer '", name, "'");
    return {};
  }
  // Every rank passes the whole states it read from the files.
  void load(const rg::NamedTensors& model_state, const rg::NamedTensors& optim_state,
            const std::map<std::string, std::string>& meta) {
    if (pipeline) {
      const auto [state, local_meta] = load_stage(*stage, model, model_state, optim_state, meta);
      return zero ? zero->load_consolidated_state_dict(state, local_meta) : adamw->load_state_dict(state, local_meta);
    }
    if (fsdp) {
      fsdp->load_full_state_dict(model_state);
      fsdp->load_full_optim_state_dict(*adamw, optim_state, meta);
      return;
    }
    if (groups->ep) {  // this rank's parameters and their state, renumbered as it holds them
      std::map<std::string, size_t> index_of;
      for (const auto& [name, p] : model.named_parameters()) index_of.emplace(name, index_of.size());
      rg::NamedTensors mine, state;
      std::map<size_t, size_t> local_of;  // the whole model's parameter index -> this rank's
      for (size_t j = 0; j < model_state.size(); ++j)
        if (index_of.count(model_state[j].first)) {
          mine.push_back(model_state[j]);
          local_of[j] = index_of.at(model_state[j].first);
        }
      for (const auto& [key, t] : optim_state) {
        const auto k = rg::optim::parse_state_key(key);
        RG_CHECK(k && k->group == 0, "gpt", "expected optimizer keys state.0.<index>.<buffer>, got '", key, "'");
        if (local_of.count(k->index))
          state.emplace_back("state.0." + std::to_string(local_of.at(k->index)) + "." + k->name, t);
      }
      std::map<std::string, std::string> local_meta = meta;
      local_meta["group.0.size"] = std::to_string(index_of.size());
      model.load_state_dict(mine);
      adamw->load_state_dict(state, local_meta);
      return;
    }
    model.load_state_dict(model_state);
    if (zero)
      zero->load_consolidated_state_dict(optim_state, meta);
    else
      adamw->load_state_dict(optim_state, meta);
  }
};

}  // namespace gpt
