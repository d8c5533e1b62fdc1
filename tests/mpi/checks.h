// checks.h — the pass/fail bookkeeping of the multi-rank test programs.
//
//   check(ok, "what", rank);          a failure prints "[rank R] FAILED: what" to stderr
//   check_error(fn, "part", "what", rank)   fn must throw an error whose message contains part
//   return report(rank, n);           prints "rank R/N: P passed, F failed"; 0 or 1
//   max_param_diff(a, b, skip_key_bias)     largest |a − b| over two modules' parameters
//
// ctest matches that report line (tests/CMakeLists.txt).
#pragma once

#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace mpi_test {

inline int passed = 0, failed = 0;

inline void check(bool ok, const std::string& what, int rank) {
  if (ok)
    ++passed;
  else
    ++failed, std::fprintf(stderr, "[rank %d] FAILED: %s\n", rank, what.c_str());
}

// Runs fn, which must throw an error whose message contains `expected`.
template <typename F>
void check_error(F fn, const std::string& expected, const std::string& what, int rank) {
  std::string message = "(no error)";
  try {
    fn();
  } catch (const std::exception& e) {
    message = e.what();
  }
  check(message.find(expected) != std::string::npos,
        what + ": expected an error containing '" + expected + "', got '" + message + "'", rank);
}

// The largest |a − b| over two modules' parameters (same names, same order), in
// float64. With skip_key_bias, the key part of every attention's in_proj_bias is
// left out: its true gradient is exactly zero (adding a constant to every key
// shifts each query's scores equally, and softmax ignores that), so what it gets
// is rounding noise, which AdamW divides by its own size — steps of about lr in
// float32 (~1e-11 in float64) in a direction set by rounding, which any change of
// summation order moves, in one process as much as across ranks. Every other
// parameter is compared.
inline double max_param_diff(ringgrad::nn::Module& a, ringgrad::nn::Module& b,
                             bool skip_key_bias = false) {
  namespace rg = ringgrad;
  rg::NoGradGuard no_grad;
  auto pa = a.named_parameters(), pb = b.named_parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    rg::Tensor d = rg::abs(pa[i].second.to(rg::kFloat64) - pb[i].second.to(rg::kFloat64));
    if (skip_key_bias && pa[i].first.ends_with("in_proj_bias")) {  // (q | k | v) biases
      const int64_t e = d.size(0) / 3;
      d.narrow(0, e, e).zero_();
    }
    worst = std::max(worst, rg::amax(d).item());
  }
  return worst;
}

inline int report(int rank, int n) {
  std::printf("rank %d/%d: %d passed, %d failed\n", rank, n, passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace mpi_test
