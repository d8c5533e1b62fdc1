// dataset.h — what a DataLoader draws batches from.
//
// A Dataset knows how many examples it has and how to assemble a batch from a
// list of example indices. A Batch is a plain pair of tensors, so it unpacks:
//
//   rg::data::TensorDataset ds(x, y);           // x (N, ...), y (N, ...)
//   auto [xb, yb] = ds.get_batch({3, 1, 4});     // xb (3, ...), yb (3, ...)
//   for (auto& [x, y] : loader) { ... }          // the same, batch by batch
#pragma once

#include <cstdint>
#include <vector>

#include "ringgrad/core/tensor.h"

namespace ringgrad::data {

// Inputs and targets for B examples. For MNIST: x (B, 28, 28) float32, y (B) int64.
struct Batch {
  Tensor x;
  Tensor y;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Examples indices[0], indices[1], … stacked along a new first dim, in that order.
  // Every index must lie in [0, size()).
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
};

// A dataset held in memory as two tensors whose first dim counts the examples:
// example i is (x[i], y[i]). A batch is one index_select per tensor (one gather).
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor x, Tensor y);
  int64_t size() const override { return x_.size(0); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& x() const { return x_; }
  const Tensor& y() const { return y_; }

 protected:
  // For subclasses that load their tensors before handing them over (MNIST).
  TensorDataset() = default;
  void set_tensors(Tensor x, Tensor y);

 private:
  Tensor x_, y_;
};

}  // namespace ringgrad::data
