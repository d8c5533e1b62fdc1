// test_sharded_checkpoint.cpp — a checkpoint as a directory of shards: runs found from a
// layout's own slicing, any layout read back by any other, the one-file form both ways, and
// incomplete, damaged or foreign directories as clear errors. (The GPT's layouts saving and
// resuming each other's: tests/check_gpt_sharded.sh.)
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ringgrad/ringgrad.h>

#include "test_helpers.h"

namespace {

namespace fs = std::filesystem;

// The same shape and the same bits.
bool same(const rg::Tensor& a, const rg::Tensor& b) {
  return a.shape() == b.shape() && test::values(a) == test::values(b);
}

// arange(numel) shaped like the whole tensor: the indices a slice of it picks out.
rg::Tensor indices(const rg::Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return rg::arange(double(n), {.dtype = rg::kInt64}).reshape(shape);
}

// A layout: for each of `ranks` ranks, the indices it holds (any slicing of indices(shape)).
using Layout = std::vector<rg::Tensor>;

Layout rows(const rg::Shape& shape, int ranks) {
  Layout out;
  for (int r = 0; r < ranks; ++r)
    out.push_back(indices(shape).narrow(0, r * shape[0] / ranks, shape[0] / ranks).contiguous());
  return out;
}
Layout columns(const rg::Shape& shape, int ranks) {
  Layout out;
  for (int r = 0; r < ranks; ++r)
    out.push_back(indices(shape).narrow(1, r * shape[1] / ranks, shape[1] / ranks).contiguous());
  return out;
}
// Uneven pieces of the flattened tensor, as FSDP's flat shards cut it.
Layout flat(const rg::Shape& shape, const std::vector<int64_t>& cuts) {
  Layout out;
  const rg::Tensor all = indices(shape).reshape({-1});
  for (size_t i = 0; i + 1 < cuts.size(); ++i) out.push_back(all.narrow(0, cuts[i], cuts[i + 1] - cuts[i]).contiguous());
  return out;
}

// Writes `whole` as `layout` holds it (rank r: the elements at layout[r]) and commits.
void save_as(const std::string& dir, const rg::Tensor& whole, const Layout& layout, int64_t step = 3) {
  const rg::Tensor values = whole.reshape({-1});
  for (size_t r = 0; r < layout.size(); ++r) {
    const rg::Tensor local = rg::index_select(values, 0, layout[r].reshape({-1})).reshape(layout[r].shape());
    rg::write_shard_file(dir, step, int(r), int(layout.size()),
                         {{.name = "model.w", .shape = whole.shape(), .local = local, .runs = rg::runs_of(layout[r])}});
  }
  rg::Checkpoint info;
  info.progress.step = step;
  info.optimizer_meta["group.0.lr"] = "0.1";
  rg::commit_sharded_checkpoint(dir, step, int(layout.size()), info);
}

}  // namespace

TEST_CASE("sharded checkpoint: runs are found from a layout's own slicing") {
  const rg::Shape shape{6, 8};
  CHECK(rg::runs_of(indices(shape)) == std::vector<rg::Run>{{0, 0, 48, 1, 0}});
  CHECK(rg::runs_of(rows(shape, 2)[1]) == std::vector<rg::Run>{{24, 0, 24, 1, 0}});
  // A slice of columns: one run of 6 stretches of 4, 8 apart.
  CHECK(rg::runs_of(columns(shape, 2)[1]) == std::vector<rg::Run>{{4, 0, 4, 6, 8}});
  // Packed q, k, v rows, each cut over 2 ranks and put together (ColumnParallelLinear's blocks).
  const rg::Tensor idx = indices({12, 4});
  const rg::Tensor qkv = rg::cat({idx.narrow(0, 2, 2), idx.narrow(0, 6, 2), idx.narrow(0, 10, 2)}, 0);
  CHECK(rg::runs_of(qkv) == std::vector<rg::Run>{{8, 0, 8, 3, 16}});
  // Stretches that do not repeat at one stride stay apart.
  const rg::Tensor odd = rg::cat({idx.narrow(0, 0, 1), idx.narrow(0, 2, 2), idx.narrow(0, 9, 1)}, 0);
  CHECK(rg::runs_of(odd) == std::vector<rg::Run>{{0, 0, 4, 1, 0}, {8, 4, 8, 1, 0}, {36, 12, 4, 1, 0}});
}

TEST_CASE("sharded checkpoint: every layout reads what every other wrote") {
  const rg::Shape shape{6, 8};
  const rg::Tensor whole = rg::randn(shape);
  const std::vector<Layout> layouts{rows(shape, 2), columns(shape, 4), flat(shape, {0, 5, 29, 48}),
                                    flat(shape, {0, 48})};
  for (size_t a = 0; a < layouts.size(); ++a) {
    test::TempDir dir;
    save_as(dir.path.string(), whole, layouts[a]);
    const rg::ShardedCheckpoint c = rg::open_sharded_checkpoint(dir.path.string());
    CHECK(c.info.optimizer_meta.at("group.0.lr") == "0.1");
    CHECK(same(c.read_whole("model.w"), whole));
    for (const Layout& b : layouts)
      for (const rg::Tensor& mine : b) {
        rg::Tensor local = rg::empty(mine.shape());
        c.read("model.w", local, rg::runs_of(mine));
        CHECK(same(local, rg::index_select(whole.reshape({-1}), 0, mine.reshape({-1})).reshape(mine.shape())));
      }
  }
}

TEST_CASE("sharded checkpoint: the one-file form converts both ways, and a new save replaces the old") {
  test::TempDir dir;
  rg::Checkpoint c;
  c.model = {{"a", rg::randn({3, 2})}, {"b", rg::randn({5})}};
  c.optimizer = {{"state.0.0.exp_avg", rg::randn({3, 2})}, {"state.0.0.step", rg::full({}, 4.0)}};
  c.optimizer_meta = {{"group.0.lr", "0.01"}, {"group.0.size", "2"}};
  c.progress = {.step = 7, .epoch = 1, .batch = 2};
  c.world_size = 4;
  c.run = {{"seed", "1"}};
  c.generators["default"] = rg::Generator(5);
  const std::string ckpt = dir / "run.ckpt";
  rg::save_sharded_checkpoint(c, ckpt);
  CHECK(rg::is_sharded_checkpoint(ckpt));
  rg::save_checkpoint(rg::load_sharded_as_checkpoint(ckpt), dir / "a.safetensors");
  rg::save_checkpoint(c, dir / "b.safetensors");
  std::ifstream a(dir / "a.safetensors", std::ios::binary), b(dir / "b.safetensors", std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(a), {}) == std::string(std::istreambuf_iterator<char>(b), {}));
  // A later step's save removes the earlier step's files once its manifest is in place.
  c.progress.step = 9;
  rg::save_sharded_checkpoint(c, ckpt);
  CHECK(fs::exists(fs::path(ckpt) / "step-9"));
  CHECK_FALSE(fs::exists(fs::path(ckpt) / "step-7"));
}

TEST_CASE("sharded checkpoint: incomplete, damaged or foreign directories are clear errors") {
  const rg::Shape shape{4, 4};
  const rg::Tensor whole = rg::randn(shape);
  test::TempDir dir;
  const std::string ckpt = dir / "run.ckpt";
  CHECK_CONTAINS(test::error_of([&] { rg::open_sharded_checkpoint(ckpt); }), "expected a checkpoint directory with a manifest.json");
  save_as(ckpt, whole, rows(shape, 2), 1);

  // A save killed before its commit: the files of step 2 are there, the manifest still names step 1.
  rg::write_shard_file(ckpt, 2, 0, 2, {{.name = "model.w", .shape = shape, .local = rg::zeros({2, 4}), .runs = {{0, 0, 8}}}});
  CHECK(same(rg::open_sharded_checkpoint(ckpt).read_whole("model.w"), whole));
  // Committing it without rank 1's file names the file.
  CHECK_CONTAINS(test::error_of([&] { rg::commit_sharded_checkpoint(ckpt, 2, 2, {}); }), "rank-1-of-2.safetensors");
  // Rank 1 wrote a piece that leaves a gap: the commit names the tensor and the elements.
  rg::write_shard_file(ckpt, 2, 1, 2, {{.name = "model.w", .shape = shape, .local = rg::zeros({1, 4}), .runs = {{12, 0, 4}}}});
  const std::string gap = test::error_of([&] { rg::commit_sharded_checkpoint(ckpt, 2, 2, {}); });
  CHECK_CONTAINS(gap, "tensor 'model.w'");
  CHECK_CONTAINS(gap, "no piece for elements [8, 12)");
  CHECK(same(rg::open_sharded_checkpoint(ckpt).read_whole("model.w"), whole));  // step 1 still

  // A shard file changed after the commit: its size or CRC says so, naming the file.
  {
    std::fstream f(fs::path(ckpt) / "step-1" / "rank-1-of-2.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  const std::string damaged = test::error_of([&] { rg::open_sharded_checkpoint(ckpt).read_whole("model.w"); });
  CHECK_CONTAINS(damaged, "rank-1-of-2.safetensors");
  CHECK_CONTAINS(damaged, "CRC-32");

  // Manifests that do not hold together name the manifest and the tensor.
  auto manifest_error = [&](const std::string& text) { return test::error_of([&] { rg::parse_sharded_manifest(text, ckpt); }); };
  std::ifstream in(fs::path(ckpt) / "manifest.json");
  const std::string good((std::istreambuf_iterator<char>(in)), {});
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  CHECK_CONTAINS(manifest_error("{"), "manifest.json': expected JSON");
  CHECK_CONTAINS(manifest_error(edited("ringgrad-sharded-checkpoint", "torch-dcp")), "expected format");
  CHECK_CONTAINS(manifest_error(edited("\"float32\"", "\"float33\"")), "tensor 'model.w': expected a dtype name");
  CHECK_CONTAINS(manifest_error(edited("\"shape\": [\n    4,", "\"shape\": [\n    5,")), "no piece for elements [16, 20)");
  CHECK_CONTAINS(manifest_error(edited("\"file\": 1", "\"file\": 2")), "expected \"file\" an integer in [0, 1]");
  CHECK_CONTAINS(manifest_error(edited("step-1/rank-0", "../rank-0")), "expected \"path\" \"step-1/rank-0-of-2.safetensors\"");
}
