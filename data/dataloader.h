// dataloader.h — batches of a dataset, one epoch per pass of a range-for.
//
//   rg::data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 1});
//   for (int epoch = 0; epoch < 5; ++epoch) {
//     loader.set_epoch(epoch);               // a new shuffle each epoch
//     for (auto& [x, y] : loader) { ... }    // x (64, 28, 28), y (64); the last may be short
//   }
//
// The order comes from a Sampler: the caller's (`.sampler = &sampler`, e.g. a
// DistributedSampler, which then also owns the shuffling), or one the loader makes
// itself (RandomSampler with `.shuffle`, SequentialSampler otherwise). Each begin()
// asks the sampler for the epoch's order, so iterating again replays or reshuffles
// according to the sampler's epoch at that time.
//
// With `.pin_memory = true` (as in PyTorch) each batch's CPU tensors are copied into
// page-locked memory when the batch is assembled, so `x.to(cuda)` is one direct,
// asynchronous DMA instead of a copy through a staging buffer. Without a usable GPU
// the batches stay in ordinary memory (same values; nothing to pin for). A pinned
// batch is for reading: `.to(cuda)` does not wait for its DMA, so write into a copy
// (x.clone()), not into x, after moving it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "ringgrad/data/dataset.h"
#include "ringgrad/data/sampler.h"

namespace ringgrad::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;        // visit the examples in a random order (RandomSampler)
  uint64_t seed = 0;           // the shuffle's seed; epoch e uses seed + e
  bool drop_last = false;      // skip a last batch smaller than batch_size
  Sampler* sampler = nullptr;  // the caller's order (not with shuffle); must outlive the loader
  bool pin_memory = false;     // batches in page-locked memory, for fast copies to a GPU
};

class DataLoader {
 public:
  class Iterator;

  // The loader keeps a reference to `dataset`: it must outlive the loader.
  DataLoader(const Dataset& dataset, DataLoaderOptions options = {});
  DataLoader(const Dataset&& dataset, DataLoaderOptions options = {}) = delete;  // would dangle

  Iterator begin() const;  // draws this epoch's order from the sampler
  Iterator end() const;
  int64_t size() const;  // batches per epoch

  // This epoch from batch `first` on (the same order as begin()'s, its first `first`
  // batches skipped without being assembled): how a resumed run continues mid-epoch.
  //   for (auto& [x, y] : loader.starting_at(progress.batch)) …
  struct Range;
  Range starting_at(int64_t first) const;

  void set_epoch(int64_t epoch) { sampler_->set_epoch(epoch); }
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  const Dataset* dataset_;
  DataLoaderOptions options_;
  std::unique_ptr<Sampler> own_sampler_;  // when the caller gave none
  Sampler* sampler_;                      // the one in use
};

// Walks one epoch's order; each batch is assembled when first dereferenced.
class DataLoader::Iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using reference = Batch&;
  using pointer = Batch*;

  Iterator() = default;
  Batch& operator*() const;
  Batch* operator->() const { return &**this; }
  Iterator& operator++();
  void operator++(int) { ++*this; }
  bool operator==(const Iterator& other) const { return batch_ == other.batch_; }

 private:
  friend class DataLoader;
  const DataLoader* loader_ = nullptr;
  std::shared_ptr<const std::vector<int64_t>> order_;  // this epoch's example indices
  int64_t batch_ = 0;                                  // position: which batch of the epoch
  mutable Batch current_;
  mutable bool loaded_ = false;
};

struct DataLoader::Range {
  Iterator first, last;
  Iterator begin() const { return first; }
  Iterator end() const { return last; }
};

}  // namespace ringgrad::data
