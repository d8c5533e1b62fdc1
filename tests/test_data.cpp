// test_data.cpp — the IDX reader on files written here (raw and gzipped, good and
// damaged) and MNIST on a tiny fake split and on the real Fashion-MNIST when installed.
// (TensorDataset, the samplers and the DataLoader are in test_dataloader.cpp.)
#include <doctest/doctest.h>
#include <fcntl.h>     // open (the FIFO's writer)
#include <sys/stat.h>  // mkfifo
#include <unistd.h>    // getpid
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <ringgrad/data/dataloader.h>
#include <ringgrad/data/dataset.h>
#include <ringgrad/data/idx.h>
#include <ringgrad/data/mnist.h>
#include <ringgrad/data/sampler.h>
#include <ringgrad/ringgrad.h>

#include "../examples/simple_model.h"
#include "test_helpers.h"

namespace fs = std::filesystem;
using test::error_of;

namespace {

using test::TempDir;

using Bytes = std::vector<uint8_t>;

// An IDX file's bytes: 00 00 <type> <ndims>, big-endian dims, then the data.
Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t type = 0x08) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

Bytes read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// 0, 1, 2, … (mod 256): recognisable data of any length.
Bytes counting(size_t n, uint8_t start = 0) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + i);
  return b;
}

// Bytes that deflate cannot shrink much, so a flipped byte lands in real compressed data.
Bytes noise(size_t n) {
  Bytes b(n);
  uint32_t s = 12345;
  for (auto& v : b) v = static_cast<uint8_t>((s = s * 1664525u + 1013904223u) >> 24);
  return b;
}

// A fake MNIST split: n images of rows×cols (pixel i = i mod 256) and labels i mod 10.
void write_fake_mnist(const TempDir& dir, const std::string& prefix, uint32_t n, uint32_t rows,
                      uint32_t cols, bool gzip) {
  Bytes labels(n);
  for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 10);
  std::string suffix = gzip ? ".gz" : "";
  auto write = gzip ? write_gz : write_raw;
  write(dir / (prefix + "-images-idx3-ubyte" + suffix),
        idx_bytes({n, rows, cols}, counting(size_t{n} * rows * cols)));
  write(dir / (prefix + "-labels-idx1-ubyte" + suffix), idx_bytes({n}, labels));
}

}  // namespace

// ---------------------------------------------------------------- IDX reader

TEST_CASE("data: read_idx reads raw and gzipped files alike") {
  TempDir dir;
  Bytes images = counting(2 * 3 * 4, 7);
  write_raw(dir / "images.idx", idx_bytes({2, 3, 4}, images));
  write_gz(dir / "images.idx.gz", idx_bytes({2, 3, 4}, images));
  // gzip is detected by its magic bytes, not by the name
  write_gz(dir / "named-raw.idx", idx_bytes({2, 3, 4}, images));
  write_raw(dir / "named-gz.idx.gz", idx_bytes({2, 3, 4}, images));

  for (const char* name : {"images.idx", "images.idx.gz", "named-raw.idx", "named-gz.idx.gz"}) {
    CAPTURE(name);
    rg::data::IdxArray a = rg::data::read_idx(dir / name);
    CHECK(a.dims == std::vector<int64_t>{2, 3, 4});
    CHECK(a.data == images);
  }

  write_gz(dir / "labels.gz", idx_bytes({5}, {9, 8, 7, 6, 5}));
  rg::data::IdxArray labels = rg::data::read_idx(dir / "labels.gz");
  CHECK(labels.dims == std::vector<int64_t>{5});
  CHECK(labels.data == Bytes{9, 8, 7, 6, 5});

  // A larger file crosses the reader's buffer growth (starts at 1 MiB) and zlib's chunks.
  Bytes big = noise(3 * 1000 * 1005);
  write_gz(dir / "big.gz", idx_bytes({3, 1000, 1005}, big));
  CHECK(rg::data::read_idx(dir / "big.gz").data == big);

  // A zero-length dimension is legal: no data.
  write_raw(dir / "empty.idx", idx_bytes({0, 28, 28}, {}));
  rg::data::IdxArray none = rg::data::read_idx(dir / "empty.idx");
  CHECK(none.dims == std::vector<int64_t>{0, 28, 28});
  CHECK(none.data.empty());
}

TEST_CASE("data: read_idx reports a missing file or a directory by name") {
  TempDir dir;
  std::string missing = dir / "no-such-file-idx3-ubyte.gz";
  std::string msg = error_of([&] { rg::data::read_idx(missing); });
  CHECK(msg.rfind("[read_idx]", 0) == 0);
  CHECK_CONTAINS(msg, missing);
  CHECK_CONTAINS(msg, "cannot open");
  CHECK_CONTAINS(msg, "No such file");

  std::string is_dir = error_of([&] { rg::data::read_idx(dir.path.string()); });
  CHECK_CONTAINS(is_dir, dir.path.string());
  CHECK_CONTAINS(is_dir, "directory");
}

TEST_CASE("data: read_idx refuses what is not a regular file (a FIFO, /dev/zero), without hanging") {
  TempDir dir;
  test::Fifo fifo(dir / "train-images-idx3-ubyte");
  auto start = std::chrono::steady_clock::now();
  std::string msg = error_of([&] { rg::data::read_idx(fifo.path); });
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  CHECK(msg.rfind("[read_idx]", 0) == 0);
  CHECK_CONTAINS(msg, fifo.path + ": expected a regular file, got a FIFO (named pipe)");
  if (fs::exists("/dev/zero"))
    CHECK_CONTAINS(error_of([&] { rg::data::read_idx("/dev/zero"); }),
                   "/dev/zero: expected a regular file, got a character device");
  CHECK_CONTAINS(error_of([&] { rg::data::read_idx(dir.path.string()); }),
                 "expected a regular file, got a directory");
  // MNIST passes the file's name through: a FIFO in place of the labels.
  write_raw(dir / "t10k-images-idx3-ubyte", idx_bytes({1, 2, 2}, counting(4)));
  test::Fifo labels(dir / "t10k-labels-idx1-ubyte");
  msg = error_of([&] { rg::data::MNIST(dir.path.string(), rg::data::Split::Test); });
  CHECK_CONTAINS(msg, labels.path + ": expected a regular file, got a FIFO");
}

TEST_CASE("data: read_idx reports a bad magic number") {
  TempDir dir;
  for (bool gz : {false, true}) {
    CAPTURE(gz);
    auto write = gz ? write_gz : write_raw;
    std::string path = dir / (gz ? "bad.gz" : "bad");

    Bytes zip = {'P', 'K', 3, 4, 0, 0, 0, 0};  // some other file format
    write(path, zip);
    std::string msg = error_of([&] { rg::data::read_idx(path); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "bad magic");
    CHECK_CONTAINS(msg, "0x50 0x4b");

    write(path, idx_bytes({4}, counting(16), 0x0D));  // float32 data: a clear refusal
    msg = error_of([&] { rg::data::read_idx(path); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "type code 0x08");
    CHECK_CONTAINS(msg, "got 0x0d (float32)");

    write(path, idx_bytes({4}, counting(4), 0x42));  // not a type code at all
    CHECK_CONTAINS(error_of([&] { rg::data::read_idx(path); }), "not an IDX type code");

    write(path, Bytes{0, 0, 8, 0});  // zero dims
    msg = error_of([&] { rg::data::read_idx(path); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "got 0 (bad magic)");

    write(path, Bytes{0, 0, 8, 200});  // legal byte, absurd number of dims
    CHECK_CONTAINS(error_of([&] { rg::data::read_idx(path); }), "got 200");
  }
}

TEST_CASE("data: read_idx reports truncated files") {
  TempDir dir;
  for (bool gz : {false, true}) {
    CAPTURE(gz);
    auto write = gz ? write_gz : write_raw;
    std::string path = dir / (gz ? "short.gz" : "short");

    write(path, {});  // empty
    std::string msg = error_of([&] { rg::data::read_idx(path); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "got 0 bytes (empty or truncated file)");

    write(path, Bytes{0, 0, 8, 3, 0, 0, 0, 10, 0, 0});  // header cut inside the dims
    msg = error_of([&] { rg::data::read_idx(path); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "truncated header");

    Bytes full = idx_bytes({10, 28, 28}, counting(10 * 28 * 28));
    write(path, Bytes(full.begin(), full.end() - 100));  // data 100 bytes short
    msg = error_of([&] { rg::data::read_idx(path); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "expected 7840 bytes of data for dims [10, 28, 28], got 7740");
    CHECK_CONTAINS(msg, "truncated");
  }

  // A gzip stream cut short (an interrupted download) is truncated, not silently short.
  write_gz(dir / "cut.gz", idx_bytes({3000}, noise(3000)));
  Bytes gz = read_raw(dir / "cut.gz");
  write_raw(dir / "cut.gz", Bytes(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)));
  std::string msg = error_of([&] { rg::data::read_idx(dir / "cut.gz"); });
  CHECK_CONTAINS(msg, dir / "cut.gz");
  CHECK_CONTAINS(msg, "truncated");
  CHECK_CONTAINS(msg, "gzip");

  // More data than the dims describe is refused too.
  write_raw(dir / "long", idx_bytes({4}, counting(5)));
  msg = error_of([&] { rg::data::read_idx(dir / "long"); });
  CHECK_CONTAINS(msg, dir / "long");
  CHECK_CONTAINS(msg, "trailing data");
}

TEST_CASE("data: read_idx reports corrupt gzip data") {
  TempDir dir;
  std::string path = dir / "corrupt-idx1-ubyte.gz";
  write_gz(path, idx_bytes({5000}, noise(5000)));
  const Bytes good = read_raw(path);

  // A flipped byte in the CRC-32 trailer: the data inflates but fails its checksum.
  Bytes bad_crc = good;
  bad_crc[bad_crc.size() - 8] ^= 0xFF;
  write_raw(path, bad_crc);
  std::string msg = error_of([&] { rg::data::read_idx(path); });
  CHECK_CONTAINS(msg, path);
  CHECK_CONTAINS(msg, "corrupt gzip");

  // Garbage in the middle of the compressed data.
  Bytes garbage = good;
  for (size_t i = garbage.size() / 2; i < garbage.size() / 2 + 64; ++i) garbage[i] = 0xFF;
  write_raw(path, garbage);
  msg = error_of([&] { rg::data::read_idx(path); });
  CHECK_CONTAINS(msg, path);
  CHECK_CONTAINS(msg, "gzip");

  // A gzip header followed by nothing that inflates.
  write_raw(path, Bytes{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xFF, 0xFF, 0xFF, 0xFF});
  msg = error_of([&] { rg::data::read_idx(path); });
  CHECK_CONTAINS(msg, path);
  CHECK_CONTAINS(msg, "gzip");
}

TEST_CASE("data: read_idx guards against absurd dims") {
  TempDir dir;
  // 2^32-1 in every dim overflows int64 when multiplied out: refused up front.
  write_raw(dir / "huge", idx_bytes({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {}));
  std::string msg = error_of([&] { rg::data::read_idx(dir / "huge"); });
  CHECK_CONTAINS(msg, dir / "huge");
  CHECK_CONTAINS(msg, "at most 1 TiB");
  CHECK_CONTAINS(msg, "[4294967295, 4294967295, 4294967295]");

  // 10^12 bytes claimed, 10 present: a truncation error, without allocating the claim.
  write_gz(dir / "liar.gz", idx_bytes({1000000, 1000000}, counting(10)));
  msg = error_of([&] { rg::data::read_idx(dir / "liar.gz"); });
  CHECK_CONTAINS(msg, dir / "liar.gz");
  CHECK_CONTAINS(msg, "expected 1000000000000 bytes of data for dims [1000000, 1000000], got 10");
}

TEST_CASE("data: read_idx never crashes on damaged files") {
  // Every truncation, and every header byte set to 0x00 / 0xFF: each read either
  // succeeds or throws ringgrad::Error naming the file (run under ASan to see reads).
  TempDir dir;
  const Bytes good = idx_bytes({3, 4, 5}, noise(60));
  write_gz(dir / "good.gz", good);
  const Bytes good_gz = read_raw(dir / "good.gz");
  std::string path = dir / "damaged";
  auto survives = [&](const Bytes& bytes) {
    write_raw(path, bytes);
    try {
      rg::data::read_idx(path);
    } catch (const rg::Error& e) {
      CHECK_CONTAINS(std::string(e.what()), path);
    }
  };
  for (const Bytes& file : {good, good_gz}) {
    for (size_t n = 0; n < file.size(); ++n) survives(Bytes(file.begin(), file.begin() + n));
    for (size_t i = 0; i < 24 && i < file.size(); ++i)
      for (uint8_t v : {0x00, 0xFF}) {
        Bytes damaged = file;
        damaged[i] = v;
        survives(damaged);
      }
  }
}

// ---------------------------------------------------------------- MNIST

TEST_CASE("data: MNIST loads a split from gzipped or raw IDX files") {
  TempDir dir;
  write_fake_mnist(dir, "train", 7, 4, 3, /*gzip=*/true);
  write_fake_mnist(dir, "t10k", 5, 4, 3, /*gzip=*/false);

  rg::data::MNIST train(dir.path.string(), rg::data::Split::Train);
  CHECK(train.size() == 7);
  CHECK(train.image_file() == dir / "train-images-idx3-ubyte.gz");
  CHECK(train.label_file() == dir / "train-labels-idx1-ubyte.gz");
  CHECK_SHAPE(train.images(), {7, 4, 3});
  CHECK(train.images().dtype() == rg::kFloat32);
  CHECK(train.labels().dtype() == rg::kInt64);

  auto [x, y] = train.get_batch({6, 0, 3});
  CHECK_SHAPE(x, {3, 4, 3});
  CHECK_SHAPE(y, {3});
  CHECK(y.dtype() == rg::kInt64);
  CHECK(y.tolist<int64_t>() == std::vector<int64_t>{6, 0, 3});
  std::vector<double> want;  // pixel j of image i is (12·i + j) / 255
  for (int64_t i : {6, 0, 3})
    for (int j = 0; j < 12; ++j) want.push_back((12 * i + j) / 255.0);
  test::check_close(x, want, 1e-7);

  rg::data::MNIST test_split(dir.path.string(), rg::data::Split::Test);
  CHECK(test_split.size() == 5);
  CHECK(test_split.image_file() == dir / "t10k-images-idx3-ubyte");
  CHECK(test_split.labels().tolist<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});

  std::string msg = error_of([&] { train.get_batch({0, 7}); });
  CHECK_CONTAINS(msg, "[get_batch]");
  CHECK_CONTAINS(msg, "expected indices in [0, 7), got 7 at position 1");
  CHECK_CONTAINS(error_of([&] { train.get_batch({-1}); }), "got -1");
}

TEST_CASE("data: MNIST errors name the files and what is wrong") {
  TempDir dir;
  using rg::data::MNIST;
  using rg::data::Split;
  std::string d = dir.path.string();

  std::string msg = error_of([&] { MNIST(dir / "nowhere", Split::Train); });
  CHECK_CONTAINS(msg, "[MNIST]");
  CHECK_CONTAINS(msg, dir / "nowhere");
  CHECK_CONTAINS(msg, "no such directory");

  msg = error_of([&] { MNIST(d, Split::Test); });
  CHECK_CONTAINS(msg, "t10k-images-idx3-ubyte or t10k-images-idx3-ubyte.gz");
  CHECK_CONTAINS(msg, "missing file");

  // Labels missing.
  write_raw(dir / "train-images-idx3-ubyte", idx_bytes({3, 2, 2}, counting(12)));
  msg = error_of([&] { MNIST(d, Split::Train); });
  CHECK_CONTAINS(msg, "train-labels-idx1-ubyte");
  CHECK_CONTAINS(msg, "missing file");

  // Image/label count mismatch names both files and both counts.
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes({4}, {1, 2, 3, 4}));
  msg = error_of([&] { MNIST(d, Split::Train); });
  CHECK_CONTAINS(msg, "expected as many labels as images");
  CHECK_CONTAINS(msg, "3 images in " + dir / "train-images-idx3-ubyte");
  CHECK_CONTAINS(msg, "4 labels in " + dir / "train-labels-idx1-ubyte.gz");

  // Labels that are not 1-D.
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes({3, 1}, {1, 2, 3}));
  msg = error_of([&] { MNIST(d, Split::Train); });
  CHECK_CONTAINS(msg, dir / "train-labels-idx1-ubyte.gz");
  CHECK_CONTAINS(msg, "expected labels with dims N (a 1-D IDX file), got dims [3, 1]");

  // Images that are not N×rows×cols (here: the label file's shape), or have no pixels.
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes({3}, {1, 2, 3}));
  write_raw(dir / "train-images-idx3-ubyte", idx_bytes({3}, {1, 2, 3}));
  msg = error_of([&] { MNIST(d, Split::Train); });
  CHECK_CONTAINS(msg, dir / "train-images-idx3-ubyte");
  CHECK_CONTAINS(msg, "expected images with dims N×rows×cols");
  CHECK_CONTAINS(msg, "got dims [3]");
  write_raw(dir / "train-images-idx3-ubyte", idx_bytes({3, 0, 28}, {}));
  CHECK_CONTAINS(error_of([&] { MNIST(d, Split::Train); }), "got dims [3, 0, 28]");

  // Errors of the reader itself come through with the file's name.
  write_raw(dir / "train-images-idx3-ubyte", Bytes{0, 0, 8, 3, 0, 0, 0, 3});
  msg = error_of([&] { MNIST(d, Split::Train); });
  CHECK_CONTAINS(msg, dir / "train-images-idx3-ubyte");
  CHECK_CONTAINS(msg, "truncated header");
}

TEST_CASE("data: MNIST checks labels against its 10 classes and refuses an empty split") {
  TempDir dir;
  using rg::data::MNIST;
  using rg::data::Split;
  const std::string d = dir.path.string();
  // A label of 200 in a test split used to lower the accuracy; in a training split it
  // failed at the step that met it, naming neither the file nor the sample.
  write_raw(dir / "t10k-images-idx3-ubyte", idx_bytes({4, 2, 2}, counting(16)));
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", idx_bytes({4}, {3, 9, 200, 10}));
  std::string msg = error_of([&] { MNIST(d, Split::Test); });
  CHECK_CONTAINS(msg, "[MNIST]");
  CHECK_CONTAINS(msg, dir / "t10k-labels-idx1-ubyte.gz");
  CHECK_CONTAINS(msg, "expected labels in [0, 10), got 200 for sample 2");
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", idx_bytes({4}, {3, 9, 0, 10}));
  CHECK_CONTAINS(error_of([&] { MNIST(d, Split::Test); }), "got 10 for sample 3");
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", idx_bytes({4}, {3, 9, 0, 1}));
  CHECK(MNIST(d, Split::Test).size() == 4);

  // A split of zero images (and zero labels) used to train on nothing: loss -nan, exit 0.
  write_raw(dir / "train-images-idx3-ubyte", idx_bytes({0, 28, 28}, {}));
  write_raw(dir / "train-labels-idx1-ubyte", idx_bytes({0}, {}));
  msg = error_of([&] { MNIST(d, Split::Train); });
  CHECK_CONTAINS(msg, dir / "train-images-idx3-ubyte");
  CHECK_CONTAINS(msg, "expected at least one sample, got 0 images");
}

TEST_CASE("data: the article's SimpleModel refuses images that are not 28×28") {
  // MNIST reads images of any size; 14×56 is also 784 pixels, which fc1 would take.
  rg::manual_seed(0);
  SimpleModel model;
  CHECK_SHAPE(model(rg::zeros({2, 28, 28})), {2, 10});
  std::string msg = error_of([&] { model(rg::zeros({2, 14, 56})); });
  CHECK_CONTAINS(msg, "[SimpleModel]");
  CHECK_CONTAINS(msg, "expected 28×28 images, x of shape [B, 28, 28], got shape [2, 14, 56]");
  CHECK_CONTAINS(error_of([&] { model(rg::zeros({2, 784})); }), "got shape [2, 784]");
}

TEST_CASE("data: Fashion-MNIST from the Debian package, when installed") {
  const std::string dir = rg::data::kDefaultMnistDir;
  if (!fs::exists(fs::path(dir) / "train-images-idx3-ubyte.gz") &&
      !fs::exists(fs::path(dir) / "train-images-idx3-ubyte")) {
    MESSAGE("skipped: Fashion-MNIST is not installed in " << dir
                                                          << " (apt install dataset-fashion-mnist)");
    return;
  }
  auto start = std::chrono::steady_clock::now();
  rg::data::MNIST train(dir, rg::data::Split::Train);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count();
  MESSAGE("loaded the Fashion-MNIST training split in " << ms << " ms");
  rg::data::MNIST test_split(dir, rg::data::Split::Test);

  CHECK(train.size() == 60000);
  CHECK(test_split.size() == 10000);
  CHECK_SHAPE(train.images(), {60000, 28, 28});
  CHECK_SHAPE(test_split.images(), {10000, 28, 28});
  for (const rg::data::MNIST* split : {&train, &test_split}) {
    CHECK(split->images().min().item() == 0.0);
    CHECK(split->images().max().item() == 1.0);
    CHECK(split->labels().min().item() == 0);
    CHECK(split->labels().max().item() == 9);
  }
  // Fashion-MNIST is balanced: 6000 training images per class.
  std::vector<int64_t> per_class(10, 0);
  for (int64_t label : train.labels().tolist<int64_t>()) ++per_class[label];
  CHECK(per_class == std::vector<int64_t>(10, 6000));

  rg::data::DataLoader loader(train, {.batch_size = 64});
  CHECK(loader.size() == 938);  // 937 full batches and one of 32
  auto [x, y] = *loader.begin();
  CHECK_SHAPE(x, {64, 28, 28});
  CHECK_SHAPE(y, {64});
}
