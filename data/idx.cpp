// idx.cpp — the IDX reader.
//
// A ByteSource reads a file sequentially, through zlib when it starts with the gzip
// magic (1f 8b) and directly otherwise. read_idx then takes the file apart in order:
// magic number, dimension sizes, data, end of file. Every field is checked before it
// is trusted, so a damaged file is reported (with its name) instead of crashing us.
#include "ringgrad/data/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "ringgrad/core/error.h"
#include "ringgrad/core/file_kind.h"

namespace ringgrad::data {

namespace {

constexpr const char* kOp = "read_idx";
constexpr int kMaxDims = 16;                     // MNIST uses 1 or 3; 255 is legal but absurd
constexpr int64_t kMaxBytes = int64_t{1} << 40;  // a header claiming over 1 TiB is corrupt
constexpr size_t kFirstChunk = size_t{1} << 20;  // the data buffer grows from 1 MiB

// "[read_idx] <path>: <what is wrong>"
template <typename... Args>
[[noreturn]] void bad_file(const std::string& path, const Args&... args) {
  fail(kOp, path, ": ", args...);
}

std::string hex(uint8_t byte) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02x", byte);
  return s;
}

const char* type_name(uint8_t code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "not an IDX type code";
  }
}


// Sequential reads from a raw file or a gzip stream, whichever the first two bytes say.
class ByteSource {
 public:
  explicit ByteSource(const std::string& path) : path_(path) {
    // Before opening: opening a FIFO for reading blocks until a writer comes (forever,
    // for a stray one), and a device such as /dev/zero never ends.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      bad_file(path, "cannot open the file (", std::strerror(errno), ")");
    if (!S_ISREG(st.st_mode))
      bad_file(path, "expected a regular file, got ", file_kind(st.st_mode));
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) bad_file(path, "cannot open the file (", std::strerror(errno), ")");
    unsigned char magic[2] = {0, 0};
    gzipped_ = std::fread(magic, 1, 2, f) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (!gzipped_) {
      std::rewind(f);
      file_ = f;
      return;
    }
    std::fclose(f);
    gz_ = gzopen(path.c_str(), "rb");
    if (!gz_) bad_file(path, "cannot open the gzip stream (", std::strerror(errno), ")");
    gzbuffer(gz_, 1 << 20);  // fewer, larger reads of the compressed file
  }
  ~ByteSource() {
    if (file_) std::fclose(file_);
    if (gz_) gzclose(gz_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Reads up to n bytes into dst; fewer only at the end of the data.
  size_t read(uint8_t* dst, size_t n) {
    if (!gzipped_) {
      size_t got = std::fread(dst, 1, n, file_);
      if (got < n && std::ferror(file_)) bad_file(path_, "read error (", std::strerror(errno), ")");
      return got;
    }
    size_t got = 0;
    while (got < n) {
      unsigned ask = static_cast<unsigned>(std::min<size_t>(n - got, INT_MAX));
      int r = gzread(gz_, dst + got, ask);
      check_gzip();
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

 private:
  // zlib records an error in the stream; turn it into ours.
  void check_gzip() {
    int code = Z_OK;
    const char* message = gzerror(gz_, &code);
    if (code == Z_OK) return;
    if (code == Z_BUF_ERROR)  // the compressed stream stops before its end marker
      bad_file(path_, "expected a complete gzip stream, got a truncated one (", message, ")");
    bad_file(path_, "expected valid gzip data, got corrupt gzip (", message, ")");
  }

  std::string path_;
  bool gzipped_ = false;
  std::FILE* file_ = nullptr;
  gzFile gz_ = nullptr;
};

}  // namespace

IdxArray read_idx(const std::string& path) {
  ByteSource in(path);
  IdxArray out;

  // 1. Magic number: 00 00 <type code> <number of dims>.
  uint8_t magic[4] = {0, 0, 0, 0};
  size_t got = in.read(magic, 4);
  if (got < 4)
    bad_file(path, "expected a 4-byte IDX magic number, got ", got,
             " bytes (empty or truncated file)");
  if (magic[0] != 0 || magic[1] != 0)
    bad_file(path, "expected an IDX magic number starting with 0x00 0x00, got ", hex(magic[0]),
             " ", hex(magic[1]), " (bad magic: not an IDX file)");
  if (magic[2] != 0x08)
    bad_file(path, "expected IDX type code 0x08 (unsigned byte), got ", hex(magic[2]), " (",
             type_name(magic[2]), "); only unsigned-byte IDX files are supported");
  int ndims = magic[3];
  if (ndims < 1 || ndims > kMaxDims)
    bad_file(path, "expected 1 to ", kMaxDims, " dimensions in the IDX magic number, got ", ndims,
             " (bad magic)");

  // 2. Dimension sizes: one big-endian uint32 each.
  uint8_t sizes[4 * kMaxDims];
  got = in.read(sizes, 4 * static_cast<size_t>(ndims));
  if (got < 4 * static_cast<size_t>(ndims))
    bad_file(path, "expected ", ndims, " dimension sizes (", 4 * ndims, " bytes) after the magic ",
             "number, got ", got, " bytes (truncated header)");
  int64_t total = 1;  // bytes of data the dims describe
  for (int i = 0; i < ndims; ++i) {
    const uint8_t* b = sizes + 4 * i;
    int64_t d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    out.dims.push_back(d);
    if (d > 0 && total > kMaxBytes / d) total = kMaxBytes + 1;  // saturate, no overflow
    else total *= d;
  }
  if (total > kMaxBytes)
    bad_file(path, "expected dims describing at most 1 TiB of data, got ", out.dims,
             " (corrupt header)");

  // 3. Data. The buffer grows as bytes arrive, so a header that claims far more data
  //    than the file holds costs an error message, not a huge allocation.
  size_t want = static_cast<size_t>(total), have = 0;
  while (have < want) {
    size_t next = std::min(want, std::max(kFirstChunk, 2 * have));
    out.data.resize(next);
    size_t n = in.read(out.data.data() + have, next - have);
    have += n;
    if (have < next) break;  // end of file
  }
  if (have < want)
    bad_file(path, "expected ", want, " bytes of data for dims ", out.dims, ", got ", have,
             " (truncated file)");

  // 4. End of file. For gzip this last read also makes zlib verify the stream's checksum.
  uint8_t extra = 0;
  if (in.read(&extra, 1) != 0)
    bad_file(path, "expected the file to end after ", want, " bytes of data for dims ", out.dims,
             ", got more (trailing data)");
  return out;
}

}  // namespace ringgrad::data
