// fuzz_input.h — what the libFuzzer harnesses in tests/fuzz/ share.
//
// The readers take paths, so each input is written to a temporary file (one per
// process, reused for every input) and the loader runs on that path:
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     fuzz::expect_clear_error([&] { rg::data::read_idx(fuzz::as_file(data, size)); });
//     return 0;
//   }
//
// A ringgrad::Error is the expected outcome for a bad file. Anything else is a finding,
// and is left for libFuzzer to report with the input that caused it: another exception
// (it escapes, std::terminate aborts), a crash, a sanitizer report, a hang (-timeout)
// or an allocation past -malloc_limit_mb.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <ringgrad/core/error.h>

namespace fuzz {

// The process's input file, ringgrad_fuzz.<pid> in /dev/shm (memory) where there is
// one, else in $TMPDIR; removed when the process exits.
inline const std::string& input_path() {
  static const struct File {
    std::string path = ((std::filesystem::is_directory("/dev/shm")
                             ? std::filesystem::path("/dev/shm")
                             : std::filesystem::temp_directory_path()) /
                        ("ringgrad_fuzz." + std::to_string(getpid())))
                           .string();
    ~File() { std::remove(path.c_str()); }
  } file;
  return file.path;
}

// Writes one input to the process's file and returns its path. The file is overwritten,
// then cut to size, never truncated to 0 first: on ext4 that makes close() flush it to disk.
inline const std::string& as_file(const uint8_t* data, size_t size) {
  const std::string& path = input_path();
  int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0600);
  bool ok = fd >= 0 && (size == 0 || write(fd, data, size) == static_cast<ssize_t>(size)) &&
            ftruncate(fd, static_cast<off_t>(size)) == 0;
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (!ok) {  // the harness's own trouble (a full disk), not the reader's
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

// Runs `load`; a ringgrad::Error (a bad file, clearly reported) is fine.
template <typename F>
void expect_clear_error(F&& load) {
  try {
    load();
  } catch (const ringgrad::Error&) {
  }
}

}  // namespace fuzz
