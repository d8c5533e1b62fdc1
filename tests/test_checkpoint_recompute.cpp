// Activation recomputation (nn/checkpoint.h): the same gradients, bit for bit, as the
// plain run — with dropout, autocast, nesting, a module used twice — less memory held
// between forward and backward, and clear errors when the function does not compute the
// same thing twice.
#include <memory>

#include "test_helpers.h"
#include <ringgrad/nn/checkpoint.h>

namespace {

// Every parameter's gradient and the input's, flattened, for an exact comparison.
std::vector<std::vector<double>> grads_of(rg::nn::Module& m, const rg::Tensor& x) {
  std::vector<std::vector<double>> all;
  for (auto& p : m.parameters()) all.push_back(p.grad().defined() ? p.grad().tolist<double>() : std::vector<double>{});
  all.push_back(x.grad().tolist<double>());
  return all;
}

// A pre-norm block with dropout: x + drop(fc2(gelu(fc1(norm(x))))).
struct Block : rg::nn::Module {
  explicit Block(int64_t d) : norm(d), fc1(d, 4 * d), fc2(4 * d, d), drop(0.25) {
    register_module("norm", norm);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("drop", drop);
  }
  rg::Tensor forward(const rg::Tensor& x) override { return x + drop(fc2(rg::gelu(fc1(norm(x))))); }
  rg::nn::LayerNorm norm;
  rg::nn::Linear fc1, fc2;
  rg::nn::Dropout drop;
};

struct Model : rg::nn::Module {
  Model(int64_t d, int64_t layers) {
    for (int64_t i = 0; i < layers; ++i)  // (name built by append: GCC 12's -Wrestrict misfires on "b" + …)
      blocks.push_back(register_module(std::string("b").append(std::to_string(i)), std::make_shared<Block>(d)));
  }
  // recompute: 0 none, 1 each block checkpointed, 2 pairs of blocks nested (an outer
  // checkpoint around two inner ones).
  rg::Tensor forward(const rg::Tensor& x) override {
    rg::Tensor h = x;
    if (recompute == 2) {
      for (size_t i = 0; i + 1 < blocks.size(); i += 2)
        h = rg::nn::checkpoint([this, i](const std::vector<rg::Tensor>& in) {
          return rg::nn::checkpoint(*blocks[i + 1], rg::nn::checkpoint(*blocks[i], in[0]));
        }, {h});
      return h;
    }
    for (auto& b : blocks) h = recompute ? rg::nn::checkpoint(*b, h) : (*b)(h);
    return h;
  }
  std::vector<std::shared_ptr<Block>> blocks;
  int recompute = 0;
};

// Loss and gradients of one forward/backward from seed 7, the model's parameters as made from seed 1.
struct Run {
  double loss;
  std::vector<std::vector<double>> grads;
  uint64_t generator_after;
};
Run run(int recompute, rg::DType dtype, bool amp = false) {
  rg::manual_seed(1);
  Model m(8, 4);
  m.to(dtype);
  m.recompute = recompute;
  rg::Tensor x = rg::randn({3, 5, 8}, {.dtype = dtype}).requires_grad_();
  rg::manual_seed(7);
  rg::Tensor loss;
  {
    rg::autocast cast(rg::kCPU, rg::kBFloat16, amp);
    loss = (m(x) * m(x).detach()).sum();  // the model twice: the second call's graph is cut
  }
  loss.backward();
  return {loss.item(), grads_of(m, x), rg::default_generator().offset()};
}

}  // namespace

TEST_CASE("recompute: gradients bit-identical to the plain run, dropout replayed") {
  for (rg::DType dtype : {rg::kFloat64, rg::kFloat32}) {
    CAPTURE(dtype);
    const Run plain = run(0, dtype), each = run(1, dtype), nested = run(2, dtype);
    CHECK(each.loss == plain.loss);
    CHECK(nested.loss == plain.loss);
    CHECK(each.grads == plain.grads);
    CHECK(nested.grads == plain.grads);
    // The recomputation puts the generator back: later draws are the plain run's too.
    CHECK(each.generator_after == plain.generator_after);
    CHECK(nested.generator_after == plain.generator_after);
  }
}

TEST_CASE("recompute: the forward's autocast state is replayed in the recomputation") {
  const Run plain = run(0, rg::kFloat32, true), each = run(1, rg::kFloat32, true);
  CHECK(each.loss == plain.loss);
  CHECK(each.grads == plain.grads);
}

TEST_CASE("recompute: a module checkpointed twice in one forward sums its gradients") {
  auto grads = [](bool recompute) {
    rg::manual_seed(3);
    rg::nn::Linear lin(4, 4);
    lin.to(rg::kFloat64);
    rg::Tensor x = rg::randn({2, 4}, {.dtype = rg::kFloat64}).requires_grad_();
    auto f = [&](const rg::Tensor& in) { return recompute ? rg::nn::checkpoint(lin, in) : lin(in); };
    rg::Tensor y = f(rg::tanh(f(x)));  // the same weights twice, the second on the first's output
    (y * y).sum().backward();
    return grads_of(lin, x);
  };
  CHECK(grads(true) == grads(false));
}

TEST_CASE("recompute: finite-difference gradients through a checkpointed region (float64)") {
  rg::manual_seed(5);
  rg::Tensor w = test::leaf({4, 3});
  rg::Tensor x = test::leaf({2, 4});
  auto f = [](const std::vector<rg::Tensor>& in) {
    return rg::nn::checkpoint([](const std::vector<rg::Tensor>& a) {
      return rg::tanh(rg::matmul(a[0], a[1])) * rg::sigmoid(a[0].sum(1, true));
    }, {in[0], in[1]});
  };
  auto r = rg::gradcheck(f, {x, w});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("recompute: what backward needs is freed after forward, and comes back once") {
  // A deep stack of wide blocks: without recomputation every block's hidden layer is kept
  // until backward; with it only each block's input (its output is the next one's input).
  const int64_t d = 64, layers = 8;
  auto held_after_forward = [&](int recompute) {
    rg::manual_seed(1);
    Model m(d, layers);
    m.to(rg::kFloat64);
    m.recompute = recompute;
    rg::Tensor x = rg::randn({16, 32, d}, {.dtype = rg::kFloat64}).requires_grad_();
    const int64_t before = rg::memory_stats().live_bytes;
    rg::Tensor loss = m(x).sum();
    const int64_t held = rg::memory_stats().live_bytes - before;
    loss.backward();
    return held;
  };
  const int64_t plain = held_after_forward(0), each = held_after_forward(1);
  const int64_t block_input = 16 * 32 * d * 8;  // one (16, 32, 64) float64 tensor
  // Each checkpointed block keeps its input; the output of the last is the model's output.
  CHECK(each <= (layers + 1) * block_input + block_input / 2);
  // The plain run keeps, per block, at least the norm's output, the hidden layer before and
  // after GELU, and the dropout mask: well over 8 block inputs' worth.
  CHECK(plain >= layers * 8 * block_input);
}

TEST_CASE("recompute: without grad mode it is a plain call; an input returned as is stays as is") {
  rg::Tensor x = test::leaf({2, 3});
  {
    rg::NoGradGuard no_grad;
    rg::Tensor y = rg::nn::checkpoint([](const std::vector<rg::Tensor>& in) { return in[0] * 2.0; }, {x});
    CHECK_FALSE(y.requires_grad());
  }
  rg::Tensor same = rg::nn::checkpoint([](const std::vector<rg::Tensor>& in) { return in[0]; }, {x});
  CHECK(same.is_leaf());
  rg::Tensor y = rg::nn::checkpoint([](const std::vector<rg::Tensor>& in) { return in[0] * 2.0; }, {x});
  CHECK(std::string(y.grad_fn_name()) == "checkpoint");
}

TEST_CASE("recompute: a function that computes something else the second time is refused") {
  rg::Tensor x = test::leaf({2, 3});
  SUBCASE("another shape") {
    int calls = 0;
    rg::Tensor y = rg::nn::checkpoint([&](const std::vector<rg::Tensor>& in) {
      return ++calls == 1 ? in[0] * 2.0 : in[0].sum(0) * 2.0;
    }, {x});
    const std::string e = test::error_of([&] { y.sum().backward(); });
    CHECK(e.find("checkpoint") != std::string::npos);
    CHECK(e.find("recomputation to give what the forward gave") != std::string::npos);
  }
  SUBCASE("another tensor read") {
    rg::Tensor w = test::leaf({2, 3});
    rg::Tensor* read = &x;
    rg::Tensor y = rg::nn::checkpoint([&](const std::vector<rg::Tensor>&) { return *read * 3.0; }, {});
    read = &w;  // captured by reference, replaced before backward
    const std::string e = test::error_of([&] { y.sum().backward(); });
    CHECK(e.find("read the tensors the forward read") != std::string::npos);
  }
  SUBCASE("a second backward without retain_graph") {
    rg::Tensor y = rg::nn::checkpoint([](const std::vector<rg::Tensor>& in) { return rg::exp(in[0]); }, {x});
    rg::Tensor z = rg::tanh(y).sum();
    z.backward(rg::Tensor(), /*retain_graph=*/false);
    const std::string e = test::error_of([&] { y.sum().backward(); });
    CHECK(e.find("already freed") != std::string::npos);
  }
  SUBCASE("retain_graph: two backwards through it add up") {
    rg::Tensor y = rg::nn::checkpoint([](const std::vector<rg::Tensor>& in) { return rg::exp(in[0]); }, {x});
    y.sum().backward(rg::Tensor(), /*retain_graph=*/true);
    y.sum().backward();
    test::check_close(x.grad(), rg::exp(x.detach()) * 2.0, 1e-12);
  }
}
