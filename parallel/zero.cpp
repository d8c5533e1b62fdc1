// zero.cpp — the partition of the parameters, the local step, the broadcasts.
#include "ringgrad/parallel/zero.h"

#include <algorithm>
#include <numeric>

#include "ringgrad/autograd/grad_mode.h"

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

}  // namespace ringgrad::parallel
