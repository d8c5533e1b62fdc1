// pipeline.h — pipeline parallelism: the model cut into stages across a "pp" group,
// micro-batches flowing through them.
//
//   rg::parallel::DeviceMesh mesh(world.communicator(), {{"pp", 4}});
//   rg::nn::Sequential stage = …;            // this rank's layers (rank r: stage r)
//   rg::parallel::Pipeline pipe(stage, mesh.group("pp"), {.micro_batches = 8});
//   double loss = pipe.forward_backward(x, y, [](const rg::Tensor& out, const rg::Tensor& y) {
//     return rg::nn::mse_loss(out, y);
//   });                                        // every stage's .grad now holds its gradient
//   opt.step();                                // each rank steps its own stage
//
// Interleaved (virtual stages): each rank passes its v model chunks, chunk c being the
// pipeline's stage c·p + r, and the schedule Interleaved1F1B:
//   rg::parallel::Pipeline pipe({&chunk0, &chunk1}, mesh.group("pp"),
//                               {.micro_batches = 8, .schedule = rg::parallel::PipelineSchedule::Interleaved1F1B});
//
// Rank r of the pp group holds stage r: it receives activations from rank r − 1 and
// sends its outputs to rank r + 1, and in backward the gradients travel the other
// way. The first stage reads the batch (input), the last computes the loss (target);
// the batch is split into micro-batches along dim 0 so that the stages can work at
// once. Four schedules, the same gradients (up to the order of floating-point sums):
//   GPipe   every micro-batch's forward, then every backward: simple, but each stage
//           keeps the activations of all m micro-batches until backward;
//   1F1B    after p − 1 − r warm-up forwards, stage r alternates one forward and one
//           backward, so it keeps at most p − r micro-batches' activations;
//   interleaved  Megatron's order over v chunks a rank (m a multiple of p): a micro-batch
//           goes round the ranks v times, each stage 1/v of the work, so the fill and
//           drain take 1/v as long: the bubble (p − 1) / (v·m + p − 1), for v times the
//           messages and more activations held in the longer warm-up;
//   ZB-H1   1F1B's order, with each backward split in two (autograd/split_backward.h):
//           B, the input gradient the previous stage waits for, at once; W, the weight
//           gradients, later: whenever the stage would otherwise wait for a message,
//           else before a forward that would make p micro-batches held, the rest at the
//           end. No stage holds more than 1F1B's first stage does (p micro-batches: the
//           same peak), and the W's fill the waits (Qi et al., "Zero Bubble Pipeline
//           Parallelism", 2023).
// GPipe and 1F1B leave the same idle time, the bubble: (p − 1) / (m + p − 1) of a step
// in theory (the pipeline filling and draining). ZB-H1's W's fill part of it: with F, B
// and W taking equal times (p − 1)(t_F + t_B − t_W) of idle time, a share of
// (p − 1) / (3m + p − 1) for m >= p (ideal_bubble runs any schedule on paper and finds
// exactly these). forward_backward measures each rank's (time spent waiting for a
// neighbour) and `bubble()` reports it. With tracing on, each micro-batch's forward
// ("F3"; "F3.1" through chunk 1), backward ("B3") and, under ZB-H1, weight gradients
// ("W3") are slices on the compute track, the sends and receives on the comm track.
// The loss of each micro-batch is divided by m, so the gradients accumulate to those
// of the mean over the batch (for a loss that is a mean over equal micro-batches:
// the whole batch's loss). Every rank must call forward_backward with the same batch
// size; the micro-batch count must divide it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ringgrad/nn/module.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

enum class PipelineSchedule { GPipe, OneFOneB, Interleaved1F1B, ZeroBubbleH1 };

// "gpipe", "1f1b", "interleaved", "zb-h1"; and back (a clear error naming the known ones).
const char* schedule_name(PipelineSchedule schedule);
PipelineSchedule parse_schedule(const std::string& name);

// One step of a rank's schedule: the forward or the backward of a micro-batch through one
// of its model chunks (chunk c of rank r is the pipeline's stage c·p + r; 0 without
// virtual stages).
struct PipelineStep {
  bool forward = true;
  int64_t micro_batch = 0, chunk = 0;
};

// Rank r's steps, in order, for p ranks, m micro-batches and v chunks per rank. GPipe:
// every F, then every B. 1F1B and ZB-H1: p − 1 − r F's, then one F and one B in turn, then
// the B's left. Interleaved (Megatron's order, v chunks, m a multiple of p): the forwards
// visit the chunks in groups of p micro-batches (chunk 0 for micro-batches 0…p−1, chunk 1
// for the same, …, then the next p), the backwards the same groups with the chunks
// reversed; (p − r − 1)·2 + (v − 1)·p warm-up forwards, then one F and one B in turn.
// (ZB-H1's W's are not steps: they run where the stage would wait.)
std::vector<PipelineStep> pipeline_order(PipelineSchedule schedule, int64_t p, int64_t rank,
                                         int64_t m, int64_t v = 1);

// The bubble of a schedule on paper: p ranks, m micro-batches, v chunks a rank; a chunk's
// F takes 1/v, its backward 2/v (under ZB-H1 B and W 1/v each; the first stage, which
// has no input gradient to send, B 0 and W 2/v), messages arrive at once, the step ends
// when the last rank ends. Runs pipeline_order (and ZB-H1's W's where the stage would
// wait, else before a forward that would make p micro-batches held) and returns rank's
// idle share of the step, or the largest over the ranks (rank < 0). GPipe and 1F1B:
// (p − 1)/(m + p − 1); interleaved (p − 1)/(v·m + p − 1); ZB-H1 (p − 1)/(3m + p − 1) for m >= p.
double ideal_bubble(PipelineSchedule schedule, int64_t p, int64_t m, int64_t rank = -1,
                    int64_t v = 1);

struct PipelineOptions {
  int64_t micro_batches = 4;
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
};

class Pipeline {
 public:
  using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

  Pipeline(nn::Module& stage, Communicator& pp, PipelineOptions options = {});
  // Virtual stages (Interleaved1F1B): this rank's v model chunks, chunk c being the
  // pipeline's stage c·p + r of v·p (rank r holds stages r, r + p, r + 2p, …).
  Pipeline(std::vector<nn::Module*> chunks, Communicator& pp, PipelineOptions options = {});

  // One step's forward and backward over the batch: `input` is read by the first
  // stage, `target` and `loss` by the last (other ranks may pass undefined tensors).
  // Gradients accumulate into this stage's parameters. Returns the batch's loss on
  // every rank (the mean of the micro-batches', sent from the last stage).
  double forward_backward(const Tensor& input, const Tensor& target, const LossFn& loss);

  // Forward only (evaluation: no graph, no backward): the batch's loss on every rank.
  double evaluate(const Tensor& input, const Tensor& target, const LossFn& loss);

  // Whether this rank holds the pipeline's first stage (reads the input) and last (the loss).
  bool is_first() const { return pp_.rank() == 0; }
  bool is_last() const { return pp_.rank() == pp_.size() - 1; }
  int64_t virtual_stages() const { return static_cast<int64_t>(chunks_.size()); }
  // The last step: seconds in all, and seconds this rank waited for a neighbour.
  double step_seconds() const { return step_s_; }
  double idle_seconds() const { return idle_s_; }
  double bubble() const { return step_s_ > 0 ? idle_s_ / step_s_ : 0.0; }
  // The idle share of an ideal pipeline (the largest over the stages): ideal_bubble.
  double theoretical_bubble() const;
  // The most micro-batches whose activations this stage held at once in the last step
  // (forwarded, their backward or, under ZB-H1, their W not yet done): GPipe m, 1F1B
  // min(p − r, m) on stage r, ZB-H1 at most min(p, m) (on the first stage exactly).
  // Interleaved: chunks' activations (each 1/v of a stage's), at most
  // (p − r − 1)·2 + (v − 1)·p + 1 on rank r.
  int64_t max_held() const { return max_held_; }

 private:
  struct MicroBatch;  // one micro-batch's tensors on one chunk of this rank
  void forward(MicroBatch& mb, const Tensor& input, const Tensor& target, const LossFn& loss);
  void backward(MicroBatch& mb, bool split);
  void weights(MicroBatch& mb);
  Tensor receive(const Shape& shape, DType dtype, int src, int tag,
                 const std::function<bool()>& fill = {});
  Tensor receive_activation(int src, int tag);
  void send_activation(const Tensor& t, int dst, int tag);
  int64_t stage_of(const MicroBatch& mb) const;  // c·p + r
  int tag_into(int64_t micro_batch, int64_t stage) const;  // the activation entering a stage

  std::vector<nn::Module*> chunks_;
  Communicator& pp_;
  PipelineOptions options_;
  std::vector<WorkHandle> sends_;  // in flight until the end of the step
  double step_s_ = 0, idle_s_ = 0;
  int64_t held_ = 0, max_held_ = 0;
  std::function<bool()> fill_;  // ZB-H1: run one waiting W (false: none waits)
};

}  // namespace ringgrad::parallel
