// cpu_backend.h — the CPU implementation of Backend (internal).
//
// Plain loops over strided memory (loops.h), Eigen for GEMM, OpenMP threads for
// work big enough to split. This backend is the reference every other one is
// tested against.
#pragma once

#include "ringgrad/core/backend.h"

namespace ringgrad::cpu {

// Frees the caching allocator's free blocks (backend.cpp).
void release_cached_memory();

class CpuBackend final : public Backend {
 public:
  // Elementwise loops convert 16-bit operands as they load and store (elementwise.cpp).
  bool native_reduced_precision(Kernel k) const override { return k == Kernel::Elementwise; }
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t nbytes) override;
  void copy_from_host(void* dst, const void* host_src, size_t nbytes) override;

  void fill(const TensorRef& out, double value) override;
  void copy(const TensorRef& src, const TensorRef& dst) override;
  void unary(UnaryOp op, const TensorRef& in, const TensorRef& out, double p0, double p1) override;
  void binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) override;
  void where(const TensorRef& cond, const TensorRef& a, const TensorRef& b,
             const TensorRef& out) override;
  void arange(const TensorRef& out, double start, double step) override;
  void random(const TensorRef& out, RandomDist dist, uint64_t seed, uint64_t offset, double p0,
              double p1) override;

  void reduce(ReduceOp op, const TensorRef& in, const TensorRef& out, int64_t outer, int64_t r,
              int64_t inner) override;
  void softmax(const TensorRef& in, const TensorRef& out, int64_t outer, int64_t r, int64_t inner,
               bool log) override;
  void softmax_backward(const TensorRef& g, const TensorRef& y, const TensorRef& out, int64_t outer,
                        int64_t r, int64_t inner, bool log) override;

  void gemm(const GemmArgs& args) override;  // gemm.cpp
  bool gemm_adds_bias(DType dt) const override { return dt == kFloat32 || dt == kFloat64; }

  void layer_norm(const TensorRef& x, const TensorRef& weight, const TensorRef& bias,
                  const TensorRef& y, const TensorRef& mean, const TensorRef& rstd, int64_t n,
                  int64_t d, double eps) override;
  void layer_norm_backward(const TensorRef& dy, const TensorRef& x, const TensorRef& mean,
                           const TensorRef& rstd, const TensorRef& weight, const TensorRef& dx,
                           const TensorRef& dweight, const TensorRef& dbias, int64_t n,
                           int64_t d) override;
  void attention_tile_forward(const AttentionTile& tile, const TensorRef& s, const TensorRef& m,
                              const TensorRef& l, const TensorRef& o) override;
  void attention_tile_probs(const AttentionTile& tile, const TensorRef& s, const TensorRef& lse,
                            const TensorRef& pd) override;
  void attention_tile_grad(const AttentionTile& tile, const TensorRef& p, const TensorRef& dp,
                           const TensorRef& dsum) override;
  bool attention_tile_fused_forward(const AttentionTileForward& a) override;  // attention_fused.cpp
  bool attention_tile_fused_backward(const AttentionTileBackward& a) override;
  bool attention_tile_fused(const AttentionTile& t, int64_t d, int64_t dv, Pass pass) override;
  AttentionPlan attention_plan(int64_t pairs) override;
  void attention_run(int64_t items, const AttentionPlan& plan,
                     const std::function<void(int64_t, int)>& body) override;

  void adam_step(const TensorRef& p, const TensorRef& g, const TensorRef& m, const TensorRef& v,
                 const AdamStep& h) override;
  void cross_entropy(const TensorRef& logits, const TensorRef& target, const TensorRef& loss,
                     const TensorRef& lse, int64_t n, int64_t c, double smoothing,
                     int64_t ignore_index) override;
  void cross_entropy_backward(const TensorRef& grad_loss, const TensorRef& logits,
                              const TensorRef& target, const TensorRef& lse,
                              const TensorRef& grad_logits, int64_t n, int64_t c,
                              double smoothing, int64_t ignore_index) override;

  void index_select(const TensorRef& in, const TensorRef& index, const TensorRef& out,
                    int64_t outer, int64_t d, int64_t n, int64_t inner) override;
  void index_add(const TensorRef& out, const TensorRef& index, const TensorRef& src, int64_t outer,
                 int64_t d, int64_t n, int64_t inner) override;
  void gather(const TensorRef& in, const TensorRef& index, const TensorRef& out, int64_t outer,
              int64_t d, int64_t n, int64_t inner) override;
  void scatter_add(const TensorRef& out, const TensorRef& index, const TensorRef& src,
                   int64_t outer, int64_t d, int64_t n, int64_t inner) override;
};

}  // namespace ringgrad::cpu
