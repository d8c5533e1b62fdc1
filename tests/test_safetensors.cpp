// test_safetensors.cpp — checkpoints in the safetensors format: round trips of
// every dtype and layout, metadata, the exact bytes of a tiny file, bf16/f16 files
// as PyTorch writes them, a clear error for every kind of damaged file, and atomic
// saves.
#include <doctest/doctest.h>
#include <ringgrad/core/safetensors.h>
#include <ringgrad/ringgrad.h>
#include <fcntl.h>     // open (the FIFO's writer)
#include <sys/stat.h>  // mkfifo
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// The 16-bit patterns of a bfloat16 or float16 tensor, row-major.
std::vector<uint16_t> bits_of(const rg::Tensor& t) {
  REQUIRE(rg::element_size(t.dtype()) == 2);
  rg::Tensor c = t.contiguous();
  std::vector<uint16_t> bits(static_cast<size_t>(c.numel()));
  if (!bits.empty()) std::memcpy(bits.data(), c.raw_data(), bits.size() * 2);
  return bits;
}

// A 1-d bfloat16 or float16 tensor holding exactly these bit patterns.
rg::Tensor from_bits(const std::vector<uint16_t>& bits, rg::DType dtype) {
  rg::Tensor t = rg::empty({static_cast<int64_t>(bits.size())}, {.dtype = dtype});
  if (!bits.empty()) std::memcpy(t.raw_data(), bits.data(), bits.size() * 2);
  return t;
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

// ---------------------------------------------------------------- bfloat16 and float16

// A file written by PyTorch's safetensors (0.8.0, torch 2.15):
//
//   import torch
//   from safetensors.torch import save_file
//   save_file({"w": torch.tensor([[1.0, -2.5, 0.1], [3e38, float('inf'), 65504.]],
//                                dtype=torch.bfloat16),
//              "h": torch.tensor([0.1, -65504, 6e-8], dtype=torch.float16)}, path)
//
// and its bytes, from `open(path, 'rb').read()`.
const unsigned char kTorchBf16F16File[] = {
    0x78, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x77, 0x22,
    0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x42,
    0x46, 0x31, 0x36, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22,
    0x3a, 0x5b, 0x32, 0x2c, 0x33, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61,
    0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x30,
    0x2c, 0x31, 0x32, 0x5d, 0x7d, 0x2c, 0x22, 0x68, 0x22, 0x3a, 0x7b, 0x22,
    0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x31, 0x36, 0x22,
    0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x33, 0x5d,
    0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65,
    0x74, 0x73, 0x22, 0x3a, 0x5b, 0x31, 0x32, 0x2c, 0x31, 0x38, 0x5d, 0x7d,
    0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x80, 0x3f, 0x20, 0xc0,
    0xcd, 0x3d, 0x62, 0x7f, 0x80, 0x7f, 0x80, 0x47, 0x66, 0x2e, 0xff, 0xfb,
    0x01, 0x00,
};

TEST_CASE("safetensors: a bf16/f16 file from PyTorch loads bit-exactly; ours is byte-identical") {
  TempDir dir;
  const std::string torch_bytes(reinterpret_cast<const char*>(kTorchBf16F16File),
                                sizeof kTorchBf16F16File);
  const std::string path = dir.file("torch.safetensors");
  write_bytes(path, torch_bytes);

  rg::NamedTensors loaded = rg::load_safetensors(path);
  REQUIRE(loaded.size() == 2);
  CHECK(loaded[0].first == "w");
  CHECK(loaded[1].first == "h");
  const rg::Tensor& w = loaded[0].second;
  const rg::Tensor& h = loaded[1].second;
  CHECK(w.dtype() == rg::kBFloat16);
  CHECK(w.shape() == rg::Shape{2, 3});
  CHECK(h.dtype() == rg::kFloat16);
  CHECK(h.shape() == rg::Shape{3});
  // 1, -2.5, 0.1 → 0.10009765625, 3e38 → 2.9975e38, inf, 65504 → 65536 (bf16 has 8 bits).
  CHECK(bits_of(w) == std::vector<uint16_t>{0x3f80, 0xc020, 0x3dcd, 0x7f62, 0x7f80, 0x4780});
  // 0.1 → 0.0999755859375, -65504 (the largest float16), 6e-8 → 2^-24 (the smallest subnormal).
  CHECK(bits_of(h) == std::vector<uint16_t>{0x2e66, 0xfbff, 0x0001});
  CHECK(w.to(rg::kFloat32).tolist<float>() ==
        std::vector<float>{1.0f, -2.5f, 0.10009765625f, rg::bfloat16_bits_to_float(0x7f62),
                           INFINITY, 65536.0f});
  CHECK(h.to(rg::kFloat32).tolist<float>() ==
        std::vector<float>{0.0999755859375f, -65504.0f, std::ldexp(1.0f, -24)});

  // The same tensors made here, rounded by our float → 16-bit conversion, and saved by
  // our writer give PyTorch's file byte for byte (header, padding and data).
  rg::Tensor our_w = rg::from_vector<float>({1.0f, -2.5f, 0.1f, 3e38f, INFINITY, 65504.0f}, {2, 3})
                         .to(rg::kBFloat16);
  rg::Tensor our_h = rg::from_vector<float>({0.1f, -65504.0f, 6e-8f}, {3}).to(rg::kFloat16);
  const std::string ours = dir.file("ours.safetensors");
  rg::save_safetensors({{"w", our_w}, {"h", our_h}}, ours);
  CHECK(read_bytes(ours) == torch_bytes);
}

// Checked once by hand in the other direction (safetensors 0.8.0, torch 2.15): a file
// our writer made with all 65536 patterns of each dtype, the tensors of the test above
// and a transposed bf16 tensor, loaded with safetensors.torch.load_file, gave torch.bfloat16
// and torch.float16 tensors whose .view(torch.int16) equalled
// torch.arange(65536).to(torch.int16), i.e. every bit pattern, NaN payloads and signs
// included, arrived unchanged (torch printed -0.0, inf, nan, 9.18e-41 and 5.96e-08
// where expected), and "w"/"h" equalled PyTorch's own; the metadata came through too.
// PyTorch's save_file of those tensors, loaded back here, gave the same bytes per tensor.
TEST_CASE("safetensors: bf16/f16 round trip bit-exactly: every pattern, NaN, inf, -0, subnormals") {
  TempDir dir;
  const std::string path = dir.file("half.safetensors");
  std::vector<uint16_t> every(65536);
  for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<uint16_t>(i);
  // The special values by name, so a failure says which kind broke.
  const std::vector<uint16_t> bf16_special = {
      0x0000, 0x8000,  // +0, -0
      0x7f80, 0xff80,  // +inf, -inf
      0x7fc0, 0xffc0, 0x7f81, 0xffff,  // quiet NaN, negative NaN, signalling NaN, all ones
      0x0001, 0x807f, 0x0080,  // smallest subnormal, largest negative subnormal, smallest normal
      0x7f7f, 0xff7f};         // ±largest finite
  const std::vector<uint16_t> f16_special = {
      0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xffff,
      0x0001, 0x83ff, 0x0400, 0x7bff, 0xfbff};
  rg::Tensor bf16_t = from_bits({0x3f80, 0x8000, 0x7fc1, 0x0001, 0xff80, 0x4000}, rg::kBFloat16)
                          .reshape({2, 3})
                          .t();  // [3, 2], not contiguous
  REQUIRE_FALSE(bf16_t.is_contiguous());
  rg::Tensor f16_scalar = from_bits({0x8001}, rg::kFloat16).reshape({});
  rg::save_safetensors({{"bf16.every", from_bits(every, rg::kBFloat16)},
                        {"f16.every", from_bits(every, rg::kFloat16)},
                        {"bf16.special", from_bits(bf16_special, rg::kBFloat16)},
                        {"f16.special", from_bits(f16_special, rg::kFloat16)},
                        {"bf16.transposed", bf16_t},
                        {"f16.scalar", f16_scalar},
                        {"bf16.empty", rg::zeros({0, 5}, {.dtype = rg::kBFloat16})},
                        {"f32", rg::ones({2})}},
                       path, {{"dtype", "mixed"}});

  std::map<std::string, std::string> meta;
  rg::NamedTensors loaded = rg::load_safetensors(path, &meta);
  CHECK(meta == std::map<std::string, std::string>{{"dtype", "mixed"}});
  REQUIRE(loaded.size() == 8);
  auto check = [&](size_t i, const std::string& name, rg::DType dtype, const rg::Shape& shape,
                   const std::vector<uint16_t>& bits) {
    CAPTURE(name);
    CHECK(loaded[i].first == name);
    CHECK(loaded[i].second.dtype() == dtype);
    CHECK(loaded[i].second.shape() == shape);
    CHECK(loaded[i].second.is_contiguous());
    CHECK(bits_of(loaded[i].second) == bits);
  };
  check(0, "bf16.every", rg::kBFloat16, {65536}, every);
  check(1, "f16.every", rg::kFloat16, {65536}, every);
  check(2, "bf16.special", rg::kBFloat16, {13}, bf16_special);
  check(3, "f16.special", rg::kFloat16, {13}, f16_special);
  check(4, "bf16.transposed", rg::kBFloat16, {3, 2},
        {0x3f80, 0x0001, 0x8000, 0xff80, 0x7fc1, 0x4000});
  check(5, "f16.scalar", rg::kFloat16, {}, {0x8001});
  check(6, "bf16.empty", rg::kBFloat16, {0, 5}, {});
  CHECK(loaded[7].second.dtype() == rg::kFloat32);
  // -0 is still negative, a NaN still a NaN, a subnormal still its value.
  const std::vector<float> bf = loaded[2].second.to(rg::kFloat32).tolist<float>();
  CHECK(std::signbit(bf[1]));
  CHECK(bf[1] == 0.0f);
  CHECK(std::isnan(bf[4]));
  CHECK(std::isnan(bf[6]));
  CHECK(bf[8] == std::ldexp(1.0f, -133));
  const std::vector<float> hf = loaded[3].second.to(rg::kFloat32).tolist<float>();
  CHECK(hf[2] == INFINITY);
  CHECK(std::isnan(hf[4]));
  CHECK(hf[8] == std::ldexp(1.0f, -24));
}

TEST_CASE("safetensors: rg::to(state, kBFloat16) saves a model in bf16; loads into float32") {
  TempDir dir;
  rg::manual_seed(3);
  rg::nn::Linear model(4, 3);
  rg::NamedTensors state = model.state_dict();
  state.emplace_back("steps", rg::arange(2, {.dtype = rg::kInt64}));
  state.emplace_back("mask", bool_tensor({true, false}));

  // Floating tensors are converted (rounded to nearest even), the others kept as they are,
  // and the model is untouched.
  rg::NamedTensors bf16 = rg::to(state, rg::kBFloat16);
  REQUIRE(bf16.size() == 4);
  CHECK(bf16[0].first == "weight");
  CHECK(bf16[0].second.dtype() == rg::kBFloat16);
  CHECK(bf16[1].second.dtype() == rg::kBFloat16);
  CHECK_FALSE(bf16[0].second.requires_grad());
  CHECK(bf16[2].second.dtype() == rg::kInt64);
  CHECK(bf16[3].second.dtype() == rg::kBool);
  CHECK(model.weight.dtype() == rg::kFloat32);
  std::vector<uint16_t> want;
  for (float v : model.weight.contiguous().tolist<float>())
    want.push_back(rg::float_to_bfloat16_bits(v));
  CHECK(bits_of(bf16[0].second) == want);

  const std::string path = dir.file("model-bf16.safetensors");
  rg::save_safetensors(rg::to(model.state_dict(), rg::kBFloat16), path);
  // Half the bytes of the float32 file's data: 12 + 3 values, 2 bytes each.
  rg::NamedTensors loaded = rg::load_safetensors(path);
  REQUIRE(loaded.size() == 2);
  CHECK(loaded[0].second.dtype() == rg::kBFloat16);
  CHECK(loaded[0].second.nbytes() == 24);

  // As torch's load_state_dict: a bf16 checkpoint into a float32 model converts each
  // value into the parameter's dtype (exact: every bfloat16 is a float32).
  rg::nn::Linear fresh(4, 3);
  rg::nn::load(fresh, path);
  CHECK(fresh.weight.dtype() == rg::kFloat32);
  CHECK(fresh.weight.tolist<float>() == loaded[0].second.to(rg::kFloat32).tolist<float>());
  CHECK(fresh.bias.tolist<float>() == loaded[1].second.to(rg::kFloat32).tolist<float>());

  // float16 too; and a state dict already in the dtype is shared, not copied.
  rg::NamedTensors f16 = rg::to(state, rg::kFloat16);
  CHECK(f16[0].second.dtype() == rg::kFloat16);
  rg::NamedTensors same = rg::to(bf16, rg::kBFloat16);
  CHECK(same[0].second.raw_data() == bf16[0].second.raw_data());

  // Only to a floating dtype.
  CHECK_CONTAINS(error_of([&] { rg::to(state, rg::kInt64); }),
                 "[to] expected a floating dtype (float32, float64, bfloat16 or float16) for a "
                 "state dict, got int64");
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
    write_safetensors(path, R"({"a": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})",
                      f32x2);
    expect_error(
        "tensor 'a': dtype I32 is not supported (expected F32, F64, I64, BOOL, BF16 or F16)");
    write_safetensors(path,
                      R"({"a": {"dtype": "F8_E4M3", "shape": [8], "data_offsets": [0, 8]}})",
                      f32x2);
    expect_error("F8_E4M3 is not supported");
  }
  SUBCASE("BF16 and F16 entries whose byte length is not 2 x numel") {
    // 8 bytes hold four 16-bit values, not two (a writer that thought in float32).
    write_safetensors(path, R"({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 8]}})",
                      f32x2);
    expect_error("tensor 'w': expected data_offsets spanning 4 bytes (shape [2] of BF16), "
                 "got [0,8] (8 bytes)");
    write_safetensors(path, R"({"h": {"dtype": "F16", "shape": [3], "data_offsets": [0, 5]}})",
                      std::string(5, '\0'));
    expect_error("tensor 'h': expected data_offsets spanning 6 bytes (shape [3] of F16), "
                 "got [0,5] (5 bytes)");
    // An odd-length buffer cut short of the last element.
    write_safetensors(path, R"({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}})",
                      std::string(5, '\0'));
    expect_error("within the 5-byte data buffer");
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
