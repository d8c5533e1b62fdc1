// convert_checkpoint.cpp — a training checkpoint from one form to the other: one file
// (optim/checkpoint.h) to a directory of shards (optim/sharded_checkpoint.h), or back.
//
//   build/bin/convert_checkpoint run.ckpt/ run.safetensors   # a directory, put together
//   build/bin/convert_checkpoint run.safetensors run.ckpt/   # one file, as one rank's pieces
//
// Either form resumes any layout of the GPT example (gpt --resume), so this is for the
// tools that read one form: a one-file checkpoint loads with nn::load-style code, or opens
// in any safetensors viewer; a directory is what a large run writes without gathering. The
// conversion of a directory reads each tensor whole in turn (its pieces from every rank's
// file), so it needs the host memory of the whole checkpoint, as the file it writes does.
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

namespace rg = ringgrad;

int main(int argc, char** argv) {
  CLI::App app{"Converts a training checkpoint between one file and a directory of shards"};
  std::string from, to;
  app.add_option("FROM", from, "a checkpoint: one file, or a directory with a manifest.json")->required();
  app.add_option("TO", to, "where to write the other form: a directory (ending in '/') or a file")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const bool from_directory = std::filesystem::is_directory(from);
    const rg::Checkpoint c = rg::load_checkpoint(from);  // either form
    if (from_directory)
      rg::save_checkpoint(c, to);
    else
      rg::save_sharded_checkpoint(c, to);
    std::printf("%s (%s, step %lld) -> %s (%s)\n", from.c_str(), from_directory ? "directory" : "one file",
                static_cast<long long>(c.progress.step), to.c_str(), from_directory ? "one file" : "directory");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
