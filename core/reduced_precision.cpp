// reduced_precision.cpp — bfloat16 and float16 operands on every backend, by staging them
// through float32.
//
// A backend's compute kernels are written for float32 and float64. When an operand of a
// kernel is a 16-bit dtype, StagedBackend (which backend(device, op) hands out) copies it
// into a float32 scratch buffer, runs the backend's float32 kernel there, and copies the
// results back, rounding each element once (round to nearest even). So every op on a
// bfloat16 tensor gives the bfloat16 rounding of the float32 result on the same inputs,
// and every sum, matmul, softmax and layer-norm statistic accumulates in float32 — what
// PyTorch does on a CPU without bfloat16 arithmetic. Gradients are ops too: they flow back
// in the dtypes of the forward.
//
// The kernels that only move elements (fill, copy, where, index_select, gather) take the
// 16-bit types as they are, on every backend; a backend may also take a kernel natively
// (Backend::native_reduced_precision: cuBLAS's bfloat16 GEMM with float32 accumulation;
// the CPU's elementwise loops, which convert as they load and store).
//
// Scratch buffers are Storages, so memory_stats counts them.
#include <algorithm>
#include <memory>
#include <vector>

#include "ringgrad/core/backend.h"
#include "ringgrad/core/storage.h"

namespace ringgrad {
namespace {

// The most elements a float32 copy of one large operand holds (4 MiB): GEMMs and
// reductions bigger than this are staged block by block.
constexpr int64_t kBlock = int64_t(1) << 20;

// A view's operands are staged whole in one contiguous float32 buffer; a broadcast dim
// (stride 0) is staged once and keeps stride 0.
class Staging {
 public:
  Staging(Backend& inner, Device device) : inner_(inner), device_(device) {}

  // The float32 view the kernel reads `r` through (r itself if it is not 16-bit).
  TensorRef in(const TensorRef& r) { return stage(r, /*read=*/true, /*write=*/false); }
  // A view the kernel only writes; copied back to r by finish().
  TensorRef out(const TensorRef& r) { return stage(r, /*read=*/false, /*write=*/true); }
  // A view the kernel reads and writes (accumulating outputs, in-place state).
  TensorRef inout(const TensorRef& r) { return stage(r, /*read=*/true, /*write=*/true); }

  // Copy every written view back into its 16-bit original.
  void finish() {
    for (const auto& [scratch, original] : writes_) inner_.copy(scratch, original);
  }

 private:
  TensorRef stage(const TensorRef& r, bool read, bool write) {
    if (r.data == nullptr || !is_reduced_precision(r.dtype)) return r;
    TensorRef compact = r;  // r without its broadcast dims: each element once
    TensorRef scratch = r;
    scratch.dtype = kFloat32;
    int64_t stride = 1;
    for (int d = r.ndim; d-- > 0;) {
      if (r.strides[d] == 0) compact.shape[d] = 1;
      scratch.strides[d] = r.strides[d] == 0 ? 0 : stride;
      stride *= compact.shape[d];
    }
    buffers_.push_back(std::make_unique<Storage>(size_t(stride) * sizeof(float), device_));
    scratch.data = buffers_.back()->data();
    TensorRef scratch_compact = scratch;
    scratch_compact.shape = compact.shape;
    if (read) inner_.copy(compact, scratch_compact);
    if (write) writes_.push_back({scratch_compact, compact});
    return scratch;
  }

  Backend& inner_;
  Device device_;
  std::vector<std::unique_ptr<Storage>> buffers_;
  std::vector<std::pair<TensorRef, TensorRef>> writes_;
};

bool any_reduced(std::initializer_list<const TensorRef*> refs) {
  for (const TensorRef* r : refs)
    if (r->data != nullptr && is_reduced_precision(r->dtype)) return true;
  return false;
}

// The three operands of a GEMM as strided views (batch, rows, cols).
TensorRef matrix(const void* data, DType dtype, int64_t batch, int64_t rows, int64_t cols,
                 int64_t batch_stride, int64_t row_stride, int64_t col_stride) {
  TensorRef r;
  r.data = const_cast<void*>(data);
  r.dtype = dtype;
  r.ndim = 3;
  r.shape = {batch, rows, cols};
  r.strides = {batch == 1 ? 0 : batch_stride, rows == 1 ? 0 : row_stride,
               cols == 1 ? 0 : col_stride};
  // A size-1 dim's stride does not matter; 0 there keeps Staging from widening it.
  for (int d = 0; d < 3; ++d)
    if (r.shape[d] == 1) r.strides[d] = 0;
  return r;
}

class StagedBackend final : public Backend {
 public:
  StagedBackend(Backend& inner, Device device) : inner_(inner), device_(device) {}

  void* allocate(size_t nbytes) override { return inner_.allocate(nbytes); }
  void deallocate(void* ptr, size_t nbytes) override { inner_.deallocate(ptr, nbytes); }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    inner_.copy_to_host(dst, src, n);
  }
  void copy_from_host(void* dst, const void* src, size_t n) override {
    inner_.copy_from_host(dst, src, n);
  }

  // Element movers: every backend takes the 16-bit types as they are.
  void fill(const TensorRef& out, double value) override { inner_.fill(out, value); }
  void copy(const TensorRef& src, const TensorRef& dst) override { inner_.copy(src, dst); }
  void where(const TensorRef& c, const TensorRef& a, const TensorRef& b,
             const TensorRef& out) override {
    inner_.where(c, a, b, out);
  }
  void index_select(const TensorRef& in, const TensorRef& index, const TensorRef& out,
                    int64_t outer, int64_t d, int64_t n, int64_t inner) override {
    inner_.index_select(in, index, out, outer, d, n, inner);
  }
  void gather(const TensorRef& in, const TensorRef& index, const TensorRef& out, int64_t outer,
              int64_t d, int64_t n, int64_t inner) override {
    inner_.gather(in, index, out, outer, d, n, inner);
  }

  void unary(UnaryOp op, const TensorRef& in, const TensorRef& out, double p0,
             double p1) override {
    if (!any_reduced({&in, &out}) || inner_.native_reduced_precision(Kernel::Elementwise))
      return inner_.unary(op, in, out, p0, p1);
    Staging s(inner_, device_);
    inner_.unary(op, s.in(in), s.out(out), p0, p1);
    s.finish();
  }
  void binary(BinaryOp op, const TensorRef& a, const TensorRef& b,
              const TensorRef& out) override {
    if (!any_reduced({&a, &b, &out}) || inner_.native_reduced_precision(Kernel::Elementwise))
      return inner_.binary(op, a, b, out);
    Staging s(inner_, device_);
    inner_.binary(op, s.in(a), s.in(b), s.out(out));
    s.finish();
  }
  void arange(const TensorRef& out, double start, double step) override {
    if (!any_reduced({&out})) return inner_.arange(out, start, step);
    Staging s(inner_, device_);
    inner_.arange(s.out(out), start, step);
    s.finish();
  }
  void random(const TensorRef& out, RandomDist dist, uint64_t seed, uint64_t offset, double p0,
              double p1) override {
    if (!any_reduced({&out})) return inner_.random(out, dist, seed, offset, p0, p1);
    Staging s(inner_, device_);
    inner_.random(s.out(out), dist, seed, offset, p0, p1);
    s.finish();
  }

  // In blocks of [outer, r, inner] (whole outer rows, else columns of inner), so that the
  // float32 copy of a large input (a bias gradient's sum over every token) stays small.
  void reduce(ReduceOp op, const TensorRef& in, const TensorRef& out, int64_t outer, int64_t r,
              int64_t inner) override {
    if (!any_reduced({&in, &out})) return inner_.reduce(op, in, out, outer, r, inner);
    const int64_t per_outer = std::max<int64_t>(r * inner, 1);
    const int64_t ob = std::clamp<int64_t>(kBlock / per_outer, 1, std::max<int64_t>(outer, 1));
    // Columns only into a 16-bit out (staged, so its block is compacted for the kernel; an
    // int64 out of argmax is written in place and must be whole rows).
    const int64_t ic = ob > 1 || !is_reduced_precision(out.dtype)
                           ? inner
                           : std::clamp<int64_t>(kBlock / std::max<int64_t>(r, 1), 1,
                                                 std::max<int64_t>(inner, 1));
    auto block = [](const TensorRef& t, int64_t o0, int64_t os, int64_t rows, int64_t i0,
                    int64_t is, int64_t row_len) {
      TensorRef b;  // (os, rows, is) of a contiguous (·, rows, row_len)
      b.dtype = t.dtype;
      b.data = static_cast<char*>(t.data) +
               (o0 * rows * row_len + i0) * static_cast<int64_t>(element_size(t.dtype));
      b.ndim = 3;
      b.shape = {os, rows, is};
      b.strides = {rows * row_len, row_len, 1};
      return b;
    };
    for (int64_t o0 = 0; o0 < outer; o0 += ob)
      for (int64_t i0 = 0; i0 < inner; i0 += ic) {
        const int64_t os = std::min(ob, outer - o0), is = std::min(ic, inner - i0);
        Staging s(inner_, device_);
        TensorRef x = s.in(block(in, o0, os, r, i0, is, inner));
        TensorRef y = s.out(block(out, o0, os, 1, i0, is, inner));
        inner_.reduce(op, x, y, os, r, is);
        s.finish();
      }
  }
  void softmax(const TensorRef& in, const TensorRef& out, int64_t outer, int64_t r, int64_t inner,
               bool log) override {
    if (!any_reduced({&in, &out})) return inner_.softmax(in, out, outer, r, inner, log);
    Staging s(inner_, device_);
    inner_.softmax(s.in(in), s.out(out), outer, r, inner, log);
    s.finish();
  }
  void softmax_backward(const TensorRef& g, const TensorRef& y, const TensorRef& out,
                        int64_t outer, int64_t r, int64_t inner, bool log) override {
    if (!any_reduced({&g, &y, &out}))
      return inner_.softmax_backward(g, y, out, outer, r, inner, log);
    Staging s(inner_, device_);
    inner_.softmax_backward(s.in(g), s.in(y), s.out(out), outer, r, inner, log);
    s.finish();
  }

  // A 16-bit GEMM runs on float32 copies. A small one is staged whole; a large one in
  // blocks — one batch entry, up to mb rows of A and C, up to kb of the inner dim — so no
  // float32 copy holds more than kBlock elements (the copies are scratch next to 16-bit
  // activations: whole ones would double a large GEMM's memory). C's block stays float32
  // across the inner dim's blocks and is rounded once.
  bool gemm_adds_bias(DType dt) const override {
    return (!is_reduced_precision(dt) || inner_.native_reduced_precision(Kernel::Gemm)) &&
           inner_.gemm_adds_bias(dt);
  }
  void gemm(const GemmArgs& g) override {
    if (!is_reduced_precision(g.dtype) || inner_.native_reduced_precision(Kernel::Gemm))
      return inner_.gemm(g);
    // (gemm_adds_bias is false here, so no caller set an epilogue: the staged paths below
    // would apply it per inner block)
    RG_ASSERT(!g.bias && !g.relu && !g.gelu_out);
    if (g.batch * g.m * g.k <= kBlock && g.batch * g.k * g.n <= kBlock &&
        g.batch * g.m * g.n <= kBlock)
      return gemm_block(g);
    const int64_t kb = std::clamp<int64_t>(kBlock / std::max<int64_t>(g.n, 1), 1,
                                           std::max<int64_t>(g.k, 1));
    const int64_t mb = std::clamp<int64_t>(kBlock / std::max<int64_t>({kb, g.n, 1}), 1,
                                           std::max<int64_t>(g.m, 1));
    const int64_t es = static_cast<int64_t>(element_size(g.dtype));
    auto at = [es](const void* p, int64_t elements) {
      return static_cast<const char*>(p) + elements * es;
    };
    for (int64_t bi = 0; bi < g.batch; ++bi)
      for (int64_t m0 = 0; m0 < g.m; m0 += mb) {
        const int64_t rows = std::min(mb, g.m - m0);
        Staging sc(inner_, device_);
        TensorRef c0 = matrix(at(g.c, bi * g.c_batch_stride + m0 * g.ldc()), g.dtype, 1, rows,
                              g.n, 0, g.ldc(), 1);
        TensorRef c = g.beta != 0.0 ? sc.inout(c0) : sc.out(c0);
        for (int64_t k0 = 0; k0 == 0 || k0 < g.k; k0 += kb) {
          const int64_t depth = std::min(kb, g.k - k0);
          Staging s(inner_, device_);
          TensorRef a = s.in(matrix(at(g.a, bi * g.a_batch_stride + m0 * g.a_row_stride +
                                                k0 * g.a_col_stride),
                                    g.dtype, 1, rows, depth, 0, g.a_row_stride, g.a_col_stride));
          TensorRef b = s.in(matrix(at(g.b, bi * g.b_batch_stride + k0 * g.b_row_stride), g.dtype,
                                    1, depth, g.n, 0, g.b_row_stride, g.b_col_stride));
          GemmArgs f = g;  // alpha kept
          f.dtype = kFloat32;
          f.batch = 1, f.m = rows, f.k = depth;
          f.a = a.data, f.a_batch_stride = 0, f.a_row_stride = depth, f.a_col_stride = 1;
          f.b = b.data, f.b_batch_stride = 0, f.b_row_stride = g.n, f.b_col_stride = 1;
          f.c = c.data, f.c_batch_stride = 0, f.c_row_stride = g.n;
          f.beta = k0 == 0 ? g.beta : 1.0;  // later inner blocks add to the float32 block
          inner_.gemm(f);
        }
        sc.finish();
      }
  }

  void gemm_block(const GemmArgs& g) {
    Staging s(inner_, device_);
    TensorRef a = s.in(matrix(g.a, g.dtype, g.batch, g.m, g.k, g.a_batch_stride, g.a_row_stride,
                              g.a_col_stride));
    TensorRef b = s.in(matrix(g.b, g.dtype, g.batch, g.k, g.n, g.b_batch_stride, g.b_row_stride,
                              g.b_col_stride));
    TensorRef c0 = matrix(g.c, g.dtype, g.batch, g.m, g.n, g.c_batch_stride, g.ldc(), 1);
    TensorRef c = g.beta != 0.0 ? s.inout(c0) : s.out(c0);
    GemmArgs f = g;
    f.dtype = kFloat32;
    f.a = a.data;
    f.a_batch_stride = a.strides[0], f.a_row_stride = a.strides[1], f.a_col_stride = a.strides[2];
    f.b = b.data;
    f.b_batch_stride = b.strides[0], f.b_row_stride = b.strides[1], f.b_col_stride = b.strides[2];
    // A (rows, cols) operand staged with stride 0 on a size-1 dim: any stride is right there.
    if (g.k <= 1) f.a_col_stride = 1, f.b_row_stride = g.n;
    if (g.m <= 1) f.a_row_stride = std::max<int64_t>(g.k, 1);
    if (g.n <= 1) f.b_col_stride = 1;
    f.c = c.data;
    f.c_batch_stride = g.m * g.n;
    f.c_row_stride = g.n;
    inner_.gemm(f);
    s.finish();
  }

  void layer_norm(const TensorRef& x, const TensorRef& w, const TensorRef& b, const TensorRef& y,
                  const TensorRef& mean, const TensorRef& rstd, int64_t n, int64_t d,
                  double eps) override {
    if (!any_reduced({&x, &w, &b, &y, &mean, &rstd}))
      return inner_.layer_norm(x, w, b, y, mean, rstd, n, d, eps);
    Staging s(inner_, device_);
    inner_.layer_norm(s.in(x), s.in(w), s.in(b), s.out(y), s.out(mean), s.out(rstd), n, d, eps);
    s.finish();
  }
  void layer_norm_backward(const TensorRef& dy, const TensorRef& x, const TensorRef& mean,
                           const TensorRef& rstd, const TensorRef& w, const TensorRef& dx,
                           const TensorRef& dw, const TensorRef& db, int64_t n,
                           int64_t d) override {
    if (!any_reduced({&dy, &x, &mean, &rstd, &w, &dx, &dw, &db}))
      return inner_.layer_norm_backward(dy, x, mean, rstd, w, dx, dw, db, n, d);
    Staging s(inner_, device_);
    inner_.layer_norm_backward(s.in(dy), s.in(x), s.in(mean), s.in(rstd), s.in(w), s.out(dx),
                               s.out(dw), s.out(db), n, d);
    s.finish();
  }

  // A tile's description for the float32 kernel: its mask staged like the operands.
  static AttentionTile float32_tile(Staging& s, const AttentionTile& t) {
    AttentionTile f = t;
    f.dtype = kFloat32;
    f.mask = s.in(t.mask);
    return f;
  }

  // Attention's tile passes: ops_attention.cpp runs a 16-bit attention on float32 copies of
  // its inputs (one staging per call, not per tile), so these see 16 bits only if that
  // changes; they stay correct if it does.
  void attention_tile_forward(const AttentionTile& t, const TensorRef& sc, const TensorRef& m,
                              const TensorRef& l, const TensorRef& o) override {
    if (!any_reduced({&sc, &m, &l, &o, &t.mask}))
      return inner_.attention_tile_forward(t, sc, m, l, o);
    Staging s(inner_, device_);
    const AttentionTile f = float32_tile(s, t);
    inner_.attention_tile_forward(f, s.inout(sc), s.inout(m), s.inout(l), s.inout(o));
    s.finish();
  }
  void attention_tile_probs(const AttentionTile& t, const TensorRef& sc, const TensorRef& lse,
                            const TensorRef& pd) override {
    if (!any_reduced({&sc, &lse, &pd, &t.mask})) return inner_.attention_tile_probs(t, sc, lse, pd);
    Staging s(inner_, device_);
    const AttentionTile f = float32_tile(s, t);
    inner_.attention_tile_probs(f, s.inout(sc), s.in(lse), s.out(pd));
    s.finish();
  }
  void attention_tile_grad(const AttentionTile& t, const TensorRef& p, const TensorRef& dp,
                           const TensorRef& dsum) override {
    if (!any_reduced({&p, &dp, &dsum, &t.mask})) return inner_.attention_tile_grad(t, p, dp, dsum);
    Staging s(inner_, device_);
    const AttentionTile f = float32_tile(s, t);
    inner_.attention_tile_grad(f, s.in(p), s.inout(dp), s.in(dsum));
    s.finish();
  }
  // The fused tile kernels take float32 tiles only (16-bit attention arrives as float32).
  bool attention_tile_fused_forward(const AttentionTileForward& a) override {
    return !is_reduced_precision(a.tile.dtype) && inner_.attention_tile_fused_forward(a);
  }
  bool attention_tile_fused_backward(const AttentionTileBackward& a) override {
    return !is_reduced_precision(a.tile.dtype) && inner_.attention_tile_fused_backward(a);
  }
  bool attention_tile_fused(const AttentionTile& t, int64_t d, int64_t dv, Pass pass) override {
    return !is_reduced_precision(t.dtype) && inner_.attention_tile_fused(t, d, dv, pass);
  }
  AttentionPlan attention_plan(int64_t pairs) override { return inner_.attention_plan(pairs); }
  void attention_run(int64_t items, const AttentionPlan& plan,
                     const std::function<void(int64_t, int)>& body) override {
    inner_.attention_run(items, plan, body);
  }

  void adam_step(const TensorRef& p, const TensorRef& g, const TensorRef& m, const TensorRef& v,
                 const AdamStep& h) override {
    if (!any_reduced({&p, &g, &m, &v})) return inner_.adam_step(p, g, m, v, h);
    Staging s(inner_, device_);
    inner_.adam_step(s.inout(p), s.in(g), s.inout(m), s.inout(v), h);
    s.finish();
  }
  void cross_entropy(const TensorRef& logits, const TensorRef& target, const TensorRef& loss,
                     const TensorRef& lse, int64_t n, int64_t c, double smoothing,
                     int64_t ignore_index) override {
    if (!any_reduced({&logits, &loss, &lse}))
      return inner_.cross_entropy(logits, target, loss, lse, n, c, smoothing, ignore_index);
    Staging s(inner_, device_);
    inner_.cross_entropy(s.in(logits), target, s.out(loss), s.out(lse), n, c, smoothing,
                         ignore_index);
    s.finish();
  }
  void cross_entropy_backward(const TensorRef& gl, const TensorRef& logits,
                              const TensorRef& target, const TensorRef& lse, const TensorRef& gx,
                              int64_t n, int64_t c, double smoothing,
                              int64_t ignore_index) override {
    if (!any_reduced({&gl, &logits, &lse, &gx}))
      return inner_.cross_entropy_backward(gl, logits, target, lse, gx, n, c, smoothing,
                                           ignore_index);
    Staging s(inner_, device_);
    inner_.cross_entropy_backward(s.in(gl), s.in(logits), target, s.in(lse), s.out(gx), n, c,
                                  smoothing, ignore_index);
    s.finish();
  }
  void index_add(const TensorRef& out, const TensorRef& index, const TensorRef& src,
                 int64_t outer, int64_t d, int64_t n, int64_t inner) override {
    if (!any_reduced({&out, &src})) return inner_.index_add(out, index, src, outer, d, n, inner);
    Staging s(inner_, device_);
    inner_.index_add(s.inout(out), index, s.in(src), outer, d, n, inner);
    s.finish();
  }
  void scatter_add(const TensorRef& out, const TensorRef& index, const TensorRef& src,
                   int64_t outer, int64_t d, int64_t n, int64_t inner) override {
    if (!any_reduced({&out, &src})) return inner_.scatter_add(out, index, src, outer, d, n, inner);
    Staging s(inner_, device_);
    inner_.scatter_add(s.inout(out), index, s.in(src), outer, d, n, inner);
    s.finish();
  }

 private:
  Backend& inner_;
  Device device_;
};

}  // namespace

Backend& backend(Device device, const char* op) {
  if (device.is_cpu()) {
    static StagedBackend cpu_backend(cpu::backend(), Device::cpu());
    return cpu_backend;
  }
  Backend& inner = cuda::backend(op);  // throws in a build or on a machine without CUDA
  static StagedBackend cuda_backend(inner, Device::cuda());
  return cuda_backend;
}

}  // namespace ringgrad
