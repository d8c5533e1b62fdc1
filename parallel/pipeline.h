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
// Rank r of the pp group holds stage r: it receives activations from rank r − 1 and
// sends its outputs to rank r + 1, and in backward the gradients travel the other
// way. The first stage reads the batch (input), the last computes the loss (target);
// the batch is split into micro-batches along dim 0 so that the stages can work at
// once. Two schedules, the same gradients (up to the order of floating-point sums):
//   GPipe   every micro-batch's forward, then every backward: simple, but each stage
//           keeps the activations of all m micro-batches until backward;
//   1F1B    after p − 1 − r warm-up forwards, stage r alternates one forward and one
//           backward, so it keeps at most p − r micro-batches' activations.
// Both leave the same idle time, the bubble: (p − 1) / (m + p − 1) of a step in
// theory (the pipeline filling and draining); forward_backward measures each
// rank's (time spent waiting for a neighbour) and `bubble()` reports it. With
// tracing on, each micro-batch's forward ("F3") and backward ("B3") is a slice on the
// compute track, the sends and receives on the comm track.
// The loss of each micro-batch is divided by m, so the gradients accumulate to those
// of the mean over the batch (for a loss that is a mean over equal micro-batches:
// the whole batch's loss). Every rank must call forward_backward with the same batch
// size; the micro-batch count must divide it.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "ringgrad/nn/module.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

enum class PipelineSchedule { GPipe, OneFOneB };

struct PipelineOptions {
  int64_t micro_batches = 4;
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
};

class Pipeline {
 public:
  using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

  Pipeline(nn::Module& stage, Communicator& pp, PipelineOptions options = {});

  // One step's forward and backward over the batch: `input` is read by the first
  // stage, `target` and `loss` by the last (other ranks may pass undefined tensors).
  // Gradients accumulate into this stage's parameters. Returns the batch's loss on
  // every rank (the mean of the micro-batches', sent from the last stage).
  double forward_backward(const Tensor& input, const Tensor& target, const LossFn& loss);

  // Forward only (evaluation: no graph, no backward): the batch's loss on every rank.
  double evaluate(const Tensor& input, const Tensor& target, const LossFn& loss);

  bool is_first() const { return pp_.rank() == 0; }
  bool is_last() const { return pp_.rank() == pp_.size() - 1; }
  // The last step: seconds in all, and seconds this rank waited for a neighbour.
  double step_seconds() const { return step_s_; }
  double idle_seconds() const { return idle_s_; }
  double bubble() const { return step_s_ > 0 ? idle_s_ / step_s_ : 0.0; }
  // (p − 1) / (m + p − 1): the idle share of an ideal pipeline.
  double theoretical_bubble() const;

 private:
  struct MicroBatch;  // one micro-batch's tensors on this stage
  void forward(MicroBatch& mb, const Tensor& input, const Tensor& target, const LossFn& loss);
  void backward(MicroBatch& mb);
  Tensor receive(const Shape& shape, DType dtype, int src, int tag);
  Tensor receive_activation(int src, int tag);
  void send_activation(const Tensor& t, int dst, int tag);

  nn::Module& stage_;
  Communicator& pp_;
  PipelineOptions options_;
  std::vector<WorkHandle> sends_;  // in flight until the end of the step
  double step_s_ = 0, idle_s_ = 0;
};

}  // namespace ringgrad::parallel
