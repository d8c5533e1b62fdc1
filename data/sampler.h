// sampler.h — the order in which a DataLoader visits a dataset's examples.
//
// A Sampler hands out one epoch's list of example indices at a time:
//
//   rg::data::RandomSampler sampler(60000, /*seed=*/42);
//   sampler.set_epoch(3);
//   std::vector<int64_t> order = sampler.indices();  // a permutation of 0..59999
//
// RandomSampler draws its permutation from a generator seeded with seed + epoch, so
// the same (seed, epoch) gives the same order on every run and every rank, and each
// epoch a different one. DistributedSampler (one shard per rank) has this interface too.
#pragma once

#include <cstdint>
#include <vector>

namespace ringgrad::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices() const = 0;  // this epoch's order
  virtual int64_t size() const = 0;                  // indices().size()
  virtual void set_epoch(int64_t epoch) {}           // samplers that shuffle reshuffle
};

// 0, 1, …, n-1, every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// A permutation of 0..n-1 drawn with seed + epoch.
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, uint64_t seed = 0);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 private:
  int64_t n_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

}  // namespace ringgrad::data
