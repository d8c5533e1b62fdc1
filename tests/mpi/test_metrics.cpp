// test_metrics.cpp — the examples' metrics across ranks (examples/metrics.h, metrics_log.h),
// run by ctest under mpirun with N = 1, 2, 3, 4 ranks.
//
//   scripts/rgrun -n 3 build/bin/test_metrics
//
// Sharded evaluation: every example is evaluated by exactly one rank, and accuracy() with
// the communicator (each rank 1/N of the batches, counts summed) equals accuracy() of the
// whole set in one process exactly — on a fake dataset whose batches do not divide evenly
// among the ranks, and on the real Fashion-MNIST test set after a few training steps (where
// installed). The loss meter averages over every rank and every step of an interval. The
// JSON log is written by rank 0 only, one complete line at a time, readable before it is
// closed (a crash keeps what was written).
// Prints "rank R/N: P passed, F failed" per rank (checks.h); exits non-zero on a failure.
#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../../examples/metrics.h"
#include "../../examples/metrics_log.h"
#include "../../examples/simple_model.h"
#include "checks.h"

namespace rg = ringgrad;

namespace {

int rank = 0, N = 1;

void check(bool ok, const std::string& what) { mpi_test::check(ok, what, rank); }

void test_eval_shard(rg::parallel::Communicator& comm) {
  for (int64_t n : {0, 1, 999, 1000, 2537, 10000}) {
    for (int64_t batch : {1, 300, 1000}) {
      if (n / batch > 3000) continue;
      std::vector<double> seen(static_cast<size_t>(n), 0.0);
      for (const auto& indices : eval_shard(n, batch, &comm)) {
        check(!indices.empty() && indices.front() % batch == 0 && indices.size() <= size_t(batch),
              "a shard's batch is one of the one-process batches");
        for (int64_t i : indices) seen[static_cast<size_t>(i)] += 1;
      }
      if (n == 0) continue;
      std::vector<double> total = sum_over_ranks(&comm, seen);
      check(std::all_of(total.begin(), total.end(), [](double c) { return c == 1.0; }),
            "n = " + std::to_string(n) + ", batch " + std::to_string(batch) +
                ": every example evaluated by exactly one rank");
    }
  }
  // A world of one (no communicator): all the batches.
  check(eval_shard(2537, 1000, nullptr).size() == 3, "no communicator: every batch");
}

// A fake MNIST-shaped dataset: n random 28×28 images with random labels (the same on every rank).
rg::data::TensorDataset fake_images(int64_t n) {
  rg::Generator g(42);
  return rg::data::TensorDataset(rg::rand({n, 28, 28}, {}, &g), rg::randint(0, 10, {n}, &g));
}

void test_sharded_accuracy(rg::parallel::Communicator& comm) {
  rg::manual_seed(0);
  SimpleModel model;
  rg::data::TensorDataset data = fake_images(2537);
  for (int64_t batch : {1000, 300, 7}) {
    const double whole = accuracy(model, data, rg::kCPU, nullptr, batch);   // this rank alone
    const double sharded = accuracy(model, data, rg::kCPU, &comm, batch);  // 1/N each
    check(sharded == whole, "fake data, batch " + std::to_string(batch) + ": sharded accuracy " +
                                std::to_string(sharded) + " equals the one-process " +
                                std::to_string(whole));
  }
  // The real test set, after some training (the same steps on every rank).
  const std::string dir = rg::data::kDefaultMnistDir;
  if (!std::filesystem::exists(dir + "/t10k-images-idx3-ubyte.gz")) {
    if (rank == 0) std::printf("(no %s: the real test set is not checked)\n", dir.c_str());
    return;
  }
  rg::data::MNIST train(dir, rg::data::Split::Train), test(dir, rg::data::Split::Test);
  rg::optim::Adam opt(model.parameters(), {.lr = 1e-3});
  rg::data::DataLoader loader(train, {.batch_size = 64});
  int steps = 0;
  for (auto& [x, y] : loader) {
    opt.zero_grad();
    rg::nn::cross_entropy(model(x), y).backward();
    opt.step();
    if (++steps == 30) break;
  }
  const double whole = accuracy(model, test), sharded = accuracy(model, test, rg::kCPU, &comm);
  check(sharded == whole && whole > 0.5,
        "Fashion-MNIST test set: sharded accuracy " + std::to_string(sharded) +
            " equals the one-process " + std::to_string(whole) + " (and the model has learned)");
  if (rank == 0) std::printf("Fashion-MNIST test accuracy after 30 steps: %.4f on %d rank(s)\n", sharded, N);
}

void test_loss_meter(rg::parallel::Communicator& comm) {
  // Rank r's steps have losses r+1 and 3(r+1): the interval's mean over every rank and
  // step is 2 · mean(1..N) = N + 1.
  LossMeter meter;
  meter.add(rank + 1.0);
  meter.add(3.0 * (rank + 1));
  const double mean = meter.flush(&comm);
  check(std::abs(mean - (N + 1.0)) < 1e-12, "the interval's loss is the mean over every rank's steps");
  meter.add(10.0);  // the next interval: one step of 10 everywhere
  check(meter.flush(&comm) == 10.0, "a flush starts a new interval");
  check(std::abs(meter.epoch_mean() - (2 * (N + 1.0) + 10) / 3) < 1e-12,
        "the epoch's mean is over every flushed step");
  check(meter.flush(&comm) == 10.0, "an empty interval keeps the last mean");
  meter.new_epoch();
  check(meter.epoch_mean() == 10.0, "a new epoch starts empty");
}

void test_log(rg::parallel::Communicator& comm) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ringgrad-test-metrics-" + std::to_string(getpid()) + ".jsonl"))
                               .string();
  if (rank == 0) std::filesystem::remove(path);
  comm.barrier();
  {
    MetricsLog log(path, /*writer=*/rank == 0);
    check(log.enabled() == (rank == 0), "only the writer opens the log");
    for (int step = 1; step <= 3; ++step)
      log.write({{"step", step}, {"loss", 1.0 / step}, {"nan", NAN}});
    comm.barrier();  // every rank has written (or not): read it back while it is still open
    if (rank == 0) {
      std::ifstream in(path);
      int lines = 0;
      for (std::string line; std::getline(in, line); ++lines) {
        nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        check(!j.is_discarded() && j["step"] == lines + 1 && j.contains("elapsed_s") &&
                  j["nan"].is_null(),
              "line " + std::to_string(lines + 1) + " is complete JSON before the log is closed: " + line);
      }
      check(lines == 3, "three lines, once each (got " + std::to_string(lines) + ")");
    }
    comm.barrier();
  }
  {
    MetricsLog log(path, rank == 0, /*append=*/true);  // a resumed run
    log.write({{"step", 4}});
  }
  comm.barrier();
  if (rank == 0) {
    std::ifstream in(path);
    int lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    check(lines == 4, "a resumed run appends");
    MetricsLog fresh(path, true);  // a new run truncates
    fresh.write({{"step", 1}});
    std::ifstream again(path);
    lines = 0;
    for (std::string line; std::getline(again, line);) ++lines;
    check(lines == 1, "a new run starts the file again");
    std::filesystem::remove(path);
  }
}

}  // namespace

int main(int argc, char** argv) {
  rg::parallel::World world(argc, argv);
  rank = world.rank(), N = world.size();
  auto& comm = world.communicator();
  test_eval_shard(comm);
  test_sharded_accuracy(comm);
  test_loss_meter(comm);
  test_log(comm);
  return mpi_test::report(rank, N);
}
