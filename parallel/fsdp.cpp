// fsdp.cpp — FullyShardedDataParallel, in the order fsdp.h tells it:
//   1. make_units            the policy's units, each flattened, padded and sharded
//   2. before_forward /      a unit gathered before its forward (the next one
//      after_forward         prefetched), released after it; its output wrapped so
//                            that backward announces itself (before_backward)
//   3. before_backward /     gathered again in backward; when the unit's last
//      on_gradient           gradient is final, flattened and reduce-scattered
//   4. finish_backward       wait for the last reduce-scatters, shards' .grad set
//                            (the earlier ones complete during backward, two behind)
// A unit moves between three states: Sharded (flat buffer released), Gathering
// (all-gather in flight), Full. Every rank issues the same collectives in the same
// order: forward visits the units in program order; backward reduce-scatters
// strictly in the reverse of that order (launch_ready_reductions, as DDP's buckets).
//
// Traces (core/trace.h): each all-gather and reduce-scatter is an instant on the
// compute track when issued ("all-gather layers.1, 3.1 MB") and a slice on the
// comm track while it runs; time spent waiting for one is a "wait …" slice.
#include "ringgrad/parallel/fsdp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <set>

#include "ringgrad/autograd/function.h"
#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/autograd/node.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"
#include "ringgrad/core/trace.h"
#include "ringgrad/parallel/zero.h"

namespace ringgrad::parallel {

namespace {

enum class Status { Sharded, Gathering, Full };

struct Unit {
  std::string name;                // the module's dotted name; "" for the root
  std::vector<std::string> names;  // its parameters' full names
  std::vector<Tensor> params;      // the module's parameters: views into `full`
  std::vector<int64_t> offsets;    // where each starts in `full`
  int64_t numel = 0;               // parameter elements, before padding
  Tensor full;                     // padded flat parameters; memory released while Sharded
  Tensor shard;                    // this rank's chunk of `full`: the leaf the optimizer steps
  Status status = Status::Sharded;
  WorkHandle gather;  // the all-gather in flight (Gathering)
  // per backward
  size_t pending = 0;  // parameters whose gradient is not final yet
  bool ready = false;  // every gradient final (or known missing)
  Tensor grad_full;    // flattened gradients being reduce-scattered
  Tensor grad_shard;   // this rank's reduced chunk
  WorkHandle reduce;

  std::string label() const { return name.empty() ? "(root)" : name; }
};

}  // namespace

struct FullyShardedDataParallel::State : std::enable_shared_from_this<State> {
  Communicator* comm = nullptr;
  FSDPOptions options;
  const bool* sync = nullptr;
  std::vector<Unit> units;  // the root unit (if it has parameters) first
  bool has_root = false;
  bool summoned = false;  // a FullParams guard lives: every unit stays gathered, hooks idle
  double wait_seconds = 0;
  // per forward: the order units ran in (this forward's, and the previous one's for prefetch)
  std::vector<size_t> order, last_order;
  // per backward
  bool active = false;
  std::vector<size_t> backward_order;  // reduce-scatters start strictly in this order
  size_t next_to_reduce = 0, next_to_complete = 0;  // in backward_order
  static constexpr size_t kReductionsInFlight = 2;

  // ---- the three states of a unit

  // Start gathering unit u's parameters, unless it is gathered or under way.
  void start_gather(Unit& u) {
    if (u.status != Status::Sharded) return;
    u.full.storage()->reallocate_memory();
    if (trace::enabled())
      trace::instant("all-gather " + u.label() + ", " +
                         trace::format_bytes(static_cast<double>(u.full.nbytes())),
                     "fsdp");
    u.gather = comm->all_gather_async(u.full, u.shard);
    u.status = Status::Gathering;
  }

  // Unit u's parameters hold their whole values when this returns.
  void gather(Unit& u) {
    start_gather(u);
    if (u.status == Status::Gathering) {
      timed_wait("wait all-gather " + u.label(), u.gather);
      u.gather.reset();
      u.status = Status::Full;
    }
  }

  // Release unit u's gathered parameters (views keep naming the storage; reading
  // one until the next gather is an error that says so).
  void reshard(Unit& u) {
    if (u.status == Status::Gathering) u.gather->wait(), u.gather.reset();
    if (u.status != Status::Sharded) u.full.storage()->release_memory();
    u.status = Status::Sharded;
  }

  // ---- 2. forward

  void before_forward(size_t k) {
    if (summoned) return;
    order.push_back(k);
    gather(units[k]);
    // Prefetch: the unit that ran next in the previous forward.
    size_t next = order.size();
    if (options.forward_prefetch && next < last_order.size() && last_order[next] != k)
      start_gather(units[last_order[next]]);
  }

  void after_forward(size_t k, Tensor& out) {
    if (summoned) return;
    if (options.reshard_after_forward || !is_grad_enabled()) reshard(units[k]);
    out = announce_backward(out, k);
  }

  // The output, with an identity node in front of the unit's backward: the first
  // gradient to reach it runs before_backward(k) (PyTorch's pre-backward hook).
  Tensor announce_backward(const Tensor& out, size_t k);

  // ---- 3. backward

  void before_backward(size_t k) {
    if (!active) begin_backward();
    if (k == root() && !has_root) return;  // the model's output, with no root unit
    gather(units[k]);
    // Prefetch: the unit whose backward comes next.
    auto it = std::find(backward_order.begin(), backward_order.end(), k);
    if (options.backward_prefetch && it != backward_order.end() && it + 1 != backward_order.end())
      start_gather(units[*(it + 1)]);
  }

  // The gradient of one of unit k's parameters is final for this backward.
  void on_gradient(size_t k) {
    if (!active) begin_backward();
    Unit& u = units[k];
    if (u.pending > 0 && --u.pending == 0) mark_ready(k);
  }

  // Every gradient of unit k is final: its parameters can go, and its reduce-scatter
  // can start once every unit before it in backward_order has started its own.
  void mark_ready(size_t k) {
    Unit& u = units[k];
    u.ready = true;
    reshard(u);
    launch_ready_reductions();
  }

  // Launches, in order, every reduce-scatter whose unit is ready, and completes those more than
  // kReductionsInFlight behind the newest: each completed unit's whole flat gradient is freed
  // then, so at most that many units' whole gradients are alive at once, not the model's.
  void launch_ready_reductions() {
    while (next_to_reduce < backward_order.size() && units[backward_order[next_to_reduce]].ready) {
      reduce_scatter(units[backward_order[next_to_reduce++]]);
      while (next_to_reduce - next_to_complete > kReductionsInFlight)
        complete_reduction(units[backward_order[next_to_complete++]]);
    }
  }

  // Flatten the unit's gradients, pre-divided by N, and reduce-scatter them: this
  // rank receives the average of its own shard. Inside no_sync nothing moves: the
  // full gradients stay on the parameters and keep accumulating.
  void reduce_scatter(Unit& u) {
    if (!*sync) return;
    const int64_t shard_numel = u.shard.numel();
    u.grad_full = empty({shard_numel * comm->size()}, {.dtype = u.full.dtype(), .device = u.full.device()});
    u.grad_full.narrow(0, u.numel, u.grad_full.numel() - u.numel).zero_();  // the padding
    for (size_t i = 0; i < u.params.size(); ++i) {
      Tensor dst = u.grad_full.narrow(0, u.offsets[i], u.params[i].numel());
      Tensor g = u.params[i].grad();
      if (g.defined())
        mul_out(dst, g.reshape({-1}), 1.0 / comm->size());
      else
        dst.zero_();  // a parameter this backward did not reach: zeros, as in a bigger batch
      u.params[i].set_grad(Tensor());  // the full gradient is no longer needed
    }
    u.grad_shard = empty({shard_numel}, {.dtype = u.full.dtype(), .device = u.full.device()});
    if (trace::enabled())
      trace::instant("reduce-scatter " + u.label() + ", " +
                         trace::format_bytes(static_cast<double>(u.grad_full.nbytes())),
                     "fsdp");
    u.reduce = comm->reduce_scatter_async(u.grad_shard, u.grad_full, Reduce::Sum);
  }

  // ---- 4. the end of backward

  void finish_backward() {
    trace::Span span("FSDP finish", "fsdp");
    // Units this backward did not reach (or not all of their parameters), in order.
    for (size_t k : backward_order)
      if (!units[k].ready) mark_ready(k);
    for (Unit& u : units) complete_reduction(u);
    for (Unit& u : units) reshard(u);
    active = false;
  }

  // Waits for the unit's reduce-scatter (if one is in flight), adds its averaged shard to
  // the shard's .grad, and frees the whole flat gradient it was cut from.
  void complete_reduction(Unit& u) {
    if (!u.reduce) return;
    timed_wait("wait reduce-scatter " + u.label(), u.reduce);
    u.reduce.reset();
    NoGradGuard no_grad;
    Tensor g = u.shard.grad();
    if (g.defined())
      g.add_(u.grad_shard);  // accumulate across backwards, as .grad does
    else
      u.shard.set_grad(u.grad_shard);
    u.grad_full = Tensor();
    u.grad_shard = Tensor();
  }

  // ---- bookkeeping

  size_t root() const { return has_root ? 0 : units.size(); }

  // The first node of a backward: reset the per-backward state, fix the order of
  // the reduce-scatters (the reverse of this forward's, then units the forward
  // did not run, the root last), and have finish_backward run when it ends.
  void begin_backward() {
    active = true;
    backward_order.clear();
    std::set<size_t> seen;
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      if (seen.insert(*it).second) backward_order.push_back(*it);
    for (size_t k = 0; k < units.size(); ++k)
      if (k != root() && !seen.count(k)) backward_order.push_back(k);
    if (has_root) backward_order.push_back(root());
    for (Unit& u : units) u.pending = u.params.size(), u.ready = false;
    next_to_reduce = next_to_complete = 0;
    autograd::queue_callback([this] { finish_backward(); });
  }

  void timed_wait(const std::string& what, const WorkHandle& work) {
    auto start = std::chrono::steady_clock::now();
    {
      trace::Span span(trace::enabled() ? what : std::string(), "fsdp");
      work->wait();
    }
    wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

Tensor FullyShardedDataParallel::State::announce_backward(const Tensor& out, size_t k) {
  if (!is_grad_enabled() || !out.requires_grad()) return out;
  Tensor alias = out.detach();
  autograd::record("FSDP pre-backward", alias, {&out}, [weak = weak_from_this(), k](const Tensor& g) {
    if (auto s = weak.lock()) s->before_backward(k);
    return autograd::Grads{g};
  });
  return alias;
}

namespace {

// 1. The units: modules the policy picks (each parameter belongs to the innermost
// unit above it), then the root unit for the parameters outside all of them.
// Each unit flattened: parameters copied into one padded buffer, this rank's
// chunk kept as the shard, the parameters made views of the buffer, whose memory
// is then released.
void make_units(FullyShardedDataParallel::State& s, nn::Module& module) {
  std::vector<std::string> unit_names;
  if (s.options.auto_wrap_policy)
    for (auto& [name, m] : module.named_modules())
      if (!name.empty() && s.options.auto_wrap_policy(name, *m)) unit_names.push_back(name);

  std::map<std::string, size_t> unit_of_name;  // "" -> the root
  std::vector<Unit> units(1);                  // [0]: the root, dropped below if empty
  for (const std::string& name : unit_names) {
    unit_of_name[name] = units.size();
    units.emplace_back();
    units.back().name = name;
  }
  std::set<const TensorImpl*> seen;  // a parameter shared under two names is flattened once
  for (auto& [name, p] : module.named_parameters()) {
    if (!p.requires_grad() || !seen.insert(p.impl_ptr().get()).second) continue;
    size_t best = 0, best_len = 0;
    for (auto& [unit, index] : unit_of_name)
      if (name.size() > unit.size() && name.compare(0, unit.size() + 1, unit + ".") == 0 &&
          unit.size() + 1 > best_len)
        best = index, best_len = unit.size() + 1;
    units[best].names.push_back(name);
    units[best].params.push_back(p);
  }

  const int n = s.comm->size(), rank = s.comm->rank();
  NoGradGuard no_grad;
  for (size_t k = 0; k < units.size(); ++k) {
    Unit& u = units[k];
    if (u.params.empty()) continue;  // a unit without trainable parameters has nothing to shard
    const Tensor& first = u.params.front();
    for (size_t i = 0; i < u.params.size(); ++i) {
      RG_CHECK(u.params[i].dtype() == first.dtype() && u.params[i].device() == first.device(),
               "FullyShardedDataParallel", "expected one dtype and device per unit, got ",
               u.names[i], " (", u.params[i].dtype(), ", ", u.params[i].device(), ") beside ",
               u.names.front(), " (", first.dtype(), ", ", first.device(),
               ") in unit ", u.label(), " (wrap them in separate units)");
      u.offsets.push_back(u.numel);
      u.numel += u.params[i].numel();
    }
    const int64_t shard_numel = (u.numel + n - 1) / n;  // padded up to a multiple of n
    u.full = empty({shard_numel * n}, {.dtype = first.dtype(), .device = first.device()});
    u.full.narrow(0, u.numel, u.full.numel() - u.numel).zero_();
    for (size_t i = 0; i < u.params.size(); ++i) {
      Tensor view = u.full.narrow(0, u.offsets[i], u.params[i].numel()).view(u.params[i].shape());
      view.copy_(u.params[i].detach());
      u.params[i].set_data(view);  // the module's parameter now lives in the flat buffer
    }
    u.shard = u.full.narrow(0, rank * shard_numel, shard_numel).clone();
    u.shard.requires_grad_(true);
    u.full.storage()->release_memory();
    if (k == 0) s.has_root = true;
    s.units.push_back(std::move(u));
  }
}

// 2. and 3. Hooks: around each unit's forward, and on each parameter's final gradient.
void register_hooks(FullyShardedDataParallel::State& s, nn::Module& module,
                    const std::shared_ptr<FullyShardedDataParallel::State>& shared) {
  std::weak_ptr<FullyShardedDataParallel::State> weak = shared;
  std::map<std::string, nn::Module*> modules;
  for (auto& [name, m] : module.named_modules()) modules[name] = m;
  for (size_t k = 0; k < s.units.size(); ++k) {
    for (Tensor& p : s.units[k].params)
      p.register_post_accumulate_grad_hook([weak, k](Tensor&) {
        if (auto st = weak.lock()) st->on_gradient(k);
      });
    if (k == s.root()) continue;  // the root is gathered by FSDP's own forward
    nn::Module* m = modules.at(s.units[k].name);
    m->register_forward_pre_hook([weak, k](nn::Module&, const Tensor&) {
      if (auto st = weak.lock()) st->before_forward(k);
    });
    m->register_forward_hook([weak, k](nn::Module&, const Tensor&, Tensor& out) {
      if (auto st = weak.lock()) st->after_forward(k, out);
    });
  }
}

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(nn::Module& module, Communicator& comm,
                                                   FSDPOptions options)
    : module_(module), state_(std::make_shared<State>()) {
  State& s = *state_;
  s.comm = &comm;
  s.options = std::move(options);
  s.sync = &sync_;
  const NamedTensors named = module.state_dict();
  check_same_layout_across_ranks(comm, named, "the model (FSDP's replicas)");
  std::vector<Tensor> everything;  // every replica starts from rank 0's values, as in DDP
  for (auto& [name, t] : named) everything.push_back(t);
  broadcast_tensors(comm, everything, 0);
  make_units(s, module);             // 1.
  register_hooks(s, module, state_);  // 2., 3. (4. runs at the end of each backward)
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  // Leave the module usable on its own: every unit gathered, its parameters whole
  // (a collective: every rank destroys its FSDP at the same point of the program).
  // Not while an error unwinds the stack: the other ranks may never come, and the
  // job must end (the parameters then stay released).
  if (std::uncaught_exceptions() > 0) return;
  try {
    for (Unit& u : state_->units) state_->start_gather(u);
    for (Unit& u : state_->units) state_->gather(u);
  } catch (...) {
    // a collective that failed: the parameters stay released
  }
}

Tensor FullyShardedDataParallel::forward(const Tensor& x) {
  State& s = *state_;
  RG_CHECK(!s.active, "FullyShardedDataParallel",
           "expected the previous backward to have finished before the next forward");
  RG_CHECK(!s.summoned, "FullyShardedDataParallel",
           "expected no summon_full_params() guard alive during fsdp(x): inside one, call the "
           "module itself (every unit is gathered)");
  s.last_order.swap(s.order);
  s.order.clear();
  if (s.has_root) s.gather(s.units[s.root()]);
  Tensor out = module_(x);
  if (!is_grad_enabled()) {
    for (Unit& u : s.units) s.reshard(u);  // evaluation: nothing to keep for a backward
    return out;
  }
  return s.announce_backward(out, s.root());
}

std::vector<Tensor> FullyShardedDataParallel::parameters() const {
  std::vector<Tensor> shards;
  for (const Unit& u : state_->units) shards.push_back(u.shard);
  return shards;
}

double FullyShardedDataParallel::clip_grad_norm_(double max_norm) {
  const Device device = state_->units.empty() ? kCPU : state_->units.front().shard.device();
  return clip_grad_norm_sharded(parameters(), max_norm, *state_->comm, device);  // zero.h
}

FullyShardedDataParallel::FullParams::FullParams(FullyShardedDataParallel& fsdp, bool writeback)
    : fsdp_(fsdp), writeback_(writeback) {
  RG_CHECK(!fsdp.state_->active, "summon_full_params", "expected no backward under way");
  RG_CHECK(!fsdp.state_->summoned, "summon_full_params", "expected no other guard alive");
  for (Unit& u : fsdp.state_->units) fsdp.state_->start_gather(u);
  for (Unit& u : fsdp.state_->units) fsdp.state_->gather(u);
  fsdp.state_->summoned = true;
}

FullyShardedDataParallel::FullParams::~FullParams() {
  State& s = *fsdp_.state_;
  s.summoned = false;
  NoGradGuard no_grad;
  for (Unit& u : s.units) {
    if (writeback_) u.shard.copy_(u.full.narrow(0, s.comm->rank() * u.shard.numel(), u.shard.numel()));
    s.reshard(u);
  }
}

NamedTensors FullyShardedDataParallel::full_state_dict(int to) {
  State& s = *state_;
  RG_CHECK(to >= 0 && to < s.comm->size(), "full_state_dict", "expected a rank in [0, ",
           s.comm->size(), "), got ", to);
  RG_CHECK(!s.active, "full_state_dict", "expected no backward under way");
  const bool mine = s.comm->rank() == to;
  // One unit gathered at a time: the copies on rank `to` are all that accumulates.
  std::map<std::string, Tensor> copies;
  for (Unit& u : s.units) {
    s.gather(u);
    if (mine)
      for (size_t i = 0; i < u.params.size(); ++i) copies[u.names[i]] = u.params[i].detach().clone();
    s.reshard(u);
  }
  NamedTensors state;
  if (!mine) return state;
  for (auto& [name, t] : module_.state_dict()) {
    auto it = copies.find(name);
    state.emplace_back(name, it != copies.end() ? it->second : t.detach().clone());
  }
  return state;
}

void FullyShardedDataParallel::load_full_state_dict(const NamedTensors& state, bool strict) {
  FullParams whole(*this, /*writeback=*/true);
  module_.load_state_dict(state, strict);
}

namespace {

// For each unit and each of its parameters, the parameter's index in
// module.parameters(): the numbering of a plain optimizer over the whole model.
std::vector<std::vector<size_t>> plain_indices(const std::vector<Unit>& units, nn::Module& module) {
  std::map<const TensorImpl*, size_t> index;
  std::vector<Tensor> all = module.parameters();
  for (size_t i = 0; i < all.size(); ++i) index.emplace(all[i].impl_ptr().get(), i);
  std::vector<std::vector<size_t>> out;
  for (const Unit& u : units) {
    out.emplace_back();
    for (const Tensor& p : u.params) out.back().push_back(index.at(p.impl_ptr().get()));
  }
  return out;
}

// The optimizer must step exactly the shards, in one group.
void check_sharded_optimizer(const optim::Optimizer& opt, const std::vector<Unit>& units,
                             const char* who) {
  const auto& groups = opt.param_groups();
  bool ok = groups.size() == 1 && groups[0].params.size() == units.size();
  for (size_t k = 0; ok && k < units.size(); ++k)
    ok = groups[0].params[k].impl_ptr() == units[k].shard.impl_ptr();
  RG_CHECK(ok, who, "expected an optimizer built on fsdp.parameters() (one group, the ",
           units.size(), " shards in order)");
}

}  // namespace

NamedTensors FullyShardedDataParallel::full_optim_state_dict(
    const optim::Optimizer& opt, std::map<std::string, std::string>* metadata, int to) {
  State& s = *state_;
  check_sharded_optimizer(opt, s.units, "full_optim_state_dict");
  RG_CHECK(to >= 0 && to < s.comm->size(), "full_optim_state_dict", "expected a rank in [0, ",
           s.comm->size(), "), got ", to);
  const bool mine = s.comm->rank() == to;
  const auto indices = plain_indices(s.units, module_);
  std::map<std::string, std::string> local_meta;
  // Every rank holds the same buffer names for each shard (they all step together),
  // in the same (sorted) order: the gathers below pair up.
  std::map<std::pair<size_t, std::string>, Tensor> local;
  for (auto& [key, t] : opt.state_dict(&local_meta)) {
    std::optional<optim::StateKey> k = optim::parse_state_key(key);
    RG_CHECK(k && k->group == 0 && k->index < s.units.size(), "full_optim_state_dict",
             "expected keys state.0.<unit>.<name>, got ", key);
    local[{k->index, k->name}] = t;
  }
  std::map<std::pair<size_t, std::string>, Tensor> plain;  // (plain index, name) -> tensor
  for (auto& [where, t] : local) {
    const Unit& u = s.units[where.first];
    const std::vector<size_t>& index = indices[where.first];
    if (t.dim() == 0) {  // a per-parameter counter ("step"): the same for each
      for (size_t i = 0; i < u.params.size(); ++i) plain[{index[i], where.second}] = t.clone();
      continue;
    }
    Tensor whole = empty({u.shard.numel() * s.comm->size()}, {.dtype = t.dtype(), .device = t.device()});
    s.comm->all_gather_async(whole, t.contiguous())->wait();
    if (mine)
      for (size_t i = 0; i < u.params.size(); ++i)
        plain[{index[i], where.second}] =
            whole.narrow(0, u.offsets[i], u.params[i].numel()).view(u.params[i].shape()).clone();
  }
  NamedTensors out;
  if (!mine) return out;
  for (auto& [where, t] : plain)
    out.emplace_back("state.0." + std::to_string(where.first) + "." + where.second, t);
  if (metadata) {
    *metadata = local_meta;  // the optimizer's name, steps, the group's lr and decay
    (*metadata)["group.0.size"] = std::to_string(module_.parameters().size());
  }
  return out;
}

void FullyShardedDataParallel::load_full_optim_state_dict(
    optim::Optimizer& opt, const NamedTensors& state,
    const std::map<std::string, std::string>& metadata) {
  State& s = *state_;
  check_sharded_optimizer(opt, s.units, "load_full_optim_state_dict");
  const size_t total = module_.parameters().size();
  auto size = metadata.find("group.0.size");
  RG_CHECK(size != metadata.end() && size->second == std::to_string(total),
           "load_full_optim_state_dict", "expected the state of an optimizer over the module's ",
           total, " parameters, got group.0.size = ", size == metadata.end() ? "(none)" : size->second);
  std::map<std::pair<size_t, std::string>, Tensor> plain;
  for (const auto& [key, t] : state) {
    std::optional<optim::StateKey> k = optim::parse_state_key(key);
    RG_CHECK(k && k->group == 0 && k->index < total, "load_full_optim_state_dict",
             "expected keys state.0.<index>.<name> with index below ", total, ", got ", key);
    plain[{k->index, k->name}] = t;
  }
  const auto indices = plain_indices(s.units, module_);
  NamedTensors local;
  NoGradGuard no_grad;
  for (size_t k = 0; k < s.units.size(); ++k) {
    const Unit& u = s.units[k];
    std::set<std::string> names;  // the buffers the unit's first parameter has
    for (auto& [where, t] : plain)
      if (where.first == indices[k].front()) names.insert(where.second);
    for (const std::string& name : names) {
      const Tensor& first = plain.at({indices[k].front(), name});
      if (first.dim() == 0) {  // a per-parameter counter ("step")
        local.emplace_back("state.0." + std::to_string(k) + "." + name, first);
        continue;
      }
      Tensor whole = zeros({u.shard.numel() * s.comm->size()}, {.dtype = u.shard.dtype()});
      for (size_t i = 0; i < u.params.size(); ++i) {
        auto it = plain.find({indices[k][i], name});
        RG_CHECK(it != plain.end() && it->second.numel() == u.params[i].numel(),
                 "load_full_optim_state_dict", "expected state.0.", indices[k][i], ".", name,
                 " with ", u.params[i].numel(), " elements (", u.names[i], ")");
        whole.narrow(0, u.offsets[i], u.params[i].numel()).copy_(it->second.reshape({-1}));
      }
      local.emplace_back("state.0." + std::to_string(k) + "." + name,
                         whole.narrow(0, s.comm->rank() * u.shard.numel(), u.shard.numel()).clone());
    }
  }
  std::map<std::string, std::string> local_meta = metadata;
  local_meta["group.0.size"] = std::to_string(s.units.size());
  opt.load_state_dict(local, local_meta);
}

std::vector<FullyShardedDataParallel::UnitInfo> FullyShardedDataParallel::units() const {
  std::vector<UnitInfo> info;
  for (const Unit& u : state_->units) info.push_back({u.name, u.names, u.numel, u.shard.numel()});
  return info;
}

double FullyShardedDataParallel::comm_wait_seconds() const { return state_->wait_seconds; }

}  // namespace ringgrad::parallel
