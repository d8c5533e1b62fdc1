// metrics.h — numbers that describe the whole job, not rank 0: the training loss averaged
// over every rank and over a log interval, and the test set evaluated in shards.
//
//   LossMeter meter;                       // per step, on every rank: meter.add(loss.item())
//   double loss = meter.flush(&comm);      // collective: the mean over every rank's steps
//                                          // since the last flush (the log interval)
//   double epoch_loss = meter.epoch_mean();  // the mean of the epoch's flushed steps
//
//   for (const auto& indices : eval_shard(test.size(), 1000, &comm)) …  // this rank's batches
//   double correct = sum_over_ranks(&comm, my_correct);                 // collective
//
// Rank 0's last batch is one sample of 1/N of the data; the loss a user wants is the mean
// over every rank's batches. Evaluation is shared the same way: each rank takes every N-th
// batch of the test set (batch b, examples [b·B, (b+1)·B), goes to rank b mod N), so N
// ranks evaluate in 1/N of the time. The batches are exactly the ones one process makes,
// so every example gets the same logits, bit for bit, and the all-reduced count of correct
// answers is the one-process count: the printed accuracy does not depend on N
// (tests/mpi/test_metrics.cpp). A null communicator means a world of one (no collective).
#pragma once

#include <ringgrad/parallel/communicator.h>
#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <cstdint>
#include <vector>

// Σ over ranks of each value (a collective; float64, exact for counts below 2^53).
inline std::vector<double> sum_over_ranks(ringgrad::parallel::Communicator* comm,
                                          const std::vector<double>& local) {
  if (comm == nullptr || comm->size() == 1) return local;
  ringgrad::Tensor t = ringgrad::from_vector(local, {static_cast<int64_t>(local.size())});
  comm->all_reduce(t, ringgrad::parallel::Reduce::Sum);
  return t.tolist<double>();
}
inline double sum_over_ranks(ringgrad::parallel::Communicator* comm, double local) {
  return sum_over_ranks(comm, std::vector<double>{local})[0];
}

// This rank's evaluation batches of a dataset of n examples cut into batches of `batch`
// in order: batches rank, rank + N, rank + 2N, … (each a list of example indices).
inline std::vector<std::vector<int64_t>> eval_shard(int64_t n, int64_t batch,
                                                    ringgrad::parallel::Communicator* comm) {
  const int rank = comm ? comm->rank() : 0, size = comm ? comm->size() : 1;
  std::vector<std::vector<int64_t>> mine;
  for (int64_t b = rank; b * batch < n; b += size) {
    std::vector<int64_t>& indices = mine.emplace_back();
    for (int64_t i = b * batch; i < std::min(n, (b + 1) * batch); ++i) indices.push_back(i);
  }
  return mine;
}

// The training loss, averaged over the steps of a log interval and over every rank.
struct LossMeter {
  double sum = 0;  // this rank's losses since the last flush
  int64_t steps = 0;
  double epoch_sum = 0, epoch_count = 0;  // every rank's flushed losses this epoch
  double last = 0;                        // the last flush's mean

  void add(double loss) { sum += loss, ++steps; }
  // Collective (every rank calls it at the same step): the mean over every rank of the
  // losses added since the last flush. Keeps the last mean when no step was added anywhere.
  double flush(ringgrad::parallel::Communicator* comm) {
    std::vector<double> total = sum_over_ranks(comm, {sum, static_cast<double>(steps)});
    sum = 0, steps = 0;
    if (total[1] > 0) last = total[0] / total[1];
    epoch_sum += total[0], epoch_count += total[1];
    return last;
  }
  double epoch_mean() const { return epoch_count > 0 ? epoch_sum / epoch_count : last; }
  void new_epoch() { epoch_sum = 0, epoch_count = 0; }
};
