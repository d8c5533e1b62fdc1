// fuzz_safetensors.cpp — libFuzzer harness for the safetensors reader (core/safetensors.h).
//
// Any bytes either load (tensors and metadata) or throw a ringgrad::Error. Every byte
// of every loaded tensor is read, so ASan checks that each buffer is as large as its
// shape and dtype say. Seeds: corpus/fuzz_safetensors/ (written by make_seeds.cpp).
#include <ringgrad/core/safetensors.h>

#include <cstdint>
#include <map>
#include <string>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clear_error([&] {
    std::map<std::string, std::string> metadata;
    ringgrad::NamedTensors tensors = ringgrad::load_safetensors(fuzz::as_file(data, size), &metadata);
    volatile uint8_t sum = 0;  // volatile: the reads happen
    for (auto& [name, t] : tensors) {
      const auto* bytes = static_cast<const uint8_t*>(t.raw_data());
      for (size_t i = 0; i < t.nbytes(); ++i) sum = sum + bytes[i];
    }
  });
  return 0;
}
