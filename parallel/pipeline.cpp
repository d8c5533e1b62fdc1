// pipeline.cpp — the two schedules over one forward and one backward per micro-batch.
//
// Messages between neighbours: activation i goes from stage r to r + 1 with tag 2i
// (a small header first, its shape and dtype, then the values); its gradient comes
// back from r + 1 with tag 2i + 1 (the sender knows the shape: it sent the activation).
// ZB-H1 sends the same messages in the same order as 1F1B: only when each stage computes
// its weight gradients moves.
#include "ringgrad/parallel/pipeline.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <tuple>
#include <string>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/autograd/split_backward.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"
#include "ringgrad/core/trace.h"

namespace ringgrad::parallel {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr int64_t kMaxDims = 8;  // the activation header: ndim, dtype, then up to 8 sizes

// A micro-batch's span in the trace: "F3" (its forward), "B3" (its backward), "W3" (its
// weight gradients); "F3.1" through chunk 1 under virtual stages; empty when tracing is
// off. (Appended, not "F" + std::to_string(i): GCC 12 warns -Wrestrict on that inlined
// operator+, a false positive, GCC bug 105651.)
std::string span_name(char pass, int64_t index, int64_t chunk, int64_t chunks) {
  if (!trace::enabled()) return {};
  std::string name(1, pass);
  name.append(std::to_string(index));
  if (chunks > 1) name.append(".").append(std::to_string(chunk));
  return name;
}

}  // namespace

struct Pipeline::MicroBatch {
  int64_t index = 0, chunk = 0;
  Tensor input;   // what this stage received (a leaf that requires grad), or the batch's slice
  Tensor output;  // this stage's output, with its graph
  Tensor loss;    // the last stage: this micro-batch's loss / m
  autograd::DeferredBackward w;  // ZB-H1: its weight gradients, from B until W
};

const char* schedule_name(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::GPipe: return "gpipe";
    case PipelineSchedule::OneFOneB: return "1f1b";
    case PipelineSchedule::Interleaved1F1B: return "interleaved";
    case PipelineSchedule::ZeroBubbleH1: return "zb-h1";
  }
  return "?";
}

PipelineSchedule parse_schedule(const std::string& name) {
  for (PipelineSchedule s : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB,
                             PipelineSchedule::Interleaved1F1B, PipelineSchedule::ZeroBubbleH1})
    if (name == schedule_name(s)) return s;
  RG_CHECK(false, "Pipeline", "expected a schedule gpipe, 1f1b, interleaved or zb-h1, got '", name, "'");
  return PipelineSchedule::OneFOneB;
}

Pipeline::Pipeline(nn::Module& stage, Communicator& pp, PipelineOptions options)
    : Pipeline(std::vector<nn::Module*>{&stage}, pp, options) {}

Pipeline::Pipeline(std::vector<nn::Module*> chunks, Communicator& pp, PipelineOptions options)
    : chunks_(std::move(chunks)), pp_(pp), options_(options) {
  const int64_t m = options.micro_batches, v = virtual_stages(), p = pp.size();
  RG_CHECK(m >= 1, "Pipeline", "expected at least one micro-batch, got ", m);
  RG_CHECK(v >= 1 && std::find(chunks_.begin(), chunks_.end(), nullptr) == chunks_.end(), "Pipeline",
           "expected one model chunk or more, none of them null, got ", v);
  RG_CHECK(v == 1 || options.schedule == PipelineSchedule::Interleaved1F1B, "Pipeline",
           "expected one chunk per rank under ", schedule_name(options.schedule), ", got ", v,
           " (virtual stages run under the interleaved schedule)");
  if (options.schedule == PipelineSchedule::Interleaved1F1B)
    RG_CHECK(p >= 2 && m % p == 0, "Pipeline", "expected the interleaved schedule on 2 ranks or more "
             "and micro-batches a multiple of them, got ", p, " ranks and ", m, " micro-batches");
  RG_CHECK(2 * m * v * p < 32767, "Pipeline", "expected fewer than 16384 micro-batch passes through "
           "the stages (micro-batches × stages), got ", m, " × ", v * p);
}

int64_t Pipeline::stage_of(const MicroBatch& mb) const { return mb.chunk * pp_.size() + pp_.rank(); }

int Pipeline::tag_into(int64_t micro_batch, int64_t stage) const {
  return static_cast<int>(2 * (micro_batch * virtual_stages() * pp_.size() + stage));
}

std::vector<PipelineStep> pipeline_order(PipelineSchedule schedule, int64_t p, int64_t rank,
                                         int64_t m, int64_t v) {
  RG_CHECK(p >= 1 && rank >= 0 && rank < p && m >= 1 && v >= 1, "pipeline_order", "expected p >= 1 "
           "ranks, a rank below p, m >= 1 micro-batches and v >= 1 chunks, got p = ", p, ", rank = ",
           rank, ", m = ", m, ", v = ", v);
  std::vector<PipelineStep> steps;
  if (schedule != PipelineSchedule::Interleaved1F1B) {
    RG_CHECK(v == 1, "pipeline_order", "expected one chunk per rank under ", schedule_name(schedule),
             ", got ", v);
    const int64_t warmup = schedule == PipelineSchedule::GPipe ? m : std::min(p - 1 - rank, m);
    int64_t f = 0, b = 0;
    for (; f < warmup; ++f) steps.push_back({true, f, 0});
    for (; f < m; ++f, ++b) steps.push_back({true, f, 0}), steps.push_back({false, b, 0});
    for (; b < m; ++b) steps.push_back({false, b, 0});
    return steps;
  }
  RG_CHECK(m % p == 0, "pipeline_order", "expected the interleaved schedule's micro-batches to be a "
           "multiple of the ranks, got ", m, " and ", p);
  // Virtual micro-batch k: micro-batch (k / (p·v))·p + k % p through chunk (k / p) % v
  // (reversed for the backwards).
  const int64_t total = m * v;
  auto step = [&](int64_t k, bool forward) {
    const int64_t group = k % (p * v) / p;
    return PipelineStep{forward, k / (p * v) * p + k % p, forward ? group : v - 1 - group};
  };
  const int64_t warmup = std::min((p - rank - 1) * 2 + (v - 1) * p, total);
  for (int64_t k = 0; k < warmup; ++k) steps.push_back(step(k, true));
  for (int64_t k = 0; k + warmup < total; ++k)
    steps.push_back(step(k + warmup, true)), steps.push_back(step(k, false));
  for (int64_t k = total - warmup; k < total; ++k) steps.push_back(step(k, false));
  return steps;
}

double Pipeline::theoretical_bubble() const {
  return ideal_bubble(options_.schedule, pp_.size(), options_.micro_batches, -1, virtual_stages());
}

double ideal_bubble(PipelineSchedule schedule, int64_t p, int64_t m, int64_t rank, int64_t v) {
  RG_CHECK(p >= 1 && m >= 1 && v >= 1 && rank < p, "ideal_bubble", "expected p >= 1 stages, m >= 1 "
           "micro-batches, v >= 1 chunks and a rank below p, got p = ", p, ", m = ", m, ", v = ", v,
           ", rank = ", rank);
  const bool split = schedule == PipelineSchedule::ZeroBubbleH1;
  const int64_t stages = p * v;
  struct Rank {
    std::vector<PipelineStep> steps;
    size_t next = 0;
    int64_t waiting_w = 0, held = 0;
    double t = 0, idle = 0;
  };
  std::vector<Rank> ranks(static_cast<size_t>(p));
  for (int64_t r = 0; r < p; ++r) ranks[size_t(r)].steps = pipeline_order(schedule, p, r, m, v);
  // done[{F or B, micro-batch, stage}]: when it finished (absent: not yet)
  std::map<std::tuple<bool, int64_t, int64_t>, double> done;
  const double t_f = 1.0 / double(v);
  auto t_b = [&](int64_t stage) { return !split ? 2 * t_f : stage == 0 ? 0.0 : t_f; };
  const double t_w = split ? t_f : 0;  // (the first stage's W: 2 t_f, below)
  auto run_w = [&](Rank& rk, int64_t r) { rk.t += r == 0 ? 2 * t_w : t_w, --rk.waiting_w, --rk.held; };
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      Rank& rk = ranks[size_t(r)];
      while (rk.next < rk.steps.size()) {
        const PipelineStep& st = rk.steps[rk.next];
        const int64_t stage = st.chunk * p + r;
        // What this step waits for: the previous stage's F, the next stage's B.
        double ready = 0;
        if (st.forward ? stage > 0 : stage < stages - 1) {
          auto it = done.find({st.forward, st.micro_batch, st.forward ? stage - 1 : stage + 1});
          if (it == done.end()) break;  // not yet computed: another rank first
          ready = it->second;
        }
        while (rk.waiting_w > 0 && rk.t < ready) run_w(rk, r);  // ZB-H1: W's fill the wait
        rk.idle += std::max(0.0, ready - rk.t);
        rk.t = std::max(rk.t, ready);
        if (st.forward) {
          while (rk.waiting_w > 0 && rk.held >= p) run_w(rk, r);  // ZB-H1: held at most p
          rk.t += t_f, ++rk.held;
        } else {
          rk.t += t_b(stage);
          if (split) ++rk.waiting_w;
          else --rk.held;
        }
        done[{st.forward, st.micro_batch, stage}] = rk.t;
        ++rk.next;
        progress = true;
      }
    }
  }
  double end = 0;
  for (int64_t r = 0; r < p; ++r) {
    Rank& rk = ranks[size_t(r)];
    RG_CHECK(rk.next == rk.steps.size(), "ideal_bubble", "the ", schedule_name(schedule),
             " schedule deadlocks at p = ", p, ", m = ", m, ", v = ", v, " (rank ", r, ")");
    while (rk.waiting_w > 0) run_w(rk, r);
    end = std::max(end, rk.t);
  }
  double worst = 0;
  for (int64_t r = 0; r < p; ++r) {
    const Rank& rk = ranks[size_t(r)];
    const double bubble = (rk.idle + end - rk.t) / end;
    if (r == rank) return bubble;
    worst = std::max(worst, bubble);
  }
  return worst;
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
  held_ = max_held_ = 0;
  const int64_t v = virtual_stages();
  std::vector<MicroBatch> batches(static_cast<size_t>(m * v));  // [micro-batch · v + chunk]
  auto at = [&](const PipelineStep& st) -> MicroBatch& {
    MicroBatch& mb = batches[static_cast<size_t>(st.micro_batch * v + st.chunk)];
    mb.index = st.micro_batch, mb.chunk = st.chunk;
    return mb;
  };
  const bool split = options_.schedule == PipelineSchedule::ZeroBubbleH1;
  std::deque<MicroBatch*> waiting;  // ZB-H1: micro-batches whose W waits, oldest first
  auto W = [&] {
    weights(*waiting.front());
    waiting.pop_front();
  };
  // While this stage would wait for a message, a waiting W runs instead.
  struct Fill {
    std::function<bool()>& fill;
    ~Fill() { fill = nullptr; }  // it refers to this step's locals
  } fill{fill_};
  if (split) fill_ = [&] { return !waiting.empty() && (W(), true); };

  // The schedule's steps (pipeline_order); ZB-H1's W's run inside receive() and forward(),
  // where the stage would wait or hold too much, and the rest here at the end.
  for (const PipelineStep& st : pipeline_order(options_.schedule, p, r, m, v)) {
    MicroBatch& mb = at(st);
    if (st.forward) {
      forward(mb, input, target, loss);
      max_held_ = std::max(max_held_, ++held_);
    } else {
      backward(mb, split);
      if (split) waiting.push_back(&mb);
      else --held_;
    }
  }
  while (!waiting.empty()) W();
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
  // The schedule's forwards, in its order (every activation flows one way: no wait
  // can close a cycle).
  for (const PipelineStep& st : pipeline_order(options_.schedule, pp_.size(), pp_.rank(), m, virtual_stages())) {
    if (!st.forward) continue;
    MicroBatch mb;
    mb.index = st.micro_batch, mb.chunk = st.chunk;
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
  trace::Span span(span_name('F', mb.index, mb.chunk, virtual_stages()), "pipeline");
  const int64_t m = options_.micro_batches, p = pp_.size(), stage = stage_of(mb);
  const int64_t last = virtual_stages() * p - 1;
  if (stage == 0) {
    const int64_t k = input.size(0) / m;
    mb.input = input.narrow(0, mb.index * k, k);
  } else {  // from the previous stage: the previous rank (rank 0: the last rank's previous chunk)
    mb.input = receive_activation(static_cast<int>((pp_.rank() + p - 1) % p), tag_into(mb.index, stage));
    mb.input.requires_grad_(true);  // its gradient goes back to the previous stage
  }
  if (fill_)  // ZB-H1: W's not done while waiting go first where p micro-batches are held
    while (held_ >= pp_.size() && fill_()) {
    }
  mb.output = (*chunks_[static_cast<size_t>(mb.chunk)])(mb.input);
  if (stage == last) {
    const int64_t k = target.size(0) / m;
    mb.loss = loss(mb.output, target.narrow(0, mb.index * k, k)) * (1.0 / double(m));
  } else {
    send_activation(mb.output, static_cast<int>((pp_.rank() + 1) % p), tag_into(mb.index, stage + 1));
  }
}

void Pipeline::backward(MicroBatch& mb, bool split) {
  trace::Span span(span_name('B', mb.index, mb.chunk, virtual_stages()), "pipeline");  // (the wait, and W's filling it, inside)
  const int64_t p = pp_.size(), stage = stage_of(mb), last = virtual_stages() * p - 1;
  Tensor grad;  // the last stage starts from its loss
  if (stage < last)
    grad = receive(mb.output.shape(), mb.output.dtype(), static_cast<int>((pp_.rank() + 1) % p),
                   tag_into(mb.index, stage + 1) + 1, fill_);
  const Tensor& root = stage == last ? mb.loss : mb.output;
  if (split)  // the input's gradient now, the weights' in W (the first stage: all in W)
    mb.w = autograd::backward_inputs_first(root, grad, stage == 0 ? std::vector<Tensor>{}
                                                                  : std::vector<Tensor>{mb.input});
  else
    root.backward(grad);
  if (stage > 0) {
    Tensor g = mb.input.grad();
    Tensor out = g.defined() ? g.contiguous() : zeros_like(mb.input.detach());
    sends_.push_back(pp_.send_async(out, static_cast<int>((pp_.rank() + p - 1) % p), tag_into(mb.index, stage) + 1));
  }
  mb.output = Tensor();  // the micro-batch's graph and activations can go (under ZB-H1,
  mb.input = Tensor();   // what W needs stays with mb.w)
}

void Pipeline::weights(MicroBatch& mb) {
  trace::Span span(span_name('W', mb.index, mb.chunk, virtual_stages()), "pipeline");
  mb.w.run();
  --held_;
}

// A blocking receive; the time it waits is this rank's idle time. `fill`, while the
// message has not arrived: work to do meanwhile, one piece a call (false: none left).
Tensor Pipeline::receive(const Shape& shape, DType dtype, int src, int tag,
                         const std::function<bool()>& fill) {
  Tensor t = empty(shape, {.dtype = dtype});
  WorkHandle arriving = pp_.recv_async(t, src, tag);
  if (fill)
    while (!arriving->is_completed() && fill()) {
    }
  trace::Span span("wait for stage " + std::to_string(src), "pipeline");
  const auto waiting = Clock::now();
  arriving->wait();
  idle_s_ += since(waiting);
  return t;
}

Tensor Pipeline::receive_activation(int src, int tag) {
  Tensor header = receive({2 + kMaxDims}, kInt64, src, tag, fill_);
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
