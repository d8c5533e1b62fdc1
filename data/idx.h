// idx.h — reading IDX files, the format MNIST and Fashion-MNIST ship in.
//
// An IDX file is a 4-byte magic number, one big-endian uint32 size per dimension,
// then the elements in row-major order:
//
//   00 00 08 03 | 00 00 EA 60 | 00 00 00 1C | 00 00 00 1C | 60000·28·28 bytes
//   zero  type  ndims   N = 60000    rows = 28     cols = 28     pixels
//
// Files may be gzip-compressed (detected by the 1f 8b magic, not by the name) or raw.
// Only unsigned-byte files (type code 0x08) are supported: that is what MNIST uses.
//
//   rg::data::IdxArray a = rg::data::read_idx("train-labels-idx1-ubyte.gz");
//   a.dims   // {60000}
//   a.data   // 60000 bytes
//
// A bad file (missing, not a regular file — a FIFO, a directory, /dev/zero —, wrong
// magic, truncated, corrupt gzip, absurd dims) throws ringgrad::Error naming the file
// and what is wrong; nothing is read out of bounds, and nothing waits on a FIFO.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ringgrad::data {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};

IdxArray read_idx(const std::string& path);

}  // namespace ringgrad::data
