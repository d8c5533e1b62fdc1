// test_reduced_precision.cpp — the bfloat16 and float16 dtypes (core/dtype.h, core/half.h,
// core/reduced_precision.cpp): conversions through .to(), promotion, printing, and every
// op of the op table (op_cases.h) in each 16-bit dtype against float32.
//
// The op-table check: a case runs once with its float inputs in bfloat16 (or float16),
// forward and backward, and once in float32 on the *same* values (its inputs rounded
// through the 16-bit type first), with the same upstream gradient. An op computes in
// float32 and rounds its result once, so a single op's output is the 16-bit rounding of
// the float32 one: within one unit in the last place (2^-8 relative for bfloat16, 2^-11
// for float16). Gradients and composite ops round a few times over (a backward is a chain
// of ops, each rounding), so the bound is a few units: |got − want| ≤ k·u·(|want| + m),
// u the unit roundoff, m the largest |want| of that result, k = 16.
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "op_cases.h"
#include "test_helpers.h"

namespace {

using opcase::OpCase;
using opcase::V;

double unit_roundoff(rg::DType t) { return t == rg::kBFloat16 ? 0x1p-8 : 0x1p-11; }

// Output and input gradients of one case; float inputs in `dtype`, rounded through `via`.
std::vector<rg::Tensor> run(const OpCase& c, rg::DType dtype, rg::DType via) {
  opcase::Env env = opcase::env_for(c, dtype, rg::kCPU);
  env.round_through = via;
  V inputs = c.inputs(env);
  bool any_float = false;
  for (const rg::Tensor& x : inputs) any_float |= x.dtype() == dtype;
  if (!any_float) return {};  // nothing of this case is in the dtype (sum:bool, arange)
  rg::manual_seed(99);
  rg::Tensor out = c.call(inputs, env);
  std::vector<rg::Tensor> results{out};
  if (out.requires_grad()) {
    rg::Generator g(100);
    rg::Tensor upstream = rg::randn(out.shape(), {.dtype = rg::kFloat64}, &g).to(via).to(out.dtype());
    out.backward(upstream);
    for (const rg::Tensor& x : inputs)
      if (x.requires_grad()) results.push_back(x.grad());
  }
  return results;
}

// "" or what differs beyond bound·u·(|want| + max|want|).
std::string compare(const std::vector<rg::Tensor>& got, const std::vector<rg::Tensor>& want,
                    rg::DType dtype, double bound, double* worst) {
  if (got.size() != want.size()) return "a different number of results";
  for (size_t i = 0; i < want.size(); ++i) {
    std::string what = i == 0 ? "the output" : "gradient " + std::to_string(i - 1);
    if (!want[i].defined() || !got[i].defined()) {
      if (want[i].defined() != got[i].defined()) return what + ": defined on one side only";
      continue;
    }
    // Float results in the case's 16-bit dtype, the others (indices, masks) as they are.
    const rg::DType expected = want[i].dtype() == rg::kFloat32 ? dtype : want[i].dtype();
    if (got[i].dtype() != expected)
      return what + " has dtype " + rg::dtype_name(got[i].dtype()) + ", expected " +
             rg::dtype_name(expected);
    if (got[i].shape() != want[i].shape()) return what + " has another shape";
    if (got[i].numel() == 0) continue;
    std::vector<double> a = got[i].to(rg::kFloat64).tolist<double>();
    std::vector<double> b = want[i].to(rg::kFloat64).tolist<double>();
    if (!rg::is_floating(want[i].dtype())) {
      if (a != b) return what + " (not floating) differs";
      continue;
    }
    double m = 0;
    for (double x : b)
      if (std::isfinite(x)) m = std::max(m, std::abs(x));
    for (size_t j = 0; j < b.size(); ++j) {
      if (std::isfinite(a[j]) != std::isfinite(b[j]) ||
          (!std::isfinite(b[j]) && !(std::isnan(a[j]) && std::isnan(b[j])) && a[j] != b[j]))
        return what + ": " + std::to_string(a[j]) + " where float32 has " +
               std::to_string(b[j]) + " (element " + std::to_string(j) + ")";
      if (!std::isfinite(b[j])) continue;
      double e = std::abs(a[j] - b[j]) / (std::abs(b[j]) + m + 1e-30) / unit_roundoff(dtype);
      *worst = std::max(*worst, e);
      if (e > bound) {
        std::ostringstream os;
        os << what << " differs by " << e << " units at element " << j << ": " << a[j]
           << " vs " << b[j];
        return os.str();
      }
    }
  }
  return "";
}

}  // namespace

TEST_CASE("reduced precision: bfloat16 and float16 are dtypes of 2 bytes that compute in float32") {
  CHECK(rg::element_size(rg::kBFloat16) == 2);
  CHECK(rg::element_size(rg::kFloat16) == 2);
  CHECK(rg::is_floating(rg::kBFloat16));
  CHECK(std::string(rg::dtype_name(rg::kBFloat16)) == "bfloat16");
  CHECK(std::string(rg::dtype_name(rg::kFloat16)) == "float16");
  CHECK(rg::compute_dtype(rg::kBFloat16) == rg::kFloat32);
  CHECK(rg::compute_dtype(rg::kFloat64) == rg::kFloat64);
}

TEST_CASE("reduced precision: .to() rounds to nearest even and keeps inf, NaN and -0") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {1.0f, 1.00390625f /* halfway in bf16: to even (1) */,
                          1.01171875f /* halfway: to even, up */, -0.0f, inf, -inf,
                          std::nanf(""), 3.0e38f, 65519.0f, 65520.0f, 1e-8f, -2.5f};
  rg::Tensor t = rg::from_vector<float>(x);
  for (rg::DType dt : {rg::kBFloat16, rg::kFloat16}) {
    CAPTURE(dt);
    rg::Tensor h = t.to(dt);
    CHECK(h.dtype() == dt);
    std::vector<float> back = h.to(rg::kFloat32).tolist<float>();
    for (size_t i = 0; i < x.size(); ++i) {
      float want = dt == rg::kBFloat16
                       ? rg::bfloat16_bits_to_float(rg::float_to_bfloat16_bits(x[i]))
                       : rg::half_bits_to_float(rg::float_to_half_bits(x[i]));
      CAPTURE(x[i]);
      if (std::isnan(want)) {
        CHECK(std::isnan(back[i]));
      } else {
        CHECK(back[i] == want);
        CHECK(std::signbit(back[i]) == std::signbit(want));
      }
    }
  }
  // Spot values: 1 + 2^-8 is a bfloat16 tie (to even: 1); 65520 overflows float16.
  CHECK(t.to(rg::kBFloat16).to(rg::kFloat32).tolist<float>()[1] == 1.0f);
  CHECK(std::isinf(t.to(rg::kFloat16).to(rg::kFloat32).tolist<float>()[9]));
  // Through every other dtype and back.
  rg::Tensor h = rg::from_vector<double>({0.0, 1.5, -2.0, 300.0}).to(rg::kBFloat16);
  CHECK(h.to(rg::kInt64).tolist<int64_t>() == std::vector<int64_t>{0, 1, -2, 300});
  CHECK(h.to(rg::kBool).to(rg::kInt64).tolist<int64_t>() == std::vector<int64_t>{0, 1, 1, 1});
  CHECK(h.to(rg::kFloat16).to(rg::kFloat64).tolist<double>() ==
        std::vector<double>{0.0, 1.5, -2.0, 300.0});
  CHECK(rg::from_vector<int64_t>({257}).to(rg::kBFloat16).item() == 256.0);  // 8 bits: ties even
  CHECK(rg::full({2}, 0.1, {.dtype = rg::kBFloat16}).to(rg::kFloat64).tolist<double>()[0] ==
        double(rg::bfloat16_bits_to_float(rg::float_to_bfloat16_bits(0.1f))));
}

TEST_CASE("reduced precision: mixed floating dtypes promote as in PyTorch") {
  using rg::kBFloat16, rg::kFloat16, rg::kFloat32, rg::kFloat64;
  struct Row {
    rg::DType a, b, want;
  };
  for (Row r : {Row{kBFloat16, kBFloat16, kBFloat16}, Row{kFloat16, kFloat16, kFloat16},
                Row{kBFloat16, kFloat32, kFloat32}, Row{kFloat32, kFloat16, kFloat32},
                Row{kBFloat16, kFloat16, kFloat32}, Row{kFloat16, kFloat64, kFloat64},
                Row{kFloat32, kFloat64, kFloat64}}) {
    CAPTURE(r.a);
    CAPTURE(r.b);
    CHECK(rg::promote_floating(r.a, r.b) == r.want);
    rg::Tensor a = rg::full({2}, 1.5, {.dtype = r.a}).requires_grad_();
    rg::Tensor b = rg::full({3, 1}, 0.25, {.dtype = r.b}).requires_grad_();
    rg::Tensor y = a * b + b;
    CHECK(y.dtype() == r.want);
    CHECK(y.shape() == rg::Shape{3, 2});
    CHECK(y.to(rg::kFloat64).tolist<double>()[0] == 0.625);
    y.sum().backward();
    // Gradients come back in each input's own dtype.
    CHECK(a.grad().dtype() == r.a);
    CHECK(b.grad().dtype() == r.b);
    CHECK(a.grad().to(rg::kFloat64).tolist<double>() == std::vector<double>{0.75, 0.75});
    CHECK(b.grad().to(rg::kFloat64).tolist<double>() == std::vector<double>{5.0, 5.0, 5.0});
  }
}

TEST_CASE("reduced precision: printing shows the rounded values and the dtype") {
  std::ostringstream os;
  os << rg::from_vector<float>({1.0f, 0.1f, -3.0f}).to(rg::kBFloat16);
  CHECK(os.str().find("bfloat16") != std::string::npos);
  CHECK(os.str().find("0.1001") != std::string::npos);  // bfloat16(0.1) = 0.10009765625
}

TEST_CASE("reduced precision: every op of the op table in bfloat16 and float16 is float32 rounded") {
  int runs = 0, failed = 0, without_floats = 0;
  for (const OpCase& c : opcase::all_op_cases()) {
    if (c.flags.large || !c.flags.reduced_precision) continue;
    for (rg::DType dt : {rg::kBFloat16, rg::kFloat16}) {
      ++runs;
      std::string problem;
      double worst = 0;
      // Adam's second moment v = g² of small gradients falls among float16's subnormals
      // (below 6.1e-5), which hold fewer bits: the reason optimizers keep float32 state.
      const double bound = c.name == "adam_step" && dt == rg::kFloat16 ? 64 : 16;
      try {
        std::vector<rg::Tensor> got = run(c, dt, dt);
        if (got.empty()) {
          --runs, ++without_floats;
          continue;
        }
        problem = compare(got, run(c, rg::kFloat32, dt), dt, bound, &worst);
      } catch (const std::exception& e) {
        problem = std::string("threw: ") + e.what();
      }
      failed += !problem.empty();
      if (!problem.empty())
        std::printf("FAIL %s %s: %s\n", c.name.c_str(), rg::dtype_name(dt), problem.c_str());
      CHECK_MESSAGE(problem.empty(), c.name << " " << rg::dtype_name(dt) << ": " << problem);
    }
  }
  std::printf("%d of %d op cases x {bfloat16, float16} within 16 units of float32 (%d without "
              "float inputs)\n", runs - failed, runs, without_floats);
  CHECK(runs >= 400);
}

// Past 2^20 elements an operand's float32 copy is made block by block (GEMM: rows and the
// inner dim; reductions: outer rows or columns): the same numbers as float32 on the
// rounded inputs, to float32's summation order (≤ 1 unit of the 16-bit result).
TEST_CASE("reduced precision: large GEMMs and reductions, staged in blocks, equal float32 rounded") {
  rg::Generator gen(11);
  for (rg::DType dt : {rg::kBFloat16, rg::kFloat16}) {
    CAPTURE(dt);
    rg::Tensor a = rg::randn({1100, 1030}, {}, &gen).to(dt), b = rg::randn({1030, 1050}, {}, &gen).to(dt);
    auto check = [&](const rg::Tensor& got, const rg::Tensor& want32) {
      REQUIRE(got.dtype() == dt);
      std::vector<double> g = got.to(rg::kFloat64).tolist<double>();
      std::vector<double> w = want32.to(dt).to(rg::kFloat64).tolist<double>();
      std::vector<double> w32 = want32.to(rg::kFloat64).tolist<double>();
      REQUIRE(g.size() == w.size());
      double m = 0;
      for (double x : w32) m = std::max(m, std::abs(x));
      int64_t off = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        off += g[i] != w[i];
        // one rounding to 16 bits, plus float32's summation-order difference (cancellation)
        REQUIRE(std::abs(g[i] - w32[i]) <= unit_roundoff(dt) * std::abs(w32[i]) + 1e-5 * m);
      }
      CHECK(off < int64_t(g.size() / 100));  // rounding-boundary cases only
    };
    check(rg::matmul(a, b), rg::matmul(a.to(rg::kFloat32), b.to(rg::kFloat32)));
    check(rg::matmul(a.t(), a), rg::matmul(a.to(rg::kFloat32).t(), a.to(rg::kFloat32)));
    check(rg::sum(a, {0}), rg::sum(a.to(rg::kFloat32), {0}));
    check(rg::sum(a.view({1, 1100, 1030}), {1}), rg::sum(a.to(rg::kFloat32).view({1, 1100, 1030}), {1}));
    check(rg::amax(b, {1}), rg::amax(b.to(rg::kFloat32), {1}));
    CHECK(rg::argmax(a, 0).tolist<int64_t>() == rg::argmax(a.to(rg::kFloat32), 0).tolist<int64_t>());
  }
}
