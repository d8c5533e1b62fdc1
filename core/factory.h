// factory.h — making new tensors.
//
//   auto w = rg::randn({784, 256}, {.requires_grad = true});
//   auto z = rg::zeros({2, 3}, {.dtype = rg::kFloat64});
//   auto t = rg::from_vector<float>({1, 2, 3, 4}, {2, 2});
//
// Random factories draw from a counter-based generator (Philox-4x32-10): element i
// of a draw depends only on (seed, offset, i), so one seed gives the same numbers
// on every rank and, once the CUDA backend lands, on every device.
#pragma once

#include <functional>
#include <vector>

#include "ringgrad/core/tensor.h"

namespace ringgrad {

Tensor empty(const Shape& shape, TensorOptions options = {});  // uninitialised
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor scalar_tensor(double value, TensorOptions options = {});  // 0-dim
// [start, end) in steps of `step`, like torch.arange.
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
Tensor arange(double end, TensorOptions options = {});

Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);

// A tensor holding `values` (row-major) with the given shape (default, or {}: 1-D).
// The dtype follows T (float -> float32, double -> float64, int64_t -> int64) unless given.
template <typename T>
Tensor from_vector(const std::vector<T>& values, Shape shape = {}, TensorOptions options = {});

// A tensor over memory the caller allocated (torch::from_blob): contiguous,
// row-major, `data` on options.device. No copy is made; `release` is called with
// data when the last tensor viewing it goes (without one, the caller keeps the
// memory alive for as long as any view of the tensor lives).
Tensor from_blob(void* data, const Shape& shape, std::function<void(void*)> release,
                 TensorOptions options = {});
Tensor from_blob(void* data, const Shape& shape, TensorOptions options = {});

// ---- random numbers ----
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  // Reserve `count` counters for one draw; returns the first.
  uint64_t advance(uint64_t count) {
    uint64_t o = offset_;
    offset_ += count;
    return o;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);  // reseeds the default generator

// Uniform in [low, high) and normal(mean, std). `gen` defaults to the default generator.
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor uniform(const Shape& shape, double low, double high, TensorOptions options = {},
               Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double std, TensorOptions options = {},
              Generator* gen = nullptr);
// Random integers in [low, high), int64.
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen = nullptr);
// A random permutation of 0..n-1 (int64), drawn on the CPU.
Tensor randperm(int64_t n, Generator* gen = nullptr);

}  // namespace ringgrad
