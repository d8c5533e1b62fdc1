// DistributedSampler: PyTorch's semantics, checked by simulating every rank in one process.
#include <doctest/doctest.h>
#include <ringgrad/data/distributed_sampler.h>
#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <set>

namespace rg = ringgrad;
using rg::data::DistributedSampler;

static std::vector<std::vector<int64_t>> shards(int64_t n, int ranks,
                                                rg::data::DistributedSamplerOptions o,
                                                int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < ranks; ++r) {
    DistributedSampler s(n, ranks, r, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
    CHECK(static_cast<int64_t>(out.back().size()) == s.size());
  }
  return out;
}

TEST_CASE("distributed sampler: padding by wrap-around, as in PyTorch") {
  auto s = shards(10, 3, {.shuffle = false});
  CHECK(s[0] == std::vector<int64_t>{0, 3, 6, 9});
  CHECK(s[1] == std::vector<int64_t>{1, 4, 7, 0});
  CHECK(s[2] == std::vector<int64_t>{2, 5, 8, 1});
  // padding longer than the data repeats the whole list: n=2 over 5 ranks -> [0,1,0,1,0]
  auto tiny = shards(2, 5, {.shuffle = false});
  CHECK(tiny[2] == std::vector<int64_t>{0});
  CHECK(tiny[3] == std::vector<int64_t>{1});
}

TEST_CASE("distributed sampler: drop_last cuts the tail") {
  auto s = shards(10, 3, {.shuffle = false, .drop_last = true});
  CHECK(s[0] == std::vector<int64_t>{0, 3, 6});
  CHECK(s[1] == std::vector<int64_t>{1, 4, 7});
  CHECK(s[2] == std::vector<int64_t>{2, 5, 8});
}

TEST_CASE("distributed sampler: shards are disjoint and cover the data, every epoch") {
  for (int ranks : {1, 2, 3, 4, 7}) {
    CAPTURE(ranks);
    for (int64_t epoch : {0, 1, 5}) {
      auto s = shards(1000, ranks, {.seed = 3, .drop_last = true}, epoch);
      std::set<int64_t> seen;
      size_t total = 0;
      for (auto& shard : s) {
        total += shard.size();
        seen.insert(shard.begin(), shard.end());
      }
      CHECK(seen.size() == total);           // disjoint
      CHECK(total == 1000 / ranks * ranks);  // everything but the cut tail
      auto padded = shards(1000, ranks, {.seed = 3}, epoch);
      std::set<int64_t> all;
      for (auto& shard : padded) all.insert(shard.begin(), shard.end());
      CHECK(all.size() == 1000);  // padded: every index somewhere
    }
  }
}

TEST_CASE("distributed sampler: same order on every rank for an epoch, new order each epoch") {
  DistributedSampler a(500, 2, 0, {.seed = 11}), b(500, 2, 0, {.seed = 11});
  a.set_epoch(4);
  b.set_epoch(4);
  CHECK(a.indices() == b.indices());  // what another process with the same seed sees
  auto e4 = a.indices();
  a.set_epoch(5);
  CHECK(a.indices() != e4);
  DistributedSampler forgetful(500, 2, 0, {.seed = 11});  // never calls set_epoch
  CHECK(forgetful.indices() == forgetful.indices());
}

TEST_CASE("distributed sampler: bad arguments") {
  CHECK_THROWS_AS(DistributedSampler(10, 0, 0), rg::Error);
  CHECK_THROWS_AS(DistributedSampler(10, 2, 2), rg::Error);
  CHECK_THROWS_AS(DistributedSampler(-1, 2, 0), rg::Error);
}

TEST_CASE("distributed sampler: drives a DataLoader") {
  rg::data::TensorDataset data(rg::arange(10).reshape({10, 1}),
                               rg::arange(10, {.dtype = rg::kInt64}));
  DistributedSampler sampler(10, 2, 1, {.shuffle = false});
  rg::data::DataLoader loader(data, {.batch_size = 2, .sampler = &sampler});
  std::vector<int64_t> ys;
  for (auto& [x, y] : loader)
    for (int64_t v : y.tolist<int64_t>()) ys.push_back(v);
  CHECK(ys == std::vector<int64_t>{1, 3, 5, 7, 9});
}
