// safetensors.h — saving and loading named tensors in the safetensors format.
//
//   rg::save_safetensors({{"w", w}, {"b", b}}, "model.safetensors", {{"epoch", "3"}});
//   std::map<std::string, std::string> meta;
//   rg::NamedTensors loaded = rg::load_safetensors("model.safetensors", &meta);
//   rg::save_safetensors(rg::to(model.state_dict(), rg::kBFloat16), "model-bf16.safetensors");
//
// The format (https://github.com/huggingface/safetensors) is simple enough to
// read with a hex dump:
//
//   [8 bytes]  N, the header length, a little-endian u64
//   [N bytes]  a JSON object, padded with spaces so the data starts 8-byte aligned:
//              {"__metadata__": {"key": "value", ...},
//               "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   [rest]     the byte buffer: each tensor's elements, row-major, little-endian,
//              at [begin, end) counted from the start of the buffer
//
// ringgrad reads and writes the dtypes it has: F32, F64, I64, BOOL, BF16 and F16
// (bfloat16 and float16 as 2-byte little-endian bit patterns, exactly as PyTorch's
// safetensors writes them, so a bf16 checkpoint from PyTorch loads as kBFloat16).
// A tensor is saved in its own dtype; to save a float32 model in bf16, convert its
// state dict with to() below. Loading gives each tensor the file's dtype; nn::load
// converts it into the module's (see load_state_dict in nn/module.h).
// Saving is atomic (a temporary file, fsync, then rename), so a crash mid-save
// leaves the previous checkpoint intact. Loading checks the whole file and
// reports any damage as a ringgrad::Error naming the file; a path that is not a
// regular file (a FIFO, a directory, a device) is refused before it is opened.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ringgrad/core/tensor.h"

namespace ringgrad {

// Named tensors, in order. Saving then loading gives back the same order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (any device, any layout) and string `metadata` to `path`,
// replacing any file already there only once the new one is fully on disk.
void save_safetensors(const NamedTensors& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {});

// A copy of `tensors` with every floating tensor converted to `dtype` (float32,
// float64, bfloat16 or float16; rounding to nearest even) and every other one
// (int64 step counts, bool masks) as it is: what model.to(torch.bfloat16) does to
// a state dict, without changing the model. A PyTorch user writes
//   save_file({k: v.to(torch.bfloat16) for k, v in sd.items()}, path)
// and here
//   rg::save_safetensors(rg::to(model.state_dict(), rg::kBFloat16), path);
// A tensor already in `dtype` is shared, not copied. A non-floating `dtype` throws.
NamedTensors to(const NamedTensors& tensors, DType dtype);

// Reads every tensor in `path` onto the CPU, in the order they lie in the file.
// When `metadata` is given, it receives the file's "__metadata__" (empty if none).
NamedTensors load_safetensors(const std::string& path,
                              std::map<std::string, std::string>* metadata = nullptr);

// The header alone, checked as load_safetensors checks it, without reading the data: each
// tensor's name, dtype and shape in file order, and (when given) the metadata.
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
};
std::vector<SafetensorsEntry> read_safetensors_header(
    const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

// Writes `bytes` to `path` as save_safetensors writes: a temporary beside it, synced, then
// renamed over it (a crash leaves the old file or the new one, never a part).
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace ringgrad
