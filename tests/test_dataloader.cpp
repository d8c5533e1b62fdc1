// test_dataloader.cpp — TensorDataset, the samplers and the DataLoader: batch counts,
// drop_last, shuffling by seed + epoch, a caller's sampler, and the iterators.
// (The IDX reader and MNIST are in test_data.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <iterator>
#include <vector>

#include <ringgrad/data/dataloader.h>
#include <ringgrad/data/dataset.h>
#include <ringgrad/data/sampler.h>
#include <ringgrad/ringgrad.h>

#include "test_helpers.h"

using test::error_of;

namespace {

// A dataset whose example i is x = (i, i) as float32, y = i as int64: batches name their indices.
rg::data::TensorDataset indexed_dataset(int64_t n) {
  rg::Tensor x = rg::arange(0, static_cast<double>(n)).unsqueeze(1).expand({n, 2}).contiguous();
  rg::Tensor y = rg::arange(0, static_cast<double>(n), 1, {.dtype = rg::kInt64});
  return rg::data::TensorDataset(x, y);
}

// Every y of one pass over the loader, in order.
std::vector<int64_t> epoch_order(const rg::data::DataLoader& loader) {
  std::vector<int64_t> order;
  for (const auto& [x, y] : loader)
    for (int64_t v : y.tolist<int64_t>()) order.push_back(v);
  return order;
}

}  // namespace

// ---------------------------------------------------------------- TensorDataset

TEST_CASE("data: TensorDataset gathers rows and checks its tensors") {
  rg::data::TensorDataset ds = indexed_dataset(6);
  CHECK(ds.size() == 6);
  auto [x, y] = ds.get_batch({5, 2, 2});
  CHECK_SHAPE(x, {3, 2});
  test::check_close(x, {5, 5, 2, 2, 2, 2});
  CHECK(y.tolist<int64_t>() == std::vector<int64_t>{5, 2, 2});
  CHECK_SHAPE(ds.get_batch({}).x, {0, 2});

  std::string msg = error_of([] { rg::data::TensorDataset(rg::zeros({4, 2}), rg::zeros({3})); });
  CHECK_CONTAINS(msg, "[TensorDataset]");
  CHECK_CONTAINS(msg, "[4, 2]");
  CHECK_CONTAINS(msg, "[3]");
  CHECK_CONTAINS(error_of([] { rg::data::TensorDataset(rg::scalar_tensor(1), rg::zeros({1})); }),
                 "first dim");
  CHECK_CONTAINS(error_of([] { rg::data::TensorDataset(rg::Tensor(), rg::zeros({1})); }),
                 "undefined x");
}

// ---------------------------------------------------------------- samplers

TEST_CASE("data: samplers give sequential and seeded random orders") {
  rg::data::SequentialSampler seq(5);
  CHECK(seq.size() == 5);
  CHECK(seq.indices() == std::vector<int64_t>{0, 1, 2, 3, 4});
  seq.set_epoch(3);
  CHECK(seq.indices() == std::vector<int64_t>{0, 1, 2, 3, 4});

  rg::data::RandomSampler a(100, /*seed=*/7), b(100, /*seed=*/7), c(100, /*seed=*/8);
  std::vector<int64_t> first = a.indices();
  std::vector<int64_t> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == rg::data::SequentialSampler(100).indices());  // a permutation
  CHECK(first != sorted);
  CHECK(a.indices() == first);  // asking again does not reshuffle
  CHECK(b.indices() == first);  // same seed, same epoch
  CHECK(c.indices() != first);  // another seed
  a.set_epoch(1);
  CHECK(a.epoch() == 1);
  CHECK(a.indices() != first);  // another epoch
  a.set_epoch(0);
  CHECK(a.indices() == first);  // and back

  CHECK(rg::data::RandomSampler(0).indices().empty());
  CHECK_CONTAINS(error_of([] { rg::data::RandomSampler(-1); }), "got -1");
}

// ---------------------------------------------------------------- DataLoader

TEST_CASE("data: DataLoader batch counts with and without drop_last") {
  rg::data::TensorDataset ds = indexed_dataset(10);

  rg::data::DataLoader keep(ds, {.batch_size = 3});
  CHECK(keep.size() == 4);
  std::vector<int64_t> sizes;
  for (auto& [x, y] : keep) {
    CHECK(x.size(0) == y.size(0));
    sizes.push_back(y.size(0));
  }
  CHECK(sizes == std::vector<int64_t>{3, 3, 3, 1});
  CHECK(epoch_order(keep) == rg::data::SequentialSampler(10).indices());

  rg::data::DataLoader drop(ds, {.batch_size = 3, .drop_last = true});
  CHECK(drop.size() == 3);
  CHECK(epoch_order(drop) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8});

  CHECK(rg::data::DataLoader(ds, {.batch_size = 5, .drop_last = true}).size() == 2);
  CHECK(rg::data::DataLoader(ds, {.batch_size = 5}).size() == 2);
  CHECK(rg::data::DataLoader(ds, {.batch_size = 64}).size() == 1);
  CHECK(rg::data::DataLoader(ds, {.batch_size = 64, .drop_last = true}).size() == 0);
  int64_t batches = 0;
  for (auto& batch : rg::data::DataLoader(ds, {.batch_size = 64, .drop_last = true})) {
    (void)batch;
    ++batches;
  }
  CHECK(batches == 0);
  CHECK(rg::data::DataLoader(ds).size() == 10);  // default batch_size 1

  std::string msg = error_of([&] { rg::data::DataLoader(ds, {.batch_size = 0}); });
  CHECK_CONTAINS(msg, "[DataLoader]");
  CHECK_CONTAINS(msg, "expected batch_size >= 1, got 0");
}

TEST_CASE("data: DataLoader shuffle visits every example once per epoch, seeded by seed + epoch") {
  rg::data::TensorDataset ds = indexed_dataset(103);
  rg::data::DataLoader loader(ds, {.batch_size = 10, .shuffle = true, .seed = 5});
  const std::vector<int64_t> all = rg::data::SequentialSampler(103).indices();

  std::vector<int64_t> e0 = epoch_order(loader);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == all);  // every index exactly once
  CHECK(e0 != all);      // and not in order
  CHECK(epoch_order(loader) == e0);  // iterating again without set_epoch replays the epoch

  loader.set_epoch(1);
  std::vector<int64_t> e1 = epoch_order(loader);
  CHECK(e1 != e0);
  sorted = e1;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == all);

  rg::data::DataLoader twin(ds, {.batch_size = 7, .shuffle = true, .seed = 5});
  twin.set_epoch(1);
  CHECK(epoch_order(twin) == e1);  // same seed and epoch, same order (batch size aside)
  rg::data::RandomSampler same(103, 5);
  same.set_epoch(1);
  CHECK(same.indices() == e1);  // exactly RandomSampler's order

  // x and y of a batch stay paired through the shuffle.
  for (auto& [x, y] : loader) test::check_close(x.select(1, 0), y.to(rg::kFloat32).tolist<double>());
}

TEST_CASE("data: DataLoader::starting_at continues an epoch where a resumed run left it") {
  rg::data::TensorDataset ds = indexed_dataset(103);
  rg::data::DataLoader loader(ds, {.batch_size = 10, .shuffle = true, .seed = 5});
  loader.set_epoch(2);
  const std::vector<int64_t> whole = epoch_order(loader);
  for (int64_t first : {0, 1, 4, 10, 11}) {
    std::vector<int64_t> rest;
    for (const auto& [x, y] : loader.starting_at(first))
      for (int64_t v : y.tolist<int64_t>()) rest.push_back(v);
    // the same order as the whole epoch's, minus its first `first` batches
    const size_t skipped = std::min<size_t>(static_cast<size_t>(first) * 10, whole.size());
    CHECK(rest == std::vector<int64_t>(whole.begin() + static_cast<std::ptrdiff_t>(skipped), whole.end()));
  }
  CHECK(error_of([&] { loader.starting_at(12); }).find("expected a batch in [0, 11]") !=
        std::string::npos);
  CHECK(error_of([&] { loader.starting_at(-1); }).find("got -1") != std::string::npos);
}

TEST_CASE("data: DataLoader with a caller's sampler") {
  rg::data::TensorDataset ds = indexed_dataset(12);

  // A sampler that takes every other index, starting at the epoch's parity.
  struct EverySecond : rg::data::Sampler {
    int64_t epoch = 0;
    std::vector<int64_t> indices() const override {
      std::vector<int64_t> out;
      for (int64_t i = epoch % 2; i < 12; i += 2) out.push_back(i);
      return out;
    }
    int64_t size() const override { return 6; }
    void set_epoch(int64_t e) override { epoch = e; }
  } sampler;

  rg::data::DataLoader loader(ds, {.batch_size = 4, .sampler = &sampler});
  CHECK(loader.size() == 2);
  CHECK(epoch_order(loader) == std::vector<int64_t>{0, 2, 4, 6, 8, 10});
  loader.set_epoch(1);  // forwarded to the sampler
  CHECK(sampler.epoch == 1);
  CHECK(epoch_order(loader) == std::vector<int64_t>{1, 3, 5, 7, 9, 11});
  sampler.set_epoch(2);  // or set on the sampler directly, as with DistributedSampler
  CHECK(epoch_order(loader) == std::vector<int64_t>{0, 2, 4, 6, 8, 10});

  std::string msg =
      error_of([&] { rg::data::DataLoader(ds, {.shuffle = true, .sampler = &sampler}); });
  CHECK_CONTAINS(msg, "[DataLoader]");
  CHECK_CONTAINS(msg, "shuffle");
  CHECK_CONTAINS(msg, "sampler");

  // A sampler that hands out indices the dataset does not have: a clear error.
  rg::data::SequentialSampler too_long(13);
  rg::data::DataLoader bad(ds, {.batch_size = 13, .sampler = &too_long});
  CHECK_CONTAINS(error_of([&] { epoch_order(bad); }), "expected indices in [0, 12), got 12");
}

TEST_CASE("data: DataLoader iterators") {
  rg::data::TensorDataset ds = indexed_dataset(5);
  rg::data::DataLoader loader(ds, {.batch_size = 2});
  auto it = loader.begin();
  CHECK(it != loader.end());
  CHECK(it->y.tolist<int64_t>() == std::vector<int64_t>{0, 1});
  rg::Tensor kept = (*it).x;  // a batch's tensors outlive the step
  ++it;
  CHECK((*it).y.tolist<int64_t>() == std::vector<int64_t>{2, 3});
  it++;
  CHECK(it->y.tolist<int64_t>() == std::vector<int64_t>{4});
  ++it;
  CHECK(it == loader.end());
  CHECK_CONTAINS(error_of([&] { (void)*it; }), "dereferenced end()");
  test::check_close(kept, {0, 0, 1, 1});
  static_assert(std::input_iterator<rg::data::DataLoader::Iterator>);
}

TEST_CASE("data: pin_memory gives the same batches, pinned only where a GPU is present") {
  // A dataset whose x is a non-contiguous view, so the pinned copy must gather it.
  rg::Tensor x = rg::arange(0, 42).reshape({3, 14}).t();  // (14, 3)
  rg::Tensor y = rg::arange(0, 14, 1, {.dtype = rg::kInt64});
  rg::data::TensorDataset ds(x, y);
  rg::data::DataLoader plain(ds, {.batch_size = 4, .shuffle = true, .seed = 5});
  rg::data::DataLoader pinned(ds,
                              {.batch_size = 4, .shuffle = true, .seed = 5, .pin_memory = true});
  CHECK(pinned.options().pin_memory);
  CHECK(pinned.size() == plain.size());
  const bool gpu = rg::cuda::is_available();
  int64_t batches = 0;
  for (auto a = plain.begin(), b = pinned.begin(); a != plain.end(); ++a, ++b, ++batches) {
    REQUIRE(b != pinned.end());
    CHECK(b->x.shape() == a->x.shape());
    CHECK(b->y.shape() == a->y.shape());
    CHECK(b->x.dtype() == a->x.dtype());
    CHECK(b->y.dtype() == a->y.dtype());
    CHECK(b->x.device() == rg::kCPU);
    CHECK(b->x.tolist<double>() == a->x.tolist<double>());
    CHECK(b->y.tolist<int64_t>() == a->y.tolist<int64_t>());
    // Pinned memory only where there is a GPU to copy to; ordinary memory otherwise.
    CHECK(b->x.storage()->pinned() == gpu);
    CHECK(b->y.storage()->pinned() == gpu);
    CHECK_FALSE(a->x.storage()->pinned());
  }
  CHECK(batches == 4);  // 14 examples in batches of 4: the last holds 2
}
