// distributed_sampler.cpp — torch.utils.data.DistributedSampler, line for line.
#include "ringgrad/data/distributed_sampler.h"

#include "ringgrad/core/factory.h"

namespace ringgrad::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       DistributedSamplerOptions options)
    : n_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  RG_CHECK(num_replicas >= 1, "DistributedSampler", "expected num_replicas >= 1, got ",
           num_replicas);
  RG_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler", "expected a rank in [0, ",
           num_replicas, "), got ", rank);
  RG_CHECK(dataset_size >= 0, "DistributedSampler", "expected a dataset size >= 0, got ",
           dataset_size);
  // Padding (default) rounds the share up; drop_last rounds it down.
  if (options.drop_last && n_ % num_replicas_ != 0)
    num_samples_ = (n_ - num_replicas_ + num_replicas_ - 1) / num_replicas_;  // ceil((n-R)/R)
  else
    num_samples_ = (n_ + num_replicas_ - 1) / num_replicas_;  // ceil(n/R)
  if (num_samples_ < 0) num_samples_ = 0;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  if (options_.shuffle) {  // the same permutation on every rank: same seed, same epoch
    Generator gen(options_.seed + static_cast<uint64_t>(epoch_));
    Tensor perm = randperm(n_, &gen);
    const int64_t* p = perm.data_ptr<int64_t>();
    order.assign(p, p + n_);
  } else {
    for (int64_t i = 0; i < n_; ++i) order[i] = i;
  }
  int64_t total = total_size();
  if (!options_.drop_last) {
    // Pad by wrapping around (repeating the whole list if the padding is longer than it).
    for (int64_t i = 0; static_cast<int64_t>(order.size()) < total && n_ > 0; ++i)
      order.push_back(order[i % n_]);
  } else {
    order.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(order[i]);
  return mine;
}

}  // namespace ringgrad::data
