// distributed_checkpoint.cpp — every rank writes its own pieces, rank 0 commits.
#include "ringgrad/parallel/distributed_checkpoint.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/factory.h"

namespace ringgrad::parallel {

namespace {

// FNV-1a over the piece's name, shape and runs; never 0 (0 pads the exchange).
int64_t piece_hash(const Shard& s) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* data, size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  };
  mix(s.name.data(), s.name.size());
  for (int64_t d : s.shape) mix(&d, sizeof d);
  for (const Run& r : s.runs) mix(&r, sizeof r);
  return int64_t(h | 1);
}

}  // namespace

std::vector<Shard> owned_shards(const std::vector<Shard>& shards, Communicator& comm,
                                Device device) {
  if (comm.size() == 1) return shards;
  const Tensor counts =
      comm.all_gather(full({1}, double(shards.size()), {.dtype = kInt64, .device = device}))
          .to(kCPU);
  int64_t most = 0;
  for (int r = 0; r < comm.size(); ++r) most = std::max(most, counts.data_ptr<int64_t>()[r]);
  Tensor mine = zeros({std::max<int64_t>(most, 1)}, {.dtype = kInt64});
  for (size_t i = 0; i < shards.size(); ++i) mine.data_ptr<int64_t>()[i] = piece_hash(shards[i]);
  const Tensor all = comm.all_gather(mine.to(device)).to(kCPU);  // (ranks, most)
  std::set<int64_t> below;                                       // the pieces lower ranks hold
  for (int r = 0; r < comm.rank(); ++r)
    for (int64_t i = 0; i < most; ++i) below.insert(all.data_ptr<int64_t>()[r * most + i]);
  std::vector<Shard> out;
  for (const Shard& s : shards)
    if (!below.count(piece_hash(s))) out.push_back(s);
  return out;
}

void save_sharded(const std::string& dir, const Checkpoint& info, const std::vector<Shard>& shards,
                  Communicator& comm, Device device) {
  write_shard_file(dir, info.progress.step, comm.rank(), comm.size(),
                   owned_shards(shards, comm, device));
  comm.barrier();
  if (comm.rank() == 0) commit_sharded_checkpoint(dir, info.progress.step, comm.size(), info);
  comm.barrier();
}

AsyncShardedSaver::~AsyncShardedSaver() {
  if (thread_.joinable()) thread_.join();
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
    }
  }
}

void AsyncShardedSaver::finish() {
  if (!pending_) return;
  if (thread_.joinable()) thread_.join();
  Pending p = std::move(*pending_);
  pending_.reset();
  if (std::exception_ptr e = std::exchange(error_, nullptr)) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& failed) {
      fail("AsyncShardedSaver", "the background save to '", p.dir, "' failed: ", failed.what());
    }
  }
  p.comm->barrier();
  if (p.comm->rank() == 0)
    commit_sharded_checkpoint(p.dir, p.info.progress.step, p.comm->size(), p.info);
  p.comm->barrier();
}

void AsyncShardedSaver::save(const std::string& dir, const Checkpoint& info,
                             const std::vector<Shard>& shards, Communicator& comm, Device device) {
  finish();
  std::vector<Shard> mine = owned_shards(shards, comm, device);
  {
    NoGradGuard no_grad;
    for (Shard& s : mine)
      s.local = s.local.device().is_cpu() ? s.local.detach().clone() : s.local.detach().to(kCPU);
  }
  pending_ = Pending{dir, info, &comm};
  thread_ = std::thread([this, dir, step = info.progress.step, rank = comm.rank(),
                         world = comm.size(), mine = std::move(mine)] {
    try {
      write_shard_file(dir, step, rank, world, mine);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

}  // namespace ringgrad::parallel
