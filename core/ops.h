// ops.h — the differentiable operations on tensors.
//
// Every op checks its inputs (shapes, dtypes, devices) and throws
// ringgrad::Error "[op] expected …, got …" on a mismatch, runs on the device
// of its inputs, and, when an input requires grad, records how to undo itself
// for backward. Binary ops broadcast with NumPy's rules. Operands of two floating
// dtypes promote as in PyTorch (bfloat16 + float32 → float32, anything with float64 →
// float64; each gradient comes back in its input's dtype); other mixes are an error, and a
// plain number adopts the tensor's dtype.
#pragma once

#include <vector>

#include "ringgrad/core/tensor.h"

namespace ringgrad {

// ---- elementwise binary (broadcasting) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// pow's gradients follow PyTorch's at the edges: 0 for the base wherever the exponent is 0
// (also at base 0), 0 for the exponent where the base is 0 and the exponent >= 0.
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

// Comparisons return bool tensors and are not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

// ---- elementwise unary ----
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// relu's gradient from its output: grad where out > 0, else 0 (torch's
// threshold_backward(grad, out, 0)); for ops that fuse a relu into their own forward.
Tensor relu_backward(const Tensor& grad, const Tensor& out);
enum class GeluApprox { None, Tanh };  // None: x·Φ(x) with erf; Tanh: the tanh approximation
Tensor gelu(const Tensor& x, GeluApprox approximate = GeluApprox::None);
// gelu's gradient from its input: grad·gelu'(x) (torch's gelu_backward(grad, x)); for ops
// that fuse a gelu into their own forward.
Tensor gelu_backward(const Tensor& grad, const Tensor& x,
                     GeluApprox approximate = GeluApprox::None);
Tensor abs(const Tensor& x);
// Gradient 1 strictly inside the bounds, 0 at a bound and beyond (PyTorch 2.x), so
// clamp_min(x, 0) and relu agree at 0. clamp_min/clamp_max test only their one bound.
Tensor clamp(const Tensor& x, double min, double max);
Tensor clamp_min(const Tensor& x, double min);
Tensor clamp_max(const Tensor& x, double max);

// ---- selection ----
// where(cond, a, b): a where cond is true, else b (all three broadcast).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// ---- reductions (dims empty = all dims) ----
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);  // max values
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  // int64 indices
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// torch.max(x, dim) / torch.min(x, dim): the extreme values along dim and their int64
// indices (the first on ties, the first NaN if any, as torch on the CPU). The whole
// gradient goes to that index; amax/amin split it evenly among ties instead.
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
// Sum a broadcast gradient back down to `shape` (the inverse of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- softmax ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- normalisation ----
// Layer norm over the trailing dims `normalized_shape` (torch.nn.functional.layer_norm):
// (x − mean)/√(var + eps)·weight + bias, mean and (biased) var per sample. weight and
// bias have shape normalized_shape and may be undefined. One fused op, forward and backward.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// ---- losses ----
// Softmax cross-entropy per sample, fused (one pass, stable for large logits):
// logits (N, C), target (N) int64 class indices -> loss (N). With label smoothing ε
// the target distribution is (1-ε)·onehot + ε/C; samples whose target equals
// ignore_index get loss 0 (and no gradient). nn::cross_entropy adds the reduction.
Tensor cross_entropy_per_sample(const Tensor& logits, const Tensor& target,
                                double label_smoothing = 0.0, int64_t ignore_index = -100);

// ---- linear algebra ----
// 1-D·1-D dot, matrix×vector, matrix×matrix, and batched with broadcast batch dims,
// exactly as torch.matmul. Transposed operands are read in place, not copied.
Tensor matmul(const Tensor& a, const Tensor& b);
// input + a·b, as torch.addmm (beta = alpha = 1): a (n, m), b (m, p), input broadcastable to
// (n, p). A bias vector (p) is added inside the GEMM where the backend can (the CPU adds it
// to each block of the product while that block is in cache): nn::linear's y = x·Wᵀ + b.
Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b);
// relu(addmm(input, a, b)) (torch's _addmm_activation): where the bias goes into the GEMM
// (a bias vector, the CPU, float32 or float64), so does max(0, ·), applied to each block of
// the product while it is in cache — no pass of its own over the output; elsewhere a relu
// pass after. nn::linear_relu's forward.
Tensor addmm_relu(const Tensor& input, const Tensor& a, const Tensor& b);
// gelu(addmm(input, a, b)) (torch's _addmm_activation with use_gelu): as addmm_relu, the
// bias and GELU applied to each block of the product while it is in cache where the GEMM
// takes them. The product itself is kept too (GELU's backward needs its input), so this
// saves passes over memory, not memory. nn::linear_gelu's forward.
Tensor addmm_gelu(const Tensor& input, const Tensor& a, const Tensor& b,
                  GeluApprox approximate = GeluApprox::None);
// addmm_gelu's forward without autograd, for ops that record their own backward: out =
// gelu(gelu_input), gelu_input = input + a·b.
struct AddmmActivation {
  Tensor out, gelu_input;
};
AddmmActivation addmm_gelu_forward(const Tensor& input, const Tensor& a, const Tensor& b,
                                   GeluApprox approximate = GeluApprox::None);

// ---- indexing ----
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);  // index: 1-D int64
// gather: out[i][j][k] = x[index[i][j][k]][j][k] for dim 0; index has x's ndim and at most
// x's size on the other dims (torch's rule). scatter_add takes the same index.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// out = x with src added at index along dim (x[.., index[i], ..] += src[.., i, ..]).
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// out = x with src added at index: out[.., index[i,j], ..] += src[.., i, j, ..] along dim.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// ---- joining and splitting ----
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// ---- fused optimizer updates (what optim/ runs; no autograd) ----
// One Adam/AdamW step (PyTorch's formulas; see optim/optimizer.h), hyperparameters for
// the kernel. decoupled: AdamW's p -= lr·wd·p; otherwise Adam's g += wd·p.
struct AdamStep {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;  // 1 for the first update (bias correction)
  bool decoupled = false;
};

// In place: param, exp_avg, exp_avg_sq (contiguous, one shape and dtype, like grad).
void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                const AdamStep& hyper);

// out = a * factor, written into an existing tensor (ATen's mul_out): one pass
// instead of copy_ then mul_. DDP fills its buckets with gradient / world size.
// out keeps its shape; a broadcasts to it. Not recorded by autograd.
Tensor& mul_out(Tensor& out, const Tensor& a, double factor);

// ---- operators ----
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);

// True when shapes match and every |a - b| <= atol + rtol·|b| (like torch.allclose).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// Shape that a and b broadcast to; throws "[op] expected broadcastable shapes…" otherwise.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast");

}  // namespace ringgrad
