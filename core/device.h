// device.h — where a tensor's memory lives: the CPU, or CUDA GPU number N.
//
//   rg::Device d = rg::Device::parse("cuda:1");   // or Device::cuda(1), Device::cpu()
//   if (rg::cuda::is_available()) ...
#pragma once

#include <ostream>
#include <string>

namespace ringgrad {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  // "cpu", "cuda", "cuda:N"; anything else throws ringgrad::Error.
  static Device parse(const std::string& text);
  // parse(), plus "auto": cuda:0 when a GPU is present, else cpu.
  static Device resolve(const std::string& text);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;  // "cpu" or "cuda:N"

  friend bool operator==(const Device&, const Device&) = default;
};

inline constexpr Device kCPU = Device::cpu();

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

namespace cuda {
// Number of usable CUDA devices: 0 in a build without CUDA, and 0 when the
// driver reports any error (a machine with the toolkit but no GPU).
int device_count();
inline bool is_available() { return device_count() > 0; }
// Whether this build has the CUDA backend at all (RINGGRAD_CUDA found a toolkit).
bool is_built();
// Wait until all queued GPU work has finished (a no-op without CUDA). Ops are
// asynchronous: time GPU work only after this.
void synchronize();
// Let float32 matmuls use TF32 tensor cores (10-bit mantissa inputs, float32
// accumulation): much faster, less exact. Off by default, as in PyTorch.
void set_allow_tf32(bool allow);
// Make GPU `index` current for the calling thread (cudaSetDevice), before any
// CUDA work. The backend runs every op on one compute stream, created on the
// device that is current when CUDA is first used, and allocates on the current
// device, so each process of a multi-GPU job selects its own GPU first: World
// does it, for cuda:<local rank>, when it is constructed (four ranks on a
// four-GPU host use GPUs 0..3, not all GPU 0). Throws in a build without CUDA.
void set_device(int index);
}  // namespace cuda

}  // namespace ringgrad
