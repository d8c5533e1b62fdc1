// fuzz_idx.cpp — libFuzzer harness for the IDX reader (data/idx.h).
//
// Any bytes, raw or gzip, either read as an IdxArray whose data matches its dims
// or throw a ringgrad::Error. Seeds: corpus/fuzz_idx/ (written by make_seeds.cpp).
#include <ringgrad/data/idx.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clear_error([&] {
    ringgrad::data::IdxArray a = ringgrad::data::read_idx(fuzz::as_file(data, size));
    // The product of the dims: 0 when one is 0 (the others may then be anything),
    // else at most 1 TiB, which the reader checks.
    int64_t want = std::find(a.dims.begin(), a.dims.end(), 0) != a.dims.end() ? 0 : 1;
    if (want)
      for (int64_t d : a.dims) want *= d;
    if (a.dims.empty() || static_cast<int64_t>(a.data.size()) != want) std::abort();
  });
  return 0;
}
