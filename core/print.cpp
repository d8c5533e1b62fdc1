// print.cpp — std::cout << tensor.
//
//   tensor([[ 0.1000, -1.2000],
//           [ 3.0000,  0.5000]], shape=[2, 2], dtype=float32, device=cpu)
//
// Past 6 entries along a dim (when the tensor has over 1000 elements) only the
// first and last 3 are shown, with "..." between, as PyTorch does.
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>

#include "ringgrad/autograd/node.h"
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
  int width;

  std::string format(double v) const {
    char buf[64];
    if (dtype == kBool) return v != 0 ? "true" : "false";
    if (dtype == kInt64) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    else if (std::isfinite(v) && v != 0 && (std::abs(v) >= 1e6 || std::abs(v) < 1e-4))
      std::snprintf(buf, sizeof buf, "%.4e", v);
    else std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
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
        i = n - kEdge - 1;
        os << (d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
        continue;
      }
      print(d + 1, start + i * step, indent + 1);
      if (i + 1 < n)
        os << (d + 1 == shape.size() ? ", "
                                     : "," + std::string(shape.size() - d - 1, '\n') +
                                           std::string(indent + 1, ' '));
    }
    os << ']';
  }
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  std::vector<double> values = t.tolist<double>();
  bool summarize = t.numel() > kSummarizeAbove;
  Printer p{os, values, t.shape(), t.dtype(), summarize, 0};
  for (double v : values) p.width = std::max<int>(p.width, static_cast<int>(p.format(v).size()));
  os << "tensor(";
  if (t.numel() == 0) os << "[]";
  else p.print(0, 0, 7);
  os << ", shape=" << shape_str(t.shape()) << ", dtype=" << t.dtype() << ", device=" << t.device();
  if (t.grad_fn()) os << ", grad_fn=" << t.grad_fn()->name;
  else if (t.requires_grad()) os << ", requires_grad=true";
  return os << ')';
}

}  // namespace ringgrad
