// gpt/sharded_state.h — each rank's own pieces of the GPT's state, for a sharded checkpoint
// directory (optim/sharded_checkpoint.h), and back: every layout and strategy saves only what
// it holds, and loads only what it needs, from a checkpoint any other layout wrote.
//
//   std::vector<rg::Shard> mine = gpt::shards(trainer);               // every rank
//   par::save_sharded(dir, info, mine, world.communicator(), device);
//   ...
//   gpt::load_shards(trainer, rg::open_sharded_checkpoint(dir));      // every rank
//
// The names are the one-file checkpoint's: "model.<name in the whole GPT>" and
// "optim.state.0.<index of the parameter in the whole GPT>.<buffer>" (AdamW's state as a
// plain AdamW over the whole model writes it), so a directory converts to one file and back.
// Where a rank's tensor lies in the whole one:
//   - whole (DDP, ZeRO, an expert under --ep, a stage's norm): one run of every element;
//   - cut over tp (--tp): the runs its layer's own shard() picks out of arange(numel)
//     (rg::runs_of), so the attention's packed q, k, v rows and a row-parallel layer's
//     columns come out of the code that cuts them, not a second description;
//   - FSDP: each unit's flat shard holds a stretch of some of its parameters (one run each).
// A stage under --pp holds its own blocks, an ep rank its own experts, both under the whole
// model's names. AdamW's moments are placed as their parameter; its step counter is whole.
// Replicas (dp, cp, a norm on every tp rank, the tied embedding's copy on the last stage)
// hold the same pieces, which par::save_sharded writes once.
#pragma once

#include <ringgrad/optim/sharded_checkpoint.h>
#include <ringgrad/ringgrad.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trainer.h"

namespace gpt {

// One of a rank's tensors, flattened, and the parts of it that belong to whole tensors: each
// part's runs place its elements in its whole tensor, their `local` counting in this tensor.
struct Part {
  std::string name;  // the whole model's name (without "model.")
  rg::Shape shape;   // the whole tensor's
  std::vector<rg::Run> runs;
};
struct Placed {
  rg::Tensor local;
  std::vector<Part> parts;
};

namespace detail {

// The whole GPT's tensors (state dict order, every expert named) and parameters: name ->
// shape, and name -> index (a plain optimizer's numbering).
inline std::map<std::string, rg::Shape> whole_shapes(GPT& gpt) {
  std::map<std::string, rg::Shape> out;
  for (const auto& [name, t] : every_expert_named(gpt.state_dict(), experts_per_block(gpt))) out[name] = t.shape();
  return out;
}
inline std::map<std::string, int64_t> whole_positions(const rg::NamedTensors& named, GPT& gpt) {
  std::map<std::string, int64_t> out;
  for (const auto& [name, t] : every_expert_named(named, experts_per_block(gpt))) out.emplace(name, int64_t(out.size()));
  return out;
}

// A tensor this rank holds under `name`: whole, or cut over tp (its runs from the layer's
// own shard() of arange(numel)).
inline Placed place(Trainer& t, const std::string& name, const rg::Tensor& local,
                    const std::map<std::string, rg::Shape>& shapes) {
  auto it = shapes.find(name);
  RG_CHECK(it != shapes.end(), "gpt", "expected '", name, "' among the whole model's tensors");
  const rg::Shape& shape = it->second;
  if (local.shape() == shape || !t.stage) return {local, {{name, shape, rg::whole_shard(name, local).runs}}};
  const rg::Tensor indices = rg::arange(double(rg::numel_of(shape)), {.dtype = rg::kInt64}).reshape(shape);
  const rg::Tensor mine = par::tp_shard(*t.stage, {{name, indices}}).front().second;
  RG_CHECK(mine.numel() == local.numel(), "gpt", "expected '", name, "' cut to ", local.numel(),
           " elements, got ", mine.numel());
  return {local, {{name, shape, rg::runs_of(mine)}}};
}

}  // namespace detail

// This rank's model tensors, placed (the live tensors: a stage's, the model's or FSDP's flat
// shards).
inline std::vector<Placed> placed_model(Trainer& t) {
  const std::map<std::string, rg::Shape> shapes = detail::whole_shapes(t.model);
  std::vector<Placed> out;
  if (t.fsdp) {
    const std::vector<rg::Tensor> flat = t.fsdp->parameters();
    const auto units = t.fsdp->units();
    const int64_t rank = t.comm.rank();
    std::map<std::string, bool> in_unit;
    for (size_t u = 0; u < units.size(); ++u) {
      Placed p{flat.at(u), {}};
      const int64_t s = units[u].shard_numel, begin = rank * s, end = begin + s;
      int64_t offset = 0;  // the parameter's start in the unit's flat buffer
      for (const std::string& name : units[u].parameters) {
        in_unit[name] = true;
        const rg::Shape& shape = shapes.at(name);
        const int64_t n = rg::numel_of(shape), a = std::max(offset, begin), b = std::min(offset + n, end);
        if (a < b) p.parts.push_back({name, shape, {{.global = a - offset, .local = a - begin, .length = b - a}}});
        offset += n;
      }
      out.push_back(std::move(p));
    }
    for (const auto& [name, b] : t.model.state_dict())  // buffers: whole on every rank
      if (!in_unit.count(name)) out.push_back(detail::place(t, name, b, shapes));
    return out;
  }
  for (const auto& [name, local] : t.stage ? t.stage->state_dict() : t.model.state_dict())
    out.push_back(detail::place(t, name, local, shapes));
  return out;
}

// The parameters of this rank's optimizer (AdamW, ZeRO's local one, or FSDP's over the
// flat shards), in its order, placed.
inline std::vector<Placed> placed_optimizer_parameters(Trainer& t) {
  if (t.fsdp) {
    std::vector<Placed> model = placed_model(t);
    model.resize(t.fsdp->parameters().size());  // the units' flat shards come first
    return model;
  }
  const std::map<std::string, rg::Shape> shapes = detail::whole_shapes(t.model);
  const rg::NamedTensors params = t.stage ? t.stage->named_parameters() : t.model.named_parameters();
  std::vector<Placed> out;
  for (size_t i = 0; i < params.size(); ++i)
    if (!t.zero || t.zero->owner(i) == t.comm.rank()) out.push_back(detail::place(t, params[i].first, params[i].second, shapes));
  return out;
}

inline rg::optim::Optimizer& local_optimizer(Trainer& t) { return t.zero ? t.zero->local_optimizer() : *t.adamw; }

// The elements of `t` (flattened) that part `p` holds, and p's runs counted in them.
inline std::pair<rg::Tensor, std::vector<rg::Run>> part_of(const rg::Tensor& t, const Part& p) {
  int64_t lo = INT64_MAX, hi = 0;
  for (const rg::Run& r : p.runs) lo = std::min(lo, r.local), hi = std::max(hi, r.local + r.length * r.count);
  std::vector<rg::Run> runs = p.runs;
  for (rg::Run& r : runs) r.local -= lo;
  if (runs.empty()) return {rg::empty({0}, {.dtype = t.dtype()}), runs};
  return {t.detach().reshape({-1}).narrow(0, lo, hi - lo), runs};
}

// Every piece this rank holds: its model tensors, then its optimizer's state.
inline std::vector<rg::Shard> shards(Trainer& t) {
  const std::map<std::string, int64_t> model_at = detail::whole_positions(t.model.state_dict(), t.model);
  const std::map<std::string, int64_t> param_at = detail::whole_positions(t.model.named_parameters(), t.model);
  std::vector<rg::Shard> out;
  for (const Placed& placed : placed_model(t))
    for (const Part& p : placed.parts) {
      auto [local, runs] = part_of(placed.local, p);
      out.push_back({.name = "model." + p.name, .shape = p.shape, .local = local, .runs = runs, .position = model_at.at(p.name)});
    }
  const std::vector<Placed> params = placed_optimizer_parameters(t);
  std::vector<int64_t> buffer_of(params.size(), 0);  // the buffers seen so far, per parameter
  for (const auto& [key, value] : local_optimizer(t).state_dict(nullptr)) {
    const auto k = rg::optim::parse_state_key(key);
    RG_CHECK(k && k->group == 0 && k->index < params.size(), "gpt", "expected optimizer keys state.0.<index>.<buffer>, got '", key, "'");
    const Placed& param = params[k->index];
    const int64_t b = buffer_of[k->index]++;
    for (const Part& p : param.parts) {
      const int64_t j = param_at.at(p.name);
      const std::string name = "optim.state.0." + std::to_string(j) + "." + k->name;
      if (value.dim() > 0 && value.numel() == param.local.numel()) {  // a moment: placed as its parameter
        auto [local, runs] = part_of(value, p);
        out.push_back({.name = name, .shape = p.shape, .local = local, .runs = runs, .position = 16 * j + b});
      } else {  // the step counter: whole, the same for every part
        out.push_back(rg::whole_shard(name, value, 16 * j + b));
      }
    }
  }
  return out;
}

// Fills this rank's model and optimizer from a sharded checkpoint written by any layout.
inline void load_shards(Trainer& t, const rg::ShardedCheckpoint& c) {
  rg::NoGradGuard no_grad;
  // What the pieces of `placed` read into: a CPU tensor like it, zeros where no part is
  // (FSDP's padding); `prefix` names the whole tensors, `dtype` is the checkpoint's.
  auto gather = [&](const Placed& placed, const std::function<std::string(const Part&)>& name_of, rg::DType dtype,
                    const rg::Shape& shape) {
    rg::Tensor host = rg::zeros(shape, {.dtype = dtype});
    rg::Tensor flat = host.reshape({-1});
    for (const Part& p : placed.parts) {
      auto [view, runs] = part_of(flat, p);
      rg::Tensor piece = rg::empty({view.numel()}, {.dtype = dtype});
      c.read(name_of(p), piece, runs);
      if (piece.numel() > 0) view.copy_(piece);
    }
    return host;
  };
  for (const Placed& placed : placed_model(t)) {
    rg::Tensor target = placed.local;
    target.detach().copy_(gather(placed, [](const Part& p) { return "model." + p.name; }, target.dtype(), target.shape())
                              .to(target.device()));
  }
  // The optimizer: each of its parameters' buffers (those the checkpoint holds for the first
  // whole parameter it has a part of), placed as the parameter, or whole.
  const std::map<std::string, int64_t> param_at = detail::whole_positions(t.model.named_parameters(), t.model);
  std::map<int64_t, std::vector<std::string>> buffers;  // whole index -> buffer names
  for (const auto& e : c.tensors) {
    const auto k = e.name.rfind("optim.", 0) == 0 ? rg::optim::parse_state_key(e.name.substr(6)) : std::nullopt;
    if (k) buffers[int64_t(k->index)].push_back(k->name);
  }
  const std::vector<Placed> params = placed_optimizer_parameters(t);
  rg::NamedTensors state;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].parts.empty()) continue;
    const int64_t first = param_at.at(params[i].parts.front().name);
    if (!buffers.count(first)) continue;  // saved before the first step: no state yet
    for (const std::string& buffer : buffers.at(first)) {
      auto name_of = [&](const Part& p) { return "optim.state.0." + std::to_string(param_at.at(p.name)) + "." + buffer; };
      const auto& e = c.entry(name_of(params[i].parts.front()));
      rg::Tensor value = !e.shape.empty() && e.shape == params[i].parts.front().shape
                             ? gather(params[i], name_of, e.dtype, params[i].local.shape())
                             : c.read_whole(e.name);
      state.emplace_back("state.0." + std::to_string(i) + "." + buffer, value.to(params[i].local.device()));
    }
  }
  std::map<std::string, std::string> meta = c.info.optimizer_meta;
  meta["group.0.size"] = std::to_string(params.size());
  local_optimizer(t).load_state_dict(state, meta);
  c.release();
}

}  // namespace gpt
