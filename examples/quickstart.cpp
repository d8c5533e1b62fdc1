// quickstart.cpp — the smallest complete ringgrad program: fit y = 3x + 2.
//
// It uses the three things every training loop is made of:
//   1. tensors          — the data x, y and the parameters w, b;
//   2. autograd         — loss.backward() fills w.grad() and b.grad();
//   3. a gradient step  — w -= lr * w.grad(), done under NoGradGuard so the
//                         update itself is not recorded in the graph.
//
//   build/bin/quickstart            (prints the loss as it falls, then w and b)
#include <ringgrad/ringgrad.h>

#include <cstdio>

namespace rg = ringgrad;

int main() {
  rg::manual_seed(0);

  // 256 noisy samples of y = 3x + 2, with x in [-1, 1).
  rg::Tensor x = rg::uniform({256, 1}, -1.0, 1.0);
  rg::Tensor y = 3.0 * x + 2.0 + 0.1 * rg::randn({256, 1});

  // Parameters start at zero and ask autograd for their gradients.
  rg::Tensor w = rg::zeros({1}, {.requires_grad = true});
  rg::Tensor b = rg::zeros({1}, {.requires_grad = true});

  const double lr = 0.1;
  for (int step = 1; step <= 200; ++step) {
    rg::Tensor pred = x * w + b;  // (256, 1): broadcasting w and b
    rg::Tensor loss = ((pred - y) * (pred - y)).mean();
    loss.backward();  // d loss / d w, d loss / d b

    {
      rg::NoGradGuard no_grad;  // the update is not part of the model
      w.sub_(w.grad() * lr);
      b.sub_(b.grad() * lr);
    }
    w.set_grad(rg::Tensor());  // gradients accumulate: clear them
    b.set_grad(rg::Tensor());

    if (step == 1 || step % 40 == 0) std::printf("step %3d  loss %.5f\n", step, loss.item());
  }
  std::printf("learned  w = %.4f (true 3)   b = %.4f (true 2)\n", w.item(), b.item());
  std::printf("RESULT example=quickstart w=%.4f b=%.4f\n", w.item(), b.item());
  return 0;
}
