// test_errors.cpp — user mistakes throw ringgrad::Error with "[op] expected …, got …"
// messages that name the shapes, dtypes and devices involved.
#include "test_helpers.h"

using test::error_of;
using test::f32;
using test::f64;
using test::i64;

TEST_CASE("errors: matmul with mismatched inner dims names both shapes") {
  rg::Tensor a = rg::zeros({2, 3}), b = rg::zeros({4, 5});
  std::string msg = error_of([&] { rg::matmul(a, b); });
  CHECK_CONTAINS(msg, "[matmul]");
  CHECK_CONTAINS(msg, "[2, 3]");
  CHECK_CONTAINS(msg, "[4, 5]");
  CHECK_CONTAINS(msg, "expected");
  CHECK_CONTAINS(msg, "got");
  CHECK(msg.rfind("[matmul]", 0) == 0);  // the op name comes first

  std::string batched = error_of([&] { rg::matmul(rg::zeros({2, 3, 4}), rg::zeros({3, 4, 5})); });
  CHECK_CONTAINS(batched, "[matmul]");
  CHECK_CONTAINS(batched, "[2, 3, 4]");
  CHECK_CONTAINS(batched, "[3, 4, 5]");

  std::string dot = error_of([&] { rg::matmul(rg::zeros({3}), rg::zeros({4})); });
  CHECK_CONTAINS(dot, "[matmul]");

  std::string scalar = error_of([&] { rg::matmul(rg::scalar_tensor(1), rg::zeros({2})); });
  CHECK_CONTAINS(scalar, "[matmul]");
}

TEST_CASE("errors: size and stride of a 0-d tensor are an error, not a read past its shape") {
  rg::Tensor scalar = rg::full({}, 1.0);
  CHECK_THROWS_WITH(scalar.size(-1),
                    doctest::Contains("[size] expected a tensor with dims, got a 0-d tensor (dim -1)"));
  CHECK_THROWS_WITH(scalar.stride(0),
                    doctest::Contains("[stride] expected a tensor with dims, got a 0-d tensor (dim 0)"));
}

TEST_CASE("errors: broadcasting mismatch in binary ops") {
  rg::Tensor a = rg::zeros({2, 3}), b = rg::zeros({4});
  std::string msg = error_of([&] { rg::add(a, b); });
  CHECK_CONTAINS(msg, "[add]");
  CHECK_CONTAINS(msg, "[2, 3]");
  CHECK_CONTAINS(msg, "[4]");
  CHECK_CONTAINS(error_of([&] { (void)(a * b); }), "[mul]");
  CHECK_CONTAINS(error_of([&] { (void)(a - b); }), "[sub]");
  CHECK_CONTAINS(error_of([&] { (void)(a / b); }), "[div]");
  CHECK_CONTAINS(error_of([&] { rg::maximum(a, b); }), "[maximum]");
  CHECK_CONTAINS(error_of([&] { (void)(a < b); }), "[2, 3]");
  CHECK_CONTAINS(error_of([&] { rg::broadcast_shapes({2, 3}, {4}, "myop"); }), "[myop]");
  CHECK_CONTAINS(error_of([&] { rg::where(rg::zeros({3}) > 0.0, a, b); }), "[where]");
}

TEST_CASE("errors: dtype mismatch names both dtypes") {
  rg::Tensor a = rg::zeros({2}, {.dtype = rg::kFloat32});
  rg::Tensor b = rg::zeros({2}, {.dtype = rg::kFloat64});
  // Two floating dtypes promote (test_reduced_precision.cpp); an int64 with a float does not.
  std::string msg = error_of([&] { rg::add(a, rg::zeros({2}, {.dtype = rg::kInt64})); });
  CHECK_CONTAINS(msg, "[add]");
  CHECK_CONTAINS(msg, "float32");
  CHECK_CONTAINS(msg, "int64");
  std::string mm = error_of([&] { rg::matmul(rg::zeros({2, 2}), rg::zeros({2, 2}, {.dtype = rg::kFloat64})); });
  CHECK_CONTAINS(mm, "float32");
  CHECK_CONTAINS(mm, "float64");
  std::string cat = error_of([&] { rg::cat({a, b}); });
  CHECK_CONTAINS(cat, "float64");
}

TEST_CASE("errors: CUDA tensors in a build or machine without CUDA") {
  if (rg::cuda::is_available()) {
    MESSAGE("skipped: a CUDA device is available");
    return;
  }
  CHECK(rg::cuda::device_count() == 0);
  std::string msg = error_of([] { rg::zeros({2}, {.device = rg::Device::cuda(0)}); });
  CHECK_CONTAINS(msg, "CUDA");
  // a build without the CUDA backend says so (a CUDA build on a GPU-less machine
  // may say something else, e.g. that no device is present)
  std::string moved = error_of([] { rg::ones({2}).to(rg::Device::cuda(0)); });
  CHECK_CONTAINS(moved, "CUDA");
}

TEST_CASE("errors: CUDA tensors in this build say built without CUDA" *
          doctest::description("only meaningful in a -DRINGGRAD_CUDA=OFF build")) {
  if (rg::cuda::is_available()) {
    MESSAGE("skipped: a CUDA device is available");
    return;
  }
  std::string msg = error_of([] { rg::zeros({2}, {.device = rg::Device::cuda(0)}); });
  if (!test::contains(msg, "built without CUDA")) {
    // A CUDA build on a machine without a GPU legitimately reports something else.
    MESSAGE("CUDA build without a device: " << msg);
    return;
  }
  CHECK_CONTAINS(msg, "built without CUDA");
  CHECK(msg.rfind("[", 0) == 0);
}

TEST_CASE("errors: Device::parse") {
  CHECK(rg::Device::parse("cpu") == rg::kCPU);
  CHECK(rg::Device::parse("cuda") == rg::Device::cuda(0));
  CHECK(rg::Device::parse("cuda:1") == rg::Device::cuda(1));
  CHECK(rg::Device::cuda(2).str() == "cuda:2");
  CHECK(rg::kCPU.str() == "cpu");
  std::string msg = error_of([] { rg::Device::parse("gpu"); });
  CHECK_CONTAINS(msg, "gpu");
  error_of([] { rg::Device::parse("cuda:"); });
  error_of([] { rg::Device::parse("cuda:x"); });
  error_of([] { rg::Device::parse("cuda:-1"); });
  error_of([] { rg::Device::parse(""); });
}

TEST_CASE("errors: reshape and view") {
  rg::Tensor x = rg::zeros({2, 3});
  std::string msg = error_of([&] { x.reshape({4, 2}); });
  CHECK_CONTAINS(msg, "[reshape]");
  CHECK_CONTAINS(msg, "[2, 3]");
  CHECK_CONTAINS(msg, "[4, 2]");
  CHECK_CONTAINS(error_of([&] { x.view({5}); }), "view");
  CHECK_CONTAINS(error_of([&] { x.reshape({-1, -1}); }), "reshape");
  CHECK_CONTAINS(error_of([&] { x.reshape({-1, 4}); }), "reshape");

  // view of a non-contiguous tensor that needs a copy: point the user at reshape
  std::string nc = error_of([&] { x.t().view({6}); });
  CHECK_CONTAINS(nc, "view");
  CHECK_CONTAINS(nc, "reshape");
  CHECK_NOTHROW(x.t().reshape({6}));
}

TEST_CASE("errors: bad dims and view arguments") {
  rg::Tensor x = rg::zeros({2, 3});
  CHECK_CONTAINS(error_of([&] { x.sum(2); }), "sum");
  CHECK_CONTAINS(error_of([&] { x.sum(-3); }), "sum");
  CHECK_CONTAINS(error_of([&] { rg::softmax(x, 5); }), "softmax");
  CHECK_CONTAINS(error_of([&] { x.transpose(0, 2); }), "transpose");
  CHECK_CONTAINS(error_of([&] { x.permute({0, 0}); }), "permute");
  CHECK_CONTAINS(error_of([&] { x.permute({0}); }), "permute");
  CHECK_CONTAINS(error_of([&] { x.select(0, 2); }), "select");
  CHECK_CONTAINS(error_of([&] { x.narrow(1, 2, 2); }), "narrow");
  CHECK_CONTAINS(error_of([&] { x.expand({4, 3}); }), "expand");
  CHECK_CONTAINS(error_of([&] { x.slice(1, 0, 3, 0); }), "slice");
  CHECK_CONTAINS(error_of([&] { x.t().t().unsqueeze(4); }), "unsqueeze");
  CHECK_CONTAINS(error_of([&] { rg::zeros({2, 3, 4}).flatten(2, 1); }), "flatten");
  CHECK_CONTAINS(error_of([&] { rg::argmax(x, 2); }), "argmax");
}

TEST_CASE("errors: index ops check their indices") {
  rg::Tensor x = rg::zeros({3, 4});
  std::string msg = error_of([&] { rg::index_select(x, 0, i64({0, 3})); });
  CHECK_CONTAINS(msg, "index_select");
  CHECK_CONTAINS(error_of([&] { rg::index_select(x, 1, i64({-5})); }), "index_select");
  // a float index is a dtype error
  std::string fl = error_of([&] { rg::index_select(x, 0, f32({0, 1})); });
  CHECK_CONTAINS(fl, "int64");
  CHECK_CONTAINS(error_of([&] { rg::gather(x, 1, i64({0, 4, 1, 1, 2, 2}, {3, 2})); }), "gather");
  CHECK_CONTAINS(error_of([&] { rg::gather(x, 1, i64({0, 1})); }), "gather");  // wrong ndim
  CHECK_CONTAINS(error_of([&] { rg::index_add(x, 0, i64({0, 5}), rg::ones({2, 4})); }),
                 "index_add");
  CHECK_CONTAINS(error_of([&] { rg::index_add(x, 0, i64({0, 1}), rg::ones({2, 3})); }),
                 "index_add");
  CHECK_CONTAINS(
      error_of([&] { rg::scatter_add(x, 1, i64({0, 9, 0, 0, 0, 0}, {3, 2}), rg::ones({3, 2})); }),
      "scatter_add");
}

TEST_CASE("errors: cat stack split chunk") {
  rg::Tensor a = rg::zeros({2, 3}), b = rg::zeros({2, 4});
  std::string msg = error_of([&] { rg::cat({a, b}, 0); });
  CHECK_CONTAINS(msg, "[cat]");
  CHECK_CONTAINS(msg, "[2, 3]");
  CHECK_CONTAINS(msg, "[2, 4]");
  CHECK_NOTHROW(rg::cat({a, b}, 1));
  CHECK_CONTAINS(error_of([&] { rg::cat({a, rg::zeros({6})}, 0); }), "cat");
  CHECK_CONTAINS(error_of([&] { rg::cat({}, 0); }), "cat");
  CHECK_CONTAINS(error_of([&] { rg::stack({a, b}); }), "stack");
  CHECK_CONTAINS(error_of([&] { rg::split(a, 0); }), "split");
  CHECK_CONTAINS(error_of([&] { rg::split(a, std::vector<int64_t>{1, 2}, 0); }), "split");
  CHECK_CONTAINS(error_of([&] { rg::chunk(a, 0); }), "chunk");
}

TEST_CASE("errors: item on a multi-element tensor") {
  std::string msg = error_of([] { rg::zeros({2, 3}).item(); });
  CHECK_CONTAINS(msg, "item");
  CHECK_CONTAINS(msg, "[2, 3]");
  CHECK_NOTHROW(rg::zeros({1, 1}).item());
}

TEST_CASE("errors: autograd misuse") {
  rg::Tensor plain = rg::ones({2});
  CHECK_CONTAINS(error_of([&] { plain.sum().backward(); }), "backward");
  rg::Tensor leaf = rg::ones({2}, {.requires_grad = true});
  CHECK_CONTAINS(error_of([&] { leaf.add_(rg::ones({2})); }), "add_");
  std::string rg_msg = error_of([&] { (leaf * 2.0).requires_grad_(); });
  CHECK_CONTAINS(rg_msg, "requires_grad_");
  // only floating-point tensors can require grad
  error_of([] { rg::zeros({2}, {.dtype = rg::kInt64}).requires_grad_(); });
}

TEST_CASE("errors: in-place ops check shapes") {
  rg::Tensor x = rg::zeros({2, 3});
  std::string msg = error_of([&] { x.add_(rg::ones({4})); });
  CHECK_CONTAINS(msg, "add_");
  CHECK_CONTAINS(msg, "[2, 3]");
  CHECK_CONTAINS(msg, "[4]");
  CHECK_CONTAINS(error_of([&] { x.copy_(rg::ones({3, 2})); }), "copy_");
  // the result of broadcasting would not fit in self
  CHECK_CONTAINS(error_of([&] { rg::zeros({3}).add_(rg::ones({2, 3})); }), "add_");
}

TEST_CASE("errors: messages are Error, a std::runtime_error") {
  try {
    rg::matmul(rg::zeros({2, 3}), rg::zeros({4, 5}));
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(dynamic_cast<const rg::Error*>(&e) != nullptr);
  }
}
