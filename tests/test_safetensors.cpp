// test_safetensors.cpp — checkpoints in the safetensors format: round trips of
// every dtype and layout, metadata, the exact bytes of a tiny file, a clear
// error for every kind of damaged file, and atomic saves.
#include <doctest/doctest.h>
#include <ringgrad/core/safetensors.h>
#include <ringgrad/ringgrad.h>
#include <fcntl.h>     // open (the FIFO's writer)
#include <sys/stat.h>  // mkfifo
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "test_helpers.h"  // test::error_of, test::contains

namespace rg = ringgrad;
using test::contains;
using test::error_of;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The 8-byte little-endian length prefix.
std::string u64_le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A hand-made file: length prefix, the JSON header (space-padded to 8), then `data`.
void write_safetensors(const std::string& path, std::string json, const std::string& data) {
  json.append((8 - json.size() % 8) % 8, ' ');
  write_bytes(path, u64_le(json.size()) + json + data);
}

rg::Tensor bool_tensor(const std::vector<bool>& values) {
  rg::Tensor t = rg::empty({static_cast<int64_t>(values.size())}, {.dtype = rg::kBool});
  for (size_t i = 0; i < values.size(); ++i) t.data_ptr<bool>()[i] = values[i];
  return t;
}

std::vector<bool> bools_of(const rg::Tensor& t) {
  const bool* p = t.data_ptr<bool>();
  return std::vector<bool>(p, p + t.numel());
}

}  // namespace

// ---------------------------------------------------------------- round trips

TEST_CASE("safetensors: round trip of every dtype, 0-d, empty and non-contiguous tensors") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  rg::Tensor f = rg::from_vector<float>({1.5f, -2, 3, 4, 5, 6}, {2, 3});
  rg::Tensor d = rg::from_vector<double>({0.1, 1e300, -3.25}, {3});
  rg::Tensor i = rg::from_vector<int64_t>({-1, 0, int64_t(1) << 62}, {3, 1});
  rg::Tensor b = bool_tensor({true, false, true, true});
  rg::Tensor scalar = rg::scalar_tensor(7.25, {.dtype = rg::kFloat64});
  rg::Tensor empty = rg::zeros({0, 3});
  rg::Tensor transposed = rg::arange(12).view({3, 4}).t();  // [4, 3], not contiguous
  REQUIRE_FALSE(transposed.is_contiguous());
  rg::Tensor big = rg::randn({37, 29});

  // Names deliberately not in alphabetical order: loading keeps the saved order.
  rg::save_safetensors({{"zeta", f},
                        {"d", d},
                        {"int", i},
                        {"mask", b},
                        {"empty", empty},
                        {"scalar", scalar},
                        {"t", transposed},
                        {"big", big}},
                       path);
  std::map<std::string, std::string> meta = {{"stale", "entry"}};
  rg::NamedTensors loaded = rg::load_safetensors(path, &meta);
  CHECK(meta.empty());

  REQUIRE(loaded.size() == 8);
  std::vector<std::string> names;
  for (const auto& [name, t] : loaded) names.push_back(name);
  CHECK(names ==
        std::vector<std::string>{"zeta", "d", "int", "mask", "empty", "scalar", "t", "big"});

  auto same = [](const rg::Tensor& got, const rg::Tensor& want) {
    CHECK(got.dtype() == want.dtype());
    CHECK(got.shape() == want.shape());
    CHECK(got.device() == rg::kCPU);
    CHECK(got.is_contiguous());
    if (want.dtype() == rg::kInt64)
      CHECK(got.tolist<int64_t>() == want.tolist<int64_t>());
    else if (want.dtype() == rg::kBool)
      CHECK(bools_of(got) == bools_of(want));
    else
      CHECK(got.tolist<double>() == want.tolist<double>());  // bit-exact
  };
  same(loaded[0].second, f);
  same(loaded[1].second, d);
  same(loaded[2].second, i);
  same(loaded[3].second, b);
  same(loaded[4].second, empty);
  same(loaded[5].second, scalar);
  CHECK(loaded[5].second.dim() == 0);
  same(loaded[6].second, transposed);
  same(loaded[7].second, big);
}

TEST_CASE("safetensors: metadata round trip, and tensors needing grad") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  rg::Tensor w = rg::ones({2, 2}, {.requires_grad = true});
  std::map<std::string, std::string> meta = {
      {"epoch", "3"}, {"format", "pt"}, {"note", "quotes \" and\nnewlines, ünïcødé"}, {"", ""}};
  rg::save_safetensors({{"w", w}}, path, meta);

  std::map<std::string, std::string> got;
  rg::NamedTensors loaded = rg::load_safetensors(path, &got);
  CHECK(got == meta);
  REQUIRE(loaded.size() == 1);
  CHECK_FALSE(loaded[0].second.requires_grad());
  CHECK(loaded[0].second.tolist<float>() == std::vector<float>{1, 1, 1, 1});
  CHECK(rg::load_safetensors(path).size() == 1);  // metadata is optional to read

  // No tensors at all is a valid (if dull) checkpoint.
  rg::save_safetensors({}, path, {{"only", "metadata"}});
  CHECK(rg::load_safetensors(path, &got).empty());
  CHECK(got == std::map<std::string, std::string>{{"only", "metadata"}});
}

TEST_CASE("safetensors: byte layout of a tiny file") {
  TempDir dir;
  const std::string path = dir.file("tiny.safetensors");
  rg::save_safetensors({{"a", rg::from_vector<float>({1.0f, 2.0f}, {2})}}, path, {{"k", "v"}});

  // 79 bytes of JSON + 1 space of padding = 80 = 0x50, so the data starts at 88 (8-aligned).
  const std::string json =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} )";
  REQUIRE(json.size() == 80);
  const std::string expected = std::string("\x50\0\0\0\0\0\0\0", 8) + json +
                               std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  CHECK(read_bytes(path) == expected);
}

// ---------------------------------------------------------------- damaged files

TEST_CASE("safetensors: every kind of damaged file is a clear error naming the file") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const std::string f32x2 = std::string(8, '\0');  // two float32 zeros

  // Loads `path` and checks that the error names the file and the problem.
  auto expect_error = [&](const std::string& problem) {
    std::string msg = error_of([&] { rg::load_safetensors(path); });
    CHECK_MESSAGE(contains(msg, "[load_safetensors]"), msg);
    CHECK_MESSAGE(contains(msg, path), msg);
    CHECK_MESSAGE(contains(msg, problem), msg);
  };

  SUBCASE("missing file") { expect_error("No such file"); }
  SUBCASE("a directory") {
    fs::create_directory(path);
    expect_error("expected a regular file, got a directory");
  }
  SUBCASE("a FIFO: an error at once, not a wait for a writer") {
    test::Fifo fifo(path);
    auto start = std::chrono::steady_clock::now();
    expect_error("expected a regular file, got a FIFO (named pipe)");
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  }
  SUBCASE("a device") {
    if (fs::exists("/dev/zero")) {
      const std::string msg = error_of([&] { rg::load_safetensors("/dev/zero"); });
      CHECK_CONTAINS(msg, "'/dev/zero': expected a regular file, got a character device");
    }
  }
  SUBCASE("shorter than the length prefix") {
    write_bytes(path, "abc");
    expect_error("at least 8 bytes");
  }
  SUBCASE("header length larger than the file") {
    write_bytes(path, u64_le(100) + "{}");
    expect_error("truncated file");
  }
  SUBCASE("absurd header length") {
    write_bytes(path, u64_le(uint64_t(1) << 60) + "{}");
    expect_error("at most 100000000 bytes");
  }
  SUBCASE("invalid JSON") {
    write_safetensors(path, R"({"a": {"dtype": )", "");
    expect_error("valid JSON");
  }
  SUBCASE("header that is not an object") {
    write_safetensors(path, "[1, 2]", "");
    expect_error("start with '{'");
  }
  SUBCASE("entry that is not an object") {
    write_safetensors(path, R"({"a": 3})", "");
    expect_error("tensor 'a': expected an object");
  }
  SUBCASE("missing dtype") {
    write_safetensors(path, R"({"a": {"shape": [2], "data_offsets": [0, 8]}})", f32x2);
    expect_error("tensor 'a': expected a \"dtype\" field");
  }
  SUBCASE("missing shape") {
    write_safetensors(path, R"({"a": {"dtype": "F32", "data_offsets": [0, 8]}})", f32x2);
    expect_error("expected a \"shape\" field");
  }
  SUBCASE("missing data_offsets") {
    write_safetensors(path, R"({"a": {"dtype": "F32", "shape": [2]}})", f32x2);
    expect_error("expected a \"data_offsets\" field");
  }
  SUBCASE("unknown dtype") {
    write_safetensors(path, R"({"a": {"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}})",
                      f32x2);
    expect_error("unknown dtype 'F99'");
  }
  SUBCASE("unsupported dtypes") {
    write_safetensors(path, R"({"a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}})",
                      f32x2);
    expect_error("F16 is not supported");
    write_safetensors(path, R"({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}})",
                      f32x2);
    expect_error("BF16 is not supported");
  }
  SUBCASE("negative shape") {
    write_safetensors(path, R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})",
                      f32x2);
    expect_error("non-negative shape");
  }
  SUBCASE("non-integer shape") {
    write_safetensors(path, R"({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})",
                      f32x2);
    expect_error("shape to hold integers");
  }
  SUBCASE("shape whose byte size overflows") {
    write_safetensors(path,
                      R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4],)"
                      R"( "data_offsets": [0, 8]}})",
                      f32x2);
    expect_error("too large");
    write_safetensors(path,
                      R"({"a": {"dtype": "F32", "shape": [18446744073709551615],)"
                      R"( "data_offsets": [0, 8]}})",
                      f32x2);
    expect_error("below 2^63");
  }
  SUBCASE("offsets not matching shape x element size") {
    write_safetensors(path, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})",
                      f32x2);
    expect_error("spanning 8 bytes");
  }
  SUBCASE("offsets out of range") {
    write_safetensors(path, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                      std::string(4, '\0'));
    expect_error("within the 4-byte data buffer");
  }
  SUBCASE("malformed offsets") {
    write_safetensors(path, R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})",
                      f32x2);
    expect_error("0 <= begin <= end");
    write_safetensors(path, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})",
                      f32x2);
    expect_error("0 <= begin <= end");
    write_safetensors(path, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", f32x2);
    expect_error("0 <= begin <= end");
  }
  SUBCASE("overlapping tensors") {
    write_safetensors(path,
                      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                      R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                      std::string(12, '\0'));
    expect_error("non-overlapping");
  }
  SUBCASE("gap between tensors") {
    write_safetensors(path,
                      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                      R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                      std::string(12, '\0'));
    expect_error("gap at bytes [4, 8) before tensor 'b'");
  }
  SUBCASE("bytes after the last tensor") {
    write_safetensors(path, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                      f32x2);
    expect_error("gap at bytes [4, 8) at its end");
  }
  SUBCASE("duplicate names") {
    write_safetensors(path,
                      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                      R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                      f32x2);
    expect_error("'a' twice");
  }
  SUBCASE("metadata values that are not strings") {
    write_safetensors(path, R"({"__metadata__": {"epoch": 3}})", "");
    expect_error("__metadata__ values to be strings");
  }
}

TEST_CASE("safetensors: saving refuses what the format cannot hold") {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  rg::Tensor t = rg::ones({2});
  CHECK(contains(error_of([&] {
                   rg::save_safetensors({{"a", t}, {"a", t}}, path);
                 }),
                 "expected unique tensor names, got 'a' twice"));
  CHECK(contains(error_of([&] {
                   rg::save_safetensors({{"__metadata__", t}}, path);
                 }),
                 "reserved for metadata"));
  CHECK(contains(error_of([&] {
                   rg::save_safetensors({{"u", rg::Tensor()}}, path);
                 }),
                 "undefined one named 'u'"));
  CHECK_FALSE(fs::exists(path));
}

// ---------------------------------------------------------------- atomic saves

namespace {

// Every entry of a directory, by name.
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  return names;
}

// The old checkpoint is still there, whole.
void check_old_checkpoint(const std::string& path) {
  rg::NamedTensors loaded = rg::load_safetensors(path);
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0].first == "old");
  CHECK(loaded[0].second.tolist<float>() == std::vector<float>{1, 2, 3});
}

}  // namespace

TEST_CASE("safetensors: a successful save leaves no temporary file") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  rg::save_safetensors({{"a", rg::ones({3})}}, path);
  rg::save_safetensors({{"b", rg::zeros({5})}}, path);  // over the first one
  CHECK(listing(dir.path) == std::vector<std::string>{"ckpt.safetensors"});
  rg::NamedTensors loaded = rg::load_safetensors(path);
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0].first == "b");
}

TEST_CASE("safetensors: a failed save leaves the previous checkpoint intact") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  rg::save_safetensors({{"old", rg::from_vector<float>({1, 2, 3}, {3})}}, path);
  const rg::NamedTensors fresh = {{"new", rg::zeros({1000})}};

  SUBCASE("the temporary file cannot be created") {
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    fs::create_directory(tmp);  // occupies the temporary file's name
    std::string msg = error_of([&] { rg::save_safetensors(fresh, path); });
    CHECK_MESSAGE(contains(msg, "[save_safetensors] could not save '" + path + "'"), msg);
    CHECK_MESSAGE(contains(msg, "creating '" + tmp + "' failed: Is a directory"), msg);
    CHECK(fs::is_directory(tmp));  // not ours to remove
    check_old_checkpoint(path);
  }

  SUBCASE("the directory is not writable") {
    fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
    bool can_still_write = bool(std::ofstream(dir.file("probe")));  // true for root
    if (can_still_write) {
      MESSAGE("skipped: permissions are not enforced here (running as root?)");
    } else {
      std::string msg = error_of([&] { rg::save_safetensors(fresh, path); });
      CHECK_MESSAGE(contains(msg, path), msg);
      CHECK_MESSAGE(contains(msg, "Permission denied"), msg);
      check_old_checkpoint(path);
      CHECK(listing(dir.path) == std::vector<std::string>{"ckpt.safetensors"});
    }
  }

  SUBCASE("the rename fails, and the temporary file is removed") {
    const std::string target = dir.file("occupied");
    fs::create_directories(fs::path(target) / "child");  // a non-empty directory: rename fails
    std::string msg = error_of([&] { rg::save_safetensors(fresh, target); });
    CHECK_MESSAGE(contains(msg, "could not save '" + target + "'"), msg);
    CHECK_MESSAGE(contains(msg, "renaming"), msg);
    auto names = listing(dir.path);
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"ckpt.safetensors", "occupied"});
    check_old_checkpoint(path);
  }
}
