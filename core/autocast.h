// autocast.h — mixed precision by op, as torch.autocast.
//
//   {
//     rg::autocast guard(rg::kCPU, rg::kBFloat16);   // torch.autocast("cpu", dtype=torch.bfloat16)
//     rg::Tensor loss = criterion(model.forward(x), y);
//   }
//   loss.backward();   // outside the region, as in PyTorch
//
// Inside the region, on that device type:
//  - GEMM-like ops run in the low-precision dtype: matmul, nn::linear (weight and bias
//    too) and scaled_dot_product_attention cast their float32 inputs to it;
//  - ops that need range or accumulate run in float32: layer_norm, softmax, log_softmax,
//    logsumexp, cross_entropy and mse_loss cast 16-bit inputs up (PyTorch's CUDA lists);
//  - every other op runs in its inputs' dtype, and binary ops with mixed floating
//    dtypes promote (bfloat16 + float32 → float32).
// The casts are ordinary differentiable .to() ops, so the model's float32 parameters get
// float32 gradients: the parameters themselves are the master weights (PyTorch's AMP).
// float64 tensors are never cast. The setting is per thread, like torch.autocast.
#pragma once

#include <initializer_list>
#include <optional>

#include "ringgrad/core/device.h"
#include "ringgrad/core/dtype.h"

namespace ringgrad {

class Tensor;

class autocast {
 public:
  // dtype: bfloat16 or float16; enabled = false switches autocast off inside an
  // enclosing region (torch.autocast(..., enabled=False)).
  explicit autocast(Device device = Device::cpu(), DType dtype = kBFloat16, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  DeviceType type_;
  std::optional<DType> previous_;
};

// One 16-bit copy of each weight for a whole step. While a cache lives on this thread, the
// casts autocast makes of leaf tensors that require grad (the parameters), with gradients on,
// are kept and reused, so a step's micro-batches (a pipeline's in flight, or accumulated ones)
// share one copy of each weight instead of each casting, and keeping for backward, its own.
// PyTorch's autocast caches the same casts within one region; Megatron keeps its parameters
// in 16 bits with a float32 copy in its optimizer. Each micro-batch's backward still runs the
// cast's backward into the parameter's float32 gradient, so the gradients are the same. The
// parameters must not change while the cache lives: open it around a step's forwards and
// backwards and close it before the optimizer steps. Nested caches share the outermost.
//
//   { rg::autocast_weight_cache cache;  for (auto& mb : micro_batches) { …forward, backward… } }
//   opt.step();
//
// Not under FSDP: its gathered parameters would all stay gathered, their casts kept.
class autocast_weight_cache {
 public:
  autocast_weight_cache();
  ~autocast_weight_cache();
  autocast_weight_cache(const autocast_weight_cache&) = delete;
  autocast_weight_cache& operator=(const autocast_weight_cache&) = delete;
};

// The dtype autocast runs GEMM-like ops in on `device`'s type now; nullopt when off.
std::optional<DType> autocast_dtype(Device device);

namespace detail {
// For GEMM-like ops: under autocast, the dtype the defined float32/16-bit operands among
// `ts` must be cast to, when any of them is not in it yet (nullopt: run as they are).
std::optional<DType> autocast_lower(std::initializer_list<const Tensor*> ts);
// For float32 ops: under autocast, whether a defined operand among `ts` is 16-bit.
bool autocast_widen(std::initializer_list<const Tensor*> ts);
// t cast to `dtype` when t is a defined float32/16-bit tensor (float64 and integer kept).
Tensor autocast_cast(const Tensor& t, DType dtype);
}  // namespace detail

}  // namespace ringgrad
