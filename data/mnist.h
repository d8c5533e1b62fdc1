// mnist.h — MNIST and Fashion-MNIST from their IDX files.
//
//   rg::data::MNIST train(rg::data::kDefaultMnistDir, rg::data::Split::Train);
//   train.size();                       // 60000
//   auto [x, y] = train.get_batch({0, 1});
//   // x (2, 28, 28) float32 in [0, 1], y (2) int64 class labels
//
// The directory holds the files under their usual names, compressed or not:
//   train-images-idx3-ubyte[.gz]  train-labels-idx1-ubyte[.gz]    (Split::Train)
//   t10k-images-idx3-ubyte[.gz]   t10k-labels-idx1-ubyte[.gz]     (Split::Test)
// The whole split is loaded once into one float32 tensor (N, rows, cols) — 188 MB
// for the training set — and every batch is a single gather from it.
//
// Loading checks what it can: at least one image, as many labels as images, every
// label a class in [0, 10). Images of any rows×cols are accepted (the reader is not the
// model: small fake splits test the pipeline); a model that needs 28×28 checks its
// input (examples/simple_model.h does).
#pragma once

#include <string>

#include "ringgrad/data/dataset.h"

namespace ringgrad::data {

// The Debian package dataset-fashion-mnist installs Fashion-MNIST here.
inline constexpr const char* kDefaultMnistDir = "/usr/share/datasets/fashion-mnist";

// MNIST's digits and Fashion-MNIST's garments: ten classes each, labels 0 to 9.
inline constexpr int kMnistClasses = 10;

enum class Split { Train, Test };

class MNIST : public TensorDataset {
 public:
  explicit MNIST(const std::string& directory = kDefaultMnistDir, Split split = Split::Train);

  const Tensor& images() const { return x(); }  // (N, rows, cols) float32, pixels / 255
  const Tensor& labels() const { return y(); }  // (N) int64
  const std::string& image_file() const { return image_file_; }
  const std::string& label_file() const { return label_file_; }

 private:
  std::string image_file_, label_file_;
};

}  // namespace ringgrad::data
