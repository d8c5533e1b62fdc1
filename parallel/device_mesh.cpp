// device_mesh.cpp — row-major coordinates, and one split of the communicator per group.
//
// A group along a set of axes is the set of ranks that agree on every other
// axis. So one Communicator::split makes all such groups at once: the color is
// the rank's position on the *other* axes (the same for every member of a group,
// different between groups), the key its position on the group's own axes
// (which numbers the members row-major).
#include "ringgrad/parallel/device_mesh.h"

#include <algorithm>
#include <sstream>

namespace ringgrad::parallel {

namespace {

std::string describe_axes(const std::vector<std::pair<std::string, int>>& axes) {
  std::ostringstream os;
  for (size_t i = 0; i < axes.size(); ++i)
    os << (i ? ", " : "") << axes[i].first << "=" << axes[i].second;
  return os.str();
}

}  // namespace

DeviceMesh::DeviceMesh(Communicator& comm, std::vector<std::pair<std::string, int>> axes)
    : comm_(comm), axes_(std::move(axes)) {
  RG_CHECK(!axes_.empty(), "DeviceMesh", "expected at least one axis, got none");
  int64_t product = 1;
  for (size_t i = 0; i < axes_.size(); ++i) {
    const auto& [name, size] = axes_[i];
    RG_CHECK(!name.empty(), "DeviceMesh", "expected named axes, got an empty name at axis ", i);
    RG_CHECK(size >= 1, "DeviceMesh", "expected axis sizes >= 1, got ", name, "=", size);
    for (size_t j = 0; j < i; ++j)
      RG_CHECK(axes_[j].first != name, "DeviceMesh", "expected distinct axis names, got '", name,
               "' twice");
    product *= size;
  }
  RG_CHECK(product == comm.size(), "DeviceMesh", "expected axis sizes that multiply to the ",
           comm.size(), " ranks, got ", describe_axes(axes_), " (", product, " ranks)");
  coords_ = coordinates(comm.rank());
  // Every one-axis group now, in axis order, on every rank alike (each is a collective).
  for (const auto& [name, size] : axes_) group(name);
}

DeviceMesh::~DeviceMesh() = default;

int DeviceMesh::axis_index(const std::string& axis) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].first == axis) return static_cast<int>(i);
  fail("DeviceMesh", "expected one of the axes (", describe_axes(axes_), "), got '", axis, "'");
}

int DeviceMesh::size(const std::string& axis) const { return axes_[axis_index(axis)].second; }
int DeviceMesh::rank(const std::string& axis) const { return coords_[axis_index(axis)]; }

int DeviceMesh::rank_at(const std::vector<int>& coords) const {
  RG_CHECK(coords.size() == axes_.size(), "DeviceMesh", "expected ", axes_.size(),
           " coordinates, got ", coords.size());
  int r = 0;
  for (size_t i = 0; i < axes_.size(); ++i) {
    RG_CHECK(coords[i] >= 0 && coords[i] < axes_[i].second, "DeviceMesh", "expected ",
             axes_[i].first, " in [0, ", axes_[i].second, "), got ", coords[i]);
    r = r * axes_[i].second + coords[i];  // row-major: the last axis varies fastest
  }
  return r;
}

std::vector<int> DeviceMesh::coordinates(int r) const {
  RG_CHECK(r >= 0 && r < comm_.size(), "DeviceMesh", "expected a rank in [0, ", comm_.size(),
           "), got ", r);
  std::vector<int> c(axes_.size());
  for (size_t i = axes_.size(); i-- > 0;) {
    c[i] = r % axes_[i].second;
    r /= axes_[i].second;
  }
  return c;
}

Communicator& DeviceMesh::group(const std::string& axis) {
  return group(std::vector<std::string>{axis});
}

Communicator& DeviceMesh::group(const std::vector<std::string>& axes) {
  RG_CHECK(!axes.empty(), "DeviceMesh", "expected at least one axis for a group, got none");
  std::vector<int> in(axes.size());
  for (size_t i = 0; i < axes.size(); ++i) in[i] = axis_index(axes[i]);
  std::sort(in.begin(), in.end());
  RG_CHECK(std::adjacent_find(in.begin(), in.end()) == in.end(), "DeviceMesh",
           "expected distinct axes for a group, got one twice");
  auto it = groups_.find(in);
  if (it != groups_.end()) return *it->second;
  // color: position on the other axes; key: position on the group's own axes.
  int color = 0, key = 0;
  for (size_t i = 0; i < axes_.size(); ++i) {
    const bool own = std::binary_search(in.begin(), in.end(), static_cast<int>(i));
    int& index = own ? key : color;
    index = index * axes_[i].second + coords_[i];
  }
  std::unique_ptr<Communicator> g = comm_.split(color, key);
  RG_ASSERT(g != nullptr);  // every rank belongs to one group along any axes
  return *(groups_[in] = std::move(g));
}

std::ostream& operator<<(std::ostream& os, const DeviceMesh& mesh) {
  int ranks = 1;
  for (const auto& [name, size] : mesh.axes()) ranks *= size;
  os << "DeviceMesh(" << describe_axes(mesh.axes()) << ") on " << ranks << " ranks";
  for (int r = 0; r < ranks; ++r) {
    std::vector<int> c = mesh.coordinates(r);
    os << "\n  rank " << r << ":";
    for (size_t i = 0; i < c.size(); ++i)
      os << (i ? ", " : " ") << mesh.axes()[i].first << " " << c[i];
  }
  return os;
}

}  // namespace ringgrad::parallel
