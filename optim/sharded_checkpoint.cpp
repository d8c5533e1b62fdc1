// sharded_checkpoint.cpp — a checkpoint as a directory of shards and a manifest
// (see sharded_checkpoint.h).
#include "ringgrad/optim/sharded_checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/safetensors.h"

namespace ringgrad {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kFormat = "ringgrad-sharded-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kManifest = "manifest.json";
constexpr const char* kShardsKey = "ringgrad.shards";  // a shard file's metadata: its runs
constexpr const char* kWriteOp = "write_shard_file";
constexpr const char* kCommitOp = "commit_sharded_checkpoint";
constexpr const char* kOpenOp = "open_sharded_checkpoint";
constexpr const char* kReadOp = "ShardedCheckpoint";
// Stretches a tensor's pieces may hold in all (a tensor-parallel slice of columns is one per
// row): enough for any layout, and a bound on what checking a manifest allocates.
constexpr int64_t kMaxStretches = int64_t(1) << 22;

std::string step_dir(int64_t step) { return "step-" + std::to_string(step); }
std::string rank_file(int64_t step, int rank, int world) {
  return step_dir(step) + "/rank-" + std::to_string(rank) + "-of-" + std::to_string(world) +
         ".safetensors";
}

std::optional<DType> dtype_named(const std::string& name) {
  for (const DTypeInfo& info : kDTypeInfo)
    if (name == info.name) return info.dtype;
  return std::nullopt;
}

// One stretch of a run: `length` elements at `global` of the whole tensor, `local` of a piece.
struct Stretch {
  int64_t global, local, length;
  size_t piece;
};

// A run's last element + 1 in the whole tensor, or nullopt when it overflows.
std::optional<int64_t> run_end(const Run& r) {
  int64_t span = 0, end = 0;
  if (__builtin_mul_overflow(r.count - 1, r.stride, &span) ||
      __builtin_add_overflow(r.global, span, &end) || __builtin_add_overflow(end, r.length, &end))
    return std::nullopt;
  return end;
}

// Checks one run against a whole tensor of `numel` elements and a piece of `local_numel`;
// `who` says whose run it is in errors.
void check_run(const Run& r, int64_t numel, int64_t local_numel, const char* op,
               const std::string& who) {
  RG_CHECK(r.global >= 0 && r.local >= 0 && r.length >= 1 && r.count >= 1 && r.stride >= 0, op, who,
           "expected a run [global, local, length, count, stride] with length and count >= 1 "
           "and nothing negative, got [",
           r.global, ", ", r.local, ", ", r.length, ", ", r.count, ", ", r.stride, "]");
  const std::optional<int64_t> end = run_end(r);
  int64_t elements = 0, local_end = 0;
  RG_CHECK(end && *end <= numel, op, who, "expected the run [", r.global, ", ", r.local, ", ",
           r.length, ", ", r.count, ", ", r.stride, "] within the tensor's ", numel, " elements");
  RG_CHECK(!__builtin_mul_overflow(r.length, r.count, &elements) &&
               !__builtin_add_overflow(r.local, elements, &local_end) && local_end <= local_numel,
           op, who, "expected the run [", r.global, ", ", r.local, ", ", r.length, ", ", r.count,
           ", ", r.stride, "] within the piece's ", local_numel, " elements");
}

using Piece = ShardedCheckpoint::Piece;

// The pieces' stretches, sorted by where they lie in the whole tensor. At most `limit` (and
// kMaxStretches).
std::vector<Stretch> stretches(const std::vector<Piece>& pieces, int64_t limit, const char* op,
                               const std::string& who) {
  limit = std::min(limit, kMaxStretches);
  int64_t count = 0;
  for (const Piece& p : pieces)
    for (const Run& r : p.runs)
      RG_CHECK(!__builtin_add_overflow(count, r.count, &count) && count <= limit, op, who,
               "expected at most ", limit, " stretches (one element each at least), got more");
  std::vector<Stretch> out;
  out.reserve(size_t(count));
  for (size_t p = 0; p < pieces.size(); ++p)
    for (const Run& r : pieces[p].runs)
      for (int64_t i = 0; i < r.count; ++i)
        out.push_back({r.global + i * r.stride, r.local + i * r.length, r.length, p});
  std::sort(out.begin(), out.end(),
            [](const Stretch& a, const Stretch& b) { return a.global < b.global; });
  return out;
}

// The pieces must hold each of the tensor's elements exactly once.
void check_tiling(const std::vector<Piece>& pieces, int64_t numel, const char* op,
                  const std::string& who) {
  int64_t cursor = 0;
  for (const Stretch& s : stretches(pieces, numel, op, who)) {
    RG_CHECK(s.global >= cursor, op, who, "expected pieces that do not overlap, got elements [",
             s.global, ", ", std::min(cursor, s.global + s.length), ") twice");
    RG_CHECK(s.global == cursor, op, who,
             "expected pieces that cover the tensor, got no piece for elements [", cursor, ", ",
             s.global, ") (a rank's file missing from the save?)");
    cursor += s.length;
  }
  RG_CHECK(cursor == numel, op, who,
           "expected pieces that cover the tensor, got no piece for elements [", cursor, ", ",
           numel, ") (a rank's file missing from the save?)");
}

Json runs_json(const std::vector<Run>& runs) {
  Json out = Json::array();
  for (const Run& r : runs) out.push_back({r.global, r.local, r.length, r.count, r.stride});
  return out;
}

// Runs from JSON ([[global, local, length, count, stride], …]); `who` names the place.
std::vector<Run> runs_from(const Json& j, const char* op, const std::string& who) {
  RG_CHECK(j.is_array(), op, who, "expected runs as an array, got ", j.type_name());
  std::vector<Run> out;
  for (const Json& r : j) {
    RG_CHECK(r.is_array() && r.size() == 5, op, who,
             "expected each run as [global, local, length, count, stride], got ", r.dump());
    int64_t v[5];
    for (size_t i = 0; i < 5; ++i) {
      RG_CHECK(r[i].is_number_integer() &&
                   !(r[i].is_number_unsigned() &&
                     r[i].get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())),
               op, who, "expected integers in the run ", r.dump());
      v[i] = r[i].get<int64_t>();
    }
    out.push_back({v[0], v[1], v[2], v[3], v[4]});
  }
  return out;
}

// A shape from JSON: non-negative dimensions whose product fits.
Shape shape_from(const Json& j, const char* op, const std::string& who) {
  RG_CHECK(j.is_array(), op, who, "expected a shape array, got ", j.dump());
  Shape shape;
  int64_t n = 1;
  for (const Json& d : j) {
    RG_CHECK(d.is_number_integer() &&
                 (d.is_number_unsigned()
                      ? d.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())
                      : d.get<int64_t>() >= 0),
             op, who, "expected non-negative integer dimensions below 2^63, got ", j.dump());
    shape.push_back(d.get<int64_t>());
    RG_CHECK(!__builtin_mul_overflow(n, shape.back(), &n), op, who,
             "expected a shape whose element count fits in 64 bits, got ", j.dump());
  }
  return shape;
}

uint32_t file_crc32(const std::string& path, int64_t* bytes) {
  std::ifstream in(path, std::ios::binary);
  RG_CHECK(in.good(), kReadOp, "could not open '", path, "'");
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> buffer(1 << 20);
  *bytes = 0;
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), uInt(got));
    *bytes += got;
  }
  return uint32_t(crc);
}

// A tensor name's group in the manifest's order: the model's tensors first.
int group_of(const std::string& name) { return name.rfind("model.", 0) == 0 ? 0 : 1; }

}  // namespace

Shard whole_shard(const std::string& name, const Tensor& t, int64_t position) {
  Shard s{.name = name, .shape = t.shape(), .local = t, .runs = {}, .position = position};
  if (t.numel() > 0) s.runs.push_back({.global = 0, .local = 0, .length = t.numel()});
  return s;
}

std::vector<Run> runs_of(const Tensor& indices) {
  RG_CHECK(indices.dtype() == kInt64, "runs_of", "expected int64 indices, got ", indices.dtype());
  const Tensor flat = indices.device().is_cpu() ? indices.contiguous() : indices.to(kCPU);
  const auto* g = static_cast<const int64_t*>(flat.raw_data());
  const int64_t n = flat.numel();
  std::vector<Run> runs;
  for (int64_t i = 0; i < n;) {
    int64_t j = i + 1;  // the stretch of consecutive indices from i
    while (j < n && g[j] == g[j - 1] + 1) ++j;
    const int64_t length = j - i;
    if (!runs.empty()) {
      Run& r = runs.back();
      const bool same = r.length == length;
      if (same && r.count == 1 && g[i] > r.global) {
        r.stride = g[i] - r.global, r.count = 2;
      } else if (same && r.count > 1 && g[i] == r.global + r.count * r.stride) {
        ++r.count;
      } else {
        runs.push_back({.global = g[i], .local = i, .length = length});
      }
    } else {
      runs.push_back({.global = g[i], .local = i, .length = length});
    }
    i = j;
  }
  return runs;
}

void write_shard_file(const std::string& dir, int64_t step, int rank, int world,
                      const std::vector<Shard>& shards) {
  RG_CHECK(world >= 1 && rank >= 0 && rank < world && step >= 0, kWriteOp,
           "expected 0 <= rank < world and step >= 0, got rank ", rank, " of ", world, ", step ",
           step);
  NamedTensors tensors;
  Json described = Json::object();
  NoGradGuard no_grad;
  for (const Shard& s : shards) {
    const std::string who = "'" + dir + "', tensor '" + s.name + "': ";
    RG_CHECK(!described.contains(s.name), kWriteOp, who, "expected each name once on a rank");
    RG_CHECK(s.local.defined(), kWriteOp, who, "expected a tensor, got an undefined one");
    int64_t held = 0;
    for (const Run& r : s.runs) {
      check_run(r, numel_of(s.shape), s.local.numel(), kWriteOp, who);
      held += r.length * r.count;
    }
    RG_CHECK(held == s.local.numel(), kWriteOp, who, "expected runs that place each of the ",
             s.local.numel(), " elements, got runs for ", held);
    Tensor flat = s.local.detach();
    flat = (flat.device().is_cpu() ? flat.contiguous() : flat.to(kCPU)).reshape({s.local.numel()});
    tensors.emplace_back(s.name, flat);
    described[s.name] = {{"shape", s.shape}, {"position", s.position}, {"runs", runs_json(s.runs)}};
  }
  fs::create_directories(fs::path(dir) / step_dir(step));
  const std::string path = (fs::path(dir) / rank_file(step, rank, world)).string();
  remove_stale_temporaries(path);  // a killed save's, of this step
  save_safetensors(tensors, path, {{kShardsKey, described.dump()}});
}

void commit_sharded_checkpoint(const std::string& dir, int64_t step, int world,
                               const Checkpoint& info) {
  struct Gathered {
    DType dtype;
    Shape shape;
    int64_t position;
    std::vector<Piece> pieces = {};  // each rank's, its file the rank
  };
  std::map<std::string, Gathered> by_name;
  Json files = Json::array();
  for (int r = 0; r < world; ++r) {
    const std::string rel = rank_file(step, r, world), path = (fs::path(dir) / rel).string();
    std::map<std::string, std::string> meta;
    const std::vector<SafetensorsEntry> entries = read_safetensors_header(path, &meta);
    Json described;
    try {
      described = Json::parse(meta.at(kShardsKey));
    } catch (const std::exception& e) {
      fail(kCommitOp, "'", path, "': expected its runs as JSON under ", kShardsKey, ": ", e.what());
    }
    for (const SafetensorsEntry& e : entries) {
      const std::string who = "'" + path + "', tensor '" + e.name + "': ";
      RG_CHECK(described.is_object() && described.contains(e.name) &&
                   described[e.name].contains("shape") && described[e.name].contains("runs") &&
                   described[e.name].contains("position") &&
                   described[e.name]["position"].is_number_integer(),
               kCommitOp, who, "expected its shape, position and runs, found none");
      const Json& d = described[e.name];
      const Shape shape = shape_from(d.at("shape"), kCommitOp, who);
      auto [it, fresh] =
          by_name.try_emplace(e.name, Gathered{e.dtype, shape, d.at("position").get<int64_t>()});
      RG_CHECK(it->second.shape == shape && it->second.dtype == e.dtype, kCommitOp, who,
               "expected the shape and dtype the other ranks give it, got ", shape, " ", e.dtype,
               " against ", it->second.shape, " ", it->second.dtype);
      it->second.pieces.push_back({size_t(r), runs_from(d.at("runs"), kCommitOp, who)});
    }
    int64_t bytes = 0;
    const uint32_t crc = file_crc32(path, &bytes);
    files.push_back({{"path", rel}, {"bytes", bytes}, {"crc32", crc}});
  }
  std::vector<std::pair<std::string, Gathered*>> order;
  for (auto& [name, g] : by_name) {
    check_tiling(g.pieces, numel_of(g.shape), kCommitOp, "'" + dir + "', tensor '" + name + "': ");
    order.emplace_back(name, &g);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tuple(group_of(a.first), a.second->position, a.first) <
           std::tuple(group_of(b.first), b.second->position, b.first);
  });
  Json tensors = Json::array();
  for (const auto& [name, g] : order) {
    Json shards = Json::array();
    for (const Piece& p : g->pieces)
      shards.push_back({{"file", p.file}, {"runs", runs_json(p.runs)}});
    tensors.push_back(
        {{"name", name}, {"dtype", dtype_name(g->dtype)}, {"shape", g->shape}, {"shards", shards}});
  }
  Json metadata = Json::object();
  for (const auto& [key, value] : checkpoint_metadata(info)) metadata[key] = value;
  const Json manifest = {{"format", kFormat}, {"version", kVersion},  {"step", step},
                         {"ranks", world},    {"metadata", metadata}, {"files", files},
                         {"tensors", tensors}};
  const std::string path = (fs::path(dir) / kManifest).string();
  remove_stale_temporaries(path);
  write_file_atomically(path, manifest.dump(1) + "\n");
  // The checkpoint is now this step's: earlier steps' files go (listed first, then removed).
  std::error_code ec;
  std::vector<fs::path> earlier;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("step-", 0) == 0 && name != step_dir(step) && it->is_directory(ec))
      earlier.push_back(it->path());
  }
  for (const fs::path& p : earlier) fs::remove_all(p, ec);
}

ShardedCheckpoint parse_sharded_manifest(const std::string& text, const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifest).string();
  const std::string where = "'" + path + "': ";
  Json m;
  try {
    m = Json::parse(text);
  } catch (const std::exception& e) {
    fail(kOpenOp, where, "expected JSON, got: ", e.what());
  }
  auto field = [&](const Json& j, const char* key, const std::string& who) -> const Json& {
    RG_CHECK(j.is_object() && j.contains(key), kOpenOp, who, "expected a \"", key, "\" field");
    return j[key];
  };
  auto integer = [&](const Json& j, const char* key, const std::string& who, int64_t lo,
                     int64_t hi) {
    const Json& v = field(j, key, who);
    RG_CHECK(
        v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) &&
            v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
        kOpenOp, who, "expected \"", key, "\" an integer in [", lo, ", ", hi, "], got ", v.dump());
    return v.get<int64_t>();
  };
  const Json& format = field(m, "format", where);
  RG_CHECK(format == kFormat, kOpenOp, where, "expected format \"", kFormat, "\", got ",
           format.dump());
  RG_CHECK(integer(m, "version", where, 0, 1 << 20) == kVersion, kOpenOp, where,
           "expected version ", kVersion, " (written by another version of ringgrad)");
  const int64_t step = integer(m, "step", where, 0, std::numeric_limits<int64_t>::max());
  const int64_t world = integer(m, "ranks", where, 1, 1 << 24);  // the files written

  ShardedCheckpoint c;
  c.dir = dir;
  const Json& metadata = field(m, "metadata", where);
  RG_CHECK(metadata.is_object(), kOpenOp, where, "expected \"metadata\" an object of strings");
  std::map<std::string, std::string> meta;
  for (const auto& [key, value] : metadata.items()) {
    RG_CHECK(value.is_string(), kOpenOp, where, "expected metadata values to be strings, got ",
             value.dump(), " for '", key, "'");
    meta[key] = value.get<std::string>();
  }
  c.info = checkpoint_from_metadata(meta, path);
  RG_CHECK(c.info.progress.step == step, kOpenOp, where, "expected the metadata's step (",
           c.info.progress.step, ") to be the manifest's (", step, ")");

  const Json& files = field(m, "files", where);
  RG_CHECK(files.is_array() && files.size() == size_t(world), kOpenOp, where,
           "expected \"files\" an array of ", world, " (one per rank)");
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string who = where + "file " + std::to_string(i) + ": ";
    const Json& p = field(files[i], "path", who);
    RG_CHECK(p.is_string() && p.get<std::string>() == rank_file(step, int(i), int(world)), kOpenOp,
             who, "expected \"path\" \"", rank_file(step, int(i), int(world)), "\", got ",
             p.dump());
    c.files.push_back({p.get<std::string>(),
                       integer(files[i], "bytes", who, 8, std::numeric_limits<int64_t>::max()),
                       uint32_t(integer(files[i], "crc32", who, 0, 0xffffffffLL))});
  }
  const Json& tensors = field(m, "tensors", where);
  RG_CHECK(tensors.is_array(), kOpenOp, where, "expected \"tensors\" an array");
  for (const Json& t : tensors) {
    const Json& name = field(t, "name", where);
    RG_CHECK(name.is_string(), kOpenOp, where, "expected each tensor's \"name\" a string, got ",
             name.dump());
    const std::string who = where + "tensor '" + name.get<std::string>() + "': ";
    RG_CHECK(!c.index_.count(name.get<std::string>()), kOpenOp, who, "expected each name once");
    ShardedCheckpoint::Entry e{
        .name = name.get<std::string>(), .dtype = kFloat32, .shape = {}, .pieces = {}};
    const Json& dtype = field(t, "dtype", who);
    const std::optional<DType> parsed =
        dtype.is_string() ? dtype_named(dtype.get<std::string>()) : std::nullopt;
    RG_CHECK(parsed, kOpenOp, who, "expected a dtype name (float32, bfloat16, int64, …), got ",
             dtype.dump());
    e.dtype = *parsed;
    e.shape = shape_from(field(t, "shape", who), kOpenOp, who);
    const Json& shards = field(t, "shards", who);
    RG_CHECK(shards.is_array(), kOpenOp, who, "expected \"shards\" an array");
    for (const Json& s : shards) {
      const size_t file = size_t(integer(s, "file", who, 0, world - 1));
      e.pieces.push_back({file, runs_from(field(s, "runs", who), kOpenOp, who)});
      for (const Run& r : e.pieces.back().runs)  // (the piece's size is checked when it is read)
        check_run(r, numel_of(e.shape), std::numeric_limits<int64_t>::max(), kOpenOp, who);
    }
    check_tiling(e.pieces, numel_of(e.shape), kOpenOp, who);
    c.index_[e.name] = c.tensors.size();
    c.tensors.push_back(std::move(e));
  }
  return c;
}

ShardedCheckpoint open_sharded_checkpoint(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifest).string();
  std::error_code ec;
  RG_CHECK(fs::is_regular_file(path, ec), kOpenOp, "'", dir,
           "': expected a checkpoint directory "
           "with a manifest.json, found none (a save that never finished, or not a checkpoint)");
  remove_stale_temporaries(path);
  std::ifstream in(path, std::ios::binary);
  RG_CHECK(in.good(), kOpenOp, "could not open '", path, "'");
  std::stringstream text;
  text << in.rdbuf();
  return parse_sharded_manifest(text.str(), dir);
}

bool is_sharded_checkpoint(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / kManifest, ec);
}

bool names_directory(const std::string& path) {
  std::error_code ec;
  return !path.empty() && (path.back() == '/' || fs::is_directory(path, ec));
}

const ShardedCheckpoint::Entry& ShardedCheckpoint::entry(const std::string& name) const {
  auto it = index_.find(name);
  RG_CHECK(it != index_.end(), kReadOp, "'", dir, "': expected a tensor '", name,
           "' in the checkpoint, found none");
  return tensors[it->second];
}

const std::map<std::string, Tensor>& ShardedCheckpoint::file_tensors(size_t i) const {
  auto it = loaded_.find(i);
  if (it != loaded_.end()) return it->second;
  const File& f = files.at(i);
  const std::string path = (fs::path(dir) / f.path).string();
  int64_t bytes = 0;
  const uint32_t crc = file_crc32(path, &bytes);
  RG_CHECK(bytes == f.bytes && crc == f.crc32, kReadOp, "'", path, "': expected ", f.bytes,
           " bytes with CRC-32 ", f.crc32, " (as manifest.json says), got ", bytes,
           " bytes with CRC-32 ", crc, ": the file changed after the checkpoint was written");
  std::map<std::string, Tensor> by_name;
  for (auto& [name, t] : load_safetensors(path)) by_name.emplace(name, std::move(t));
  return loaded_.emplace(i, std::move(by_name)).first->second;
}

std::vector<const Tensor*> ShardedCheckpoint::held_pieces(const Entry& e) const {
  std::vector<const Tensor*> held;
  for (const Piece& p : e.pieces) {
    const std::map<std::string, Tensor>& in_file = file_tensors(p.file);
    const std::string file = (fs::path(dir) / files[p.file].path).string();
    auto t = in_file.find(e.name);
    RG_CHECK(t != in_file.end(), kReadOp, "'", file, "': expected tensor '", e.name,
             "' (manifest.json places a piece of it here), found none");
    int64_t end = 0;
    for (const Run& r : p.runs) end = std::max(end, r.local + r.length * r.count);
    RG_CHECK(t->second.dtype() == e.dtype && end <= t->second.numel(), kReadOp, "'", file,
             "', tensor '", e.name, "': expected ", end, " elements of ", e.dtype,
             " (as manifest.json says), got ", t->second.numel(), " of ", t->second.dtype());
    held.push_back(&t->second);
  }
  return held;
}

void ShardedCheckpoint::read(const std::string& name, Tensor& local,
                             const std::vector<Run>& runs) const {
  const Entry& e = entry(name);
  const std::string who = "'" + dir + "', tensor '" + name + "': ";
  RG_CHECK(local.defined() && local.device().is_cpu() && local.is_contiguous() &&
               local.dtype() == e.dtype,
           kReadOp, who, "expected a contiguous CPU tensor of dtype ", e.dtype, " to read into");
  int64_t wanted = 0;
  for (const Run& r : runs) {
    check_run(r, numel_of(e.shape), local.numel(), kReadOp, who);
    wanted += r.length * r.count;
  }
  RG_CHECK(wanted == local.numel(), kReadOp, who, "expected runs placing each of the ",
           local.numel(), " elements, got runs for ", wanted);
  const std::vector<const Tensor*> held = held_pieces(e);
  const std::vector<Stretch> from = stretches(e.pieces, numel_of(e.shape), kReadOp, who);
  const size_t size = element_size(e.dtype);
  auto* out = static_cast<char*>(local.raw_data());
  for (const Run& r : runs)
    for (int64_t i = 0; i < r.count; ++i) {
      int64_t g = r.global + i * r.stride, l = r.local + i * r.length, left = r.length;
      while (left > 0) {
        // The stretch holding element g: the last one starting at or before it (the pieces
        // tile the tensor: checked when the manifest was opened).
        auto at = std::upper_bound(from.begin(), from.end(), g,
                                   [](int64_t v, const Stretch& s) { return v < s.global; });
        RG_CHECK(at != from.begin(), kReadOp, who, "expected a piece holding element ", g);
        const Stretch& s = *--at;
        const int64_t take = std::min(left, s.global + s.length - g);
        RG_CHECK(take > 0, kReadOp, who, "expected a piece holding element ", g);
        const int64_t src = s.local + (g - s.global);
        std::memcpy(out + l * size,
                    static_cast<const char*>(held[s.piece]->raw_data()) + src * size,
                    size_t(take) * size);
        g += take, l += take, left -= take;
      }
    }
}

Tensor ShardedCheckpoint::read_whole(const std::string& name) const {
  const Entry& e = entry(name);
  // The pieces' files first: the tensor is no larger than what they hold on disk.
  int64_t on_disk = 0;
  for (const Tensor* t : held_pieces(e)) on_disk += t->numel();
  RG_CHECK(numel_of(e.shape) <= on_disk, kReadOp, "'", dir, "', tensor '", name, "': expected its ",
           numel_of(e.shape), " elements in the files manifest.json names, found ", on_disk);
  Tensor t = empty(e.shape, {.dtype = e.dtype});
  const int64_t n = t.numel();
  read(name, t,
       n > 0 ? std::vector<Run>{{.global = 0, .local = 0, .length = n}} : std::vector<Run>{});
  return t;
}

void save_sharded_checkpoint(const Checkpoint& c, const std::string& dir) {
  std::vector<Shard> shards;
  int64_t i = 0;
  for (const auto& [key, t] : c.model) shards.push_back(whole_shard("model." + key, t, i++));
  i = 0;
  for (const auto& [key, t] : c.optimizer) shards.push_back(whole_shard("optim." + key, t, i++));
  write_shard_file(dir, c.progress.step, 0, 1, shards);
  commit_sharded_checkpoint(dir, c.progress.step, 1, c);
}

Checkpoint load_sharded_as_checkpoint(const std::string& dir) {
  const ShardedCheckpoint s = open_sharded_checkpoint(dir);
  Checkpoint c = s.info;
  for (const auto& e : s.tensors) {
    if (e.name.rfind("model.", 0) == 0)
      c.model.emplace_back(e.name.substr(6), s.read_whole(e.name));
    else if (e.name.rfind("optim.", 0) == 0)
      c.optimizer.emplace_back(e.name.substr(6), s.read_whole(e.name));
    else
      fail(kReadOp, "'", dir, "': expected tensors named model.<key> or optim.<key>, got '", e.name,
           "'");
  }
  s.release();
  RG_CHECK(!c.model.empty(), kReadOp, "'", dir,
           "': expected the model's tensors (model.<key>), found none");
  return c;
}

}  // namespace ringgrad
