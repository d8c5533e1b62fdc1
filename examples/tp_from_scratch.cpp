// tp_from_scratch.cpp — tensor parallelism in one page: Megatron's MLP on N ranks.
//
//   scripts/rgrun -n 2 build/bin/tp_from_scratch        (N must divide --hidden)
//
// The MLP y = gelu(x·W1ᵀ + b1)·W2ᵀ + b2, x (B, E), W1 (F, E), W2 (E, F). Tensor
// parallelism splits its F hidden features over N ranks, rank r keeping features
// [r·F/N, (r+1)·F/N):
//   - fc1 column-parallel: rank r keeps rows r of W1 and b1 (F/N of them) and computes
//     its F/N hidden features from the whole x — no communication;
//   - gelu acts on each feature alone — no communication;
//   - fc2 row-parallel: rank r keeps its F/N columns of W2 and multiplies its hidden
//     features by them, a partial sum of y; the N partial sums add up to y.
// Two communication ops make this right in both directions (Megatron's f and g):
//   f, before fc1: forward the identity (every rank has all of x); backward an
//      all-reduce — each rank's dL/dx covers only its features' share of the paths
//      from x to the loss, and dL/dx is their sum;
//   g, after fc2: forward an all-reduce (add the partial sums; then b2, once);
//      backward the identity (every rank's partial sum gets the same gradient).
// They are conjugates: each one's backward is the other's forward. Here both are
// written out as autograd ops over the textbook ring all-reduce
// (parallel/ring_allreduce.cpp); parallel/tensor_parallel.cpp is the same pair as
// copy_to_tp_region and reduce_from_tp_region, with the backend's all-reduce.
//
// The cost: a step all-reduces y forward and dL/dx backward, B·E numbers each; a ring
// all-reduce sends 2(N−1)/N of its tensor from every rank, so each rank sends
//   2 · 2(N−1)/N · B·E · 8 bytes (float64)
// per step, whatever F is: tensor parallelism's traffic grows with the activations, not
// the weights. What each rank keeps for backward shrinks: the hidden layer before and
// after gelu, 2·B·F/N numbers instead of 2·B·F (plus y, B·E, the step's output).
// The program prints both beside what its sends carried and what its tensors hold.
// Then it checks what tensor parallelism promises: the output and every gradient equal
// the plain MLP's (the whole weights on one rank), in float64.
//
//   scripts/rgrun -n 2 build/bin/tp_from_scratch --sequence-parallel
// Sequence parallelism (Megatron's, with the rows of x as the sequence): outside the
// two linears each rank keeps only its B/N rows — x's, and y's — and f and g become
// an all-gather of the rows before fc1 (backward: a reduce-scatter) and a reduce-scatter
// after fc2 (backward: an all-gather), the library's gather_from_sequence_region and
// reduce_scatter_to_sequence_region. An all-reduce is a reduce-scatter then an
// all-gather, so the bytes are the same, 4·(N−1)/N·B·E·8, plus dL/db2's all-reduce
// (each rank added b2 to its own rows only): 2(N−1)/N·E·8.
// Ends with: RESULT example=tp_from_scratch world=N max_diff=… bytes_per_step=…
#include <ringgrad/autograd/function.h>
#include <ringgrad/parallel/ring_allreduce.h>
#include <ringgrad/parallel/tensor_parallel.h>
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>

#include "parse_on_every_rank.h"

namespace rg = ringgrad;
namespace par = rg::parallel;

// The sum over ranks of t (a new tensor; t is left as it was).
rg::Tensor summed(const rg::Tensor& t, par::Communicator& comm) {
  rg::Tensor total = t.contiguous().clone();
  par::ring_all_reduce(comm, total, par::Reduce::Sum);
  return total;
}

// f: forward the identity, backward the sum over ranks of dL/dx.
rg::Tensor f(const rg::Tensor& x, par::Communicator& comm) {
  rg::Tensor out = x.detach();  // the same values, as a new node of the graph
  rg::autograd::record("f", out, {&x}, [&comm](const rg::Tensor& grad) {
    return rg::autograd::Grads{summed(grad, comm)};
  });
  return out;
}

// g: forward the sum over ranks, backward the identity.
rg::Tensor g(const rg::Tensor& partial, par::Communicator& comm) {
  rg::Tensor out;
  {
    rg::NoGradGuard no_grad;  // the all-reduce is not an op autograd should see
    out = summed(partial, comm);
  }
  rg::autograd::record("g", out, {&partial}, [](const rg::Tensor& grad) {
    return rg::autograd::Grads{grad};
  });
  return out;
}

// The largest |a − b| over two tensors, relative to b's largest |element| (or 1).
double max_diff(const rg::Tensor& a, const rg::Tensor& b) {
  return rg::amax(rg::abs(a - b)).item() / std::max(1.0, rg::amax(rg::abs(b)).item());
}

// Bytes held by every live tensor now (core/storage.h).
int64_t live() { return rg::memory_stats().live_bytes; }

int main(int argc, char** argv) {
  par::World world(argc, argv);
  CLI::App app{"Tensor parallelism from scratch: a column- then row-parallel MLP (rgrun -n N)"};
  int64_t batch = 8, embed = 16, hidden = 64;
  bool sequence_parallel = false;
  app.add_option("--batch", batch, "B: rows of x (tokens)")->check(CLI::PositiveNumber);
  app.add_option("--embed", embed, "E: features in and out")->check(CLI::PositiveNumber);
  app.add_option("--hidden", hidden, "F: hidden features, split over the ranks")
      ->check(CLI::PositiveNumber);
  app.add_flag("--sequence-parallel", sequence_parallel,
               "also cut x's and y's rows over the ranks (B divisible by N)");
  if (auto code = parse_on_every_rank(world, app, argc, argv)) return *code;

  return par::main_guard(world, [&] {
    par::Communicator& comm = world.communicator();
    const int n = world.size(), r = world.rank();
    RG_CHECK(hidden % n == 0, "tp_from_scratch", "expected --hidden divisible by the world size ",
             n, ", got ", hidden);
    RG_CHECK(!sequence_parallel || batch % n == 0, "tp_from_scratch",
             "expected --batch divisible by the world size ", n, " with --sequence-parallel, got ",
             batch);
    const rg::TensorOptions f64{.dtype = rg::kFloat64};

    // The whole MLP, the same on every rank (one seed), and its input.
    rg::manual_seed(1);
    rg::Tensor W1 = rg::randn({hidden, embed}, f64) * 0.3, b1 = rg::randn({hidden}, f64) * 0.1;
    rg::Tensor W2 = rg::randn({embed, hidden}, f64) * 0.3, b2 = rg::randn({embed}, f64) * 0.1;
    rg::Tensor x = rg::randn({batch, embed}, f64);
    for (rg::Tensor* t : {&W1, &b1, &W2, &b2, &x}) t->requires_grad_();

    // The plain MLP on every rank: the answer to compare with.
    rg::Tensor y_plain = rg::nn::linear(rg::gelu(rg::nn::linear(x, W1, b1)), W2, b2);
    y_plain.pow(2).sum().backward();  // any loss will do: L = Σ y²

    // This rank's slices: rows of W1 and b1, columns of W2 (copies that are leaves);
    // with sequence parallelism also its rows of x.
    const int64_t k = hidden / n, rows = sequence_parallel ? batch / n : batch;
    const int64_t row0 = sequence_parallel ? r * rows : 0;
    rg::Tensor w1 = W1.detach().narrow(0, r * k, k).contiguous().requires_grad_();
    rg::Tensor c1 = b1.detach().narrow(0, r * k, k).contiguous().requires_grad_();
    rg::Tensor w2 = W2.detach().narrow(1, r * k, k).contiguous().requires_grad_();
    rg::Tensor c2 = b2.detach().clone().requires_grad_();  // whole: added once, after g
    rg::Tensor xs = x.detach().narrow(0, row0, rows).contiguous().requires_grad_();

    // The tensor-parallel MLP: f, fc1's slice, gelu, fc2's slice, g, then b2. Under
    // sequence parallelism f and g are the all-gather / reduce-scatter pair instead.
    // Bytes kept are counted between two barriers: by then the communication thread has let
    // go of the tensors of every call before it (it holds them while they are in flight).
    comm.barrier();
    comm.reset_wire_bytes();
    const int64_t before = live();
    rg::Tensor in = sequence_parallel ? par::gather_from_sequence_region(xs, comm, /*seq_dim=*/0)
                                      : f(xs, comm);                // (B, E) on every rank
    rg::Tensor h = rg::gelu(rg::nn::linear(in, w1, c1));            // (B, F/N): this rank's features
    rg::Tensor partial = rg::nn::linear(h, w2);                     // (B, E): a partial sum of y
    rg::Tensor y = (sequence_parallel ? par::reduce_scatter_to_sequence_region(partial, comm, 0)
                                      : g(partial, comm)) + c2;     // (B or B/N, E): summed
    partial = rg::Tensor();  // (g's sum is all that needs it)
    comm.barrier();  // (and of the forward's sends)
    const int64_t kept = live() - before;  // what forward left for backward, and y
    y.pow(2).sum().backward();
    // b2 was added to this rank's rows only: the rows' gradients summed over the ranks.
    if (sequence_parallel) {
      rg::Tensor db2 = c2.grad();  // a handle: the sum lands in c2.grad() itself
      par::ring_all_reduce(comm, db2, par::Reduce::Sum);
    }
    const int64_t sent = comm.wire_bytes();

    // Compare: y, dL/dx, dL/db2 whole; dL/dW1, dL/db1, dL/dW2 against this rank's slices.
    struct Check {
      const char* what;
      double diff;
    };
    const Check checks[] = {
        {"output y", max_diff(y, y_plain.narrow(0, row0, rows))},
        {sequence_parallel ? "dL/dx (reduce-scatter)" : "dL/dx (f's all-reduce)",
         max_diff(xs.grad(), x.grad().narrow(0, row0, rows))},
        {"dL/dW1 (rows)", max_diff(w1.grad(), W1.grad().narrow(0, r * k, k))},
        {"dL/db1 (rows)", max_diff(c1.grad(), b1.grad().narrow(0, r * k, k))},
        {"dL/dW2 (columns)", max_diff(w2.grad(), W2.grad().narrow(1, r * k, k))},
        {"dL/db2 (whole)", max_diff(c2.grad(), b2.grad())},
    };
    double worst = 0;
    for (const Check& c : checks) worst = std::max(worst, c.diff);
    rg::Tensor worst_all = rg::scalar_tensor(worst, f64);
    comm.all_reduce(worst_all, par::Reduce::Max);  // every rank's slices, one verdict
    worst = worst_all.item();

    // The formulas. Bytes: 2 all-reduces of B·E (or their halves, twice; plus dL/db2's).
    // Kept: gelu's input and output (B·F/N each), y; sequence parallelism keeps the
    // gathered x too (fc1 saves its input for dL/dW1), and y is B/N rows.
    const double B = double(batch), E = double(embed), F = double(hidden), N = double(n);
    const double predicted = 2.0 * 2.0 * (N - 1) / N * B * E * 8.0 +
                             (sequence_parallel ? 2.0 * (N - 1) / N * E * 8.0 : 0.0);
    const double kept_predicted =
        8.0 * (2.0 * B * F / N + (sequence_parallel ? B * E + B / N * E : B * E));
    if (world.is_main()) {
      std::printf("tensor parallel MLP%s: E=%ld F=%ld over %d ranks (F/N=%ld features each), B=%ld\n",
                  sequence_parallel ? ", sequence parallel (x's and y's rows cut too)" : "",
                  long(embed), long(hidden), n, long(k), long(batch));
      for (const Check& c : checks)
        std::printf("  %-24s rank 0: max |tp - plain| / max |plain| = %.3g\n", c.what, c.diff);
      std::printf("every rank, every tensor: %.3g (float64: equal up to the order of the sums)\n",
                  worst);
      std::printf("bytes each rank sent this step: %s = %.0f predicted, %ld measured\n",
                  sequence_parallel ? "4 x (N-1)/N x B*E x 8 + 2(N-1)/N x E x 8"
                                    : "2 all-reduces x 2(N-1)/N x B*E x 8",
                  predicted, long(sent));
      std::printf("bytes each rank kept after forward: %s = %.0f predicted, %ld measured "
                  "(the plain MLP: 8 x (2*B*F + B*E) = %.0f)\n",
                  sequence_parallel ? "8 x (2*B*F/N + B*E + B/N*E)" : "8 x (2*B*F/N + B*E)",
                  kept_predicted, long(kept), 8.0 * (2.0 * B * F + B * E));
      std::printf("CHECK tp_bytes_per_step predicted=%.0f measured=%ld\n", predicted, long(sent));
      std::printf("CHECK tp_kept_bytes predicted=%.0f measured=%ld\n", kept_predicted, long(kept));
      std::printf("RESULT example=tp_from_scratch world=%d sequence_parallel=%d max_diff=%.3g "
                  "bytes_per_step=%ld kept_bytes=%ld\n",
                  n, int(sequence_parallel), worst, long(sent), long(kept));
    }
    return worst <= 1e-12 ? 0 : 1;
  });
}
