// sharded_example.h — the sharded checkpoint fuzz_sharded_manifest.cpp reads manifests
// against, and make_seeds.cpp's seed manifests describe: two ranks, a (4, 3) weight cut by
// columns (2 runs of stretches) and a bias rank 0 holds whole. Deterministic: the same
// bytes, so the same CRCs, every time it is written.
#pragma once

#include <ringgrad/core/factory.h>
#include <ringgrad/optim/sharded_checkpoint.h>

#include <string>

namespace fuzz {

inline void write_sharded_example(const std::string& dir) {
  namespace rg = ringgrad;
  const rg::Tensor w = rg::arange(12.0).reshape({4, 3}), b = rg::arange(3.0);
  const rg::Tensor idx = rg::arange(12.0, {.dtype = rg::kInt64}).reshape({4, 3});
  for (int r = 0; r < 2; ++r) {
    const rg::Tensor cols = idx.narrow(1, r * 2, r == 0 ? 2 : 1).contiguous();
    std::vector<rg::Shard> mine{{.name = "model.w", .shape = {4, 3},
                                 .local = w.narrow(1, r * 2, r == 0 ? 2 : 1).contiguous(),
                                 .runs = rg::runs_of(cols), .position = 0}};
    if (r == 0) mine.push_back(rg::whole_shard("model.b", b, 1));
    rg::write_shard_file(dir, 5, r, 2, mine);
  }
  rg::Checkpoint info;
  info.progress.step = 5;
  info.schedule_steps = 5;
  info.world_size = 2;
  info.optimizer_meta = {{"group.0.lr", "0.001"}, {"group.0.size", "2"}};
  info.run = {{"seed", "1"}};
  info.generators["default"] = rg::Generator(3);
  rg::commit_sharded_checkpoint(dir, 5, 2, info);
}

}  // namespace fuzz
