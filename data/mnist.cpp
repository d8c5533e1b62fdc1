// mnist.cpp — loading one MNIST split: find its two IDX files, read them, check that
// they describe the same images, and turn bytes into tensors (pixels / 255, labels int64).
#include "ringgrad/data/mnist.h"

#include <filesystem>

#include "ringgrad/core/factory.h"
#include "ringgrad/data/idx.h"

namespace ringgrad::data {

namespace {

constexpr const char* kOp = "MNIST";

// <directory>/<name> or <directory>/<name>.gz, whichever exists (uncompressed first).
std::string find_idx_file(const std::string& directory, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  RG_CHECK(fs::is_directory(directory, ec), kOp,
           "expected a directory holding the MNIST IDX files, got '", directory,
           "' (no such directory)");
  for (const std::string& candidate : {name, name + ".gz"}) {
    fs::path path = fs::path(directory) / candidate;
    if (fs::exists(path, ec)) return path.string();
  }
  fail(kOp, "expected ", name, " or ", name, ".gz in ", directory, ", got neither (missing file)");
}

}  // namespace

MNIST::MNIST(const std::string& directory, Split split) {
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  image_file_ = find_idx_file(directory, prefix + "-images-idx3-ubyte");
  label_file_ = find_idx_file(directory, prefix + "-labels-idx1-ubyte");

  IdxArray images = read_idx(image_file_);
  RG_CHECK(images.dims.size() == 3 && images.dims[1] > 0 && images.dims[2] > 0, kOp,
           image_file_, ": expected images with dims N×rows×cols (a 3-D IDX file), got dims ",
           images.dims);
  IdxArray labels = read_idx(label_file_);
  RG_CHECK(labels.dims.size() == 1, kOp, label_file_,
           ": expected labels with dims N (a 1-D IDX file), got dims ", labels.dims);
  RG_CHECK(images.dims[0] == labels.dims[0], kOp, "expected as many labels as images, got ",
           images.dims[0], " images in ", image_file_, " and ", labels.dims[0], " labels in ",
           label_file_, " (count mismatch)");
  // An empty split would train on nothing and report a NaN loss as if all were well.
  RG_CHECK(images.dims[0] > 0, kOp, image_file_,
           ": expected at least one sample, got 0 images (an empty split)");
  // A label outside the classes would only fail at the step that meets it (training)
  // or quietly count as wrong (testing): check them all here, where the file is known.
  for (size_t i = 0; i < labels.data.size(); ++i)
    RG_CHECK(labels.data[i] < kMnistClasses, kOp, label_file_, ": expected labels in [0, ",
             kMnistClasses, "), got ", int{labels.data[i]}, " for sample ", i,
             " (a damaged file, or not an MNIST-style dataset)");

  // x (N, rows, cols) float32: each byte through a 256-entry table of byte / 255.
  float scale[256];
  for (int v = 0; v < 256; ++v) scale[v] = static_cast<float>(v) / 255.0f;
  Tensor x = empty(images.dims, {.dtype = kFloat32});
  float* px = x.data_ptr<float>();
  for (size_t i = 0; i < images.data.size(); ++i) px[i] = scale[images.data[i]];

  // y (N) int64
  Tensor y = empty(labels.dims, {.dtype = kInt64});
  int64_t* py = y.data_ptr<int64_t>();
  for (size_t i = 0; i < labels.data.size(); ++i) py[i] = labels.data[i];

  set_tensors(x, y);
}

}  // namespace ringgrad::data
