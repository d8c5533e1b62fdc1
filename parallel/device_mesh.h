// device_mesh.h — the ranks of a job as a grid with named axes, and a group per axis.
//
//   rg::parallel::World world(argc, argv);                    // 4 ranks
//   rg::parallel::DeviceMesh mesh(world.communicator(), {{"dp", 2}, {"cp", 2}});
//   mesh.rank("cp"), mesh.size("cp")         // this rank's coordinate along cp, and cp's size
//   mesh.group("dp")                         // the ranks that differ from this one only in dp
//   mesh.group({"dp", "cp"})                 // several axes flattened into one group
//
// Ranks are laid out row-major, as torch's init_device_mesh does: the last axis
// varies fastest. On a (dp 2, cp 2) mesh of 4 ranks:
//
//              cp 0   cp 1
//     dp 0      0      1          rank 1 is (dp 0, cp 1): its cp group is {0, 1},
//     dp 1      2      3          its dp group {1, 3}
//
// So a "cp" group holds one data-parallel replica's ranks (a sequence sharded
// over them), and a "dp" group the ranks that hold the same shard of different
// replicas. The constructor makes every one-axis group (a collective: every
// rank constructs the mesh); a flattened group is made on its first use, also a
// collective, so every rank must ask for it in the same order. Groups are
// sub-communicators (Communicator::split) with the world's contract and checks.
// The mesh must be destroyed before the communicator it was built on.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "ringgrad/parallel/communicator.h"

namespace ringgrad::parallel {

class DeviceMesh {
 public:
  // axes: (name, size) pairs, outermost first; their sizes must multiply to comm.size().
  DeviceMesh(Communicator& comm, std::vector<std::pair<std::string, int>> axes);
  ~DeviceMesh();
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  int ndim() const { return static_cast<int>(axes_.size()); }
  const std::vector<std::pair<std::string, int>>& axes() const { return axes_; }
  int size(const std::string& axis) const;  // the axis's length
  int rank(const std::string& axis) const;  // this rank's coordinate along it
  // The rank at these coordinates (one per axis, outermost first).
  int rank_at(const std::vector<int>& coords) const;
  // Rank r's coordinates, one per axis.
  std::vector<int> coordinates(int r) const;

  // The group along `axis`: the ranks whose other coordinates equal this rank's,
  // numbered by their coordinate along the axis.
  Communicator& group(const std::string& axis);
  // The group along several axes at once (flattened, row-major in the order given
  // by the mesh). Made on first use: a collective.
  Communicator& group(const std::vector<std::string>& axes);
  // (So that mesh.group({"dp", "cp"}) means two axes, not a string built from two pointers.)
  Communicator& group(std::initializer_list<std::string> axes) {
    return group(std::vector<std::string>(axes));
  }

  Communicator& communicator() { return comm_; }  // the whole mesh

 private:
  int axis_index(const std::string& axis) const;

  Communicator& comm_;
  std::vector<std::pair<std::string, int>> axes_;
  std::vector<int> coords_;  // this rank's
  std::map<std::vector<int>, std::unique_ptr<Communicator>> groups_;  // by sorted axis indices
};

// The table of ranks and their coordinates:
//   DeviceMesh(dp=2, cp=2) on 4 ranks
//     rank 0: dp 0, cp 0
//     …
std::ostream& operator<<(std::ostream& os, const DeviceMesh& mesh);

}  // namespace ringgrad::parallel
