// test_pinned.cpp — host-to-device copies: the pinned staging buffers and pinned batches.
//
// Tensor::to(cuda) from pageable memory of 64 KiB or more goes through two pinned
// staging buffers and returns without waiting for the DMA; from a pinned DataLoader
// batch it is one direct DMA. These cases check that what arrives on the GPU is
// what the host held when .to() was called, also when the source is changed or
// freed right after, when copies follow each other closely (the buffers are
// reused), and when a copy is bigger than a buffer (8 MiB pieces). They need a GPU;
// without one they say so (the name puts them in the GPU harness of scripts/gpu-check).
#include <doctest/doctest.h>
#include <ringgrad/data/dataloader.h>
#include <ringgrad/data/dataset.h>
#include <ringgrad/ringgrad.h>

#include <string>
#include <vector>

#include "test_helpers.h"

namespace {

bool skip_without_gpu() {
  if (rg::cuda::is_available()) return false;
  std::string build = rg::cuda::is_built() ? "built with CUDA" : "built without CUDA";
  MESSAGE("SKIPPED: no CUDA device (" << build << "): host-to-device copies not exercised");
  return true;
}

bool same(const rg::Tensor& a, const rg::Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && rg::allclose(a, b, 0, 0);
}

}  // namespace

TEST_CASE("backends: host-to-device copies through the staging buffers arrive intact") {
  if (skip_without_gpu()) return;
  const rg::Device gpu = rg::Device::cuda(0);
  rg::manual_seed(7);

  SUBCASE("one copy above the 64 KiB threshold, and one below") {
    for (int64_t n : {int64_t(16) << 10, int64_t(17) << 10, int64_t(40) << 10}) {  // 64/68/160 KiB
      CAPTURE(n);
      rg::Tensor host = rg::randn({n});
      CHECK(same(host.to(gpu).to(rg::kCPU), host));
    }
    rg::Tensor small = rg::randn({100});
    CHECK(same(small.to(gpu).to(rg::kCPU), small));
  }

  SUBCASE("copies back to back, sources changed and freed as soon as .to() returns") {
    // Sizes below, at and above one staging buffer (8 MiB), and odd ones.
    const std::vector<int64_t> sizes{70001, 1 << 20, (5 << 20) + 3, 300000, 17, 2 << 20};
    std::vector<rg::Tensor> expected, on_gpu;
    for (int64_t n : sizes) {
      rg::Tensor host = rg::randn({n});
      expected.push_back(host.clone());
      on_gpu.push_back(host.to(gpu));
      host.fill_(-1.0);  // the GPU copy must hold the values at the time of .to()
    }                    // each host tensor is freed here, possibly before its DMA has run
    for (size_t i = 0; i < sizes.size(); ++i) {
      CAPTURE(sizes[i]);
      CHECK(same(on_gpu[i].to(rg::kCPU), expected[i]));
    }
  }

  SUBCASE("many small copies, not waited for, round the 4 MiB pinned ring and past it") {
    // Labels-sized copies (below 64 KiB) go through a pinned ring with an event per
    // copy; 600 of up to 16 KiB wrap it more than once while the GPU is busy.
    rg::Tensor busy = rg::randn({2048, 2048}, {.device = gpu});
    std::vector<rg::Tensor> expected, on_gpu;
    for (int i = 0; i < 600; ++i) {
      if (i % 50 == 0) busy = rg::matmul(busy, busy) * 1e-3;  // keep the stream behind
      rg::Tensor host = rg::randint(0, 1000, {1 + (i * 37) % 2048});
      expected.push_back(host.clone());
      on_gpu.push_back(host.to(gpu));
      host.fill_(-1.0);  // the ring holds the values as they were at .to()
    }
    for (size_t i = 0; i < on_gpu.size(); ++i) {
      CAPTURE(i);
      CHECK(same(on_gpu[i].to(rg::kCPU), expected[i]));
    }
  }

  SUBCASE("a float64 view with an offset, and int64") {
    rg::Tensor big = rg::randn({3, 20000}, {.dtype = rg::kFloat64});
    rg::Tensor row = big.slice(0, 1, 3);  // contiguous, starts 160 000 bytes in
    CHECK(same(row.to(gpu).to(rg::kCPU), row));
    rg::Tensor ids = rg::randint(0, 1000, {50000});
    CHECK(same(ids.to(gpu).to(rg::kCPU), ids));
  }
}

TEST_CASE("backends: pinned DataLoader batches go to the GPU intact") {
  if (skip_without_gpu()) return;
  const rg::Device gpu = rg::Device::cuda(0);
  rg::manual_seed(3);
  // 200 examples of 40×40 float32: a batch of 16 is 100 KiB.
  rg::data::TensorDataset ds(rg::randn({200, 40, 40}), rg::randint(0, 10, {200}));
  rg::data::DataLoader plain(ds, {.batch_size = 16, .shuffle = true, .seed = 1});
  rg::data::DataLoader pinned(ds,
                              {.batch_size = 16, .shuffle = true, .seed = 1, .pin_memory = true});
  std::vector<rg::Tensor> xs, ys;
  for (auto& [x, y] : pinned) {
    CHECK(x.storage()->pinned());
    CHECK(y.storage()->pinned());
    // Not waited for; the batch is released by ++ right after, and its pinned block is
    // reused for a later batch only once the GPU has read it.
    xs.push_back(x.to(gpu));
    ys.push_back(y.to(gpu));
  }
  size_t i = 0;
  for (auto& [x, y] : plain) {
    REQUIRE(i < xs.size());
    CHECK(same(xs[i].to(rg::kCPU), x));
    CHECK(same(ys[i].to(rg::kCPU), y));
    ++i;
  }
  CHECK(i == xs.size());
  rg::empty_cache(rg::kCPU);  // frees the cached pinned blocks once their copies are done
}
