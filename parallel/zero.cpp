// zero.cpp — the partition of the parameters, the local step, the broadcasts.
#include "ringgrad/parallel/zero.h"

#include <algorithm>
#include <numeric>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/factory.h"

namespace ringgrad::parallel {

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, Communicator& comm,
                                                 const Factory& make)
    : comm_(comm), params_(std::move(params)), owner_(params_.size(), 0) {
  RG_CHECK(static_cast<bool>(make), "ZeroRedundancyOptimizer",
           "expected a function that makes the optimizer, got none");
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

void ZeroRedundancyOptimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
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

// "state.<group>.<index>.<name>" -> (index, name)
std::pair<size_t, std::string> parse_key(const std::string& key) {
  size_t a = key.find('.'), b = key.find('.', a + 1), c = key.find('.', b + 1);
  RG_CHECK(key.rfind("state.0.", 0) == 0 && c != std::string::npos, "consolidate_state_dict",
           "expected the local optimizer's keys as state.0.<index>.<name> (one parameter "
           "group), got ", key);
  return {std::stoul(key.substr(b + 1, c - b - 1)), key.substr(c + 1)};
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
    auto [index, name] = parse_key(key);
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
    auto [ia, na] = parse_key(a.first);
    auto [ib, nb] = parse_key(b.first);
    return ia != ib ? ia < ib : na < nb;
  });
  if (metadata) {
    *metadata = local_meta;  // the optimizer's name, steps, the group's lr and decay
    (*metadata)["group.0.size"] = std::to_string(params_.size());
  }
  return all;
}

}  // namespace ringgrad::parallel
