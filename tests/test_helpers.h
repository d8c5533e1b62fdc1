// test_helpers.h — small helpers shared by the unit tests.
//
//   error_of([&] { rg::matmul(a, b); })   the caught ringgrad::Error's what() (a failed
//                                          check when nothing, or something else, is thrown)
//   check_close(t, {1, 2, 3}, 1e-6)        every element of t (row-major) against doubles
//   CHECK_SHAPE(t, {2, 3})                  shape equality with a readable message
//   grad_ok("label", f, {x, y})             rg::gradcheck with the label in the failure
//   naive_matmul(a, b, m, k, n)             the reference GEMM, in double precision
//   ScopedEnv env("NAME", "value")          an environment variable for one scope (nullptr: unset)
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <thread>
#include <string>
#include <vector>

#include <ringgrad/ringgrad.h>

namespace rg = ringgrad;

namespace test {

// Sets an environment variable for one scope, then puts back what was there.
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const char* value) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    if (value)
      setenv(n, value, 1);
    else
      unsetenv(n);
  }
  ~ScopedEnv() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

// A fresh directory under /tmp for one test, removed with everything in it at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("ringgrad_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;  // a test may have made it read-only: give the owner rights back first
    std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string operator/(const std::string& name) const { return file(name); }
};


// A FIFO at `path` for one test. Opening a FIFO to read blocks until a writer comes:
// should the code under test open it, a writer comes after 5 s, so the test fails (on the
// wrong message) instead of hanging.
struct Fifo {
  std::string path;
  std::atomic<bool> done{false};
  std::thread writer;
  explicit Fifo(std::string p) : path(std::move(p)) {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    writer = std::thread([this] {
      for (int i = 0; i < 50 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (done) return;
      int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);  // fails at once without a reader
      if (fd >= 0) ::close(fd);
    });
  }
  ~Fifo() {
    done = true;
    writer.join();
  }
  Fifo(const Fifo&) = delete;
  Fifo& operator=(const Fifo&) = delete;
};

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const rg::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("expected ringgrad::Error, got another exception: " << e.what());
    return "<other exception>";
  }
  FAIL_CHECK("expected ringgrad::Error, but nothing was thrown");
  return "<nothing thrown>";
}

// Explicit dtypes and shapes: these helpers do not rely on from_vector's defaults
// (test_tensor.cpp checks those separately).
inline rg::Tensor f32(const std::vector<float>& v, const rg::Shape& shape) {
  return rg::from_vector<float>(v, shape, {.dtype = rg::kFloat32});
}
inline rg::Tensor f32(const std::vector<float>& v) {
  return f32(v, {static_cast<int64_t>(v.size())});
}
inline rg::Tensor f64(const std::vector<double>& v, const rg::Shape& shape) {
  return rg::from_vector<double>(v, shape, {.dtype = rg::kFloat64});
}
inline rg::Tensor f64(const std::vector<double>& v) {
  return f64(v, {static_cast<int64_t>(v.size())});
}
inline rg::Tensor i64(const std::vector<int64_t>& v, const rg::Shape& shape) {
  return rg::from_vector<int64_t>(v, shape, {.dtype = rg::kInt64});
}
inline rg::Tensor i64(const std::vector<int64_t>& v) {
  return i64(v, {static_cast<int64_t>(v.size())});
}

// |got - want| <= tol * (1 + |want|) for every element; reports the first mismatch.
inline void check_close(const rg::Tensor& t, const std::vector<double>& want, double tol = 1e-5) {
  REQUIRE(t.defined());
  std::vector<double> got = t.tolist<double>();
  REQUIRE_MESSAGE(got.size() == want.size(),
                  "numel " << got.size() << " vs expected " << want.size() << " ("
                           << rg::shape_str(t.shape()) << ")");
  for (size_t i = 0; i < got.size(); ++i) {
    bool ok = std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    if (std::isinf(want[i])) ok = got[i] == want[i];
    if (!ok) {
      FAIL_CHECK("element " << i << " of " << rg::shape_str(t.shape()) << ": got " << got[i]
                            << ", want " << want[i]);
      return;
    }
  }
}

inline void check_close(const rg::Tensor& t, const rg::Tensor& want, double tol = 1e-5) {
  REQUIRE_MESSAGE(t.shape() == want.shape(), rg::shape_str(t.shape()) << " vs expected "
                                                                      << rg::shape_str(want.shape()));
  check_close(t, want.tolist<double>(), tol);
}

inline std::vector<double> values(const rg::Tensor& t) { return t.tolist<double>(); }

// A float64 leaf that requires grad, uniform in [lo, hi).
inline rg::Tensor leaf(const rg::Shape& shape, double lo = -1.0, double hi = 1.0) {
  rg::Tensor t = rg::uniform(shape, lo, hi, {.dtype = rg::kFloat64});
  t.requires_grad_();
  return t;
}

// A float64 leaf from explicit values.
inline rg::Tensor leaf_of(const std::vector<double>& v, const rg::Shape& shape) {
  rg::Tensor t = rg::from_vector<double>(v, shape, {.dtype = rg::kFloat64});
  t.requires_grad_();
  return t;
}

// A float64 tensor whose i-th element (row-major) is f(i): the golden-value tests' inputs,
// written the same way in their PyTorch scripts (seq(shape, lambda i: math.sin(0.37*i))).
inline rg::Tensor seq(const rg::Shape& shape, const std::function<double(double)>& f) {
  std::vector<double> v(size_t(rg::numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = f(double(i));
  return f64(v, shape);
}

// c (m,n) = a (m,k) @ b (k,n), row-major, in double precision.
inline std::vector<double> naive_matmul(const std::vector<double>& a, const std::vector<double>& b,
                                        int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
  return c;
}

using Fn = std::function<rg::Tensor(const std::vector<rg::Tensor>&)>;

inline void grad_ok(const std::string& label, const Fn& f, const std::vector<rg::Tensor>& inputs,
                    rg::GradcheckOptions options = {}) {
  rg::GradcheckResult r = rg::gradcheck(f, inputs, options);
  CHECK_MESSAGE(r.ok, label << ": " << r.message << " (max_abs_error " << r.max_abs_error << ")");
}

}  // namespace test

// (t) is evaluated once, outside the assertion's lazily built message.
#define CHECK_SHAPE(t, ...)                                                         \
  do {                                                                              \
    const rg::Shape check_shape_got_ = (t).shape();                                 \
    CHECK_MESSAGE(check_shape_got_ == rg::Shape(__VA_ARGS__),                       \
                  "shape is " << rg::shape_str(check_shape_got_));                  \
  } while (0)
// Evaluates `text` once: it is often an error_of(...) call, which must not run
// again (and could not, from inside doctest's reporter) to print a failure.
#define CHECK_CONTAINS(text, part)                                                       \
  do {                                                                                   \
    const std::string check_contains_text_ = (text);                                     \
    const std::string check_contains_part_ = (part);                                     \
    CHECK_MESSAGE(::test::contains(check_contains_text_, check_contains_part_),          \
                  "message \"" << check_contains_text_ << "\" does not contain \""         \
                                << check_contains_part_ << "\"");                        \
  } while (0)
