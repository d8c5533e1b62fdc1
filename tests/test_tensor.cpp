// test_tensor.cpp — tensors themselves: factories, random numbers, views and
// storage sharing, non-contiguous layouts, printing, and in-place ops.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>

#include "test_helpers.h"

using test::check_close;
using test::f32;
using test::f64;
using test::i64;

// ---------------------------------------------------------------- factories

TEST_CASE("tensor: zeros ones full empty") {
  rg::Tensor z = rg::zeros({2, 3});
  CHECK_SHAPE(z, {2, 3});
  CHECK(z.dtype() == rg::kFloat32);
  CHECK(z.device() == rg::kCPU);
  CHECK(z.numel() == 6);
  CHECK(z.dim() == 2);
  CHECK(z.is_contiguous());
  CHECK(z.strides() == rg::Shape{3, 1});
  CHECK(z.nbytes() == 24);
  CHECK_FALSE(z.requires_grad());
  check_close(z, {0, 0, 0, 0, 0, 0});

  rg::Tensor o = rg::ones({4}, {.dtype = rg::kFloat64});
  CHECK(o.dtype() == rg::kFloat64);
  CHECK(o.nbytes() == 32);
  check_close(o, {1, 1, 1, 1});

  rg::Tensor oi = rg::ones({3}, {.dtype = rg::kInt64});
  CHECK(oi.dtype() == rg::kInt64);
  CHECK(oi.tolist<int64_t>() == std::vector<int64_t>{1, 1, 1});

  rg::Tensor f = rg::full({2, 2}, 7.5);
  check_close(f, {7.5, 7.5, 7.5, 7.5});

  rg::Tensor e = rg::empty({5, 2}, {.dtype = rg::kFloat64});
  CHECK_SHAPE(e, {5, 2});
  CHECK(e.dtype() == rg::kFloat64);
  CHECK(e.numel() == 10);

  rg::Tensor s = rg::scalar_tensor(3.25);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 3.25);

  rg::Tensor r = rg::zeros({2}, {.requires_grad = true});
  CHECK(r.requires_grad());
  CHECK(r.is_leaf());
}

TEST_CASE("tensor: zeros_like ones_like empty_like full_like keep shape and dtype") {
  rg::Tensor base = rg::ones({2, 3}, {.dtype = rg::kFloat64});
  rg::Tensor z = rg::zeros_like(base), o = rg::ones_like(base), e = rg::empty_like(base),
             f = rg::full_like(base, -2);
  for (const rg::Tensor& t : {z, o, e, f}) {
    CHECK_SHAPE(t, {2, 3});
    CHECK(t.dtype() == rg::kFloat64);
  }
  check_close(z, std::vector<double>(6, 0));
  check_close(o, std::vector<double>(6, 1));
  check_close(f, std::vector<double>(6, -2));
}

TEST_CASE("tensor: arange") {
  rg::Tensor a = rg::arange(5);
  CHECK_SHAPE(a, {5});
  CHECK(a.dtype() == rg::kFloat32);
  check_close(a, {0, 1, 2, 3, 4});

  rg::Tensor b = rg::arange(1, 2, 0.25, {.dtype = rg::kFloat64});
  CHECK_SHAPE(b, {4});
  check_close(b, {1, 1.25, 1.5, 1.75}, 1e-12);

  rg::Tensor c = rg::arange(2, 11, 3, {.dtype = rg::kInt64});
  CHECK(c.dtype() == rg::kInt64);
  CHECK(c.tolist<int64_t>() == std::vector<int64_t>{2, 5, 8});

  rg::Tensor d = rg::arange(3, 0, -1);
  check_close(d, {3, 2, 1});
}

TEST_CASE("tensor: from_vector") {
  rg::Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK_SHAPE(a, {2, 3});
  CHECK(a.dtype() == rg::kFloat32);
  check_close(a, {1, 2, 3, 4, 5, 6});
  CHECK(a.data_ptr<float>()[4] == 5.0f);

  rg::Tensor b = f64({0.5, -1.5});
  CHECK_SHAPE(b, {2});
  CHECK(b.dtype() == rg::kFloat64);
  CHECK(b.tolist<double>() == std::vector<double>{0.5, -1.5});

  rg::Tensor c = i64({3, 1, 2}, {3, 1});
  CHECK(c.dtype() == rg::kInt64);
  CHECK_SHAPE(c, {3, 1});
  CHECK(c.tolist<int64_t>() == std::vector<int64_t>{3, 1, 2});

  // explicit options convert
  rg::Tensor d = rg::from_vector<double>({1.5, 2.5}, {2}, {.dtype = rg::kFloat32});
  CHECK(d.dtype() == rg::kFloat32);
  check_close(d, {1.5, 2.5});
  rg::Tensor g = rg::from_vector<float>({1, 2}, {2}, {.requires_grad = true});
  CHECK(g.requires_grad());
  CHECK(g.is_leaf());
}

TEST_CASE("tensor: from_blob views the caller's memory and releases it once") {
  std::vector<double> memory = {1, 2, 3, 4, 5, 6};
  int released = 0;
  {
    rg::Tensor t = rg::from_blob(memory.data(), {2, 3}, [&](void* p) {
      CHECK(p == memory.data());
      ++released;
    }, {.dtype = rg::kFloat64});
    CHECK_SHAPE(t, {2, 3});
    CHECK(t.is_contiguous());
    CHECK(t.raw_data() == memory.data());  // no copy
    check_close(t, {1, 2, 3, 4, 5, 6});
    int64_t live = rg::memory_stats().live_bytes;
    rg::Tensor row = t.select(0, 1);
    row.mul_(10.0);  // writes land in the caller's memory
    CHECK(memory[4] == 50);
    CHECK(rg::memory_stats().live_bytes == live);  // not ours: not counted
    t = rg::Tensor();
    CHECK(released == 0);  // `row` still views it
  }
  CHECK(released == 1);
  rg::Tensor plain = rg::from_blob(memory.data(), {6}, {.dtype = rg::kFloat64});  // no release
  CHECK(plain.sum().item() == 1 + 2 + 3 + 40 + 50 + 60);
  CHECK_CONTAINS(test::error_of([] { rg::from_blob(nullptr, {3}); }), "from_blob");
  CHECK_CONTAINS(test::error_of([&] { rg::from_blob(memory.data(), {-1}); }), "non-negative");
}

TEST_CASE("tensor: from_vector defaults: dtype from T, shape 1-D") {
  // factory.h: "A tensor holding `values` (row-major) with the given shape (default: 1-D)".
  // With no options, the element type decides the dtype (an int64 vector of labels
  // must not silently become float32).
  CHECK(rg::from_vector<float>({1, 2}).dtype() == rg::kFloat32);
  CHECK(rg::from_vector<double>({1, 2}).dtype() == rg::kFloat64);
  CHECK(rg::from_vector<int64_t>({1, 2}).dtype() == rg::kInt64);
  CHECK(rg::from_vector<double>({1, 2}, {2, 1}).dtype() == rg::kFloat64);
  CHECK_SHAPE(rg::from_vector<float>({1, 2, 3}), {3});
  CHECK_SHAPE(rg::from_vector<float>({5}), {1});  // one value, default shape: still 1-D
  CHECK(rg::from_vector<float>({5}, {1, 1}).dim() == 2);
}

// ---------------------------------------------------------------- random numbers

TEST_CASE("tensor: same seed gives the same numbers") {
  rg::manual_seed(1234);
  rg::Tensor a = rg::randn({3, 5});
  rg::Tensor a2 = rg::rand({7});
  rg::manual_seed(1234);
  rg::Tensor b = rg::randn({3, 5});
  rg::Tensor b2 = rg::rand({7});
  CHECK(a.tolist<float>() == b.tolist<float>());
  CHECK(a2.tolist<float>() == b2.tolist<float>());

  // successive draws differ
  rg::Tensor c = rg::randn({3, 5});
  CHECK(c.tolist<float>() != b.tolist<float>());

  // a different seed gives different numbers
  rg::manual_seed(1235);
  CHECK(rg::randn({3, 5}).tolist<float>() != a.tolist<float>());
}

TEST_CASE("tensor: Generator objects are independent and reproducible") {
  rg::Generator g1(99), g2(99);
  rg::Tensor a = rg::rand({16}, {}, &g1);
  rg::Tensor b = rg::rand({16}, {}, &g2);
  CHECK(a.tolist<float>() == b.tolist<float>());
  CHECK(g1.offset() > 0);
  CHECK(g1.offset() == g2.offset());

  // drawing from the default generator does not disturb g1
  rg::manual_seed(5);
  (void)rg::randn({100});
  rg::Tensor a_next = rg::rand({16}, {}, &g1);
  rg::Tensor b_next = rg::rand({16}, {}, &g2);
  CHECK(a_next.tolist<float>() == b_next.tolist<float>());
  CHECK(a_next.tolist<float>() != a.tolist<float>());

  // manual_seed on a Generator restarts its stream
  g1.manual_seed(99);
  CHECK(g1.offset() == 0);
  CHECK(rg::rand({16}, {}, &g1).tolist<float>() == a.tolist<float>());

  // float64 draws are reproducible too
  rg::Generator h1(7), h2(7);
  CHECK(rg::randn({9}, {.dtype = rg::kFloat64}, &h1).tolist<double>() ==
        rg::randn({9}, {.dtype = rg::kFloat64}, &h2).tolist<double>());
}

TEST_CASE("tensor: counter-based draws: element i depends only on seed, offset, i") {
  rg::Generator g1(2024), g2(2024);
  std::vector<float> short_draw = rg::rand({5}, {}, &g1).tolist<float>();
  std::vector<float> long_draw = rg::rand({64}, {}, &g2).tolist<float>();
  CHECK(std::equal(short_draw.begin(), short_draw.end(), long_draw.begin()));

  rg::Generator h1(2024), h2(2024);
  std::vector<float> n_short = rg::randn({7}, {}, &h1).tolist<float>();
  std::vector<float> n_long = rg::randn({64}, {}, &h2).tolist<float>();
  CHECK(std::equal(n_short.begin(), n_short.end(), n_long.begin()));
}

TEST_CASE("tensor: rand is uniform in 0 <= x < 1") {
  rg::manual_seed(7);
  std::vector<double> v = rg::rand({100000}).tolist<double>();
  double lo = *std::min_element(v.begin(), v.end());
  double hi = *std::max_element(v.begin(), v.end());
  CHECK(lo >= 0.0);
  CHECK(hi < 1.0);
  double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  CHECK(mean == doctest::Approx(0.5).epsilon(0.01));
  // every tenth of [0, 1) gets about a tenth of the samples
  std::vector<int> bins(10, 0);
  for (double x : v) bins[std::min(9, static_cast<int>(x * 10))]++;
  for (int b : bins) CHECK(std::abs(b - 10000) < 600);

  rg::Tensor u = rg::uniform({10000}, -3, -2, {.dtype = rg::kFloat64});
  std::vector<double> w = u.tolist<double>();
  CHECK(*std::min_element(w.begin(), w.end()) >= -3.0);
  CHECK(*std::max_element(w.begin(), w.end()) < -2.0);
}

TEST_CASE("tensor: randn has mean 0 and std 1") {
  rg::manual_seed(11);
  for (rg::DType dt : {rg::kFloat32, rg::kFloat64}) {
    std::vector<double> v = rg::randn({100000}, {.dtype = dt}).tolist<double>();
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
    double var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    double sd = std::sqrt(var / (v.size() - 1));
    CHECK(std::abs(mean) < 0.02);
    CHECK(std::abs(sd - 1.0) < 0.02);
    CHECK(std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); }));
    // about 68.3% within one std
    double within = std::count_if(v.begin(), v.end(), [](double x) { return std::abs(x) < 1; });
    CHECK(within / v.size() == doctest::Approx(0.6827).epsilon(0.02));
  }

  rg::Tensor n = rg::normal({50000}, 3.0, 0.5, {.dtype = rg::kFloat64});
  std::vector<double> w = n.tolist<double>();
  double mean = std::accumulate(w.begin(), w.end(), 0.0) / w.size();
  CHECK(std::abs(mean - 3.0) < 0.02);
}

TEST_CASE("tensor: randint and randperm") {
  rg::manual_seed(3);
  rg::Tensor r = rg::randint(-2, 5, {1000});
  CHECK(r.dtype() == rg::kInt64);
  std::vector<int64_t> v = r.tolist<int64_t>();
  CHECK(*std::min_element(v.begin(), v.end()) == -2);
  CHECK(*std::max_element(v.begin(), v.end()) == 4);

  rg::Tensor p = rg::randperm(50);
  CHECK(p.dtype() == rg::kInt64);
  std::vector<int64_t> q = p.tolist<int64_t>();
  std::vector<int64_t> sorted = q;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> expect(50);
  std::iota(expect.begin(), expect.end(), 0);
  CHECK(sorted == expect);
  CHECK(q != expect);  // 1/50! chance of a false failure
}

// ---------------------------------------------------------------- views

TEST_CASE("tensor: reshape view flatten share storage") {
  rg::Tensor x = rg::arange(24).reshape({2, 3, 4});
  CHECK_SHAPE(x, {2, 3, 4});
  CHECK(x.strides() == rg::Shape{12, 4, 1});

  rg::Tensor v = x.view({4, -1});
  CHECK_SHAPE(v, {4, 6});
  CHECK(v.storage() == x.storage());

  CHECK_SHAPE(x.reshape({-1}), {24});
  CHECK_SHAPE(x.flatten(), {24});
  CHECK_SHAPE(x.flatten(1), {2, 12});
  CHECK_SHAPE(x.flatten(0, 1), {6, 4});
  CHECK(x.flatten(1).storage() == x.storage());
  check_close(x.flatten(0, 1), rg::arange(24).tolist<double>());

  // write through a view and see it in the source
  v.select(0, 1).fill_(-1);  // row 1 of the (4, 6) view = flat elements 6..11
  std::vector<double> flat = x.tolist<double>();
  for (int i = 0; i < 24; ++i) CHECK(flat[i] == ((i >= 6 && i < 12) ? -1.0 : i));
}

TEST_CASE("tensor: transpose t permute") {
  rg::Tensor x = rg::arange(6).reshape({2, 3});
  rg::Tensor y = x.t();
  CHECK_SHAPE(y, {3, 2});
  CHECK(y.strides() == rg::Shape{1, 3});
  CHECK_FALSE(y.is_contiguous());
  CHECK(y.storage() == x.storage());
  check_close(y, {0, 3, 1, 4, 2, 5});  // tolist reads logical (row-major) order

  rg::Tensor z = rg::arange(24).reshape({2, 3, 4});
  rg::Tensor tz = z.transpose(0, 2);
  CHECK_SHAPE(tz, {4, 3, 2});
  CHECK(tz.strides() == rg::Shape{1, 4, 12});
  CHECK_SHAPE(z.transpose(-1, -2), {2, 4, 3});

  rg::Tensor p = z.permute({2, 0, 1});
  CHECK_SHAPE(p, {4, 2, 3});
  CHECK(p.strides() == rg::Shape{1, 12, 4});
  std::vector<double> pv = p.tolist<double>(), zv = z.tolist<double>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) CHECK(pv[(i * 2 + j) * 3 + k] == zv[(j * 3 + k) * 4 + i]);

  // write through a transpose
  y.select(0, 2).fill_(9);  // y[2, :] == x[:, 2]
  check_close(x, {0, 1, 9, 3, 4, 9});
}

TEST_CASE("tensor: slice narrow select") {
  rg::Tensor x = rg::arange(24).reshape({2, 3, 4});

  rg::Tensor s = x.slice(2, 1, 4, 2);  // x[:, :, 1:4:2]
  CHECK_SHAPE(s, {2, 3, 2});
  CHECK(s.strides() == rg::Shape{12, 4, 2});
  CHECK(s.offset() == 1);
  CHECK(s.storage() == x.storage());
  check_close(s, {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23});

  rg::Tensor s0 = x.slice(1, 1, 3);
  CHECK_SHAPE(s0, {2, 2, 4});
  CHECK(s0.offset() == 4);
  CHECK(s0.data_ptr<float>()[0] == 4.0f);

  rg::Tensor n = x.narrow(1, 1, 2);
  CHECK_SHAPE(n, {2, 2, 4});
  check_close(n, s0.tolist<double>());

  rg::Tensor sel = x.select(1, 2);  // x[:, 2, :]
  CHECK_SHAPE(sel, {2, 4});
  check_close(sel, {8, 9, 10, 11, 20, 21, 22, 23});
  check_close(x[1][0], {12, 13, 14, 15});
  CHECK(x[1][2][3].item() == 23);

  // python-style negative positions
  check_close(rg::arange(6).slice(0, -3, 6), {3, 4, 5});
  check_close(x.select(2, -1), {3, 7, 11, 15, 19, 23});

  // write through a stepped slice
  rg::Tensor a = rg::zeros({6});
  a.slice(0, 0, 6, 2).fill_(1);
  check_close(a, {1, 0, 1, 0, 1, 0});
  a.slice(0, 1, 6, 2).copy_(f32({7, 8, 9}));
  check_close(a, {1, 7, 1, 8, 1, 9});
}

TEST_CASE("tensor: unsqueeze squeeze expand") {
  rg::Tensor x = rg::arange(6).reshape({2, 3});
  CHECK_SHAPE(x.unsqueeze(0), {1, 2, 3});
  CHECK_SHAPE(x.unsqueeze(1), {2, 1, 3});
  CHECK_SHAPE(x.unsqueeze(-1), {2, 3, 1});
  CHECK(x.unsqueeze(0).storage() == x.storage());
  CHECK_SHAPE(x.unsqueeze(1).squeeze(1), {2, 3});
  CHECK_SHAPE(rg::zeros({1, 3}).squeeze(0), {3});
  CHECK_SHAPE(rg::zeros({3, 1}).squeeze(-1), {3});

  rg::Tensor c = f32({1, 2, 3}, {3, 1});
  rg::Tensor e = c.expand({3, 4});
  CHECK_SHAPE(e, {3, 4});
  CHECK(e.stride(1) == 0);
  CHECK(e.storage() == c.storage());
  check_close(e, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  CHECK_SHAPE(c.expand({2, -1, 4}), {2, 3, 4});
  rg::Tensor r = f32({1, 2}).expand({3, 2});
  check_close(r, {1, 2, 1, 2, 1, 2});
  // an expanded (stride-0) tensor is usable by ops and by contiguous()
  check_close(e.contiguous(), e.tolist<double>());
  check_close(e.sum(1), {4, 8, 12});
}

TEST_CASE("tensor: contiguous clone and non-contiguous handling") {
  rg::Tensor x = rg::arange(12).reshape({3, 4});
  rg::Tensor c = x.contiguous();
  CHECK(c.storage() == x.storage());  // already contiguous: same tensor

  rg::Tensor t = x.t();
  rg::Tensor tc = t.contiguous();
  CHECK(tc.is_contiguous());
  CHECK(tc.storage() != x.storage());
  CHECK(tc.strides() == rg::Shape{3, 1});
  check_close(tc, t.tolist<double>());

  // reshape of a non-contiguous tensor copies (in logical order)
  rg::Tensor r = t.reshape({12});
  check_close(r, {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});

  // ops on non-contiguous and offset inputs read them by strides
  check_close(t + 0.0, t.tolist<double>());
  check_close(x.slice(1, 1, 3).t() * 2.0, {2, 10, 18, 4, 12, 20});
  check_close(rg::exp(t * 0.0), std::vector<double>(12, 1.0));

  rg::Tensor k = x.clone();
  CHECK(k.storage() != x.storage());
  k.fill_(0);
  CHECK(x.sum().item() == 66);
  rg::Tensor kt = t.clone();
  check_close(kt, t.tolist<double>());
}

TEST_CASE("tensor: to(dtype) item tolist") {
  rg::Tensor x = f32({1.5f, -2.0f, 3.0f});
  rg::Tensor d = x.to(rg::kFloat64);
  CHECK(d.dtype() == rg::kFloat64);
  CHECK(d.tolist<double>() == std::vector<double>{1.5, -2.0, 3.0});
  CHECK(d.storage() != x.storage());

  rg::Tensor i = f32({2.0f, -3.0f, 4.0f}).to(rg::kInt64);
  CHECK(i.dtype() == rg::kInt64);
  CHECK(i.tolist<int64_t>() == std::vector<int64_t>{2, -3, 4});
  CHECK(i.to(rg::kFloat32).tolist<float>() == std::vector<float>{2, -3, 4});

  rg::Tensor b = f32({0, 1, 2}).to(rg::kBool);
  CHECK(b.dtype() == rg::kBool);
  CHECK(b.tolist<double>() == std::vector<double>{0, 1, 1});

  CHECK(x.to(rg::kFloat32).dtype() == rg::kFloat32);
  CHECK(x.to(rg::kCPU).device() == rg::kCPU);

  // non-contiguous conversion keeps logical order
  rg::Tensor nt = rg::arange(6).reshape({2, 3}).t().to(rg::kFloat64);
  CHECK(nt.tolist<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});

  CHECK(rg::scalar_tensor(4.0).item() == 4.0);
  CHECK(f32({2.5f}, {1, 1}).item() == 2.5);
  CHECK(i64({7}).item<int64_t>() == 7);
  CHECK(x.tolist<float>() == std::vector<float>{1.5f, -2.0f, 3.0f});
}

// ---------------------------------------------------------------- printing

TEST_CASE("tensor: printing shows shape dtype device and values") {
  rg::Tensor x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  std::ostringstream os;
  os << x;
  std::string s = os.str();
  CHECK_CONTAINS(s, "2, 3");
  CHECK_CONTAINS(s, "float32");
  CHECK_CONTAINS(s, "cpu");
  CHECK_CONTAINS(s, "5");
  CHECK_CONTAINS(s, "6");

  std::string d = x.describe();
  CHECK_CONTAINS(d, "[2, 3]");
  CHECK_CONTAINS(d, "float32");
  CHECK_CONTAINS(d, "cpu");

  std::ostringstream os64;
  os64 << rg::ones({2}, {.dtype = rg::kFloat64});
  CHECK_CONTAINS(os64.str(), "float64");

  // other dtypes, 0-dim and non-contiguous tensors print too
  std::ostringstream misc;
  misc << i64({1, 2}) << (f32({1, 2}) > 1.5) << rg::scalar_tensor(2.0) << x.t();
  CHECK_CONTAINS(misc.str(), "int64");
  CHECK_CONTAINS(misc.str(), "bool");
}

TEST_CASE("tensor: printing abridges a large tensor") {
  rg::Tensor big = rg::arange(10000).reshape({100, 100});
  std::ostringstream os;
  os << big;
  std::string s = os.str();
  CHECK_CONTAINS(s, "...");
  CHECK_CONTAINS(s, "100, 100");
  CHECK_MESSAGE(s.size() < 5000, "printed " << s.size() << " characters");
  CHECK_CONTAINS(s, "9999");  // the last element is shown
}

// ---------------------------------------------------------------- in-place

TEST_CASE("tensor: in-place zero_ fill_ copy_ add_ mul_") {
  rg::Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  a.mul_(2.0);
  check_close(a, {2, 4, 6, 8, 10, 12});
  a.add_(f32({1, 1, 1}), 0.5);  // broadcasts (3) onto (2, 3)
  check_close(a, {2.5, 4.5, 6.5, 8.5, 10.5, 12.5});
  a.mul_(f32({1, 0, -1}));
  check_close(a, {2.5, 0, -6.5, 8.5, 0, -12.5});
  a.sub_(f32({0.5f, 0, 0.5f, 0.5f, 0, 0.5f}, {2, 3}));
  check_close(a, {2, 0, -7, 8, 0, -13});
  a += rg::ones({2, 3});
  check_close(a, {3, 1, -6, 9, 1, -12});
  a -= rg::ones({2, 3});
  a *= 0.5;
  check_close(a, {1, 0, -3.5, 4, 0, -6.5});

  rg::Tensor& same = a.zero_();
  CHECK(&same == &a);
  check_close(a, std::vector<double>(6, 0));
  a.fill_(3);
  check_close(a, std::vector<double>(6, 3));

  // copy_ broadcasts and converts dtype
  a.copy_(f64({1, 2, 3}));
  check_close(a, {1, 2, 3, 1, 2, 3});
  CHECK(a.dtype() == rg::kFloat32);
  a.copy_(f64({4, 5, 6, 7, 8, 9}, {2, 3}).t().t());
  check_close(a, {4, 5, 6, 7, 8, 9});
  // copy from a non-contiguous source
  a.copy_(f32({1, 2, 3, 4, 5, 6}, {3, 2}).t());
  check_close(a, {1, 3, 5, 2, 4, 6});
}

TEST_CASE("tensor: mul_out writes a * factor into an existing tensor") {
  rg::Tensor out = rg::zeros({2, 3});
  rg::Tensor& same = rg::mul_out(out, f32({1, 2, 3, 4, 5, 6}, {2, 3}), 0.5);
  CHECK(&same == &out);
  check_close(out, {0.5, 1, 1.5, 2, 2.5, 3});
  rg::mul_out(out, f32({1, 2, 3}), -2);  // broadcasts (3) onto (2, 3)
  check_close(out, {-2, -4, -6, -2, -4, -6});
  rg::Tensor x = rg::zeros({3, 4});
  rg::Tensor middle = x.narrow(1, 1, 2);  // a strided view: columns 1 and 2
  rg::mul_out(middle, f32({1, 2, 3, 4, 5, 6}, {3, 2}), 10);
  check_close(x, {0, 10, 20, 0, 0, 30, 40, 0, 0, 50, 60, 0});
  CHECK_CONTAINS(test::error_of([&] { rg::mul_out(out, f64({1, 2, 3}), 2); }), "mul_out");  // dtype
  CHECK_CONTAINS(test::error_of([&] { rg::mul_out(out, f32({1, 2}), 2); }), "broadcast");
}

TEST_CASE("tensor: in-place through views writes the source") {
  rg::Tensor x = rg::zeros({3, 4});
  x.t().select(0, 1).fill_(5);  // column 1
  x.narrow(0, 2, 1).copy_(f32({1, 2, 3, 4}));
  x.select(0, 0).add_(rg::ones({4}));
  check_close(x, {1, 6, 1, 1, 0, 5, 0, 0, 1, 2, 3, 4});
  x.t().mul_(2.0);  // in-place on a non-contiguous view
  check_close(x, {2, 12, 2, 2, 0, 10, 0, 0, 2, 4, 6, 8});
  x.t().zero_();
  CHECK(x.sum().item() == 0);
  // a view of a view of a view
  x.view({2, 6}).slice(1, 0, 6, 3).select(0, 1).fill_(7);  // flat 6 and 9
  check_close(x, {0, 0, 0, 0, 0, 0, 7, 0, 0, 7, 0, 0});
}

TEST_CASE("tensor: in-place on a leaf that requires grad throws under grad mode") {
  rg::Tensor w = rg::ones({3}, {.requires_grad = true});
  CHECK_THROWS_AS(w.add_(rg::ones({3})), rg::Error);
  CHECK_THROWS_AS(w.mul_(2.0), rg::Error);
  CHECK_THROWS_AS(w.fill_(0), rg::Error);
  CHECK_THROWS_AS(w.zero_(), rg::Error);
  CHECK_THROWS_AS(w.copy_(rg::zeros({3})), rg::Error);
  CHECK_THROWS_AS(w.mul_(rg::ones({3})), rg::Error);
  check_close(w, {1, 1, 1});  // nothing was written

  {
    rg::NoGradGuard no_grad;
    w.add_(rg::ones({3}), -0.5);
    w.mul_(4.0);
  }
  check_close(w, {2, 2, 2});
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());

  // a tensor without requires_grad is fine under grad mode
  rg::Tensor plain = rg::ones({3});
  plain.add_(plain);
  check_close(plain, {2, 2, 2});
}

TEST_CASE("tensor: a storage's memory released in place: views fail clearly until it is back") {
  rg::Tensor flat = rg::arange(0, 6).to(rg::kFloat32);
  rg::Tensor view = flat.narrow(0, 2, 3);
  const int64_t live = rg::memory_stats().live_bytes;
  flat.storage()->release_memory();
  CHECK(rg::memory_stats().live_bytes == live - 24);
  CHECK_CONTAINS(test::error_of([&] { (void)view.sum().item(); }), "memory has been released");
  flat.storage()->reallocate_memory();  // new memory, same size; values are not kept
  CHECK(rg::memory_stats().live_bytes == live);
  flat.fill_(2.0);
  CHECK(view.sum().item() == 6.0);
  flat.storage()->release_memory();  // destroyed while released: nothing freed twice
}

TEST_CASE("tensor: cpu blocks of 2 MiB and more are whole huge pages (RINGGRAD_HUGE_PAGES=0: not)") {
  // core/cpu/backend.cpp: such a block starts on a 2 MiB boundary, so that the kernel can
  // back it with transparent huge pages; a smaller one only on a cache line.
  const char* env = std::getenv("RINGGRAD_HUGE_PAGES");
  const bool huge = !env || std::string(env) != "0";
  auto offset = [](const rg::Tensor& t, uintptr_t unit) {
    return reinterpret_cast<uintptr_t>(t.raw_data()) % unit;
  };
  for (int64_t n : {int64_t(1) << 19, (int64_t(3) << 19) + 7, int64_t(1) << 22}) {  // 2, 6, 16 MiB
    CAPTURE(n);
    rg::Tensor t = rg::empty({n});
    CHECK(offset(t, 64) == 0);
    if (huge) CHECK(offset(t, uintptr_t(2) << 20) == 0);
    t.fill_(1.0);  // the whole block is there to write
    CHECK(t.sum().item() == double(n));
  }
  CHECK(offset(rg::empty({1000}), 64) == 0);
}

// ---- small CPU tensors kept for reuse (core/reuse.cpp) ----

TEST_CASE("tensor: a dead small tensor's memory comes back for the next of its size") {
  rg::Tensor a = rg::empty({64, 10});
  const void* data = a.raw_data();
  const int64_t live = rg::memory_stats().live_bytes;
  a = rg::Tensor();
  CHECK(rg::memory_stats().live_bytes == live - 64 * 10 * 4);  // waiting in the cache: not live
  rg::Tensor b = rg::empty({10, 32}, {.dtype = rg::kFloat64});  // 2,560 bytes again, other shape
  CHECK(b.raw_data() == data);
  CHECK(rg::memory_stats().live_bytes == live);
  CHECK_SHAPE(b, {10, 32});
  CHECK(b.strides() == rg::Shape{32, 1});
  CHECK(b.offset() == 0);
  CHECK(b.dtype() == rg::kFloat64);
  CHECK(b.is_contiguous());
  b.fill_(1.5);
  CHECK(b.sum().item() == 1.5 * 320);
  rg::Tensor c = rg::empty({64, 10});  // the cache had one: this one is new
  CHECK(c.raw_data() != data);
}

TEST_CASE("tensor: a small tensor is not reused while a view of it lives") {
  rg::Tensor a = rg::full({4, 4}, 3.0);
  rg::Tensor row = a.select(0, 2);
  const void* data = a.raw_data();
  a = rg::Tensor();
  rg::Tensor b = rg::empty({4, 4});
  CHECK(b.raw_data() != data);
  b.fill_(-1.0);
  check_close(row, {3, 3, 3, 3});
  row = rg::Tensor();  // now the last handle of that storage goes
  rg::Tensor c = rg::empty({16});
  CHECK(c.raw_data() == data);
}

TEST_CASE("tensor: a reused tensor carries nothing of autograd from its last life") {
  const void* data = nullptr;
  int hook_calls = 0;
  rg::Tensor y;
  {
    rg::Tensor x = rg::full({8}, 2.0, {.requires_grad = true});
    data = x.raw_data();
    x.register_post_accumulate_grad_hook([&](rg::Tensor&) { ++hook_calls; });
    (x * 3.0).sum().backward();  // x.grad defined; an AccumulateGrad node was made for x
    CHECK(x.grad().defined());
    CHECK(hook_calls == 1);
    y = x.sum();  // y's graph holds x's AccumulateGrad (a weak_ptr to x's state), not its data
  }
  rg::Tensor z = rg::empty({8});
  CHECK(z.raw_data() == data);  // x's parts
  CHECK(!z.requires_grad());
  CHECK(z.is_leaf());
  CHECK(!z.grad().defined());
  y.backward();  // x is gone: its gradient goes nowhere, and certainly not into z
  CHECK(!z.grad().defined());
  CHECK(hook_calls == 1);
  z.fill_(1.0);
  z.requires_grad_();
  (z * 4.0).sum().backward();
  check_close(z.grad(), {4, 4, 4, 4, 4, 4, 4, 4});
  CHECK(hook_calls == 1);  // x's hook went with x
}

TEST_CASE("tensor: a small tensor whose storage was swapped or released is not kept") {
  std::vector<float> memory(16, 1.0f);
  int released = 0;
  rg::Tensor a = rg::empty({16});
  a.set_data(rg::from_blob(memory.data(), {16}, [&](void*) { ++released; }));
  a = rg::Tensor();
  CHECK(released == 1);  // the caller's memory went back to the caller, not into the cache
  rg::Tensor b = rg::empty({16});
  CHECK(b.raw_data() != memory.data());

  rg::Tensor c = rg::empty({5});
  const int64_t live = rg::memory_stats().live_bytes;
  c.storage()->release_memory();
  c = rg::Tensor();
  CHECK(rg::memory_stats().live_bytes == live - 20);  // counted once, when released
  rg::Tensor d = rg::empty({5});
  d.fill_(7.0);
  CHECK(d.sum().item() == 35.0);
}

TEST_CASE("tensor: small tensors dropped on a thread that ends, and by empty_cache, are freed") {
  const int64_t live = rg::memory_stats().live_bytes;
  std::thread worker([] {
    for (int i = 0; i < 100; ++i) {
      rg::Tensor t = rg::randn({3, int64_t(1 + i % 20)});
      rg::Tensor u = t * 2.0;
    }
  });
  worker.join();
  CHECK(rg::memory_stats().live_bytes == live);  // ASan's leak check sees the rest
  { rg::Tensor t = rg::empty({100}); }
  rg::empty_cache();
  rg::Tensor again = rg::empty({100});  // nothing cached now: from the allocator
  CHECK(rg::memory_stats().live_bytes == live + 400);
}

TEST_CASE("tensor: the reuse cache, when full, frees the small tensor that waited longest") {
  rg::empty_cache();  // start from an empty cache on this thread
  const int64_t live = rg::memory_stats().live_bytes;
  std::vector<const void*> data;
  {
    std::vector<rg::Tensor> dying;
    for (int64_t i = 0; i < 17; ++i) dying.push_back(rg::empty({1000 + i}));  // 17 sizes
    for (const rg::Tensor& t : dying) data.push_back(t.raw_data());
  }  // they die first to last: the first is pushed out by the 17th
  CHECK(rg::memory_stats().live_bytes == live);
  std::vector<rg::Tensor> again;
  for (int64_t i = 16; i >= 1; --i) {  // the 16 newest all come back
    again.push_back(rg::empty({1000 + i}));
    CHECK(again.back().raw_data() == data[i]);
  }
  CHECK(rg::memory_stats().live_bytes == live + (16 * 1000 + 136) * 4);
}
