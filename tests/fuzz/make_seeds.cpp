// make_seeds.cpp — writes the fuzzers' seed corpora, corpus/<harness>/ (committed).
//
//   build-fuzz/bin/fuzz_make_seeds tests/fuzz/corpus
//
// For each reader: a few small valid files, which show libFuzzer the format, and a few
// damaged ones (truncated, bad magic, a header promising more than the file holds), which
// start it on the error paths. Every file is under 4 KB and the output is deterministic.
#include <ringgrad/core/safetensors.h>
#include <ringgrad/data/idx.h>
#include <ringgrad/nn/layers.h>
#include <ringgrad/optim/checkpoint.h>
#include <ringgrad/optim/schedule.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "optimizers.h"
#include "sharded_example.h"

namespace rg = ringgrad;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// gzip as zlib writes it (gzopen/gzwrite: no name, mtime 0).
void write_gzip(const fs::path& path, const std::string& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb9");
  gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(gz);
}

// An IDX file: 00 00 08 <ndims>, big-endian uint32 dims, then `data`.
std::string idx(const std::vector<uint32_t>& dims, const std::string& data) {
  std::string s = {0, 0, 8, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((d >> shift) & 0xff);
  return s + data;
}

std::string ramp(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 37);
  return s;
}

// A hand-made safetensors file: length prefix, the JSON header, then `data`.
std::string safetensors(const std::string& json, const std::string& data) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return s + json + data;
}

void idx_seeds(const fs::path& dir) {
  const std::string labels = idx({6}, "\x01\x02\x03\x04\x05\x06");
  const std::string images = idx({2, 3, 3}, ramp(18));
  write_bytes(dir / "labels.idx1", labels);
  write_bytes(dir / "images.idx3", images);
  write_gzip(dir / "images.idx3.gz", images);
  write_gzip(dir / "labels.idx1.gz", labels);
  std::string gz = read_bytes(dir / "images.idx3.gz");
  write_bytes(dir / "bad-truncated.gz", gz.substr(0, gz.size() / 2));
  write_bytes(dir / "bad-truncated.idx3", images.substr(0, images.size() - 3));
  write_bytes(dir / "bad-trailing.idx1", labels + "x");
  write_bytes(dir / "bad-magic.idx1", std::string("\x00\x01\x08\x01", 4) + labels.substr(4));
  write_bytes(dir / "bad-type.idx1", std::string("\x00\x00\x0d\x01", 4) + labels.substr(4));
  write_bytes(dir / "bad-huge-dims.idx3", idx({60000, 28, 28}, ramp(16)));
}

void safetensors_seeds(const fs::path& dir) {
  rg::Tensor w = rg::arange(6).reshape({2, 3});
  rg::Tensor steps = rg::arange(2, {.dtype = rg::kInt64});
  rg::save_safetensors({{"w", w}, {"steps", steps}}, (dir / "two-tensors.safetensors").string(),
                       {{"epoch", "3"}, {"format", "pt"}});
  rg::Tensor mask = rg::zeros({3}, {.dtype = rg::kBool});
  rg::save_safetensors({{"x", rg::full({2}, 1.5, {.dtype = rg::kFloat64})},
                        {"mask", mask},
                        {"scalar", rg::scalar_tensor(7)},
                        {"none", rg::zeros({0, 4})}},
                       (dir / "dtypes.safetensors").string());
  // bfloat16 and float16, as PyTorch writes them; the float16 one holds -0, inf, NaN and
  // the smallest subnormal.
  rg::Tensor half = rg::from_vector<float>({-0.0f, INFINITY, NAN, 6e-8f}, {4}).to(rg::kFloat16);
  rg::save_safetensors({{"w", rg::arange(6).reshape({2, 3}).to(rg::kBFloat16)}, {"h", half}},
                       (dir / "bf16-f16.safetensors").string(), {{"format", "pt"}});
  std::string two = read_bytes(dir / "two-tensors.safetensors");
  write_bytes(dir / "bad-truncated.safetensors", two.substr(0, two.size() - 5));
  write_bytes(dir / "bad-header-cut.safetensors", two.substr(0, 40));
  write_bytes(dir / "bad-overlap.safetensors",
              safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          std::string(12, '\0')));
  write_bytes(dir / "bad-json.safetensors",
              safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", "abcd"));
  write_bytes(dir / "bad-bf16-length.safetensors",  // 2 bf16 values need 4 bytes, not 8
              safetensors(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})",
                          std::string(8, '\0')));
  write_bytes(dir / "bad-length.safetensors", std::string("\xff\xff\xff\xff\x00\x00\x00\x00{}", 10));
}

void optim_seeds(const fs::path& dir) {
  for (int steps : {0, 2}) {  // a fresh optimizer (no state) and one with moments
    std::vector<rg::Tensor> p = fuzz::parameters(), q = fuzz::parameters();
    rg::optim::Adam adam = fuzz::adam(p);
    rg::optim::AdamW adamw = fuzz::adamw(q);
    for (int s = 0; s < steps; ++s) {
      fuzz::set_grads(adam);
      adam.step();
      fuzz::set_grads(adamw);
      adamw.step();
    }
    std::string suffix = "-" + std::to_string(steps) + "steps.safetensors";
    rg::optim::save(adam, (dir / ("adam" + suffix)).string());
    rg::optim::save(adamw, (dir / ("adamw" + suffix)).string());
  }
  std::vector<rg::Tensor> p = fuzz::parameters();
  rg::optim::SGD sgd(p, {.lr = 0.1, .momentum = 0.9});
  fuzz::set_grads(sgd);
  sgd.step();
  rg::optim::save(sgd, (dir / "sgd-momentum.safetensors").string());  // another optimizer
  std::string adam = read_bytes(dir / "adam-2steps.safetensors");
  write_bytes(dir / "bad-truncated.safetensors", adam.substr(0, adam.size() - 7));
}

void checkpoint_seeds(const fs::path& dir) {
  for (int steps : {0, 3}) {  // the model and optimizer fuzz_checkpoint.cpp restores into
    rg::manual_seed(1);
    rg::nn::Linear model(2, 3);
    rg::optim::Adam opt(model.parameters(), {.lr = 1e-3});
    rg::optim::StepLR schedule(opt, 10);
    for (int s = 0; s < steps; ++s) {
      fuzz::set_grads(opt);
      opt.step();
      schedule.step();
    }
    rg::Checkpoint c = rg::capture(model, opt, &schedule);
    c.progress = {.step = steps, .epoch = 0, .batch = steps};
    c.run = {{"batch_size", "4"}};
    c.generators["data"] = rg::Generator(7);
    rg::save_checkpoint(c, (dir / ("linear-adam-" + std::to_string(steps) + "steps.ckpt")).string());
  }
  std::string good = read_bytes(dir / "linear-adam-3steps.ckpt");
  write_bytes(dir / "bad-truncated.ckpt", good.substr(0, good.size() - 9));
}

// The manifest of sharded_example.h (the harness writes the same shard files), and edits of
// it: a gap in a tensor, a file index out of range, a bad dtype, a wrong CRC.
void sharded_manifest_seeds(const fs::path& dir) {
  const fs::path shards = fs::temp_directory_path() / "ringgrad_make_seeds_shards";
  fs::remove_all(shards);
  fuzz::write_sharded_example(shards.string());
  const std::string good = read_bytes(shards / "manifest.json");
  fs::remove_all(shards);
  write_bytes(dir / "example.json", good);
  auto edit = [&](const std::string& name, const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    if (at != std::string::npos) s.replace(at, from.size(), to);
    write_bytes(dir / name, s);
  };
  edit("bad-gap.json", "\"shape\": [\n    4", "\"shape\": [\n    5");
  edit("bad-file.json", "\"file\": 1", "\"file\": 7");
  edit("bad-dtype.json", "\"float32\"", "\"float33\"");
  edit("bad-crc.json", "\"crc32\": ", "\"crc32\": 1");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds CORPUS_DIR   (tests/fuzz/corpus)\n";
    return 2;
  }
  const fs::path root = argv[1];
  for (auto [name, write] : {std::pair{"fuzz_idx", &idx_seeds},
                             std::pair{"fuzz_safetensors", &safetensors_seeds},
                             std::pair{"fuzz_optim_state", &optim_seeds},
                             std::pair{"fuzz_checkpoint", &checkpoint_seeds},
                             std::pair{"fuzz_sharded_manifest", &sharded_manifest_seeds}}) {
    fs::create_directories(root / name);
    write(root / name);
    for (auto& f : fs::directory_iterator(root / name))
      std::cout << f.path().string() << "  " << f.file_size() << " bytes\n";
  }
  return 0;
}
