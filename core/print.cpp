// print.cpp — std::cout << tensor.
//
//   tensor([[ 0.1000, -1.2000],
//           [ 3.0000,  0.5000]], shape=[2, 2], dtype=float32, device=cpu)
//
// Whole-number floats print as "3.", a wide range of magnitudes in scientific
// notation, both decided over the values shown (as PyTorch does).
// Past 6 entries along a dim (when the tensor has over 1000 elements) only the
// first and last 3 are shown, with "..." between, as PyTorch does.
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>

#include "ringgrad/core/ops.h"

namespace ringgrad {
namespace {

constexpr int64_t kSummarizeAbove = 1000, kEdge = 3;

struct Printer {
  std::ostream& os;
  const std::vector<double>& values;
  const Shape& shape;
  DType dtype;
  bool summarize;
  bool scientific;  // one notation for the whole tensor, chosen from its range
  bool integral;    // floats that are all whole numbers print as "3." (PyTorch's style)
  int width;

  std::string format(double v) const {
    char buf[64];
    if (dtype == kBool) return v != 0 ? "true" : "false";
    if (dtype == kInt64)
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    else if (scientific)
      std::snprintf(buf, sizeof buf, "%.4e", v);
    else if (integral)
      std::snprintf(buf, sizeof buf, "%.0f.", v);
    else
      std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
  }

  // Call f(value) for every value that print() will show.
  template <typename F>
  void visit_shown(size_t d, int64_t start, F&& f) const {
    if (d == shape.size()) return f(values[start]);
    int64_t n = shape[d], step = 1;
    for (size_t k = d + 1; k < shape.size(); ++k) step *= shape[k];
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 2 * kEdge && i == kEdge) i = n - kEdge;
      visit_shown(d + 1, start + i * step, f);
    }
  }

  // Between entries of dim d: ", " in the last dim, else a comma, blank lines, and indentation.
  void separator(size_t d, size_t newlines, int indent_to) const {
    if (d + 1 == shape.size()) {
      os << ", ";
      return;
    }
    os << ',';
    for (size_t k = 0; k < newlines; ++k) os << '\n';
    for (int k = 0; k < indent_to; ++k) os << ' ';
  }

  // Print dim d of the block starting at flat index `start` (contiguous layout).
  void print(size_t d, int64_t start, int indent) const {
    if (d == shape.size()) {
      os << std::setw(width) << format(values[start]);
      return;
    }
    int64_t n = shape[d], step = 1;
    for (size_t k = d + 1; k < shape.size(); ++k) step *= shape[k];
    os << '[';
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 2 * kEdge && i == kEdge) {
        os << "...";
        separator(d, 1, indent + 1);
        i = n - kEdge - 1;
        continue;
      }
      print(d + 1, start + i * step, indent + 1);
      if (i + 1 < n) separator(d, shape.size() - d - 1, indent + 1);
    }
    os << ']';
  }
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  std::vector<double> values = t.tolist<double>();
  bool summarize = t.numel() > kSummarizeAbove;
  Printer p{os, values, t.shape(), t.dtype(), summarize, false, false, 0};
  // PyTorch's rule, over the values shown: scientific when the range is wide or extreme.
  double big = 0, small = INFINITY;
  bool integral = true;
  p.visit_shown(0, 0, [&](double v) {
    if (!std::isfinite(v)) return;
    integral = integral && v == std::round(v);
    if (v != 0) big = std::max(big, std::abs(v)), small = std::min(small, std::abs(v));
  });
  p.integral = integral;
  p.scientific = big > 1e8 || (!integral && big > 0 && (small < 1e-4 || big / small > 1e3));
  p.visit_shown(0, 0, [&](double v) {
    p.width = std::max<int>(p.width, static_cast<int>(p.format(v).size()));
  });
  os << "tensor(";
  if (t.numel() == 0)
    os << "[]";
  else
    p.print(0, 0, 7);
  os << ", shape=" << shape_str(t.shape()) << ", dtype=" << t.dtype() << ", device=" << t.device();
  if (!t.is_leaf())
    os << ", grad_fn=" << t.grad_fn_name();
  else if (t.requires_grad())
    os << ", requires_grad=true";
  return os << ')';
}

}  // namespace ringgrad
