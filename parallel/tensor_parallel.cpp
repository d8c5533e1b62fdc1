// tensor_parallel.cpp — the four communication functions, then the layers built on them.
#include "ringgrad/parallel/tensor_parallel.h"

#include <map>
#include <sstream>

#include "ringgrad/autograd/function.h"
#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/autocast.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"
#include "ringgrad/nn/functional.h"

namespace ringgrad::parallel {

namespace {

// Every rank's x concatenated along `dim`, in rank order (no autograd).
Tensor all_gather_dim(const Tensor& x, Communicator& tp, int64_t dim) {
  Tensor stacked = tp.all_gather(x.contiguous());  // (N, …): x's dim d is dim d + 1 here
  Dims order;
  for (int64_t d = 1; d <= dim; ++d) order.push_back(d);
  order.push_back(0);  // N just before x's dim: (…, N, size(dim), …)
  for (int64_t d = dim + 1; d < stacked.dim(); ++d) order.push_back(d);
  Shape shape = x.shape();
  shape[static_cast<size_t>(dim)] *= tp.size();
  return stacked.permute(order).reshape(shape);
}
Tensor all_gather_last(const Tensor& x, Communicator& tp) { return all_gather_dim(x, tp, x.dim() - 1); }

// This rank's slice of `dim` (no autograd).
Tensor my_slice(const Tensor& x, Communicator& tp, int64_t dim, const char* who) {
  const int64_t d = x.size(dim);
  RG_CHECK(d % tp.size() == 0, who, "expected dim ", dim, " divisible by the tensor-parallel size ",
           tp.size(), ", got shape ", shape_str(x.shape()));
  const int64_t k = d / tp.size();
  return x.narrow(dim, tp.rank() * k, k).contiguous();
}
Tensor my_slice_last(const Tensor& x, Communicator& tp, const char* who) {
  return my_slice(x, tp, x.dim() - 1, who);
}

// The sum over ranks of x, each rank keeping its slice of `dim` (no autograd).
Tensor reduce_scatter_dim(const Tensor& x, Communicator& tp, int64_t dim) {
  RG_CHECK(x.size(dim) % tp.size() == 0, "reduce_scatter_to_sequence_region", "expected dim ", dim,
           " divisible by the tensor-parallel size ", tp.size(), ", got shape ", shape_str(x.shape()));
  Tensor front = x.transpose(0, dim).contiguous();  // the dim to split first
  Shape part = front.shape();
  part[0] /= tp.size();
  Tensor mine = empty(part, {.dtype = x.dtype(), .device = x.device()});
  tp.reduce_scatter_async(mine, front, Reduce::Sum)->wait();
  return mine.transpose(0, dim).contiguous();
}

Tensor summed(const Tensor& x, Communicator& tp) {
  Tensor s = x.contiguous().clone();
  tp.all_reduce(s, Reduce::Sum);
  return s;
}

}  // namespace

// ---------------------------------------------------------------- f, g and their forms

Tensor copy_to_tp_region(const Tensor& x, Communicator& tp) {
  Tensor out = x.detach();
  autograd::record("copy_to_tp_region", out, {&x}, [&tp](const Tensor& g) {
    return autograd::Grads{summed(g, tp)};  // each rank holds a part of dL/dx: add them
  });
  return out;
}

Tensor reduce_from_tp_region(const Tensor& x, Communicator& tp) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = summed(x, tp);
  }
  autograd::record("reduce_from_tp_region", out, {&x}, [](const Tensor& g) {
    return autograd::Grads{g};  // every rank's partial got the same gradient
  });
  return out;
}

Tensor gather_from_tp_region(const Tensor& x, Communicator& tp) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = all_gather_last(x, tp);
  }
  autograd::record("gather_from_tp_region", out, {&x}, [&tp](const Tensor& g) {
    return autograd::Grads{my_slice_last(g, tp, "gather_from_tp_region")};
  });
  return out;
}

Tensor scatter_to_tp_region(const Tensor& x, Communicator& tp) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = my_slice_last(x, tp, "scatter_to_tp_region");
  }
  autograd::record("scatter_to_tp_region", out, {&x}, [&tp](const Tensor& g) {
    return autograd::Grads{all_gather_last(g, tp)};
  });
  return out;
}

Tensor scatter_to_sequence_region(const Tensor& x, Communicator& tp, int64_t seq_dim) {
  const int64_t dim = normalize_dim(seq_dim, x.dim(), "scatter_to_sequence_region");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = my_slice(x, tp, dim, "scatter_to_sequence_region");
  }
  autograd::record("scatter_to_sequence_region", out, {&x}, [&tp, dim](const Tensor& g) {
    return autograd::Grads{all_gather_dim(g, tp, dim)};
  });
  return out;
}

Tensor gather_from_sequence_region(const Tensor& x, Communicator& tp, int64_t seq_dim) {
  const int64_t dim = normalize_dim(seq_dim, x.dim(), "gather_from_sequence_region");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = all_gather_dim(x, tp, dim);
  }
  autograd::record("gather_from_sequence_region", out, {&x}, [&tp, dim](const Tensor& g) {
    return autograd::Grads{reduce_scatter_dim(g, tp, dim)};  // each rank's partial, summed
  });
  return out;
}

Tensor reduce_scatter_to_sequence_region(const Tensor& x, Communicator& tp, int64_t seq_dim) {
  const int64_t dim = normalize_dim(seq_dim, x.dim(), "reduce_scatter_to_sequence_region");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = reduce_scatter_dim(x, tp, dim);
  }
  autograd::record("reduce_scatter_to_sequence_region", out, {&x}, [&tp, dim](const Tensor& g) {
    return autograd::Grads{all_gather_dim(g, tp, dim)};
  });
  return out;
}

Tensor sequence_parallel_linear(const Tensor& x_in, const std::vector<Tensor>& weights_in,
                                const std::vector<Tensor>& biases_in, Communicator& tp, int64_t seq_dim) {
  RG_CHECK(!weights_in.empty() && biases_in.size() == weights_in.size(), "sequence_parallel_linear",
           "expected one bias (or an undefined tensor) for each of ", weights_in.size(), " weights, got ",
           biases_in.size());
  if (auto dt = detail::autocast_lower({&x_in, &weights_in[0], &biases_in[0]})) {  // under rg::autocast
    std::vector<Tensor> w, b;
    for (size_t i = 0; i < weights_in.size(); ++i)
      w.push_back(detail::autocast_cast(weights_in[i], *dt)), b.push_back(detail::autocast_cast(biases_in[i], *dt));
    return sequence_parallel_linear(detail::autocast_cast(x_in, *dt), w, b, tp, seq_dim);
  }
  const int64_t dim = normalize_dim(seq_dim, x_in.dim(), "sequence_parallel_linear");
  std::vector<int64_t> outs;
  for (const Tensor& w : weights_in) {
    RG_CHECK(w.dim() == 2 && x_in.dim() >= 1 && x_in.size(-1) == w.size(1), "sequence_parallel_linear",
             "expected x (…, in) and weights (out, in), got ", shape_str(x_in.shape()), " and ", shape_str(w.shape()));
    outs.push_back(w.size(0));
  }
  Tensor y;
  {
    NoGradGuard no_grad;
    Tensor whole = all_gather_dim(x_in, tp, dim);
    std::vector<Tensor> ys;
    for (size_t i = 0; i < weights_in.size(); ++i) ys.push_back(nn::linear(whole, weights_in[i], biases_in[i]));
    y = ys.size() == 1 ? ys[0] : cat(ys, -1);
  }
  std::vector<const Tensor*> inputs{&x_in};
  bool trains = x_in.requires_grad();
  for (const Tensor& w : weights_in) inputs.push_back(&w), trains = trains || w.requires_grad();
  for (const Tensor& b : biases_in) inputs.push_back(&b), trains = trains || (b.defined() && b.requires_grad());
  if (!is_grad_enabled() || !trains) return y;
  std::vector<Tensor> ws;
  for (const Tensor& w : weights_in) ws.push_back(w.detach());
  autograd::attach(
      y, "sequence_parallel_linear", inputs,
      [x = x_in.detach(), ws, outs, &tp, dim](const Tensor& g, const std::vector<bool>& need) {
        const size_t k = ws.size();
        int64_t total = 0;
        for (int64_t o : outs) total += o;
        Tensor g2 = g.reshape({-1, total});
        std::vector<Tensor> part;  // weight i's columns of the output's gradient
        for (int64_t i = 0, at = 0; i < int64_t(k); at += outs[size_t(i)], ++i)
          part.push_back(k == 1 ? g2 : g2.narrow(1, at, outs[size_t(i)]).contiguous());
        autograd::Grads grads(1 + 2 * k);
        if (need[0]) {  // the whole input's gradient (partial sums), reduce-scattered to the shard
          Tensor dx;
          for (size_t i = 0; i < k; ++i) {
            Tensor d = matmul(part[i], ws[i]);
            dx = dx.defined() ? dx + d : d;
          }
          Shape shape = x.shape();
          shape[static_cast<size_t>(dim)] *= tp.size();
          grads[0] = reduce_scatter_dim(dx.view(shape), tp, dim);
        }
        bool weights = false;
        for (size_t i = 1; i < need.size(); ++i) weights = weights || need[i];
        if (weights) {  // the shard gathered again for the weights' gradients
          Tensor whole = all_gather_dim(x, tp, dim);
          Tensor x2 = whole.reshape({-1, whole.size(-1)});
          for (size_t i = 0; i < k; ++i) {
            if (need[1 + i]) grads[1 + i] = matmul(part[i].t(), x2);
            if (need[1 + k + i]) grads[1 + k + i] = part[i].sum(0);
          }
        }
        return grads;
      });
  return y;
}

// ---------------------------------------------------------------- column parallel

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& whole, Communicator& tp,
                                           ColumnParallelOptions options)
    : ColumnParallelLinear(whole.weight, whole.bias, tp, options) {}

ColumnParallelLinear::ColumnParallelLinear(const Tensor& w, const Tensor& b, Communicator& tp,
                                           ColumnParallelOptions options)
    : in_features(w.size(1)), out_features(w.size(0)), tp_(tp), options_(options) {
  const int64_t n = tp.size();
  if (options.block_rows.empty()) {
    RG_CHECK(out_features % n == 0, "ColumnParallelLinear", "expected out_features ", out_features,
             " divisible by the tensor-parallel size ", n);
    blocks_ = {out_features};
  } else {
    blocks_ = options.block_rows;
    int64_t rows = 0;
    for (int64_t r : blocks_) {
      RG_CHECK(r > 0 && r % n == 0, "ColumnParallelLinear",
               "expected each of block_rows divisible by the tensor-parallel size ", n, ", got ", r);
      rows += r;
    }
    RG_CHECK(rows == out_features, "ColumnParallelLinear",
             "expected block_rows adding up to out_features ", out_features, ", got ", rows);
  }
  RG_CHECK(!(options.gather_output && blocks_.size() > 1), "ColumnParallelLinear",
           "expected gather_output only without stacked blocks");
  NoGradGuard no_grad;
  weight = register_parameter("weight", shard("weight", w).clone());
  if (b.defined()) bias = register_parameter("bias", shard("bias", b).clone());
}

// Rows [r·k, (r+1)·k) of each block of output features, k = its rows / N, in block order.
Tensor ColumnParallelLinear::shard(const std::string&, const Tensor& whole) const {
  const int64_t n = tp_.size();
  std::vector<Tensor> mine;
  int64_t start = 0;
  for (int64_t rows : blocks_) {
    mine.push_back(whole.narrow(0, start + tp_.rank() * (rows / n), rows / n));
    start += rows;
  }
  return mine.size() == 1 ? mine[0] : cat(mine, 0);
}

// Every rank's slices gathered, then each block's put together in rank order.
Tensor ColumnParallelLinear::unshard(const std::string&, const Tensor& local) const {
  const int64_t n = tp_.size();
  Tensor all = tp_.all_gather(local.detach().contiguous());  // (N, Σ k, …)
  std::vector<Tensor> whole;
  int64_t start = 0;
  for (int64_t rows : blocks_) {
    Shape shape = local.shape();
    shape[0] = rows;
    whole.push_back(all.narrow(1, start, rows / n).reshape(shape));  // (N, k, …) -> (rows, …)
    start += rows / n;
  }
  return whole.size() == 1 ? whole[0] : cat(whole, 0);
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  RG_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "ColumnParallelLinear",
           "expected input with last dim ", in_features, ", got shape ", shape_str(x.shape()));
  // The whole input on every rank: as given (f), or gathered from sequence shards.
  Tensor y = options_.sequence_parallel ? sequence_parallel_linear(x, {weight}, {bias}, tp_, options_.seq_dim)
                                        : nn::linear(copy_to_tp_region(x, tp_), weight, bias);  // this rank's slice
  return options_.gather_output ? gather_from_tp_region(y, tp_) : y;
}

std::string ColumnParallelLinear::describe() const {
  std::ostringstream os;
  os << "ColumnParallelLinear(in_features=" << in_features << ", out_features=" << out_features
     << ", tp=" << tp_.size() << ", local_out=" << weight.size(0)
     << (options_.gather_output ? ", gather_output" : "") << ")";
  return os.str();
}

// ---------------------------------------------------------------- row parallel

RowParallelLinear::RowParallelLinear(const nn::Linear& whole, Communicator& tp,
                                     RowParallelOptions options)
    : in_features(whole.in_features), out_features(whole.out_features), tp_(tp),
      options_(options) {
  RG_CHECK(in_features % tp.size() == 0, "RowParallelLinear", "expected in_features ",
           in_features, " divisible by the tensor-parallel size ", tp.size());
  NoGradGuard no_grad;
  weight = register_parameter("weight", shard("weight", whole.weight).clone());
  if (whole.bias.defined()) bias = register_parameter("bias", whole.bias.detach().clone());
}

// The weight's columns [r·in/N, …); the bias is whole on every rank.
Tensor RowParallelLinear::shard(const std::string& name, const Tensor& whole) const {
  if (name == "bias") return whole;
  const int64_t k = in_features / tp_.size();
  return whole.narrow(1, tp_.rank() * k, k);
}

Tensor RowParallelLinear::unshard(const std::string& name, const Tensor& local) const {
  if (name == "bias") return local.detach().clone();
  return all_gather_last(local.detach(), tp_);
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  Tensor mine = options_.input_is_parallel ? x : scatter_to_tp_region(x, tp_);
  RG_CHECK(mine.dim() >= 1 && mine.size(-1) == weight.size(1), "RowParallelLinear",
           "expected this rank's input slice with last dim ", weight.size(1), ", got shape ",
           shape_str(mine.shape()));
  Tensor partial = nn::linear(mine, weight);
  // The partial sums added (g), or added and cut into sequence shards.
  Tensor y = options_.sequence_parallel
                 ? reduce_scatter_to_sequence_region(partial, tp_, options_.seq_dim)
                 : reduce_from_tp_region(partial, tp_);
  return bias.defined() ? y + bias : y;
}

std::string RowParallelLinear::describe() const {
  std::ostringstream os;
  os << "RowParallelLinear(in_features=" << in_features << ", out_features=" << out_features
     << ", tp=" << tp_.size() << ", local_in=" << weight.size(1)
     << (options_.input_is_parallel ? ", input_is_parallel" : "") << ")";
  return os.str();
}

// ---------------------------------------------------------------- attention

namespace {

// in_proj's blocks of rows: q (E), then k and v (kv_heads·head_dim each).
std::vector<int64_t> qkv_rows(const nn::MultiheadAttention& whole) {
  const int64_t kve = whole.kv_heads * whole.head_dim;
  return {whole.embed_dim, kve, kve};
}

}  // namespace

ParallelSelfAttention::ParallelSelfAttention(const nn::MultiheadAttention& whole, Communicator& tp,
                                             bool causal, bool sequence_parallel)
    : embed_dim(whole.embed_dim),
      num_heads(whole.num_heads),
      local_heads(0),
      head_dim(whole.head_dim),
      kv_heads(whole.kv_heads),
      local_kv_heads(0),
      in_proj(whole.in_proj_weight, whole.in_proj_bias, tp,
              {.block_rows = qkv_rows(whole), .sequence_parallel = sequence_parallel}),
      out_proj(whole.out_proj, tp,
               {.input_is_parallel = true, .sequence_parallel = sequence_parallel}),
      causal_(causal),
      rotary_(whole.options().rotary),
      rope_theta_(whole.options().rope_theta) {
  RG_CHECK(whole.in_proj_weight.defined(), "ParallelSelfAttention",
           "expected a MultiheadAttention with one embed_dim for q, k and v");
  RG_CHECK(num_heads % tp.size() == 0 && kv_heads % tp.size() == 0, "ParallelSelfAttention",
           "expected num_heads ", num_heads, " and kv_heads ", kv_heads,
           " divisible by the tensor-parallel size ", tp.size());
  local_heads = num_heads / tp.size();
  local_kv_heads = kv_heads / tp.size();
  // The plain layer's names: in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias.
  register_parameter("in_proj_weight", in_proj.weight);
  if (in_proj.bias.defined()) register_parameter("in_proj_bias", in_proj.bias);
  register_module("out_proj", out_proj);
}

Tensor ParallelSelfAttention::forward(const Tensor& x) { return forward(x, Tensor()); }

Tensor ParallelSelfAttention::forward(const Tensor& x, const Tensor& positions) {
  RG_CHECK(x.dim() == 3 && x.size(2) == embed_dim, "ParallelSelfAttention",
           "expected (B, T, ", embed_dim, ") input, got shape ", shape_str(x.shape()));
  Tensor qkv = in_proj(x);  // (B, T, (H + 2·K)·D/N): this rank's q, k and v heads
  const int64_t b = qkv.size(0), t = qkv.size(1), e = local_heads * head_dim;
  auto heads = [&](int64_t start, int64_t count) {
    return qkv.narrow(2, start * head_dim, count * head_dim)
        .reshape({b, t, count, head_dim})
        .transpose(1, 2);
  };
  Tensor q = heads(0, local_heads), k = heads(local_heads, local_kv_heads);
  Tensor v = heads(local_heads + local_kv_heads, local_kv_heads);
  if (rotary_) {  // as the plain layer: q and k rotated at the tokens' positions
    q = positions.defined() ? nn::rotary_embedding(q, positions, rope_theta_)
                            : nn::rotary_embedding(q, int64_t{0}, rope_theta_);
    k = positions.defined() ? nn::rotary_embedding(k, positions, rope_theta_)
                            : nn::rotary_embedding(k, int64_t{0}, rope_theta_);
  }
  AttentionOptions options;
  options.causal = causal_;
  options.enable_gqa = kv_heads != num_heads;
  Tensor out = nn::attention(q, k, v, options);  // (B, H/N, T, D)
  return out_proj(out.transpose(1, 2).reshape({b, t, e}));
}

Tensor ParallelSelfAttention::shard(const std::string& name, const Tensor& whole) const {
  return in_proj.shard(name, whole);
}

Tensor ParallelSelfAttention::unshard(const std::string& name, const Tensor& local) const {
  return in_proj.unshard(name, local);
}

// ---------------------------------------------------------------- Llama's MLP

ParallelSwiGLU::ParallelSwiGLU(const nn::SwiGLU& whole, Communicator& tp, bool sequence_parallel)
    : w1(whole.w1, tp),
      w2(whole.w2, tp, {.input_is_parallel = true, .sequence_parallel = sequence_parallel}),
      w3(whole.w3, tp),
      tp_(tp),
      sequence_parallel_(sequence_parallel) {
  register_module("w1", w1);
  register_module("w2", w2);
  register_module("w3", w3);
}

Tensor ParallelSwiGLU::forward(const Tensor& x) {
  // One f (or one all-gather of the sequence shards) for both column layers.
  Tensor hidden;
  if (sequence_parallel_) {
    const int64_t h = w1.weight.size(0);
    Tensor both = sequence_parallel_linear(x, {w1.weight, w3.weight}, {w1.bias, w3.bias}, tp_);
    hidden = nn::silu(both.narrow(-1, 0, h)) * both.narrow(-1, h, h);
  } else {
    Tensor whole = copy_to_tp_region(x, tp_);
    hidden = nn::silu(nn::linear(whole, w1.weight, w1.bias)) * nn::linear(whole, w3.weight, w3.bias);
  }
  return w2(hidden);  // row parallel: the partial sums all-reduced (g) or reduce-scattered
}

// ---------------------------------------------------------------- the vocabulary

namespace {

// Whether each index falls in [start, start + size): as the dtype `like` has (1 or 0).
Tensor in_range(const Tensor& indices, int64_t start, int64_t size, const Tensor& like) {
  TensorOptions opts{.dtype = kInt64, .device = indices.device()};
  return ge(indices, full({}, double(start), opts)).to(like.dtype()) *
         lt(indices, full({}, double(start + size), opts)).to(like.dtype());
}

// The index relative to `start`, 0 where it falls outside (masked afterwards).
Tensor local_index(const Tensor& indices, int64_t start, int64_t size) {
  return clamp(indices - full({}, double(start), {.dtype = kInt64, .device = indices.device()}), 0,
               double(size - 1));
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(const nn::Embedding& whole, Communicator& tp,
                                               bool sequence_parallel)
    : num_embeddings(whole.num_embeddings),
      embedding_dim(whole.embedding_dim),
      tp_(tp),
      sequence_parallel_(sequence_parallel) {
  RG_CHECK(num_embeddings % tp.size() == 0, "VocabParallelEmbedding", "expected num_embeddings ",
           num_embeddings, " divisible by the tensor-parallel size ", tp.size());
  RG_CHECK(!whole.padding_idx, "VocabParallelEmbedding", "expected an Embedding without padding_idx");
  vocab_size = num_embeddings / tp.size();
  vocab_start = tp.rank() * vocab_size;
  NoGradGuard no_grad;
  weight = register_parameter("weight", shard("weight", whole.weight).clone());
}

Tensor VocabParallelEmbedding::shard(const std::string&, const Tensor& whole) const {
  return whole.narrow(0, vocab_start, vocab_size);
}

Tensor VocabParallelEmbedding::unshard(const std::string&, const Tensor& local) const {
  Tensor all = tp_.all_gather(local.detach().contiguous());  // (N, V/N, D)
  return all.reshape({num_embeddings, embedding_dim});
}

Tensor VocabParallelEmbedding::forward(const Tensor& indices) {
  RG_CHECK(indices.dtype() == kInt64, "VocabParallelEmbedding", "expected int64 indices, got ",
           indices.dtype());
  Shape out_shape = indices.shape();
  out_shape.push_back(embedding_dim);
  Tensor flat = indices.reshape({-1});
  Tensor rows = index_select(weight, 0, local_index(flat, vocab_start, vocab_size));
  Tensor mine = rows * in_range(flat, vocab_start, vocab_size, rows).unsqueeze(1);  // others: 0
  if (!sequence_parallel_) return reduce_from_tp_region(mine, tp_).view(out_shape);
  RG_CHECK(indices.dim() >= 1, "VocabParallelEmbedding", "expected indices with a sequence dim under "
           "sequence parallelism, got shape ", shape_str(indices.shape()));
  return reduce_scatter_to_sequence_region(mine.view(out_shape), tp_, indices.dim() - 1);
}

Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& target,
                                    Communicator& tp) {
  if (detail::autocast_widen({&local_logits}))  // under autocast: in float32, as cross_entropy
    return vocab_parallel_cross_entropy(local_logits.to(kFloat32), target, tp);
  RG_CHECK(target.dtype() == kInt64 && local_logits.dim() == target.dim() + 1,
           "vocab_parallel_cross_entropy", "expected logits (…, V/N) and int64 targets (…), got ",
           shape_str(local_logits.shape()), " and ", target.dtype(), " ", shape_str(target.shape()));
  const int64_t v = local_logits.size(-1), start = tp.rank() * v;
  Tensor logits = local_logits.reshape({-1, v});
  Tensor t = target.reshape({-1});
  // 1. The max over the whole vocabulary, for a stable exp (a constant: no gradient).
  Tensor m;
  {
    NoGradGuard no_grad;
    m = amax(logits, {1}, /*keepdim=*/true).contiguous();
    tp.all_reduce(m, Reduce::Max);
  }
  Tensor shifted = logits - m;
  // 2. Σ exp over the whole vocabulary: each shard's sum, added.
  Tensor sum_exp = reduce_from_tp_region(exp(shifted).sum(1), tp);
  // 3. Each target's (shifted) logit, from the shard that holds it.
  Tensor picked = gather(shifted, 1, local_index(t, start, v).unsqueeze(1)).squeeze(1);
  Tensor target_logit = reduce_from_tp_region(picked * in_range(t, start, v, picked), tp);
  return (log(sum_exp) - target_logit).mean();
}

// ---------------------------------------------------------------- whole checkpoints

namespace {

// For every parameter and buffer of `model`: its full name, the module that owns it,
// and its local name there.
struct Entry {
  std::string name, local;
  nn::Module* owner;
  Tensor tensor;
};
std::vector<Entry> entries(nn::Module& model) {
  std::vector<Entry> out;
  for (auto& [prefix, m] : model.named_modules()) {
    const std::string head = prefix.empty() ? "" : prefix + ".";
    for (auto& [local, t] : m->named_parameters(/*recurse=*/false)) out.push_back({head + local, local, m, t});
    for (auto& [local, t] : m->named_buffers(/*recurse=*/false)) out.push_back({head + local, local, m, t});
  }
  return out;
}

}  // namespace

NamedTensors tp_unshard(nn::Module& model, const NamedTensors& local) {
  std::map<std::string, Entry> by_name;
  for (Entry& e : entries(model)) by_name.emplace(e.name, e);
  NoGradGuard no_grad;
  NamedTensors whole;
  for (const auto& [name, t] : local) {
    auto it = by_name.find(name);
    auto* tp = it == by_name.end() ? nullptr : dynamic_cast<TensorParallelModule*>(it->second.owner);
    whole.emplace_back(name, tp ? tp->unshard(it->second.local, t) : t.detach().clone());
  }
  return whole;
}

NamedTensors tp_shard(nn::Module& model, const NamedTensors& whole) {
  std::map<std::string, Entry> by_name;
  for (Entry& e : entries(model)) by_name.emplace(e.name, e);
  NamedTensors local;
  for (const auto& [name, t] : whole) {
    auto it = by_name.find(name);
    auto* tp = it == by_name.end() ? nullptr : dynamic_cast<TensorParallelModule*>(it->second.owner);
    local.emplace_back(name, tp ? tp->shard(it->second.local, t) : t);
  }
  return local;
}

NamedTensors tp_full_state_dict(nn::Module& model) { return tp_unshard(model, model.state_dict()); }

void tp_load_full_state_dict(nn::Module& model, const NamedTensors& state) {
  model.load_state_dict(tp_shard(model, state));  // (load_state_dict names what is missing or unexpected)
}

}  // namespace ringgrad::parallel
