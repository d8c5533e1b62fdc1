// fuzz_sharded_manifest.cpp — libFuzzer harness for a sharded checkpoint's manifest
// (optim/sharded_checkpoint.h: parse_sharded_manifest, then every tensor read whole).
//
// Each input is a manifest.json, read against the shard files of sharded_example.h (written
// once per process): the manifest must be refused with a ringgrad::Error, or every tensor it
// names must read back (its pieces found in the files, their sizes and CRCs as it says).
// Seeds: corpus/fuzz_sharded_manifest/ (make_seeds.cpp: the example's manifest and edits).
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz_input.h"
#include "sharded_example.h"

namespace {

const std::string& example_dir() {
  static const struct Dir {
    std::string path = (std::filesystem::temp_directory_path() /
                        ("ringgrad_fuzz_shards." + std::to_string(getpid()))).string();
    Dir() { fuzz::write_sharded_example(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  return dir.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string& dir = example_dir();
  fuzz::expect_clear_error([&] {
    const ringgrad::ShardedCheckpoint c = ringgrad::parse_sharded_manifest(text, dir);
    for (const auto& e : c.tensors) c.read_whole(e.name);
  });
  return 0;
}
