// zero.cpp — the partition of the parameters, the local step, the broadcasts.
#include "ringgrad/parallel/zero.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/autograd/node.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::parallel {

// ZeRO-2: the reduces of this backward, and who owns what.
struct ZeroRedundancyOptimizer::Stage2 {
  Communicator* comm = nullptr;
  std::vector<Tensor> params;
  std::vector<int> owner;
  std::vector<WorkHandle> pending;  // this backward's reduces, in issue order
  bool active = false;
  bool sync = true;  // false under no_sync(): gradients accumulate locally

  // A parameter's gradient is final: send it to its owner (averaged there).
  void on_gradient(size_t i, Tensor& p) {
    if (!sync) return;
    if (!active) {
      active = true;
      autograd::queue_callback([this] { finish_backward(); });
    }
    // Divided first, then summed: the same arithmetic as DDP's buckets, so the
    // owner's average is DDP's to the last bit (where the sums run in one order).
    Tensor g = p.grad();
    {
      NoGradGuard no_grad;
      g.mul_(1.0 / comm->size());
    }
    pending.push_back(comm->reduce_async(g, owner[i], Reduce::Sum));
  }
  // Backward is done: every reduce waited for, the gradients of others dropped.
  void finish_backward() {
    for (WorkHandle& w : pending) w->wait();
    pending.clear();
    for (size_t i = 0; i < params.size(); ++i)
      if (owner[i] != comm->rank()) params[i].set_grad(Tensor());
    active = false;
  }
};

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, Communicator& comm,
                                                 const Factory& make, ZeroOptions options)
    : comm_(comm), options_(options), params_(std::move(params)), owner_(params_.size(), 0) {
  RG_CHECK(static_cast<bool>(make), "ZeroRedundancyOptimizer",
           "expected a function that makes the optimizer, got none");
  RG_CHECK(options.stage == 1 || options.stage == 2, "ZeroRedundancyOptimizer",
           "expected stage 1 (optimizer state) or 2 (and gradients), got ", options.stage,
           " (stage 3, the parameters too, is FSDP)");
  // Largest first, each to the rank holding the fewest elements so far (ties: the
  // lower rank). Every rank computes the same partition from the same shapes.
  std::vector<size_t> order(params_.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
  std::vector<int64_t> load(static_cast<size_t>(comm.size()), 0);
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner_[i] = r;
    load[static_cast<size_t>(r)] += params_[i].numel();
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (owner_[i] == comm.rank()) local_.push_back(params_[i]);
  optimizer_ = make(local_);
  RG_CHECK(optimizer_ != nullptr, "ZeroRedundancyOptimizer",
           "expected the factory to return an optimizer, got nullptr");
  if (options.stage == 2) {
    // Without DDP, the replicas start from rank 0's values here.
    broadcast_tensors(comm, params_, 0);
    stage2_ = std::make_shared<Stage2>();
    stage2_->comm = &comm;
    stage2_->params = params_;
    stage2_->owner = owner_;
    std::weak_ptr<Stage2> weak = stage2_;
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].register_post_accumulate_grad_hook([weak, i](Tensor& p) {
        if (auto s = weak.lock()) s->on_gradient(i, p);
      });
  }
}

void ZeroRedundancyOptimizer::step() {
  optimizer_->step();  // 1. this rank's parameters
  // 2. every parameter from its owner, all in flight at once, in the same order everywhere
  NoGradGuard no_grad;
  std::vector<WorkHandle> works;
  works.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor data = params_[i].detach();
    works.push_back(comm_.broadcast_async(data, owner_[i]));
  }
  for (WorkHandle& w : works) w->wait();
}

ZeroRedundancyOptimizer::NoSync::NoSync(ZeroRedundancyOptimizer& zero) : zero_(zero) {
  RG_CHECK(zero.stage2_ != nullptr, "ZeroRedundancyOptimizer::no_sync",
           "expected stage 2 (gradients reduced by ZeRO), got stage 1: under ZeRO-1 DDP averages the "
           "gradients, so use DistributedDataParallel::no_sync()");
  zero_.stage2_->sync = false;
}

ZeroRedundancyOptimizer::NoSync::~NoSync() { zero_.stage2_->sync = true; }

void ZeroRedundancyOptimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

double clip_grad_norm_sharded(const std::vector<Tensor>& owned, double max_norm,
                              Communicator& comm, Device device) {
  Tensor total = full({1}, optim::grad_norm_squared(owned), {.dtype = kFloat64, .device = device});
  comm.all_reduce(total, Reduce::Sum);
  const double norm = std::sqrt(total.item());
  optim::scale_grads_to_norm(owned, norm, max_norm);
  return norm;
}

// Each rank's own parameters: every gradient counted once (under ZeRO-1 every rank
// holds all of them, averaged; only the owner's update counts, so only it clips).
double ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm) {
  return clip_grad_norm_sharded(local_, max_norm, comm_, params_.empty() ? kCPU : params_.front().device());
}

int64_t ZeroRedundancyOptimizer::local_state_bytes() const {
  std::map<std::string, std::string> metadata;
  int64_t bytes = 0;
  for (const auto& [name, t] : optimizer_->state_dict(&metadata))
    bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

namespace {

// A string as int64 character codes, and back: our communicators move tensors only.
Tensor encode(const std::string& text) {
  std::vector<int64_t> codes(text.begin(), text.end());
  return from_vector<int64_t>(codes, {static_cast<int64_t>(codes.size())});
}
std::string decode(const Tensor& codes) {
  std::string text;
  for (int64_t c : codes.tolist<int64_t>()) text.push_back(static_cast<char>(c));
  return text;
}

// "state.0.<index>.<name>" -> (index, name): the local optimizer has one group.
std::pair<size_t, std::string> parse_key(const std::string& key, const char* who) {
  std::optional<optim::StateKey> k = optim::parse_state_key(key);
  RG_CHECK(k && k->group == 0, who,
           "expected optimizer state keys state.0.<index>.<name> (one parameter group), got ",
           key);
  return {k->index, k->name};
}

}  // namespace

NamedTensors ZeroRedundancyOptimizer::consolidate_state_dict(
    std::map<std::string, std::string>* metadata, int to) {
  RG_CHECK(to >= 0 && to < comm_.size(), "consolidate_state_dict", "expected to in [0, ",
           comm_.size(), "), got ", to);
  RG_CHECK(optimizer_->param_groups().size() <= 1, "consolidate_state_dict",
           "expected a local optimizer with one parameter group, got ",
           optimizer_->param_groups().size());
  // This rank's entries, with indices into params_ instead of local_.
  std::vector<size_t> global;  // local index -> index in params_
  for (size_t i = 0; i < params_.size(); ++i)
    if (owner_[i] == comm_.rank()) global.push_back(i);
  std::map<std::string, std::string> local_meta;
  NamedTensors mine;
  for (auto& [key, t] : optimizer_->state_dict(&local_meta)) {
    auto [index, name] = parse_key(key, "consolidate_state_dict");
    mine.emplace_back("state.0." + std::to_string(global[index]) + "." + name, t.contiguous());
  }

  // Every other rank sends its entries to `to`: a count, then per entry its key
  // (as codes: length first), its shape and dtype, and its values.
  NamedTensors all;
  const int tag = 0x5a45;  // "ZE"
  if (comm_.rank() != to) {
    Tensor count = scalar_tensor(double(mine.size()), {.dtype = kInt64});
    comm_.send(count, to, tag);
    for (auto& [key, t] : mine) {
      Tensor code = encode(key);
      std::vector<int64_t> header{code.numel(), static_cast<int64_t>(t.dtype()), t.dim()};
      for (int64_t d : t.shape()) header.push_back(d);
      Tensor head = from_vector<int64_t>(header, {static_cast<int64_t>(header.size())});
      Tensor head_size = scalar_tensor(double(header.size()), {.dtype = kInt64});
      comm_.send(head_size, to, tag);
      comm_.send(head, to, tag);
      comm_.send(code, to, tag);
      comm_.send(t, to, tag);
    }
    return {};
  }
  all = mine;
  for (int r = 0; r < comm_.size(); ++r) {
    if (r == to) continue;
    Tensor count = empty({}, {.dtype = kInt64});
    comm_.recv(count, r, tag);
    for (int64_t e = 0; e < count.item<int64_t>(); ++e) {
      Tensor head_size = empty({}, {.dtype = kInt64});
      comm_.recv(head_size, r, tag);
      Tensor head = empty({head_size.item<int64_t>()}, {.dtype = kInt64});
      comm_.recv(head, r, tag);
      std::vector<int64_t> h = head.tolist<int64_t>();
      Tensor code = empty({h[0]}, {.dtype = kInt64});
      comm_.recv(code, r, tag);
      Tensor t = empty(Shape(h.begin() + 3, h.end()), {.dtype = static_cast<DType>(h[1])});
      comm_.recv(t, r, tag);
      all.emplace_back(decode(code), t);
    }
  }
  // In the unsharded optimizer's order: by parameter, then by name.
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    auto [ia, na] = parse_key(a.first, "consolidate_state_dict");
    auto [ib, nb] = parse_key(b.first, "consolidate_state_dict");
    return ia != ib ? ia < ib : na < nb;
  });
  if (metadata) {
    *metadata = local_meta;  // the optimizer's name, steps, the group's lr and decay
    (*metadata)["group.0.size"] = std::to_string(params_.size());
  }
  return all;
}

void ZeroRedundancyOptimizer::load_consolidated_state_dict(
    const NamedTensors& state, const std::map<std::string, std::string>& metadata) {
  RG_CHECK(optimizer_->param_groups().size() <= 1, "load_consolidated_state_dict",
           "expected a local optimizer with one parameter group, got ",
           optimizer_->param_groups().size());
  auto size = metadata.find("group.0.size");
  RG_CHECK(size != metadata.end() && size->second == std::to_string(params_.size()),
           "load_consolidated_state_dict", "expected the state of an optimizer over ",
           params_.size(), " parameters, got group.0.size = ",
           size == metadata.end() ? "(none)" : size->second);
  std::vector<size_t> local_index(params_.size(), 0);  // index in params_ -> in local_
  for (size_t i = 0, l = 0; i < params_.size(); ++i)
    if (owner_[i] == comm_.rank()) local_index[i] = l++;
  NamedTensors mine;
  for (const auto& [key, t] : state) {
    auto [index, name] = parse_key(key, "load_consolidated_state_dict");
    RG_CHECK(index < params_.size(), "load_consolidated_state_dict",
             "expected state for one of the ", params_.size(), " parameters, got ", key);
    if (owner_[index] == comm_.rank())
      mine.emplace_back("state.0." + std::to_string(local_index[index]) + "." + name, t);
  }
  std::map<std::string, std::string> local_meta = metadata;
  local_meta["group.0.size"] = std::to_string(local_.size());
  optimizer_->load_state_dict(mine, local_meta);
}

}  // namespace ringgrad::parallel
