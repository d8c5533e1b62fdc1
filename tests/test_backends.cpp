// test_backends.cpp — every op of the op table (op_cases.h) on every backend,
// against the CPU (ggml's test-backend-ops idea).
//
// Each case makes its inputs for the CPU (odd shapes, broadcasting, non-contiguous
// views), runs forward and backward there twice (the second run must be identical:
// the harness's own determinism check), then makes the same inputs on each CUDA
// device — indices, masks and constants included — runs again, and compares the
// output and every input gradient with the CPU's. One line per case and dtype:
//
//   PASS softmax float32 max_err=1.2e-07 [cpu cuda:0]
//
// An exception inside a case is that case's FAIL; the others still run. Cases
// flagged large (hundreds of millions of elements) run only where a GPU is. On a
// machine without a GPU the CUDA half is skipped and says so ("SKIPPED: no CUDA
// device"): the ctest entry ops_x_backends then reports "Skipped", not "Passed".
#include <algorithm>
#include <cstdio>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "op_cases.h"
#include "test_helpers.h"

namespace {

using opcase::OpCase;
using opcase::V;

// Forward + backward of one case for (dtype, device): the output, then each gradient
// of an input that requires grad (undefined where backward did not reach it).
std::vector<rg::Tensor> run_case(const OpCase& c, rg::DType dtype, rg::Device device) {
  opcase::Env env = opcase::env_for(c, dtype, device);
  V inputs = c.inputs(env);
  std::string problem = opcase::check_inputs(c, inputs, device);
  if (!problem.empty()) throw std::runtime_error(problem);
  rg::manual_seed(99);  // for anything that draws from the default generator
  rg::Tensor out = c.call(inputs, env);
  if (out.device() != device)
    throw std::runtime_error("the output is on " + out.device().str() + ", not " + device.str());
  std::vector<rg::Tensor> results{out.to(rg::kCPU)};
  if (out.requires_grad()) {
    // The same upstream gradient everywhere: drawn on the CPU, then moved.
    rg::Generator g(100);
    rg::Tensor upstream = rg::randn(out.shape(), {.dtype = out.dtype()}, &g).to(device);
    out.backward(upstream);
    for (const rg::Tensor& x : inputs)
      if (x.requires_grad())
        results.push_back(x.grad().defined() ? x.grad().to(rg::kCPU) : rg::Tensor());
  }
  return results;
}

// The largest |got − want| over the output and gradients, and "" or the first
// difference beyond rtol = atol = tol (what allclose checks).
struct Comparison {
  double max_err = 0;
  std::string problem;
};

Comparison compare(const std::vector<rg::Tensor>& got, const std::vector<rg::Tensor>& want,
                   double tol) {
  Comparison r;
  if (got.size() != want.size()) {
    r.problem = std::to_string(got.size()) + " results, expected " + std::to_string(want.size());
    return r;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    std::string what =
        i == 0 ? "the output" : "the gradient of grad input " + std::to_string(i - 1);
    if (!want[i].defined()) continue;
    if (!got[i].defined()) {
      if (r.problem.empty()) r.problem = what + " is missing";
      continue;
    }
    if (got[i].shape() != want[i].shape()) {
      if (r.problem.empty())
        r.problem = what + " has shape " + rg::shape_str(got[i].shape()) + ", expected " +
                    rg::shape_str(want[i].shape());
      continue;
    }
    rg::Tensor a = got[i].to(rg::kFloat64), b = want[i].to(rg::kFloat64);
    if (a.numel() > 0) r.max_err = std::max(r.max_err, rg::amax(rg::abs(a - b)).item());
    if (!rg::allclose(a, b, tol, tol) && r.problem.empty()) r.problem = what + " differs";
  }
  return r;
}

}  // namespace

TEST_CASE("backends: every op of the op table matches the CPU on every available backend") {
  std::vector<rg::Device> others;
  for (int i = 0; i < rg::cuda::device_count(); ++i) others.push_back(rg::Device::cuda(i));
  std::string devices = "cpu";
  for (rg::Device d : others) devices += " " + d.str();

  const std::vector<OpCase>& cases = opcase::all_op_cases();
  int runs = 0, failed = 0, large_skipped = 0;
  for (const OpCase& c : cases) {
    // Every case also in bfloat16 and float16 (the CPU's 16-bit results are checked against
    // float32 in test_reduced_precision.cpp; here a GPU's against the CPU's, within a few
    // units of the 16-bit type: the two accumulate in different orders before rounding).
    std::vector<rg::DType> dtypes = c.flags.dtypes;
    if (!c.flags.large && c.flags.reduced_precision)
      dtypes.insert(dtypes.end(), {rg::kBFloat16, rg::kFloat16});
    for (rg::DType dtype : dtypes) {
      const double tol = dtype == rg::kBFloat16 ? std::max(c.flags.tol, 0.05)
                         : dtype == rg::kFloat16 ? std::max(c.flags.tol, 0.01)
                                                 : c.flags.tol;
      std::ostringstream dt;
      dt << dtype;
      if (c.flags.large && others.empty()) {  // sized for a GPU: nothing to compare here
        ++large_skipped;
        std::printf("SKIP %s %s (large: runs where a GPU is)\n", c.name.c_str(), dt.str().c_str());
        continue;
      }
      ++runs;
      Comparison worst;
      std::string at = "cpu", where;  // the run in progress; the one of the first problem
      try {
        std::vector<rg::Tensor> reference = run_case(c, dtype, rg::kCPU);
        // The CPU against itself, exactly: the case (and the CPU backend) is deterministic.
        // (A large case is computed once: it is there for the GPU's sake.)
        if (!c.flags.large) {
          at = "cpu (second run)";
          worst = compare(run_case(c, dtype, rg::kCPU), reference, 0.0);
          if (!worst.problem.empty()) where = at;
        }
        for (rg::Device d : others) {
          at = d.str();
          Comparison r = compare(run_case(c, dtype, d), reference, tol);
          worst.max_err = std::max(worst.max_err, r.max_err);
          if (worst.problem.empty() && !r.problem.empty()) {
            worst.problem = r.problem;
            where = at;
          }
        }
      } catch (const std::exception& e) {
        worst.problem = std::string("threw: ") + e.what();
        where = at;
      }
      bool ok = worst.problem.empty();
      failed += !ok;
      std::string detail = ok ? "" : "  on " + where + ": " + worst.problem;
      std::printf("%s %s %s max_err=%.3g [%s]%s\n", ok ? "PASS" : "FAIL", c.name.c_str(),
                  dt.str().c_str(), worst.max_err, devices.c_str(), detail.c_str());
      std::fflush(stdout);
      CHECK_MESSAGE(ok, c.name << " " << dt.str() << " on " << where << ": " << worst.problem);
    }
  }
  std::printf("%d of %d op cases x dtypes passed on [%s]; %d large case(s) need a GPU\n",
              runs - failed, runs, devices.c_str(), others.empty() ? large_skipped : 0);
  CHECK(cases.size() >= 200);
  if (!others.empty()) {
    MESSAGE("compared " << runs << " op cases x dtypes on " << others.size() << " GPU(s)");
  } else if (failed == 0) {  // ctest turns this line into "Skipped" (only when the CPU half passed)
    std::string build = rg::cuda::is_built() ? "built with CUDA" : "built without CUDA";
    MESSAGE("SKIPPED: no CUDA device (" << build << "): " << runs
                                        << " op cases x dtypes ran on the CPU only");
  }
}

// The GPU checks indices inside the kernels (core/cuda/device_errors.cuh): a bad
// one is skipped there and raised by the host at its next synchronisation, with
// the op, the index and the allowed range — never a wild write, never silence.
TEST_CASE("backends: a bad index on the GPU is an error at the next synchronisation") {
  if (rg::cuda::device_count() == 0) {
    std::string build = rg::cuda::is_built() ? "built with CUDA" : "built without CUDA";
    MESSAGE("SKIPPED: no CUDA device (" << build << "): deferred index errors not exercised");
    return;
  }
  const rg::Device gpu = rg::Device::cuda(0);
  rg::Tensor x = rg::randn({5, 3}, {.device = gpu});
  rg::Tensor bad = rg::from_vector<int64_t>({0, 7}, {2}).to(gpu);
  std::string err = test::error_of([&] {
    rg::Tensor y = rg::index_select(x, 0, bad);
    y.sum().item();  // the first read of a result: the host synchronises here
  });
  CHECK_CONTAINS(err, "[index_select] expected indices in [-5, 5) for a dim of size 5, got 7");
  CHECK_CONTAINS(err, "found on the GPU");
  // reported once: the next op runs normally
  rg::Tensor good = rg::from_vector<int64_t>({4, -5}, {2}).to(gpu);
  CHECK(rg::index_select(x, 0, good).sum().item() ==
        doctest::Approx(rg::index_select(x.to(rg::kCPU), 0, good.to(rg::kCPU)).sum().item()));
  // a class label out of range in cross-entropy
  rg::Tensor logits = rg::randn({2, 4}, {.device = gpu});
  rg::Tensor labels = rg::from_vector<int64_t>({1, 9}, {2}).to(gpu);
  CHECK_CONTAINS(test::error_of([&] { rg::nn::cross_entropy(logits, labels).item(); }),
                 "[cross_entropy] expected class indices in [0, 4), got 9");
}
