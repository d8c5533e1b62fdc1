// A user's program: a tiny trainer embedded in an application.
#include <cmath>
#include <cstdio>

#include <ringgrad/ringgrad.h>

namespace rg = ringgrad;

int main() {
  rg::manual_seed(1);
  rg::Tensor x = rg::randn({64, 3});
  rg::Tensor true_w = rg::from_vector<float>({1.5f, -2.0f, 0.5f}, {3, 1});
  rg::Tensor y = rg::matmul(x, true_w);
  rg::Tensor w = rg::zeros({3, 1}, {.requires_grad = true});
  for (int step = 0; step < 300; ++step) {
    rg::Tensor loss = (rg::matmul(x, w) - y).pow(2.0).mean();
    loss.backward();
    rg::NoGradGuard no_grad;
    w.sub_(w.grad() * 0.1);
    w.set_grad(rg::Tensor());
  }
  double err = rg::amax(rg::abs(w - true_w)).item();
  std::printf("embed: max |w - w*| = %.2e\n", err);
  return err < 1e-3 ? 0 : 1;
}
