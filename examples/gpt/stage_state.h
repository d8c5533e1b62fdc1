// gpt/stage_state.h — the whole model's state from a (pp, tp) layout's stages, and back.
//
//   rg::NamedTensors model = gpt::whole_model(par::tp_full_state_dict(stage), gpt, groups, v);
//   rg::NamedTensors optim = gpt::whole_optimizer_state(gpt::whole_buffers(stage, adamw.state_dict(&m)),
//                                                       gpt, groups, m, &meta, v);  // on pp rank 0
//   auto [state, local_meta] = gpt::load_stage(stage, gpt, model, optim, meta);  // every rank
//   adamw.load_state_dict(state, local_meta);
//
// A checkpoint of the 4D layout is written in the one form every strategy writes: the plain
// GPT's state dict, and AdamW's state as a plain AdamW over the whole model's parameters
// writes it ("state.0.<index in the whole model>.<buffer>"). So it resumes under any other
// layout or strategy, and any of theirs resumes here. Each parameter lives on the pp rank
// whose stage holds it (Stage's cut), cut into slices over the tp group; its optimizer
// moments are cut the same way (they are shaped like it). Writing puts the slices together
// (tp_unshard, a collective over tp) and sends each whole tensor to pp rank 0; reading cuts
// each rank's slices from the whole (tp_shard). The tied embedding has a copy on the last
// stage whose gradient is summed with the first stage's every step: the two and their moments
// stay equal, so the first stage's is written, and both read it. Under --ep a stage's MoE
// blocks hold their ep rank's share of the experts: the trainer gathers every expert over the
// ep group first (gpt/trainer.h), and the whole model's names list them all
// (every_expert_named).
#pragma once

#include <ringgrad/parallel/tensor_parallel.h>
#include <ringgrad/ringgrad.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model.h"
#include "parallel.h"

namespace gpt {

// The pp rank whose stage holds the whole model's tensor `name`: stage s of S = v·p on rank
// s mod p (Stage::first_block), the embeddings on rank 0, the final norm on rank p − 1.
inline int stage_rank(const std::string& name, int64_t p, int64_t v, int64_t layers) {
  if (name.rfind("ln_f.", 0) == 0) return int(p - 1);
  if (name.rfind("blocks.", 0) != 0) return 0;
  const int64_t b = std::stoll(name.substr(7, name.find('.', 7) - 7));
  int64_t s = 0;
  while (Stage::first_block(s + 1, v * p, layers) <= b) ++s;
  return int(s % p);
}

// A rank's names (with a tensor of each one's shape) made the whole model's: where each MoE
// block lists the experts of this rank's share (global indices, "blocks.3.moe.experts.2.…"),
// all `experts` of them, each like the block's first expert here. Idempotent where every
// expert is held.
inline rg::NamedTensors every_expert_named(const rg::NamedTensors& local, int64_t experts) {
  rg::NamedTensors out;
  std::string block;  // the MoE block whose experts are written: "blocks.3.moe.experts."
  for (const auto& [name, t] : local) {
    const size_t at = name.find(".moe.experts.");
    if (at == std::string::npos) {
      out.emplace_back(name, t);
      continue;
    }
    const size_t from = at + 13, dot = name.find('.', from);
    if (name.substr(0, from) == block) continue;  // written with the block's first expert here
    block = name.substr(0, from);
    const std::string first = name.substr(0, dot + 1);  // "blocks.3.moe.experts.2."
    for (int64_t e = 0; e < experts; ++e)
      for (const auto& [other, q] : local)
        if (other.rfind(first, 0) == 0)
          out.emplace_back(block + std::to_string(e) + "." + other.substr(first.size()), q);
  }
  return out;
}

// Experts per MoE block (0 without experts).
inline int64_t experts_per_block(const GPT& gpt) {
  return gpt.moes.empty() ? 0 : gpt.moes.front()->options().num_experts;
}

// AdamW's moments are shaped like their parameter (cut over tp as it is); its step counter
// is a scalar, the same whole or cut.
inline bool shaped_like_parameter(const rg::Tensor& buffer) { return buffer.dim() > 0; }

// On pp rank 0: for each of the whole model's `names`, the tensors its holder lists under it
// in `held` (received into what `like(name)` makes, of the same count, shapes and dtypes); on
// the other ranks nothing. Collectives over pp: every rank passes the same names.
inline std::vector<rg::NamedTensors> from_stages(
    const std::vector<std::string>& names, const std::map<std::string, rg::NamedTensors>& held,
    const std::function<rg::NamedTensors(const std::string&)>& like, par::Communicator& pp,
    int64_t v, int64_t layers) {
  constexpr int kParts = 8;  // tensors a name may list: tag = kParts · its index + the part's
  std::vector<rg::NamedTensors> out;
  for (size_t j = 0; j < names.size(); ++j) {
    const std::string& name = names[j];
    const int from = stage_rank(name, pp.size(), v, layers);
    if (pp.rank() != from && pp.rank() != 0) continue;  // neither sends nor receives it
    auto it = held.find(name);
    if (pp.rank() == from) {
      RG_CHECK(it != held.end(), "gpt", "expected pipeline rank ", from, " to hold '", name, "'");
      RG_CHECK(it->second.size() <= size_t(kParts), "gpt", "expected at most ", kParts,
               " tensors under '", name, "', got ", it->second.size());
    }
    if (from == 0) {
      out.push_back(it->second);
      continue;
    }
    rg::NamedTensors parts = pp.rank() == from ? it->second : like(name);
    for (size_t i = 0; i < parts.size(); ++i) {
      const int tag = kParts * int(j) + int(i);
      if (pp.rank() == from)
        pp.send(parts[i].second.contiguous(), 0, tag);
      else
        pp.recv(parts[i].second, from, tag);
    }
    if (pp.rank() == 0) out.push_back(std::move(parts));
  }
  return out;
}

// The whole GPT's state dict, on pp rank 0, from each rank's stage state made whole over tp
// (par::tp_full_state_dict; under --ep with every expert of its MoE blocks): collectives
// over pp.
inline rg::NamedTensors whole_model(const rg::NamedTensors& stage_state, GPT& gpt, const Groups& g, int64_t v) {
  std::map<std::string, rg::NamedTensors> held;
  for (auto& [name, t] : stage_state) held[name] = {{"", t}};
  std::map<std::string, rg::Tensor> shapes;
  std::vector<std::string> names;
  for (const auto& [name, t] : every_expert_named(gpt.state_dict(), experts_per_block(gpt)))
    names.push_back(name), shapes[name] = t;
  auto like = [&](const std::string& name) {
    const rg::Tensor& t = shapes.at(name);
    return rg::NamedTensors{{"", rg::empty(t.shape(), {.dtype = t.dtype()})}};
  };
  const std::vector<rg::NamedTensors> got =
      from_stages(names, held, like, g.pp, v, int64_t(gpt.blocks->size()));
  rg::NamedTensors whole;
  for (size_t i = 0; i < got.size(); ++i) whole.emplace_back(names[i], got[i].front().second);
  return whole;
}

// This rank's optimizer state (a plain optimizer's over the stage's parameters), grouped by
// its parameters' names: each moment made whole over tp (one collective for all of them), the
// step counters as they are.
inline std::map<std::string, rg::NamedTensors> whole_buffers(Stage& stage, const rg::NamedTensors& state) {
  const rg::NamedTensors params = stage.named_parameters();
  rg::NamedTensors moments;  // named by their parameter, for tp_unshard
  std::vector<std::pair<std::string, rg::NamedTensors::value_type>>
      buffers;  // (parameter, (buffer, t))
  for (const auto& [key, t] : state) {
    const auto k = rg::optim::parse_state_key(key);
    RG_CHECK(k && k->group == 0 && k->index < params.size(), "gpt",
             "expected optimizer keys state.0.<index>.<buffer>, got '", key, "'");
    const std::string& name = params[k->index].first;
    if (shaped_like_parameter(t)) moments.emplace_back(name, t);
    buffers.push_back({name, {k->name, t}});
  }
  const rg::NamedTensors whole = par::tp_unshard(stage, moments);
  std::map<std::string, rg::NamedTensors> held;
  size_t next = 0;  // the moments in the order they were made whole
  for (auto& [name, buffer] : buffers)
    held[name].emplace_back(
        buffer.first, shaped_like_parameter(buffer.second) ? whole[next++].second : buffer.second);
  return held;
}

// AdamW's state as a plain AdamW over the whole GPT writes it, on pp rank 0, from `held`
// (whole_buffers of a plain AdamW's state over the stage's parameters; under --ep with every
// expert's) and `local_meta`, that AdamW's metadata; `meta` the whole one's (every rank).
// Nothing before the first step (no state yet, on any rank).
inline rg::NamedTensors whole_optimizer_state(const std::map<std::string, rg::NamedTensors>& held, GPT& gpt,
                                              const Groups& g,
                                              const std::map<std::string, std::string>& local_meta,
                                              std::map<std::string, std::string>* meta, int64_t v) {
  const rg::NamedTensors whole_params = every_expert_named(gpt.named_parameters(), experts_per_block(gpt));
  if (meta) {
    *meta = local_meta;
    (*meta)["group.0.size"] = std::to_string(whole_params.size());
  }
  if (held.empty()) return {};
  // What a parameter's state holds, from one held here: a buffer shaped like its parameter
  // takes the whole parameter's shape, the others (the step) their own.
  const rg::NamedTensors& template_buffers = held.begin()->second;
  std::map<std::string, rg::Tensor> shapes(whole_params.begin(), whole_params.end());
  auto like = [&](const std::string& name) {
    rg::NamedTensors out;
    for (const auto& [buffer, t] : template_buffers)
      out.emplace_back(buffer,
                       rg::empty(shaped_like_parameter(t) ? shapes.at(name).shape() : t.shape(),
                                 {.dtype = t.dtype()}));
    return out;
  };
  std::vector<std::string> names;
  for (const auto& [name, p] : whole_params) names.push_back(name);
  const std::vector<rg::NamedTensors> got =
      from_stages(names, held, like, g.pp, v, int64_t(gpt.blocks->size()));
  rg::NamedTensors out;
  for (size_t j = 0; j < got.size(); ++j)
    for (const auto& [buffer, t] : got[j])
      out.emplace_back("state.0." + std::to_string(j) + "." + buffer, t);
  return out;
}

// Loads the whole GPT's state into this rank's stage, each parameter cut to this rank's
// slices, and returns from a plain AdamW's state over it the state (and metadata) of a plain
// AdamW over the stage's parameters, each moment cut likewise: what its optimizer loads.
inline std::pair<rg::NamedTensors, std::map<std::string, std::string>> load_stage(
    Stage& stage, GPT& gpt, const rg::NamedTensors& model_state, const rg::NamedTensors& optim_state,
    const std::map<std::string, std::string>& meta) {
  std::map<std::string, size_t> local_index;
  const rg::NamedTensors params = stage.named_parameters();
  for (const auto& [name, p] : params) local_index.emplace(name, local_index.size());
  rg::NamedTensors mine;
  const rg::NamedTensors stage_state = stage.state_dict();
  std::map<std::string, rg::Tensor> wanted(stage_state.begin(), stage_state.end());
  for (const auto& [name, t] : model_state)
    if (wanted.count(name)) mine.emplace_back(name, t);
  par::tp_load_full_state_dict(stage, mine);  // (names what is missing)
  std::vector<std::string> whole_names;
  for (const auto& [name, p] : every_expert_named(gpt.named_parameters(), experts_per_block(gpt)))
    whole_names.push_back(name);
  rg::NamedTensors state;
  for (const auto& [key, t] : optim_state) {
    const auto k = rg::optim::parse_state_key(key);
    RG_CHECK(
        k && k->group == 0 && k->index < whole_names.size(), "gpt",
        "expected optimizer keys state.0.<index of the whole model's parameter>.<buffer>, got '",
        key, "'");
    const std::string& name = whole_names[k->index];
    auto at = local_index.find(name);
    if (at == local_index.end()) continue;  // another stage's
    state.emplace_back("state.0." + std::to_string(at->second) + "." + k->name, t);
  }
  // The moments cut as their parameters are (named by them for tp_shard, one call for all).
  rg::NamedTensors moments;
  for (const auto& [key, t] : state)
    if (shaped_like_parameter(t))
      moments.emplace_back(params[rg::optim::parse_state_key(key)->index].first, t);
  const rg::NamedTensors cut = par::tp_shard(stage, moments);
  size_t next = 0;
  for (auto& [key, t] : state)
    if (shaped_like_parameter(t)) t = cut[next++].second.contiguous();
  std::map<std::string, std::string> local_meta = meta;
  local_meta["group.0.size"] = std::to_string(params.size());
  return {state, local_meta};
}

}  // namespace gpt
