// pipeline.cpp — the two schedules over one forward and one backward per micro-batch.
//
// Messages between neighbours: activation i goes from stage r to r + 1 with tag 2i
// (a small header first, its shape and dtype, then the values); its gradient comes
// back from r + 1 with tag 2i + 1 (the sender knows the shape: it sent the activation).
#include "ringgrad/parallel/pipeline.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"
#include "ringgrad/core/trace.h"

namespace ringgrad::parallel {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr int64_t kMaxDims = 8;  // the activation header: ndim, dtype, then up to 8 sizes

// A micro-batch's span in the trace: "F3" (its forward), "B3" (its backward); empty when
// tracing is off. (Appended, not "F" + std::to_string(i): GCC 12 warns -Wrestrict on that
// inlined operator+, a false positive, GCC bug 105651.)
std::string span_name(char pass, int64_t index) {
  if (!trace::enabled()) return {};
  std::string name(1, pass);
  return name.append(std::to_string(index));
}

}  // namespace

struct Pipeline::MicroBatch {
  int64_t index = 0;
  Tensor input;   // what this stage received (a leaf that requires grad), or the batch's slice
  Tensor output;  // this stage's output, with its graph
  Tensor loss;    // the last stage: this micro-batch's loss / m
};

Pipeline::Pipeline(nn::Module& stage, Communicator& pp, PipelineOptions options)
    : stage_(stage), pp_(pp), options_(options) {
  RG_CHECK(options.micro_batches >= 1, "Pipeline", "expected at least one micro-batch, got ",
           options.micro_batches);
  RG_CHECK(2 * options.micro_batches < 32767, "Pipeline", "expected fewer than 16384 micro-batches, got ",
           options.micro_batches);
}

double Pipeline::theoretical_bubble() const {
  const double p = pp_.size(), m = static_cast<double>(options_.micro_batches);
  return (p - 1) / (m + p - 1);
}

double Pipeline::forward_backward(const Tensor& input, const Tensor& target, const LossFn& loss) {
  const int64_t m = options_.micro_batches, p = pp_.size(), r = pp_.rank();
  if (is_first())
    RG_CHECK(input.defined() && input.dim() >= 1 && input.size(0) % m == 0, "Pipeline",
             "expected the first stage's input with a batch divisible by ", m,
             " micro-batches, got ", input.defined() ? shape_str(input.shape()) : "none");
  if (is_last())
    RG_CHECK(target.defined() && target.dim() >= 1 && target.size(0) % m == 0 && loss, "Pipeline",
             "expected the last stage's target with a batch divisible by ", m,
             " micro-batches, and a loss function");
  const auto start = Clock::now();
  idle_s_ = 0;
  std::vector<MicroBatch> batches(static_cast<size_t>(m));
  int64_t forwards = 0, backwards = 0;
  auto F = [&] {
    MicroBatch& mb = batches[static_cast<size_t>(forwards)];
    mb.index = forwards++;
    forward(mb, input, target, loss);
  };
  auto B = [&] { backward(batches[static_cast<size_t>(backwards++)]); };

  if (options_.schedule == PipelineSchedule::GPipe) {
    while (forwards < m) F();
    while (backwards < m) B();
  } else {  // 1F1B: fill the pipeline, then one forward and one backward in turn, then drain
    const int64_t warmup = std::min(p - 1 - r, m);
    while (forwards < warmup) F();
    while (forwards < m) F(), B();
    while (backwards < m) B();
  }
  {
    trace::Span span("wait for sends", "pipeline");
    const auto waiting = Clock::now();
    for (WorkHandle& w : sends_) w->wait();
    idle_s_ += since(waiting);
    sends_.clear();
  }
  // The batch's loss, from the last stage to everyone.
  double total = 0;
  for (const MicroBatch& mb : batches)
    if (mb.loss.defined()) total += mb.loss.item();
  Tensor result = full({1}, total, {.dtype = kFloat64});
  pp_.broadcast(result, static_cast<int>(p - 1));
  step_s_ = since(start);
  return result.item();
}

double Pipeline::evaluate(const Tensor& input, const Tensor& target, const LossFn& loss) {
  NoGradGuard no_grad;
  const int64_t m = options_.micro_batches;
  double total = 0;
  for (int64_t i = 0; i < m; ++i) {
    MicroBatch mb;
    mb.index = i;
    forward(mb, input, target, loss);
    if (mb.loss.defined()) total += mb.loss.item();
  }
  for (WorkHandle& w : sends_) w->wait();
  sends_.clear();
  Tensor result = full({1}, total, {.dtype = kFloat64});
  pp_.broadcast(result, pp_.size() - 1);
  return result.item();
}

void Pipeline::forward(MicroBatch& mb, const Tensor& input, const Tensor& target,
                       const LossFn& loss) {
  trace::Span span(span_name('F', mb.index), "pipeline");
  const int64_t m = options_.micro_batches;
  if (is_first()) {
    const int64_t k = input.size(0) / m;
    mb.input = input.narrow(0, mb.index * k, k);
  } else {
    mb.input = receive_activation(pp_.rank() - 1, static_cast<int>(2 * mb.index));
    mb.input.requires_grad_(true);  // its gradient goes back to the previous stage
  }
  mb.output = stage_(mb.input);
  if (is_last()) {
    const int64_t k = target.size(0) / m;
    mb.loss = loss(mb.output, target.narrow(0, mb.index * k, k)) * (1.0 / double(m));
  } else {
    send_activation(mb.output, pp_.rank() + 1, static_cast<int>(2 * mb.index));
  }
}

void Pipeline::backward(MicroBatch& mb) {
  trace::Span span(span_name('B', mb.index), "pipeline");
  const int tag = static_cast<int>(2 * mb.index + 1);
  if (is_last()) {
    mb.loss.backward();
  } else {
    Tensor grad = receive(mb.output.shape(), mb.output.dtype(), pp_.rank() + 1, tag);
    mb.output.backward(grad);
  }
  if (!is_first()) {
    Tensor g = mb.input.grad();
    Tensor out = g.defined() ? g.contiguous() : zeros_like(mb.input.detach());
    sends_.push_back(pp_.send_async(out, pp_.rank() - 1, tag));
  }
  mb.output = Tensor();  // the micro-batch's graph and activations can go
  mb.input = Tensor();
}

// A blocking receive; the time it waits is this rank's idle time.
Tensor Pipeline::receive(const Shape& shape, DType dtype, int src, int tag) {
  Tensor t = empty(shape, {.dtype = dtype});
  trace::Span span("wait for stage " + std::to_string(src), "pipeline");
  const auto waiting = Clock::now();
  pp_.recv(t, src, tag);
  idle_s_ += since(waiting);
  return t;
}

Tensor Pipeline::receive_activation(int src, int tag) {
  Tensor header = receive({2 + kMaxDims}, kInt64, src, tag);
  std::vector<int64_t> h = header.tolist<int64_t>();
  RG_CHECK(h[0] >= 0 && h[0] <= kMaxDims, "Pipeline", "expected an activation header from stage ",
           src, ", got ", h[0], " dims");
  const Shape shape(h.begin() + 2, h.begin() + 2 + h[0]);
  return receive(shape, static_cast<DType>(h[1]), src, tag);
}

void Pipeline::send_activation(const Tensor& t, int dst, int tag) {
  RG_CHECK(t.dim() <= kMaxDims, "Pipeline", "expected a stage output of at most ", kMaxDims,
           " dims, got shape ", shape_str(t.shape()));
  std::vector<int64_t> h(2 + kMaxDims, 0);
  h[0] = t.dim();
  h[1] = static_cast<int64_t>(t.dtype());
  for (int64_t d = 0; d < t.dim(); ++d) h[2 + d] = t.size(d);
  sends_.push_back(pp_.send_async(from_vector(h), dst, tag));
  sends_.push_back(pp_.send_async(t.detach().contiguous(), dst, tag));
}

}  // namespace ringgrad::parallel
