// sharded_checkpoint.h — a checkpoint as a directory: each rank writes the pieces it holds,
// and any layout reads back the pieces it needs (torch.distributed.checkpoint's idea).
//
//   // every rank: what it holds, named as in the one-file checkpoint ("model.<key>",
//   // "optim.<key>"), each with the whole tensor's shape and where its elements lie in it
//   std::vector<rg::Shard> mine = {rg::whole_shard("model.bias", bias),
//                                  {.name = "model.weight", .shape = {8, 4}, .local = my_rows,
//                                   .runs = {{.global = 4 * first_row, .length = 4 * rows}}}};
//   rg::write_shard_file("run.ckpt", step, rank, world, mine);
//   comm.barrier();
//   if (rank == 0) rg::commit_sharded_checkpoint("run.ckpt", step, world, info);  // last
//   comm.barrier();
//   ...
//   rg::ShardedCheckpoint c = rg::open_sharded_checkpoint("run.ckpt");  // the manifest, checked
//   c.read("model.weight", my_rows, runs);      // the elements at `runs`, from whichever files
//
// (parallel/distributed_checkpoint.h does the three steps as one collective, and leaves a
// piece that several ranks hold to the lowest of them.)
//
// On disk:
//
//   run.ckpt/manifest.json                      written last: the checkpoint exists once it does
//   run.ckpt/step-20/rank-0-of-4.safetensors    each rank's pieces, one flat tensor per name
//   run.ckpt/step-20/rank-1-of-4.safetensors    (ranks that hold nothing write an empty file)
//
// A piece is a shard: some elements of the whole ("global") tensor, in row-major order, with
// `runs` saying where: run {global, local, length, count, stride} is `count` stretches of
// `length` elements, the i-th at element global + i·stride of the whole tensor (row-major)
// and at local + i·length of the shard. So a tensor-parallel slice of rows is one run, a slice
// of columns one run with count = rows, FSDP's part of a flat buffer one run, and the packed
// q, k, v rows of an attention layer's slice one run of three stretches. runs_of() finds them from
// the indices a layout's own slicing code picks out of arange(numel), so no layout is described by
// hand.
//
// The manifest (JSON, for people as much as programs) names every tensor with its dtype,
// whole shape and the pieces that tile it (each element exactly once), every file with its
// size and CRC-32, and the rest of the checkpoint: the metadata map of the one-file form
// (optim/checkpoint.h: step, generators, schedule, run settings, …). Committing checks that
// the pieces tile every tensor before it writes the manifest, and writes it atomically
// (temporary, fsync, rename); then it removes the files of earlier steps. A save killed
// before its manifest is renamed leaves the previous checkpoint whole: the manifest still
// names the previous step's files. Opening checks the manifest strictly; reading checks each
// file's size and CRC the first time it is used, and errors name the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ringgrad/optim/checkpoint.h"

namespace ringgrad {

// `count` stretches of `length` elements: the i-th at element global + i·stride of the whole
// tensor (row-major) and at local + i·length of the shard.
struct Run {
  int64_t global = 0;
  int64_t local = 0;
  int64_t length = 0;
  int64_t count = 1;
  int64_t stride = 0;
  bool operator==(const Run&) const = default;
};

// Some elements of a whole tensor: `local` holds them (any shape; read row-major), `runs`
// says where they lie in the whole tensor of shape `shape`. `position` orders the tensors in
// the manifest and in a one-file conversion (the index in the whole state).
struct Shard {
  std::string name;
  Shape shape;
  Tensor local;
  std::vector<Run> runs;
  int64_t position = 0;
};

// The whole tensor as one shard.
Shard whole_shard(const std::string& name, const Tensor& t, int64_t position = 0);

// The runs of a shard whose elements are, in order, the whole tensor's elements
// `indices` (int64, any shape: what slicing arange(numel).reshape(shape) gives). Stretches
// of consecutive indices become runs; equal stretches at a constant stride merge into one.
std::vector<Run> runs_of(const Tensor& indices);

// Writes this rank's shards to <dir>/step-<step>/rank-<rank>-of-<world>.safetensors
// (atomically), the runs in its metadata. Each name at most once.
void write_shard_file(const std::string& dir, int64_t step, int rank, int world,
                      const std::vector<Shard>& shards);

// Once every rank's file is written (after a barrier), on one rank: reads the files'
// headers, checks that the pieces tile every tensor, writes <dir>/manifest.json with
// `info`'s metadata (its tensors are ignored) and removes earlier steps' files.
void commit_sharded_checkpoint(const std::string& dir, int64_t step, int world,
                               const Checkpoint& info);

// A committed sharded checkpoint, opened: its metadata (as load_checkpoint gives it, without
// tensors) and the tensors' pieces, read on demand.
class ShardedCheckpoint {
 public:
  struct Piece {
    size_t file = 0;  // index into files
    std::vector<Run> runs;
  };
  struct Entry {
    std::string name;
    DType dtype = kFloat32;
    Shape shape;
    std::vector<Piece> pieces;
  };
  struct File {
    std::string path;  // relative to the directory
    int64_t bytes = 0;
    uint32_t crc32 = 0;
  };

  Checkpoint info;  // metadata only: model and optimizer are empty
  std::string dir;
  std::vector<File> files;
  std::vector<Entry> tensors;  // in the manifest's order

  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  const Entry& entry(const std::string& name) const;
  // Fills `local` (contiguous, on the CPU, of the tensor's dtype) with the whole tensor's
  // elements at `runs`, from the pieces that hold them.
  void read(const std::string& name, Tensor& local, const std::vector<Run>& runs) const;
  // The whole tensor.
  Tensor read_whole(const std::string& name) const;
  // Forgets the files read so far (their tensors are kept until then).
  void release() const { loaded_.clear(); }

 private:
  friend ShardedCheckpoint parse_sharded_manifest(const std::string& text, const std::string& dir);
  const std::map<std::string, Tensor>& file_tensors(size_t file) const;  // read once, checked
  // Each piece's tensor in its file (in e.pieces' order), checked to hold what its runs name.
  std::vector<const Tensor*> held_pieces(const Entry& e) const;
  std::map<std::string, size_t> index_;
  mutable std::map<size_t, std::map<std::string, Tensor>> loaded_;
};

// Opens <dir>/manifest.json; errors name the manifest, the tensor and the field.
ShardedCheckpoint open_sharded_checkpoint(const std::string& dir);
// The manifest's checks alone, on its text (the fuzz harness's entry).
ShardedCheckpoint parse_sharded_manifest(const std::string& text, const std::string& dir);

// True when `path` is a directory holding a manifest.json (a committed sharded checkpoint).
bool is_sharded_checkpoint(const std::string& path);
// True when `path` names a directory: it ends in '/' or is one (where a save writes the
// sharded form).
bool names_directory(const std::string& path);

// Conversions with the one-file form: every tensor whole, written as one rank's, and back.
void save_sharded_checkpoint(const Checkpoint& c, const std::string& dir);
Checkpoint load_sharded_as_checkpoint(const std::string& dir);

}  // namespace ringgrad
