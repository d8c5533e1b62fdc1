// distributed_checkpoint.h — saving a sharded checkpoint directory from every rank at once
// (torch.distributed.checkpoint.save's role; the format is optim/sharded_checkpoint.h's).
//
//   std::vector<rg::Shard> mine = …;          // what this rank holds, placed in the whole tensors
//   rg::Checkpoint info = …;                  // step, generators, run settings (no tensors)
//   rg::parallel::save_sharded(dir, info, mine, world.communicator());   // every rank
//   ...
//   rg::ShardedCheckpoint c = rg::open_sharded_checkpoint(dir);         // every rank
//   c.read("model.w", my_slice, my_runs);      // only the pieces this rank's slice needs
//
// A piece that several ranks hold (a replicated tensor under data parallelism, a norm every
// tensor-parallel rank keeps whole) is written once, by the lowest of them: the ranks
// exchange a 64-bit hash of each piece's name, shape and runs, one all-gather. Then each rank
// writes its file, a barrier, rank 0 checks that the pieces tile every tensor and commits the
// manifest, and a last barrier: when save_sharded returns on any rank, the checkpoint is whole
// on disk. A save killed before the commit leaves the previous checkpoint as it was.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ringgrad/optim/sharded_checkpoint.h"
#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

// The shards this rank writes: those no lower rank of `comm` also holds (a collective;
// `device`: where the communicator's tensors live, a GPU under NCCL).
std::vector<Shard> owned_shards(const std::vector<Shard>& shards, Communicator& comm,
                                Device device = kCPU);

// Writes a sharded checkpoint of every rank's `shards` to `dir` (a collective over `comm`):
// owned_shards, write_shard_file, and on rank 0 commit_sharded_checkpoint with `info`.
void save_sharded(const std::string& dir, const Checkpoint& info, const std::vector<Shard>& shards,
                  Communicator& comm, Device device = kCPU);

// save_sharded in the background (torch.distributed.checkpoint.async_save):
//   par::AsyncShardedSaver saver;
//   saver.save(dir, info, mine, comm);   // the pieces copied now, this rank's file written later
//   ... training goes on ...
//   saver.finish();                      // every rank: the file on disk, then the commit
// save() chooses the pieces this rank writes (a collective), copies them to host memory (the
// parameters and moments are live tensors, which the next step changes) and starts a thread
// that writes this rank's file. The commit (a barrier, rank 0's manifest, a barrier) needs
// every rank's file, so it waits for the next save() or finish(), both collectives made from
// the training thread: a save in flight when the next begins is finished first. Until the
// commit the previous checkpoint is the one on disk: a kill during the write leaves it whole.
// The destructor waits for the write but cannot commit (a collective): call finish().
class AsyncShardedSaver {
 public:
  AsyncShardedSaver() = default;
  AsyncShardedSaver(const AsyncShardedSaver&) = delete;
  AsyncShardedSaver& operator=(const AsyncShardedSaver&) = delete;
  ~AsyncShardedSaver();
  void save(const std::string& dir, const Checkpoint& info, const std::vector<Shard>& shards,
            Communicator& comm, Device device = kCPU);
  void finish();
  bool pending() const { return pending_.has_value(); }

 private:
  struct Pending {
    std::string dir;
    Checkpoint info;
    Communicator* comm;
  };
  std::thread thread_;
  std::exception_ptr error_;  // the write's, set by its thread
  std::optional<Pending> pending_;
};

}  // namespace ringgrad::parallel
