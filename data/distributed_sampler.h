// distributed_sampler.h — each rank's share of the data, with PyTorch's semantics.
//
//   rg::data::DistributedSampler sampler(train.size(), world.size(), world.rank());
//   rg::data::DataLoader loader(train, {.batch_size = 64, .sampler = &sampler});
//   for (int epoch = 0; …) { sampler.set_epoch(epoch); for (auto& [x, y] : loader) … }
//
// Every rank draws the same permutation (seeded by seed + epoch), pads it by
// wrapping around until its length divides by the number of ranks (or, with
// drop_last, cuts the tail), and takes every num_replicas-th index starting
// at its rank: the shards are disjoint, cover the data, and have equal sizes,
// so every rank runs the same number of steps. Forgetting set_epoch gives the
// same order every epoch, exactly as in PyTorch.
#pragma once

#include "ringgrad/data/sampler.h"

namespace ringgrad::data {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                     DistributedSamplerOptions options = {});
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return num_samples_; }  // this rank's share
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t n_;
  int num_replicas_, rank_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace ringgrad::data
