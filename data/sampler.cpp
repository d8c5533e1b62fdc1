// sampler.cpp — sequential and shuffled index orders.
#include "ringgrad/data/sampler.h"

#include <numeric>

#include "ringgrad/core/factory.h"

namespace ringgrad::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  RG_CHECK(n >= 0, "SequentialSampler", "expected a dataset size >= 0, got ", n);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  RG_CHECK(n >= 0, "RandomSampler", "expected a dataset size >= 0, got ", n);
}

std::vector<int64_t> RandomSampler::indices() const {
  // A fresh generator per call: the order depends only on (seed, epoch), never on
  // how many times indices() was called before.
  Generator gen(seed_ + static_cast<uint64_t>(epoch_));
  Tensor perm = randperm(n_, &gen);
  const int64_t* p = perm.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + n_);
}

}  // namespace ringgrad::data
