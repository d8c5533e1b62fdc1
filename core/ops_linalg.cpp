// ops_linalg.cpp — matmul, with torch.matmul's rules for 1-D and batched operands.
//
// Every case becomes one strided-batched GEMM: C[b] = A[b]·B[b], where each
// operand is read in its own layout (row-major, or column-major for a
// transposed view) and broadcast batch dims get batch stride 0. Only an operand
// whose layout no GEMM can read (e.g. a slice with steps in both dims) is copied.
#include "ringgrad/core/autocast.h"
#include "ringgrad/core/op_utils.h"

namespace ringgrad {

using autograd::Grads;

namespace {

// How a GEMM reads one (batch…, rows, cols) operand.
struct Operand {
  Tensor t;  // possibly a contiguous copy of the original
  int64_t batch_stride = 0, row_stride = 0, col_stride = 0;
};

// Batch dims [0, nb) collapse to one stride when they are evenly spaced (or all broadcast).
bool batch_stride_of(const Tensor& t, int64_t nb, int64_t* stride) {
  int64_t s = 0, expected = -1;
  for (int64_t d = nb - 1; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (expected < 0) {
      s = t.stride(d);
      expected = s * t.size(d);
    } else if (s == 0 ? t.stride(d) != 0 : t.stride(d) != expected) {
      return false;
    } else {
      expected = t.stride(d) * t.size(d);
    }
  }
  *stride = s;
  return true;
}

// The GEMM layout of t's last two dims, or false when neither layout fits.
bool matrix_layout(const Tensor& t, int64_t* rs, int64_t* cs) {
  int64_t rows = t.size(-2), cols = t.size(-1);
  int64_t r = t.stride(-2), c = t.stride(-1);
  if (c == 1 || cols == 1) {  // row-major: leading dimension r
    *rs = rows == 1 ? cols : r;
    *cs = 1;
    if (*rs >= cols) return true;
  }
  if (r == 1 || rows == 1) {  // column-major: leading dimension c
    *rs = 1;
    *cs = cols == 1 ? rows : c;
    if (*cs >= rows) return true;
  }
  return false;
}

Operand gemm_operand(const Tensor& t, int64_t nb) {
  Operand op{t};
  if (!batch_stride_of(t, nb, &op.batch_stride) ||
      !matrix_layout(t, &op.row_stride, &op.col_stride)) {
    op.t = t.contiguous();
    batch_stride_of(op.t, nb, &op.batch_stride);
    matrix_layout(op.t, &op.row_stride, &op.col_stride);
  }
  return op;
}

// What the GEMM does to its product while a block of it is in cache (GemmArgs): add `bias`
// (n, contiguous) to every row, then max(0, ·) (relu) or GELU into `gelu_out` (laid out as
// the product). Only where the caller has asked gemm_adds_bias.
struct Epilogue {
  Tensor bias;
  bool relu = false;
  Tensor gelu_out;
  bool gelu_tanh = false;
};

// a (…, m, k) @ b (…, k, n), both at least 2-D, with the epilogue e.
Tensor matmul_nd(const Tensor& a, const Tensor& b, const Epilogue& e = {}) {
  const char* op = "matmul";
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  RG_CHECK(b.size(-2) == k, op, "expected a.shape[-1] == b.shape[-2], got ", shape_str(a.shape()),
           " and ", shape_str(b.shape()));
  Operand A, B;
  Shape out_shape;
  int64_t batch_count = 1;
  if (a.dim() == 2 && b.dim() == 2) {  // the common case (Linear): no batch dims to line up
    A = gemm_operand(a, 0);
    B = gemm_operand(b, 0);
    out_shape = {m, n};
  } else {
    Shape a_batch(a.shape().begin(), a.shape().end() - 2);
    Shape b_batch(b.shape().begin(), b.shape().end() - 2);
    Shape batch;
    try {
      batch = broadcast_shapes(a_batch, b_batch, op);
    } catch (const Error&) {
      fail(op, "expected broadcastable batch dims, got ", shape_str(a.shape()), " and ",
           shape_str(b.shape()));
    }
    Shape a_full = batch, b_full = batch;
    out_shape = batch;
    a_full.insert(a_full.end(), {m, k});
    b_full.insert(b_full.end(), {k, n});
    out_shape.insert(out_shape.end(), {m, n});
    int64_t nb = static_cast<int64_t>(batch.size());
    batch_count = numel_of(batch);
    A = gemm_operand(a.detach().expand(a_full), nb);
    B = gemm_operand(b.detach().expand(b_full), nb);
  }
  Tensor out = empty(out_shape, detail::options_of(a));
  GemmArgs g;
  g.dtype = a.dtype();
  g.batch = batch_count;
  g.m = m, g.n = n, g.k = k;
  g.a = A.t.raw_data(), g.a_batch_stride = A.batch_stride;
  g.a_row_stride = A.row_stride, g.a_col_stride = A.col_stride;
  g.b = B.t.raw_data(), g.b_batch_stride = B.batch_stride;
  g.b_row_stride = B.row_stride, g.b_col_stride = B.col_stride;
  g.c = out.raw_data(), g.c_batch_stride = m * n;
  g.bias = e.bias.defined() ? e.bias.raw_data() : nullptr;
  g.relu = e.relu;
  RG_ASSERT(!e.gelu_out.defined() || (!e.relu && e.gelu_out.shape() == out_shape &&
                                      e.gelu_out.is_contiguous()));
  g.gelu_out = e.gelu_out.defined() ? e.gelu_out.raw_data() : nullptr;
  g.gelu_tanh = e.gelu_tanh;
  if (out.numel() > 0) backend(a.device(), op).gemm(g);

  // dA = dC·Bᵀ, dB = Aᵀ·dC, each summed over the batch dims it was broadcast along.
  if (autograd::needs_grad({&a, &b}))
    autograd::record(
        "matmul", out, {&a, &b},
        [a = a.detach(), b = b.detach()](const Tensor& g, const std::vector<bool>& need) {
          Tensor da, db;
          if (need[0]) da = sum_to(matmul_nd(g, b.transpose(-2, -1)), a.shape());
          if (need[1]) db = sum_to(matmul_nd(a.transpose(-2, -1), g), b.shape());
          return Grads{da, db};
        });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  const char* op = "matmul";
  if (auto dt = detail::autocast_lower({&a, &b}))  // under rg::autocast: in its dtype
    return matmul(detail::autocast_cast(a, *dt), detail::autocast_cast(b, *dt));
  detail::check_defined(a, op);
  detail::check_defined(b, op);
  detail::check_same_device(a, b, op);
  detail::check_same_dtype(a, b, op);
  detail::check_floating(a, op);
  RG_CHECK(a.dim() >= 1 && b.dim() >= 1, op, "expected tensors with at least 1 dim, got ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  RG_CHECK(a.size(-1) == b.size(b.dim() == 1 ? 0 : -2), op,
           "expected a.shape[-1] == b.shape[-2] (or b.shape[0] for 1-D b), got ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  // 1-D operands become matrices (a row for a, a column for b) and lose that dim again after.
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(-1) : b;
  Tensor out = matmul_nd(a2, b2);
  if (b.dim() == 1) out = out.squeeze(-1);
  if (a.dim() == 1) out = out.squeeze(-1 - (b.dim() == 1 ? 0 : 1));
  return out;
}

namespace {

// The activation an addmm ends in.
enum class Act { none, relu, gelu, gelu_tanh };

// act(addmm(input, a, b)) without autograd: the result, and for GELU its input (what
// GELU's backward needs). Where the backend's GEMM takes the epilogue (a bias vector, the
// CPU, float32 or float64) the bias and the activation are applied to each block of the
// product while it is in cache; else passes after.
AddmmActivation addmm_act_forward(const Tensor& input, const Tensor& a, const Tensor& b, Act act,
                                  const char* op) {
  for (const Tensor* t : {&input, &a, &b}) {
    detail::check_defined(*t, op);
    detail::check_same_device(a, *t, op);
    detail::check_same_dtype(a, *t, op);
  }
  detail::check_floating(a, op);
  RG_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), op,
           "expected a (n, m) and b (m, p), got ", shape_str(a.shape()), " and ",
           shape_str(b.shape()));
  const int64_t n = a.size(0), p = b.size(1);
  const bool broadcasts = input.dim() <= 2 &&
                          (input.dim() < 1 || input.size(-1) == p || input.size(-1) == 1) &&
                          (input.dim() < 2 || input.size(0) == n || input.size(0) == 1);
  RG_CHECK(broadcasts, op, "expected input that broadcasts to ", shape_str({n, p}),
           " (a bias (p), or (n, p)), got ", shape_str(input.shape()));
  const bool in_gemm = input.dim() >= 1 && input.numel() == p && input.size(-1) == p &&
                       input.is_contiguous() &&
                       backend(a.device(), op).gemm_adds_bias(a.dtype());
  const bool gelu = act == Act::gelu || act == Act::gelu_tanh;
  NoGradGuard no_grad;
  if (in_gemm) {
    Epilogue e{.bias = input, .relu = act == Act::relu, .gelu_out = Tensor(),
               .gelu_tanh = act == Act::gelu_tanh};
    if (gelu) e.gelu_out = empty({n, p}, detail::options_of(a));
    Tensor product = matmul_nd(a, b, e);
    if (gelu) return {e.gelu_out, product};
    return {product, Tensor()};
  }
  Tensor product = matmul_nd(a, b);
  product.add_(input);
  if (act == Act::relu) return {ringgrad::relu(product), Tensor()};
  if (gelu)
    return {ringgrad::gelu(product, act == Act::gelu_tanh ? GeluApprox::Tanh : GeluApprox::None),
            product};
  return {product, Tensor()};
}

Tensor addmm_impl(const Tensor& input, const Tensor& a, const Tensor& b, Act act) {
  const char* op = act == Act::none ? "addmm" : act == Act::relu ? "addmm_relu" : "addmm_gelu";
  if (auto dt = detail::autocast_lower({&input, &a, &b}))  // under rg::autocast: in its dtype
    return addmm_impl(detail::autocast_cast(input, *dt), detail::autocast_cast(a, *dt),
                      detail::autocast_cast(b, *dt), act);
  AddmmActivation r = addmm_act_forward(input, a, b, act, op);
  if (autograd::needs_grad({&input, &a, &b}))
    autograd::record(
        op, r.out, {&input, &a, &b},
        [input_shape = input.shape(), a = a.detach(), b = b.detach(), act,
         y = act == Act::relu ? r.out.detach() : Tensor(),
         x = r.gelu_input.defined() ? r.gelu_input.detach() : Tensor()](
            const Tensor& g_out, const std::vector<bool>& need) {
          const Tensor g = act == Act::relu ? relu_backward(g_out, y)
                           : act == Act::none
                               ? g_out
                               : gelu_backward(g_out, x,
                                               act == Act::gelu_tanh ? GeluApprox::Tanh
                                                                     : GeluApprox::None);
          return Grads{need[0] ? sum_to(g, input_shape) : Tensor(),
                       need[1] ? matmul(g, b.t()) : Tensor(),
                       need[2] ? matmul(a.t(), g) : Tensor()};
        });
  return r.out;
}

}  // namespace

Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b) {
  return addmm_impl(input, a, b, Act::none);
}

Tensor addmm_relu(const Tensor& input, const Tensor& a, const Tensor& b) {
  return addmm_impl(input, a, b, Act::relu);
}

Tensor addmm_gelu(const Tensor& input, const Tensor& a, const Tensor& b, GeluApprox approximate) {
  return addmm_impl(input, a, b, approximate == GeluApprox::Tanh ? Act::gelu_tanh : Act::gelu);
}

AddmmActivation addmm_gelu_forward(const Tensor& input, const Tensor& a, const Tensor& b,
                                   GeluApprox approximate) {
  return addmm_act_forward(input, a, b,
                           approximate == GeluApprox::Tanh ? Act::gelu_tanh : Act::gelu,
                           "addmm_gelu");
}

}  // namespace ringgrad
