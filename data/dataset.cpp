// dataset.cpp — TensorDataset: batches are gathered rows of two in-memory tensors.
#include "ringgrad/data/dataset.h"

#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::data {

TensorDataset::TensorDataset(Tensor x, Tensor y) { set_tensors(std::move(x), std::move(y)); }

void TensorDataset::set_tensors(Tensor x, Tensor y) {
  const char* op = "TensorDataset";
  RG_CHECK(x.defined() && y.defined(), op, "expected two defined tensors, got ",
           x.defined() ? "a defined x" : "an undefined x", " and ",
           y.defined() ? "a defined y" : "an undefined y");
  RG_CHECK(x.dim() >= 1 && y.dim() >= 1, op,
           "expected x and y with a first dim counting the examples, got shapes ",
           shape_str(x.shape()), " and ", shape_str(y.shape()));
  RG_CHECK(x.size(0) == y.size(0), op, "expected as many targets as inputs, got x of shape ",
           shape_str(x.shape()), " and y of shape ", shape_str(y.shape()));
  RG_CHECK(x.device() == y.device(), op, "expected x and y on one device, got ", x.describe(),
           " and ", y.describe());
  x_ = std::move(x);
  y_ = std::move(y);
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t n = size();
  for (size_t i = 0; i < indices.size(); ++i)
    RG_CHECK(indices[i] >= 0 && indices[i] < n, "get_batch", "expected indices in [0, ", n,
             "), got ", indices[i], " at position ", i);
  Tensor index = from_vector<int64_t>(indices, {static_cast<int64_t>(indices.size())});
  if (x_.device() != kCPU) index = index.to(x_.device());
  // x (B, ...) = x_[indices], y (B, ...) = y_[indices]
  return {index_select(x_, 0, index), index_select(y_, 0, index)};
}

}  // namespace ringgrad::data
