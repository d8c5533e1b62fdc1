// safetensors.cpp — checkpoints in the safetensors format (see safetensors.h).
//
// Layout of a file:
//
//   u64 N (little-endian) | N bytes of JSON, space-padded to a multiple of 8 | byte buffer
//
// Writing builds the JSON header with each tensor's dtype, shape and
// [begin, end) byte range in the buffer, then writes header and data to a
// temporary file next to the target, syncs it to disk and renames it over the
// target (rename is atomic on POSIX), then syncs the directory so the rename
// itself survives a crash.
//
// Reading trusts nothing: the header length, the JSON, every entry and the
// byte ranges are checked (the ranges must tile the buffer exactly, as the
// specification requires) before any data is read.
#include "ringgrad/core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "ringgrad/core/dtype_table.h"
#include "ringgrad/core/file_kind.h"
#include "ringgrad/core/factory.h"

namespace ringgrad {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; this host is big-endian");

namespace {

// ordered_json keeps keys in insertion order, so the header lists tensors in
// the order they were given (and, on reading, ties keep the file's order).
using Json = nlohmann::ordered_json;

constexpr const char* kSaveOp = "save_safetensors";
constexpr const char* kLoadOp = "load_safetensors";
constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // a larger header is not a checkpoint
constexpr const char* kMetadataKey = "__metadata__";

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

// ---------------------------------------------------------------- dtypes

// The format's name for each dtype ringgrad has (all of them, today). BF16 and F16
// are 2-byte little-endian words holding the bit patterns of core/half.h, as PyTorch
// writes them: the bytes go to and from the tensor unchanged.
const DTypeTable<std::string>& safetensors_types() {
  static const DTypeTable<std::string> table(
      "safetensors", {{kFloat32, "F32"},
                      {kFloat64, "F64"},
                      {kInt64, "I64"},
                      {kBool, "BOOL"},
                      {kBFloat16, "BF16"},
                      {kFloat16, "F16"}});
  return table;
}

// "F32, F64, I64, BOOL, BF16 or F16": the names a file may use, for error messages.
const std::string& supported_names() {
  static const std::string names = [] {
    std::vector<std::string> all;
    for (const DTypeInfo& info : kDTypeInfo)
      if (safetensors_types().has(info.dtype)) all.push_back(safetensors_types()(info.dtype));
    std::string text;
    for (size_t i = 0; i < all.size(); ++i)
      text += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + all[i];
    return text;
  }();
  return names;
}

// Dtypes the format defines but ringgrad has no tensor type for.
bool is_other_safetensors_dtype(const std::string& s) {
  static const std::set<std::string> others = {"F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3",
                                               "F6_E3M2", "F4",      "I8",      "I16",
                                               "I32",     "U8",      "U16",     "U32",
                                               "U64",     "C64"};
  return others.count(s) > 0;
}

// ---------------------------------------------------------------- saving

// Where a save failed: `step` names what was being done to which file.
[[noreturn]] void save_failed(const std::string& path, const std::string& step,
                              const std::string& file, int err) {
  fail(kSaveOp, "could not save '", path, "': ", step, " '", file,
       "' failed: ", err ? std::strerror(err) : "unknown error");
}

// Builds the JSON header (padded to a multiple of 8 bytes) and collects the
// contiguous CPU tensors whose bytes follow it, in the same order.
std::string build_header(const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata,
                         std::vector<Tensor>& host_tensors) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[kMetadataKey] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    RG_CHECK(t.defined(), kSaveOp, "expected defined tensors, got an undefined one named '", name,
             "'");
    RG_CHECK(name != kMetadataKey, kSaveOp, "expected tensor names other than '", kMetadataKey,
             "' (reserved for metadata), got a tensor with that name");
    RG_CHECK(!header.contains(name), kSaveOp, "expected unique tensor names, got '", name,
             "' twice");
    Tensor host = t.detach().to(kCPU).contiguous();
    uint64_t nbytes = host.nbytes();
    Json entry = Json::object();
    entry["dtype"] = safetensors_types()(host.dtype());
    entry["shape"] = host.shape();
    entry["data_offsets"] = Json::array({offset, offset + nbytes});
    header[name] = std::move(entry);
    offset += nbytes;
    host_tensors.push_back(std::move(host));
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail(kSaveOp, "expected tensor names and metadata in valid UTF-8, got: ", e.what());
  }
  // The data must start 8-byte aligned; the 8-byte length prefix already is.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// fsyncs a directory, so that a rename inside it is on disk.
void sync_directory(const std::string& path, const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) save_failed(path, "opening directory", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems cannot sync directories (EINVAL); the rename is done either way.
  if (rc != 0 && err != EINVAL) save_failed(path, "syncing directory", dir, err);
}

}  // namespace

NamedTensors to(const NamedTensors& tensors, DType dtype) {
  RG_CHECK(is_floating(dtype), "to",
           "expected a floating dtype (float32, float64, bfloat16 or float16) for a state dict, "
           "got ",
           dtype);
  NamedTensors out;
  out.reserve(tensors.size());
  for (const auto& [name, t] : tensors)
    out.emplace_back(name, t.defined() && is_floating(t.dtype()) ? t.detach().to(dtype) : t);
  return out;
}

namespace {

// Writes `parts` one after the other to a temporary file beside `path`, syncs it, renames
// it over `path` and syncs the directory; any failure removes the temporary and throws.
void write_atomically(const std::string& path,
                      const std::vector<std::pair<const void*, size_t>>& parts) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  File f(std::fopen(tmp.c_str(), "wb"));
  if (!f) save_failed(path, "creating", tmp, errno);

  // From here on, any failure removes the temporary file before throwing.
  auto check = [&](bool ok, const char* step) {
    if (ok) return;
    int err = errno;
    f.reset();
    ::unlink(tmp.c_str());
    save_failed(path, step, tmp, err);
  };
  for (const auto& [data, size] : parts) {
    errno = 0;
    check(size == 0 || std::fwrite(data, 1, size, f.get()) == size, "writing");
  }
  check(std::fflush(f.get()) == 0, "flushing");
  check(::fsync(::fileno(f.get())) == 0, "syncing");
  check(std::fclose(f.release()) == 0, "closing");
  check(std::rename(tmp.c_str(), path.c_str()) == 0, "renaming");

  std::string dir = std::filesystem::path(path).parent_path().string();
  sync_directory(path, dir.empty() ? "." : dir);
}

}  // namespace

void save_safetensors(const NamedTensors& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> host_tensors;
  std::string header = build_header(tensors, metadata, host_tensors);
  uint64_t header_size = header.size();
  // little-endian host: the length's bytes are as stored
  std::vector<std::pair<const void*, size_t>> parts{{&header_size, sizeof header_size},
                                                    {header.data(), header.size()}};
  for (const Tensor& t : host_tensors) parts.emplace_back(t.raw_data(), t.nbytes());
  write_atomically(path, parts);
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  write_atomically(path, {{bytes.data(), bytes.size()}});
}

// ---------------------------------------------------------------- loading

namespace {

// One tensor's header entry, checked.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

// Every load error names the file: "[load_safetensors] 'm.safetensors': ...".
template <typename... Args>
[[noreturn]] void bad_file(const std::string& path, const Args&... args) {
  fail(kLoadOp, "'", path, "': ", args...);
}


void read_exact(FILE* f, void* data, size_t size, const std::string& path, const char* what) {
  if (size > 0 && std::fread(data, 1, size, f) != size)
    bad_file(path, "expected ", size, " bytes of ", what, ", got a short read",
             std::ferror(f) ? std::string(" (") + std::strerror(errno) + ")" : "");
}

// Parses the header, refusing duplicate keys (JSON allows them; safetensors does not).
Json parse_header(const std::string& text, const std::string& path) {
  if (text.empty() || text[0] != '{')
    bad_file(path, "expected the JSON header to start with '{', got ",
             text.empty() ? std::string("an empty header") : "'" + text.substr(0, 16) + "'");
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::optional<std::string> duplicate;
  auto watch_keys = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) keys_of_open_objects.emplace_back();
    if (event == Json::parse_event_t::object_end) keys_of_open_objects.pop_back();
    if (event == Json::parse_event_t::key && !duplicate &&
        !keys_of_open_objects.back().insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, watch_keys);
  } catch (const nlohmann::json::exception& e) {
    bad_file(path, "expected a valid JSON header, got: ", e.what());
  }
  if (duplicate)
    bad_file(path, "expected unique names in the header, got '", *duplicate, "' twice");
  if (!header.is_object())
    bad_file(path, "expected the JSON header to be an object, got ", header.type_name());
  return header;
}

// A non-negative JSON integer, or nullopt.
std::optional<uint64_t> as_unsigned(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  return std::nullopt;
}

Entry parse_entry(const std::string& path, const std::string& name, const Json& value,
                  uint64_t buffer_size) {
  const std::string who = "tensor '" + name + "': ";
  if (!value.is_object())
    bad_file(path, who, "expected an object with dtype, shape and data_offsets, got ",
             value.type_name());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!value.contains(field)) bad_file(path, who, "expected a \"", field, "\" field, got none");
  Entry e{name, kFloat32, {}, 0, 0};

  const Json& dtype = value["dtype"];
  if (!dtype.is_string()) bad_file(path, who, "expected dtype to be a string, got ", dtype.dump());
  const std::string dtype_text = dtype.get<std::string>();
  std::optional<DType> parsed = safetensors_types().find(dtype_text);
  if (!parsed && is_other_safetensors_dtype(dtype_text))
    bad_file(path, who, "dtype ", dtype_text, " is not supported (expected ", supported_names(),
             ")");
  if (!parsed)
    bad_file(path, who, "unknown dtype '", dtype_text, "' (expected ", supported_names(), ")");
  e.dtype = *parsed;

  const Json& shape = value["shape"];
  if (!shape.is_array()) bad_file(path, who, "expected shape to be an array, got ", shape.dump());
  int64_t nbytes = static_cast<int64_t>(element_size(e.dtype));
  for (const Json& d : shape) {
    if (!d.is_number_integer())
      bad_file(path, who, "expected shape to hold integers, got ", shape.dump());
    if (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT64_MAX))
      bad_file(path, who, "expected shape dimensions below 2^63, got ", shape.dump());
    int64_t size = d.get<int64_t>();
    if (size < 0) bad_file(path, who, "expected non-negative shape dimensions, got ", shape.dump());
    e.shape.push_back(size);
    if (__builtin_mul_overflow(nbytes, size, &nbytes))
      bad_file(path, who, "shape ", shape.dump(), " is too large (its byte size overflows)");
  }

  const Json& offsets = value["data_offsets"];
  std::optional<uint64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = as_unsigned(offsets[0]);
    end = as_unsigned(offsets[1]);
  }
  if (!begin || !end || *begin > *end)
    bad_file(path, who, "expected data_offsets to be [begin, end] with 0 <= begin <= end, got ",
             offsets.dump());
  e.begin = *begin;
  e.end = *end;
  if (e.end - e.begin != uint64_t(nbytes))
    bad_file(path, who, "expected data_offsets spanning ", nbytes, " bytes (shape ", e.shape,
             " of ", dtype_text, "), got ", offsets.dump(), " (", e.end - e.begin, " bytes)");
  if (e.end > buffer_size)
    bad_file(path, who, "expected data_offsets within the ", buffer_size, "-byte data buffer, got ",
             offsets.dump());
  return e;
}

// The byte ranges, sorted, must tile [0, buffer_size) with no gap and no overlap.
void check_coverage(const std::string& path, const std::vector<Entry>& entries,
                    uint64_t buffer_size) {
  uint64_t cursor = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < cursor)
      bad_file(path, "expected non-overlapping tensors, got '", previous->name, "' [",
               previous->begin, ", ", previous->end, ") and '", e.name, "' [", e.begin, ", ", e.end,
               ")");
    if (e.begin > cursor)
      bad_file(path, "expected tensors to cover the data buffer, got a gap at bytes [", cursor,
               ", ", e.begin, ") before tensor '", e.name, "'");
    cursor = e.end;
    previous = &e;
  }
  if (cursor != buffer_size)
    bad_file(path, "expected tensors to cover the data buffer, got a gap at bytes [", cursor, ", ",
             buffer_size, ") at its end");
}

}  // namespace

namespace {

// A file opened and its header read and checked: the entries in file order, the metadata.
struct Opened {
  File f;
  std::vector<Entry> entries;
  std::map<std::string, std::string> meta;
};

Opened open_checked(const std::string& path) {
  // Checked before opening: opening a FIFO for reading blocks until a writer comes
  // (forever, for a stray one).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail(kLoadOp, "could not open '", path, "': ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) bad_file(path, "expected a regular file, got ", file_kind(st.st_mode));
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) fail(kLoadOp, "could not open '", path, "': ", std::strerror(errno));
  if (::fstat(::fileno(f.get()), &st) != 0)
    fail(kLoadOp, "could not stat '", path, "': ", std::strerror(errno));
  if (!S_ISREG(st.st_mode))  // replaced between the two looks
    bad_file(path, "expected a regular file, got ", file_kind(st.st_mode));
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);

  // ---- header length and header ----
  if (file_size < 8)
    bad_file(path, "expected at least 8 bytes (the header length), got a ", file_size,
             "-byte file");
  uint64_t header_size = 0;
  read_exact(f.get(), &header_size, 8, path, "header length");
  if (header_size > kMaxHeaderBytes)
    bad_file(path, "expected a header length of at most ", kMaxHeaderBytes, " bytes, got ",
             header_size, " (not a safetensors file?)");
  if (header_size > file_size - 8)
    bad_file(path, "expected a header length of at most ", file_size - 8,
             " bytes (what follows it), got ", header_size, " (truncated file?)");
  std::string text(header_size, '\0');
  read_exact(f.get(), text.data(), text.size(), path, "header");
  Json header = parse_header(text, path);

  // ---- entries ----
  const uint64_t buffer_size = file_size - 8 - header_size;
  Opened out{std::move(f), {}, {}};
  for (const auto& [name, value] : header.items()) {
    if (name != kMetadataKey) {
      out.entries.push_back(parse_entry(path, name, value, buffer_size));
      continue;
    }
    if (!value.is_object())
      bad_file(path, "expected __metadata__ to be an object, got ", value.type_name());
    for (const auto& [key, v] : value.items()) {
      if (!v.is_string())
        bad_file(path, "expected __metadata__ values to be strings, got ", v.dump(), " for '", key,
                 "'");
      out.meta[key] = v.get<std::string>();
    }
  }
  // File order: by byte range; empty tensors sit before a non-empty one at the same offset.
  std::stable_sort(out.entries.begin(), out.entries.end(), [](const Entry& a, const Entry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  check_coverage(path, out.entries, buffer_size);
  return out;
}

}  // namespace

NamedTensors load_safetensors(const std::string& path,
                              std::map<std::string, std::string>* metadata) {
  Opened file = open_checked(path);
  // ---- data: the ranges tile the buffer, so one sequential pass reads it all ----
  NamedTensors out;
  out.reserve(file.entries.size());
  for (const Entry& e : file.entries) {
    Tensor t = empty(e.shape, {.dtype = e.dtype});
    read_exact(file.f.get(), t.raw_data(), t.nbytes(), path,
               ("data for tensor '" + e.name + "'").c_str());
    if (e.dtype == kBool) {  // any byte other than 0 or 1 would be an invalid C++ bool
      auto* bytes = static_cast<unsigned char*>(t.raw_data());
      for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = bytes[i] != 0;
    }
    out.emplace_back(e.name, std::move(t));
  }
  if (metadata) *metadata = std::move(file.meta);
  return out;
}

std::vector<SafetensorsEntry> read_safetensors_header(
    const std::string& path, std::map<std::string, std::string>* metadata) {
  Opened file = open_checked(path);
  std::vector<SafetensorsEntry> out;
  for (const Entry& e : file.entries) out.push_back({e.name, e.dtype, e.shape});
  if (metadata) *metadata = std::move(file.meta);
  return out;
}

}  // namespace ringgrad
