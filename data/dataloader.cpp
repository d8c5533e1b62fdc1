// dataloader.cpp — cutting a sampler's order into batches.
//
// Batch b of an epoch holds the examples order[b·B … min((b+1)·B, n)), B = batch_size;
// the dataset assembles them (for MNIST, one index_select over the whole split). With
// pin_memory, each CPU tensor of the batch is then copied into a pinned Storage, as
// PyTorch's pin-memory step does.
#include "ringgrad/data/dataloader.h"

#include <algorithm>
#include <cstring>

#include "ringgrad/core/device.h"
#include "ringgrad/core/error.h"

namespace ringgrad::data {
namespace {

// t's values in a new contiguous CPU tensor in page-locked memory; t itself where
// there is nothing to pin (not a CPU tensor, or no GPU to give pinned memory).
Tensor pinned(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu()) return t;
  Tensor src = t.contiguous();
  auto storage = std::make_shared<Storage>(src.nbytes(), kCPU, /*pin=*/true);
  if (!storage->pinned()) return t;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = src.shape();
  impl->strides = contiguous_strides(src.shape());
  impl->dtype = src.dtype();
  Tensor out(std::move(impl));
  if (src.nbytes() > 0) std::memcpy(out.raw_data(), src.raw_data(), src.nbytes());
  return out;
}

}  // namespace

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options)
    : dataset_(&dataset), options_(options), sampler_(options.sampler) {
  const char* op = "DataLoader";
  RG_CHECK(options.batch_size >= 1, op, "expected batch_size >= 1, got ", options.batch_size);
  RG_CHECK(!(options.sampler && options.shuffle), op,
           "expected either shuffle = true or a sampler, got both (the sampler decides the ",
           "order: shuffle through it instead)");
  if (!sampler_) {
    if (options.shuffle)
      own_sampler_ = std::make_unique<RandomSampler>(dataset.size(), options.seed);
    else
      own_sampler_ = std::make_unique<SequentialSampler>(dataset.size());
    sampler_ = own_sampler_.get();
  }
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() const {
  auto order = std::make_shared<const std::vector<int64_t>>(sampler_->indices());
  RG_CHECK(static_cast<int64_t>(order->size()) == sampler_->size(), "DataLoader",
           "expected the sampler to give size() = ", sampler_->size(), " indices, got ",
           order->size());
  Iterator it;
  it.loader_ = this;
  it.order_ = std::move(order);
  return it;
}

DataLoader::Range DataLoader::starting_at(int64_t first) const {
  RG_CHECK(first >= 0 && first <= size(), "DataLoader::starting_at",
           "expected a batch in [0, ", size(), "] (batches per epoch), got ", first);
  Range range{begin(), end()};
  range.first.batch_ = first;
  return range;
}

DataLoader::Iterator DataLoader::end() const {
  Iterator it;
  it.loader_ = this;
  it.batch_ = size();
  return it;
}

Batch& DataLoader::Iterator::operator*() const {
  if (!loaded_) {
    RG_CHECK(order_ && batch_ < loader_->size(), "DataLoader", "expected a batch in [0, ",
             loader_ ? loader_->size() : 0, "), got batch ", batch_, " (dereferenced end())");
    const int64_t b = loader_->options_.batch_size, n = static_cast<int64_t>(order_->size());
    const int64_t first = batch_ * b, last = std::min(first + b, n);
    std::vector<int64_t> indices(order_->begin() + first, order_->begin() + last);
    current_ = loader_->dataset_->get_batch(indices);
    if (loader_->options_.pin_memory && cuda::is_available())
      current_ = {pinned(current_.x), pinned(current_.y)};
    loaded_ = true;
  }
  return current_;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++batch_;
  loaded_ = false;
  current_ = Batch{};  // release the previous batch's tensors
  return *this;
}

}  // namespace ringgrad::data
