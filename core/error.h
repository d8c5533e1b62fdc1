// error.h — how ringgrad reports mistakes.
//
// User mistakes (wrong shapes, dtypes, devices, bad files) throw ringgrad::Error
// with a message of the form "[op] expected …, got …". Internal invariants use
// RG_ASSERT, which names the file and line: if one fires, it is our bug.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringgrad {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
// Shapes print as [2, 3] inside messages.
inline std::ostream& operator<<(std::ostream& os, const std::vector<int64_t>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os << ']';
}

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// fail("matmul", "expected a.shape[-1] == b.shape[-2], got ", a.shape(), " and ", b.shape())
// throws Error("[matmul] expected a.shape[-1] == b.shape[-2], got [2, 3] and [4, 5]").
template <typename... Args>
[[noreturn]] void fail(const char* op, const Args&... args) {
  using detail::operator<<;
  throw Error(detail::concat("[", op, "] ", args...));
}

}  // namespace ringgrad

// RG_CHECK(cond, "op", message parts...): a user-facing precondition.
#define RG_CHECK(cond, op, ...)                     \
  do {                                              \
    if (!(cond)) ::ringgrad::fail(op, __VA_ARGS__); \
  } while (0)

// RG_ASSERT(cond): an internal invariant; failure is a ringgrad bug.
#define RG_ASSERT(cond)                                                                            \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      throw ::ringgrad::Error(::ringgrad::detail::concat("internal error: ", #cond, " failed at ", \
                                                         __FILE__, ":", __LINE__));                \
  } while (0)
