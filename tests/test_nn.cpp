// test_nn.cpp — nn::Module bookkeeping (names, modes, dtype moves, state dicts,
// checkpoints, printing), the basic layers (Linear, Dropout, Sequential, GELU)
// and the losses (cross_entropy, mse_loss) against naive double-precision
// references. The finite-difference gradients of linear, cross_entropy and
// mse_loss are cases of the op table (test_op_cases_nn.cpp, run by test_gradcheck.cpp).
#include <doctest/doctest.h>
#include <ringgrad/ringgrad.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "test_helpers.h"

namespace rg = ringgrad;
namespace nn = ringgrad::nn;
namespace fs = std::filesystem;
using test::check_close;
using test::error_of;
using test::f32;
using test::f64;
using test::i64;
using test::leaf;
using test::values;

namespace {

// fc1 (4->3), fc2 (3->2), seq = [Linear(2,2), ReLU, Linear(2,1,no bias)], a buffer.
struct Net : nn::Module {
  nn::Linear fc1{4, 3}, fc2{3, 2};
  std::shared_ptr<nn::Sequential> seq;
  Net() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    auto s = std::make_shared<nn::Sequential>();
    s->add(std::make_shared<nn::Linear>(2, 2));
    s->add(std::make_shared<nn::ReLU>());
    s->add(std::make_shared<nn::Linear>(2, 1, /*bias=*/false));
    seq = register_module("seq", s);
    register_buffer("running", rg::zeros({2}));
  }
  rg::Tensor forward(const rg::Tensor& x) override { return seq->forward(fc2(rg::relu(fc1(x)))); }
};

// Exposes registration so a test can misuse it.
struct Registrar : nn::Module {
  void param(const std::string& n) { register_parameter(n, rg::zeros({1})); }
  void buffer(const std::string& n) { register_buffer(n, rg::zeros({1})); }
};

using test::TempDir;

std::vector<std::string> names_of(const rg::NamedTensors& named) {
  std::vector<std::string> out;
  for (auto& [n, t] : named) out.push_back(n);
  return out;
}

void check_same_state(const nn::Module& a, const nn::Module& b) {
  auto sa = a.state_dict(), sb = b.state_dict();
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    CHECK(sa[i].first == sb[i].first);
    CHECK_MESSAGE(values(sa[i].second) == values(sb[i].second), sa[i].first);
  }
}

// Naive per-sample cross-entropy in double: log-softmax, then pick (and smooth).
std::vector<double> naive_ce(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t c,
                             double eps = 0.0, int64_t ignore = -100) {
  std::vector<double> out;
  for (size_t i = 0; i < t.size(); ++i) {
    const double* row = x.data() + i * c;
    if (t[i] == ignore) {
      out.push_back(0.0);
      continue;
    }
    double m = *std::max_element(row, row + c), s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(row[j] - m);
    double lse = m + std::log(s), mean_neg_logp = 0;
    for (int64_t j = 0; j < c; ++j) mean_neg_logp += (lse - row[j]) / static_cast<double>(c);
    double nll = lse - row[t[i]];
    out.push_back((1 - eps) * nll + eps * mean_neg_logp);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- Module

TEST_CASE("nn: named_parameters uses dotted names through members and Sequential children") {
  Net net;
  CHECK(names_of(net.named_parameters()) ==
        std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "seq.0.weight",
                                 "seq.0.bias", "seq.2.weight"});
  CHECK(names_of(net.named_parameters(/*recurse=*/false)).empty());
  CHECK(names_of(net.named_buffers()) == std::vector<std::string>{"running"});
  CHECK(names_of(net.state_dict()) ==
        std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "seq.0.weight",
                                 "seq.0.bias", "seq.2.weight", "running"});
  CHECK(net.parameters().size() == 7);
  CHECK(net.num_parameters() == 4 * 3 + 3 + 3 * 2 + 2 + 2 * 2 + 2 + 2 * 1);
  auto children = net.named_children();
  REQUIRE(children.size() == 3);
  CHECK(children[0].first == "fc1");
  CHECK(children[0].second == &net.fc1);
  auto modules = net.named_modules();
  std::vector<std::string> mod_names;
  for (auto& [n, m] : modules) mod_names.push_back(n);
  CHECK(mod_names == std::vector<std::string>{"", "fc1", "fc2", "seq", "seq.0", "seq.1", "seq.2"});
  // The handles name the members themselves.
  CHECK(net.parameters()[0].impl_ptr() == net.fc1.weight.impl_ptr());
  for (const rg::Tensor& p : net.parameters()) CHECK(p.requires_grad());
}

TEST_CASE("nn: registering a name twice, or a dotted name, is an error") {
  Registrar r;
  r.param("w");
  std::string msg = error_of([&] { r.param("w"); });
  CHECK_CONTAINS(msg, "\"w\"");
  CHECK_CONTAINS(msg, "twice");
  CHECK_CONTAINS(error_of([&] { r.buffer("w"); }), "twice");  // buffers share the namespace
  CHECK_CONTAINS(error_of([&] { r.param("a.b"); }), "a.b");
  CHECK_CONTAINS(error_of([&] { r.param(""); }), "non-empty");
  CHECK(r.named_parameters().size() == 1);
}

TEST_CASE("nn: train() and eval() recurse into every child") {
  Net net;
  for (auto& [n, m] : net.named_modules()) CHECK_MESSAGE(m->is_training(), n);
  net.eval();
  for (auto& [n, m] : net.named_modules()) CHECK_MESSAGE(!m->is_training(), n);
  net.train();
  for (auto& [n, m] : net.named_modules()) CHECK_MESSAGE(m->is_training(), n);
  net.train(false);
  CHECK_FALSE((*net.seq)[1].is_training());
}

TEST_CASE("nn: zero_grad clears every parameter's gradient") {
  rg::manual_seed(1);
  Net net;
  net.forward(rg::randn({5, 4})).sum().backward();
  for (auto& [n, p] : net.named_parameters()) CHECK_MESSAGE(p.grad().defined(), n);
  net.zero_grad();
  for (auto& [n, p] : net.named_parameters()) CHECK_MESSAGE(!p.grad().defined(), n);
}

TEST_CASE("nn: to(kFloat64) converts in place; handles taken before see the new dtype") {
  rg::manual_seed(2);
  Net net;
  std::vector<rg::Tensor> handles = net.parameters();
  std::vector<std::vector<double>> before;
  for (const rg::Tensor& p : handles) before.push_back(values(p));
  rg::optim::SGD opt(net.parameters(), {.lr = 0.1});
  net.to(rg::kFloat64);
  for (size_t i = 0; i < handles.size(); ++i) {
    CHECK(handles[i].dtype() == rg::kFloat64);
    CHECK(handles[i].requires_grad());
    CHECK(handles[i].is_leaf());
    CHECK(values(handles[i]) == before[i]);  // float32 -> float64 is exact
  }
  CHECK(net.fc1.weight.dtype() == rg::kFloat64);
  CHECK(net.named_buffers()[0].second.dtype() == rg::kFloat64);
  CHECK(opt.param_groups()[0].params[0].dtype() == rg::kFloat64);
  // Training through the old handles updates the model.
  rg::Tensor x = rg::randn({3, 4}, {.dtype = rg::kFloat64});
  rg::Tensor y = net.forward(x);
  CHECK(y.dtype() == rg::kFloat64);
  y.sum().backward();
  REQUIRE(net.fc1.weight.grad().defined());
  CHECK(net.fc1.weight.grad().dtype() == rg::kFloat64);
  std::vector<double> w = values(net.fc1.weight), g = values(net.fc1.weight.grad());
  opt.step();
  std::vector<double> want(w.size());
  for (size_t i = 0; i < w.size(); ++i) want[i] = w[i] - 0.1 * g[i];
  check_close(net.fc1.weight, want, 1e-12);
  CHECK_CONTAINS(error_of([&] { net.to(rg::kInt64); }), "floating");
}

TEST_CASE("nn: state_dict / load_state_dict round trip copies values") {
  rg::manual_seed(3);
  Net a, b;
  CHECK(values(a.fc1.weight) != values(b.fc1.weight));
  b.load_state_dict(a.state_dict());
  check_same_state(a, b);
  // A copy, not an alias: changing a afterwards leaves b alone.
  std::vector<double> w = values(b.fc1.weight);
  {
    rg::NoGradGuard ng;
    a.fc1.weight.fill_(7.0);
  }
  CHECK(values(b.fc1.weight) == w);
  CHECK(b.fc1.weight.requires_grad());
}

TEST_CASE("nn: strict load_state_dict names missing, unexpected and mis-shaped keys") {
  Net a, b;
  rg::NamedTensors full = a.state_dict();

  rg::NamedTensors missing;
  for (auto& e : full)
    if (e.first != "fc2.bias") missing.push_back(e);
  std::string msg = error_of([&] { b.load_state_dict(missing); });
  CHECK_CONTAINS(msg, "missing");
  CHECK_CONTAINS(msg, "fc2.bias");

  rg::NamedTensors extra = full;
  extra.emplace_back("extra.w", rg::zeros({2}));
  msg = error_of([&] { b.load_state_dict(extra); });
  CHECK_CONTAINS(msg, "unexpected");
  CHECK_CONTAINS(msg, "extra.w");

  rg::NamedTensors both = missing;
  both.emplace_back("extra.w", rg::zeros({2}));
  msg = error_of([&] { b.load_state_dict(both); });
  CHECK_CONTAINS(msg, "fc2.bias");
  CHECK_CONTAINS(msg, "extra.w");

  rg::NamedTensors bad_shape = full;
  for (auto& e : bad_shape)
    if (e.first == "fc1.weight") e.second = rg::zeros({3, 5});
  msg = error_of([&] { b.load_state_dict(bad_shape); });
  CHECK_CONTAINS(msg, "fc1.weight");
  CHECK_CONTAINS(msg, "[3, 4]");
  CHECK_CONTAINS(msg, "[3, 5]");
  // Shapes are checked even when not strict.
  CHECK_CONTAINS(error_of([&] { b.load_state_dict(bad_shape, /*strict=*/false); }), "fc1.weight");
}

TEST_CASE("nn: non-strict load_state_dict loads the keys given and ignores the rest") {
  rg::manual_seed(4);
  Net a, b;
  std::vector<double> fc2_before = values(b.fc2.weight);
  rg::NamedTensors partial{{"fc1.weight", a.fc1.weight}, {"nope", rg::ones({9})}};
  b.load_state_dict(partial, /*strict=*/false);
  CHECK(values(b.fc1.weight) == values(a.fc1.weight));
  CHECK(values(b.fc2.weight) == fc2_before);
  CHECK(values(b.fc1.bias) != values(a.fc1.bias));
}

TEST_CASE("nn: save / load through a .safetensors file") {
  rg::manual_seed(5);
  TempDir dir;
  std::string path = dir.file("net.safetensors");
  Net a;
  {
    rg::NoGradGuard ng;
    a.named_buffers()[0].second.fill_(0.5);
  }
  nn::save(a, path);
  CHECK(fs::exists(path));
  Net b;
  nn::load(b, path);
  check_same_state(a, b);
  rg::Tensor x = rg::randn({2, 4});
  CHECK(values(a.forward(x)) == values(b.forward(x)));
  // A file of another model is refused when strict, naming the keys.
  nn::Linear other(4, 3);
  std::string msg = error_of([&] { nn::load(other, path); });
  CHECK_CONTAINS(msg, "unexpected");
  CHECK_CONTAINS(msg, "fc2.weight");
  CHECK_CONTAINS(error_of([&] { nn::load(b, dir.file("absent.safetensors")); }),
                 "absent.safetensors");
}

TEST_CASE("nn: load_state_dict refuses NaN / Inf weights, naming the key, and changes nothing") {
  rg::manual_seed(6);
  Net a, b;
  const std::vector<double> before = values(b.fc1.bias);
  for (double bad : {std::nan(""), double(INFINITY), -double(INFINITY)}) {
    CAPTURE(bad);
    rg::NamedTensors state = a.state_dict();
    for (auto& [n, t] : state)
      if (n == "fc2.weight") {
        t = t.detach().clone();
        rg::NoGradGuard ng;
        t.reshape({-1}).narrow(0, 4, 1).fill_(bad);
      }
    const std::string msg = error_of([&] { b.load_state_dict(state); });
    CHECK_CONTAINS(msg, "[load_state_dict]");
    CHECK_CONTAINS(msg, "expected finite values in fc2.weight");
    CHECK_CONTAINS(msg, "at element 4 of 6");
    // fc1 comes before fc2 and was fine: still not loaded.
    CHECK(values(b.fc1.bias) == before);
  }
  // From a file: the file is named too.
  TempDir dir;
  rg::NamedTensors state = a.state_dict();
  state[0].second = rg::full(state[0].second.shape(), NAN);
  rg::save_safetensors(state, dir.file("nan.safetensors"));
  const std::string msg = error_of([&] { nn::load(b, dir.file("nan.safetensors")); });
  CHECK_CONTAINS(msg, "nan.safetensors");
  CHECK_CONTAINS(msg, "expected finite values in " + state[0].first);
  CHECK(values(b.fc1.bias) == before);
}

TEST_CASE("nn: load_state_dict refuses dtypes that would change the values, names both") {
  Net a, b;
  const rg::NamedTensors state = a.state_dict();
  auto with = [&](rg::DType dtype) {
    rg::NamedTensors s = state;
    for (auto& [n, t] : s)
      if (n == "fc1.bias") t = t.detach().to(dtype);
    return s;
  };
  for (rg::DType dtype : {rg::kBool, rg::kInt64, rg::kFloat64}) {
    CAPTURE(dtype);
    const std::string msg = error_of([&] { b.load_state_dict(with(dtype)); });
    CHECK_CONTAINS(msg, "expected fc1.bias as float32 (the module's dtype), got " +
                            std::string(rg::dtype_name(dtype)));
  }
  // float32 into float32 loads, and so does float32 into a float64 model (exact).
  b.load_state_dict(state);
  Net wide;
  wide.to(rg::kFloat64);
  wide.load_state_dict(state);
  CHECK(wide.fc1.weight.dtype() == rg::kFloat64);
  CHECK(values(wide.fc1.weight) == values(a.fc1.weight));
  // From a file, named: an int64 weight saved in place of a float one.
  TempDir dir;
  rg::save_safetensors(with(rg::kInt64), dir.file("ints.safetensors"));
  const std::string msg = error_of([&] { nn::load(b, dir.file("ints.safetensors")); });
  CHECK_CONTAINS(msg, "ints.safetensors");
  CHECK_CONTAINS(msg, "fc1.bias as float32");
  CHECK_CONTAINS(msg, "int64");
}

TEST_CASE("nn: printing a model shows the module tree") {
  Net net;
  std::ostringstream os;
  os << net;
  std::string s = os.str();
  CHECK_CONTAINS(s, "Net(");
  CHECK_CONTAINS(s, "(fc1): Linear(in_features=4, out_features=3, bias=true)");
  CHECK_CONTAINS(s, "(fc2): Linear(in_features=3, out_features=2, bias=true)");
  CHECK_CONTAINS(s, "(seq): Sequential(");
  CHECK_CONTAINS(s, "(0): Linear(in_features=2, out_features=2, bias=true)");
  CHECK_CONTAINS(s, "(1): ReLU()");
  CHECK_CONTAINS(s, "(2): Linear(in_features=2, out_features=1, bias=false)");
  CHECK(nn::Dropout(0.25).describe() == "Dropout(p=0.25)");
  CHECK(nn::GELU().describe() == "GELU()");
  CHECK(nn::GELU(rg::GeluApprox::Tanh).describe() == "GELU(approximate='tanh')");
}

// ---------------------------------------------------------------- Linear

TEST_CASE("nn: Linear shapes, 3-D input and bias=false") {
  rg::manual_seed(6);
  nn::Linear lin(4, 3);
  CHECK_SHAPE(lin.weight, {3, 4});
  CHECK_SHAPE(lin.bias, {3});
  rg::Tensor x2 = rg::randn({5, 4});
  rg::Tensor y2 = lin(x2);
  CHECK_SHAPE(y2, {5, 3});
  // y = x·Wᵀ + b against the naive GEMM
  std::vector<double> want =
      test::naive_matmul(values(x2), values(lin.weight.t().contiguous()), 5, 4, 3);
  std::vector<double> b = values(lin.bias);
  for (size_t i = 0; i < want.size(); ++i) want[i] += b[i % 3];
  check_close(y2, want, 1e-5);

  rg::Tensor x3 = rg::randn({2, 6, 4});
  rg::Tensor y3 = lin(x3);
  CHECK_SHAPE(y3, {2, 6, 3});
  check_close(y3.reshape({12, 3}), lin(x3.reshape({12, 4})), 1e-6);

  nn::Linear nb(4, 3, /*bias=*/false);
  CHECK_FALSE(nb.bias.defined());
  CHECK(names_of(nb.named_parameters()) == std::vector<std::string>{"weight"});
  check_close(nb(x2), rg::matmul(x2, nb.weight.t()), 1e-6);
  CHECK(nb.num_parameters() == 12);
}

TEST_CASE("nn: linear_relu and linear_gelu equal the activation after linear, bit for bit") {
  // The activation inside the GEMM (each block the threads compute, after its bias) against
  // the activation as its own op after: the same numbers, so equal exactly, values and
  // gradients — with and without a bias, 3-D input, one and two threads, float32 and float64,
  // relu, gelu and gelu's tanh form. 70 × 300 rows: blocks of the epilogue's size and a
  // ragged last one.
  const int saved_threads = rg::get_num_threads();
  enum class Act { relu, gelu, gelu_tanh };
  for (Act act : {Act::relu, Act::gelu, Act::gelu_tanh})
    for (int threads : {1, 2})
      for (rg::DType dt : {rg::kFloat32, rg::kFloat64})
        for (bool bias : {true, false})
          for (bool three_d : {false, true}) {
            CAPTURE(int(act));
            CAPTURE(threads);
            CAPTURE(bias);
            CAPTURE(three_d);
            rg::set_num_threads(threads);
            rg::manual_seed(31);
            const rg::Shape xs = three_d ? rg::Shape{2, 35, 40} : rg::Shape{70, 40};
            rg::Tensor x = rg::randn(xs, {.dtype = dt}).requires_grad_();
            rg::Tensor w = rg::randn({300, 40}, {.dtype = dt}).requires_grad_();
            rg::Tensor b = bias ? rg::randn({300}, {.dtype = dt}).requires_grad_() : rg::Tensor();
            rg::Tensor up = rg::randn(three_d ? rg::Shape{2, 35, 300} : rg::Shape{70, 300},
                                      {.dtype = dt});
            auto grads = [&](const rg::Tensor& y) {
              x.set_grad(rg::Tensor()), w.set_grad(rg::Tensor());
              if (bias) b.set_grad(rg::Tensor());
              (y * up).sum().backward();
              return std::vector<rg::Tensor>{x.grad().clone(), w.grad().clone(),
                                             bias ? b.grad().clone() : rg::Tensor()};
            };
            const rg::GeluApprox form =
                act == Act::gelu_tanh ? rg::GeluApprox::Tanh : rg::GeluApprox::None;
            rg::Tensor fused = act == Act::relu ? nn::linear_relu(x, w, b)
                                                : nn::linear_gelu(x, w, b, form);
            rg::Tensor apart = act == Act::relu ? rg::relu(nn::linear(x, w, b))
                                                : rg::gelu(nn::linear(x, w, b), form);
            CHECK(values(fused) == values(apart));
            if (act == Act::relu) CHECK(fused.min().item<double>() == 0.0);  // it did cut
            if (act != Act::relu) CHECK(fused.min().item<double>() < -0.1);  // gelu's dip
            std::vector<rg::Tensor> gf = grads(fused), ga = grads(apart);
            for (size_t i = 0; i < gf.size(); ++i)
              if (gf[i].defined()) CHECK(values(gf[i]) == values(ga[i]));
          }
  rg::set_num_threads(saved_threads);
  CHECK_THROWS_WITH(nn::linear_relu(rg::randn({2, 3}), rg::randn({4, 5})),
                    doctest::Contains("[linear_relu] expected x (…, in) and weight (out, in), got [2, 3] and [4, 5]"));
  CHECK_THROWS_WITH(nn::linear_gelu(rg::randn({2, 3}), rg::randn({4, 5})),
                    doctest::Contains("[linear_gelu] expected x (…, in) and weight (out, in), got [2, 3] and [4, 5]"));
  CHECK_THROWS_WITH(rg::relu_backward(rg::randn({2, 3}), rg::randn({3, 2})),
                    doctest::Contains("[relu_backward] expected grad and out of one shape, got [2, 3] and [3, 2]"));
  CHECK_THROWS_WITH(rg::gelu_backward(rg::randn({2, 3}), rg::randn({3, 2})),
                    doctest::Contains("[gelu_backward] expected grad and x of one shape, got [2, 3] and [3, 2]"));
}

TEST_CASE("nn: a Transformer layer's ReLU or GELU feed-forward, fused, equals it unfused") {
  // Activation::ReLU and ::GELU run linear1 and the activation as one op; a callable that
  // calls relu or gelu runs them apart. Same weights: the same outputs and gradients, bit for
  // bit. A hook on linear1 turns the fusion off (the hook must see linear1's own output).
  for (bool gelu : {false, true}) {
    CAPTURE(gelu);
    rg::manual_seed(32);
    const nn::Activation& fused_act = gelu ? nn::Activation::GELU : nn::Activation::ReLU;
    nn::TransformerEncoderLayer fused(
        16, 2, {.dim_feedforward = 64, .dropout = 0.0, .activation = fused_act});
    nn::TransformerEncoderLayer apart(
        16, 2, {.dim_feedforward = 64, .dropout = 0.0,
                .activation = nn::Activation([gelu](const rg::Tensor& x) {
                  return gelu ? rg::gelu(x) : rg::relu(x);
                })});
    apart.load_state_dict(fused.state_dict());
    CHECK(fused_act.is_relu() == !gelu);
    CHECK(fused_act.is_gelu() == gelu);
    CHECK_FALSE(apart.options.activation.is_relu());
    CHECK_FALSE(apart.options.activation.is_gelu());
    rg::Tensor x = rg::randn({5, 3, 16});
    rg::Tensor yf = fused(x), ya = apart(x);
    CHECK(values(yf) == values(ya));
    yf.sum().backward();
    ya.sum().backward();
    auto grad_of = [](const nn::Module& m, const std::string& name) {
      for (const auto& [n, p] : m.named_parameters())
        if (n == name) return values(p.grad());
      FAIL("no parameter ", name);
      return std::vector<double>{};
    };
    for (const char* name :
         {"linear1.weight", "linear1.bias", "linear2.weight", "self_attn.in_proj_weight"}) {
      CAPTURE(name);
      CHECK(grad_of(fused, name) == grad_of(apart, name));
    }
    rg::Tensor seen;
    fused.linear1.register_forward_hook(
        [&](nn::Module&, const rg::Tensor&, rg::Tensor& out) { seen = out; });
    rg::Tensor hooked = fused(x);
    REQUIRE(seen.defined());
    CHECK(seen.min().item<double>() < -0.5);  // linear1's own output, before the activation
    CHECK(values(hooked) == values(yf));
  }
}

TEST_CASE("nn: Linear init follows PyTorch's U(-1/sqrt(in), 1/sqrt(in))") {
  rg::manual_seed(7);
  nn::Linear lin(100, 50);
  double bound = 1.0 / std::sqrt(100.0);
  for (const rg::Tensor& t : {lin.weight, lin.bias}) {
    std::vector<double> v = values(t);
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    CHECK(*lo >= -bound);
    CHECK(*hi <= bound);
    CHECK(*lo < *hi);  // not all equal
  }
  std::vector<double> w = values(lin.weight);
  auto [lo, hi] = std::minmax_element(w.begin(), w.end());
  CHECK(*lo < -0.9 * bound);  // 5000 uniform draws fill the range
  CHECK(*hi > 0.9 * bound);
  double mean = 0;
  for (double x : w) mean += x / static_cast<double>(w.size());
  CHECK(std::abs(mean) < 0.1 * bound);
  nn::Linear other(100, 50);
  CHECK(values(other.weight) != w);  // each layer draws its own numbers
}

TEST_CASE("nn: Linear with the wrong in_features names both sizes") {
  nn::Linear lin(4, 3);
  std::string msg = error_of([&] { lin(rg::zeros({2, 5})); });
  CHECK_CONTAINS(msg, "Linear");
  CHECK_CONTAINS(msg, "4");
  CHECK_CONTAINS(msg, "[2, 5]");
  CHECK_CONTAINS(error_of([&] { nn::linear(rg::zeros({2, 5}), rg::zeros({3, 4})); }), "[3, 4]");
  CHECK_CONTAINS(error_of([&] { nn::Linear bad(0, 3); }), "in_features=0");
}

// ---------------------------------------------------------------- Dropout, Sequential, GELU

TEST_CASE("nn: Dropout is the identity in eval and drops about p while training") {
  rg::manual_seed(9);
  nn::Dropout d(0.3);
  rg::Tensor x = rg::ones({100000});
  x.requires_grad_();
  d.eval();
  CHECK(values(d(x)) == values(x));
  d.train();
  rg::Tensor y = d(x);
  std::vector<double> v = values(y);
  int64_t zeros = 0;
  bool scaled = true;
  for (double e : v) {
    if (e == 0)
      ++zeros;
    else if (std::abs(e - 1.0 / 0.7) > 1e-6)
      scaled = false;
  }
  double frac = static_cast<double>(zeros) / static_cast<double>(v.size());
  CHECK(frac > 0.29);
  CHECK(frac < 0.31);
  CHECK(scaled);
  // The gradient is the same mask and scale.
  y.sum().backward();
  CHECK(values(x.grad()) == v);
  // Two calls draw different masks.
  CHECK(values(d(x)) != v);
}

TEST_CASE("nn: Dropout with p=0 and p=1, and a bad p") {
  rg::Tensor x = rg::randn({1000});
  nn::Dropout none(0.0), all(1.0);
  CHECK(values(none(x)) == values(x));
  for (double e : values(all(x))) CHECK(e == 0.0);
  all.eval();
  CHECK(values(all(x)) == values(x));
  CHECK_CONTAINS(error_of([] { nn::Dropout bad(1.5); }), "1.5");
  CHECK_CONTAINS(error_of([&] { nn::dropout(x, -0.1); }), "-0.1");
}

TEST_CASE("nn: Sequential forward equals the manual composition") {
  rg::manual_seed(10);
  auto l1 = std::make_shared<nn::Linear>(4, 8);
  auto l2 = std::make_shared<nn::Linear>(8, 3);
  nn::Sequential seq{l1, std::make_shared<nn::ReLU>(), l2};
  CHECK(seq.size() == 3);
  CHECK(&seq[0] == l1.get());
  rg::Tensor x = rg::randn({5, 4});
  CHECK(values(seq(x)) == values((*l2)(rg::relu((*l1)(x)))));
  CHECK(names_of(seq.named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
}

TEST_CASE("nn: GELU module, exact and tanh forms") {
  std::vector<double> xs{-3.0, -1.0, -0.25, 0.0, 0.5, 1.0, 2.5};
  rg::Tensor x = f64(xs);
  std::vector<double> exact, approx;
  for (double v : xs) {
    exact.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    approx.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
  }
  check_close(nn::GELU()(x), exact, 1e-12);
  check_close(nn::GELU(rg::GeluApprox::Tanh)(x), approx, 1e-12);
  CHECK(std::abs(exact[5] - approx[5]) > 1e-5);  // the two forms do differ
}

// ---------------------------------------------------------------- cross_entropy

TEST_CASE("nn: cross_entropy values and reductions against a naive reference") {
  rg::manual_seed(11);
  rg::Tensor logits = rg::randn({4, 5}, {.dtype = rg::kFloat64}) * 2.0;
  std::vector<int64_t> t{1, 0, 4, 2};
  rg::Tensor target = i64(t);
  std::vector<double> per = naive_ce(values(logits), t, 5);
  double total = per[0] + per[1] + per[2] + per[3];
  check_close(nn::cross_entropy(logits, target, {.reduction = nn::Reduction::None}), per, 1e-12);
  check_close(nn::cross_entropy(logits, target, {.reduction = nn::Reduction::Sum}), {total}, 1e-12);
  rg::Tensor mean = nn::cross_entropy(logits, target);
  CHECK(mean.dim() == 0);
  check_close(mean, {total / 4}, 1e-12);
  // float32 logits agree with the double reference to float precision.
  check_close(nn::cross_entropy(logits.to(rg::kFloat32), target), {total / 4}, 1e-5);
}

TEST_CASE("nn: cross_entropy label smoothing matches (1-e)*nll + e*mean_j(-log p_j)") {
  rg::manual_seed(12);
  rg::Tensor logits = rg::randn({3, 4}, {.dtype = rg::kFloat64});
  std::vector<int64_t> t{3, 1, 0};
  for (double eps : {0.1, 0.5, 1.0}) {
    std::vector<double> per = naive_ce(values(logits), t, 4, eps);
    check_close(nn::cross_entropy(logits, i64(t),
                                  {.reduction = nn::Reduction::None, .label_smoothing = eps}),
                per, 1e-12);
    check_close(nn::cross_entropy(logits, i64(t), {.label_smoothing = eps}),
                {(per[0] + per[1] + per[2]) / 3}, 1e-12);
  }
  CHECK_CONTAINS(error_of([&] { nn::cross_entropy(logits, i64(t), {.label_smoothing = 1.5}); }),
                 "label_smoothing");
}

TEST_CASE("nn: cross_entropy ignore_index: mean over the rest, zero gradient for ignored rows") {
  rg::manual_seed(13);
  rg::Tensor logits = leaf({4, 3}, -2, 2);
  std::vector<int64_t> t{2, -100, 0, -100};
  std::vector<double> per = naive_ce(values(logits), t, 3);
  check_close(nn::cross_entropy(logits, i64(t), {.reduction = nn::Reduction::None}), per, 1e-12);
  rg::Tensor loss = nn::cross_entropy(logits, i64(t));
  check_close(loss, {(per[0] + per[2]) / 2}, 1e-12);
  loss.backward();
  std::vector<double> g = values(logits.grad());
  for (int j = 0; j < 3; ++j) {
    CHECK(g[1 * 3 + j] == 0.0);
    CHECK(g[3 * 3 + j] == 0.0);
  }
  // Kept rows: (softmax - onehot) / 2.
  std::vector<double> x = values(logits);
  for (int row : {0, 2}) {
    double m = *std::max_element(x.begin() + row * 3, x.begin() + row * 3 + 3), s = 0;
    for (int j = 0; j < 3; ++j) s += std::exp(x[row * 3 + j] - m);
    for (int j = 0; j < 3; ++j) {
      double want = (std::exp(x[row * 3 + j] - m) / s - (j == t[row] ? 1.0 : 0.0)) / 2;
      CHECK(std::abs(g[row * 3 + j] - want) < 1e-12);
    }
  }
  // A custom ignore_index.
  std::vector<int64_t> t2{1, 1, 2, 0};
  std::vector<double> per2 = naive_ce(values(logits), t2, 3, 0.0, /*ignore=*/1);
  check_close(nn::cross_entropy(logits, i64(t2), {.ignore_index = 1}), {(per2[2] + per2[3]) / 2},
              1e-12);
}

TEST_CASE("nn: cross_entropy is stable for logits of +-1000") {
  rg::Tensor logits = f32({1000, -1000, 0, -1000, -1000, 1000}, {2, 3});
  logits.requires_grad_();
  rg::Tensor per = nn::cross_entropy(logits, i64({0, 1}), {.reduction = nn::Reduction::None});
  std::vector<double> v = values(per);
  CHECK(std::isfinite(v[0]));
  CHECK(std::isfinite(v[1]));
  CHECK(std::abs(v[0]) < 1e-6);
  CHECK(std::abs(v[1] - 2000.0) < 1e-3);
  rg::Tensor loss = nn::cross_entropy(logits, i64({0, 1}));
  check_close(loss, {1000.0}, 1e-6);
  loss.backward();
  check_close(logits.grad(), {0, 0, 0, 0, -0.5, 0.5}, 1e-6);
}

TEST_CASE("nn: cross_entropy errors: target out of range, shape and dtype mismatches") {
  rg::Tensor logits = rg::zeros({3, 5});
  std::string msg = error_of([&] { nn::cross_entropy(logits, i64({0, 5, 1})); });
  CHECK_CONTAINS(msg, "cross_entropy");
  CHECK_CONTAINS(msg, "[0, 5)");
  CHECK_CONTAINS(msg, "got 5");
  CHECK_CONTAINS(error_of([&] { nn::cross_entropy(logits, i64({0, -1, 1})); }), "got -1");
  msg = error_of([&] { nn::cross_entropy(logits, i64({0, 1})); });
  CHECK_CONTAINS(msg, "[3, 5]");
  CHECK_CONTAINS(msg, "[2]");
  CHECK_CONTAINS(error_of([&] { nn::cross_entropy(rg::zeros({15}), i64({0, 1, 2})); }), "[15]");
  CHECK_CONTAINS(error_of([&] { nn::cross_entropy(logits, f32({0, 1, 2})); }), "cross_entropy");
}

// ---------------------------------------------------------------- mse_loss

TEST_CASE("nn: mse_loss values, reductions and errors") {
  rg::Tensor a = f64({1, 2, 3, -1}), b = f64({0, 2, 5, 1});
  check_close(nn::mse_loss(a, b), {(1 + 0 + 4 + 4) / 4.0}, 1e-12);
  check_close(nn::mse_loss(a, b, nn::Reduction::Sum), {9.0}, 1e-12);
  check_close(nn::mse_loss(a, b, nn::Reduction::None), {1, 0, 4, 4}, 1e-12);
  std::string msg = error_of([] { nn::mse_loss(rg::zeros({2, 3}), rg::zeros({3, 2})); });
  CHECK_CONTAINS(msg, "mse_loss");
  CHECK_CONTAINS(msg, "[2, 3]");
  CHECK_CONTAINS(msg, "[3, 2]");
}

TEST_CASE("nn: forward hooks run around module(x) and Module::call, not around forward()") {
  rg::manual_seed(0);
  rg::nn::Linear fc(3, 2);
  std::vector<std::string> seen;
  fc.register_forward_pre_hook([&](rg::nn::Module& m, const rg::Tensor& x) {
    seen.push_back("pre " + m.name() + " " + std::to_string(x.size(0)));
  });
  fc.register_forward_hook([&](rg::nn::Module&, const rg::Tensor&, rg::Tensor& out) {
    seen.push_back("post");
    out = out * 2.0;  // a hook may replace the output
  });
  rg::Tensor x = rg::ones({4, 3});
  rg::Tensor plain = fc.forward(x);
  CHECK(seen.empty());
  rg::Tensor hooked = fc(x);
  CHECK(seen == std::vector<std::string>{"pre Linear 4", "post"});
  CHECK(rg::allclose(hooked, plain * 2.0));
  fc.call(x, [&] { return fc.forward(x); });
  CHECK(seen.size() == 4);
}

TEST_CASE("nn: an encoder stack calls its layers through hooks (FSDP wraps them)") {
  rg::nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 8, .dropout = 0.0});
  rg::nn::TransformerEncoder encoder(layer, 2);
  int calls = 0;
  for (auto& l : encoder.layers)
    l->register_forward_pre_hook([&](rg::nn::Module&, const rg::Tensor&) { ++calls; });
  encoder.forward(rg::ones({3, 1, 8}), rg::nn::AttentionMasks{.is_causal = true});
  CHECK(calls == 2);
}
