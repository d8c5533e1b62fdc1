// checks.h — the pass/fail bookkeeping of the multi-rank test programs.
//
//   check(ok, "what", rank);          a failure prints "[rank R] FAILED: what" to stderr
//   check_error(fn, "part", "what", rank)   fn must throw an error whose message contains part
//   return report(rank, n);           prints "rank R/N: P passed, F failed"; 0 or 1
//
// ctest matches that report line (tests/CMakeLists.txt).
#pragma once

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

inline int report(int rank, int n) {
  std::printf("rank %d/%d: %d passed, %d failed\n", rank, n, passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace mpi_test
