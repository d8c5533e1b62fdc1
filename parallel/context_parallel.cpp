// context_parallel.cpp — the context-parallel region: shard buffers, route attention
// through the ring, and undo both at the end (see context_parallel.h).
//
// Sharding, N = 2, T = 8 positions p0…p7:
//   contiguous                rank 0: p0 p1 p2 p3            rank 1: p4 p5 p6 p7
//   zigzag (causal), 4 chunks rank 0: [p0 p1 | p6 p7]        rank 1: [p2 p3 | p4 p5]
// gather_sequence undoes either: all_gather the shards, put the chunks back in order.
#include "ringgrad/parallel/context_parallel.h"

#include <algorithm>
#include <utility>

#include "ringgrad/autograd/function.h"
#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::parallel {

namespace {

constexpr const char* kOp = "context_parallel";

// How many chunks the sequence is cut into: N, or 2N for zigzag.
int64_t chunks_of(SequenceLayout layout, int size) {
  return layout == SequenceLayout::Zigzag ? 2 * int64_t(size) : int64_t(size);
}

// Each rank's shard (rank order) -> the whole sequence (position order), along `dim`.
Tensor to_sequence_order(const std::vector<Tensor>& shards, SequenceLayout layout, int64_t dim) {
  const int n = static_cast<int>(shards.size());
  const int64_t local = shards.front().size(dim);
  std::vector<std::pair<int64_t, Tensor>> pieces;  // (global start, piece)
  for (int r = 0; r < n; ++r)
    for (const ShardPiece& p : shard_pieces(layout, r, n, local))
      pieces.emplace_back(p.global_start, shards[static_cast<size_t>(r)].narrow(dim, p.local_start, p.length));
  std::sort(pieces.begin(), pieces.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Tensor> ordered;
  for (auto& [start, t] : pieces) ordered.push_back(t);
  return cat(ordered, dim);
}

// The whole sequence -> rank r's shard, along `dim`.
Tensor shard_of(const Tensor& whole, SequenceLayout layout, int r, int n, int64_t dim) {
  std::vector<Tensor> parts;
  for (const ShardPiece& p : shard_pieces(layout, r, n, whole.size(dim) / n))
    parts.push_back(whole.narrow(dim, p.global_start, p.length));
  return parts.size() == 1 ? parts.front() : cat(parts, dim);
}

// The whole sequence of x (every rank's shard, in position order) on every rank, as an
// autograd function: backward gives each rank the sum over ranks of its positions'
// gradient (a reduce-scatter).
Tensor all_gather_sequence(const Tensor& x, Communicator& comm, SequenceLayout layout, int64_t dim) {
  const int n = comm.size();
  Tensor whole;
  {
    NoGradGuard no_grad;
    Tensor all = comm.all_gather(x.detach().contiguous());  // (N, …)
    std::vector<Tensor> shards;
    for (int r = 0; r < n; ++r) shards.push_back(all[r]);
    whole = to_sequence_order(shards, layout, dim);
  }
  autograd::record("all_gather_sequence", whole, {&x}, [&comm, layout, dim, n](const Tensor& g) {
    std::vector<Tensor> per_rank;
    for (int r = 0; r < n; ++r) per_rank.push_back(shard_of(g, layout, r, n, dim));
    Tensor stacked = stack(per_rank, 0).contiguous();
    Tensor mine = empty(per_rank.front().shape(), {.dtype = g.dtype(), .device = g.device()});
    comm.reduce_scatter_async(mine, stacked, Reduce::Sum)->wait();
    return autograd::Grads{mine};
  });
  return whole;
}

// all_to_all as an autograd function: x (N, …), chunk j to rank j. It is a permutation
// of the ranks' chunks whose adjoint is the same exchange, so backward is all_to_all too.
Tensor all_to_all_op(const Tensor& x, Communicator& comm) {
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  comm.all_to_all(out, x.detach().contiguous());
  autograd::record("all_to_all", out, {&x}, [&comm](const Tensor& g) {
    Tensor back = empty(g.shape(), {.dtype = g.dtype(), .device = g.device()});
    comm.all_to_all(back, g.contiguous());
    return autograd::Grads{back};
  });
  return out;
}

// The local kernel, never the region's (nn::attention would come back here).
AttentionOptions local_options(const AttentionOptions& o) {
  RG_CHECK(o.dropout_p == 0, kOp, "expected no attention dropout with the AllGather or Ulysses "
           "method (it would not draw one process's mask; the Ring method does), got p = ",
           o.dropout_p);
  AttentionOptions local = o;
  local.q_offset = local.k_offset = 0;
  return local;
}

// Llama 3's: the whole K and V once, each rank's query pieces at their global positions.
Tensor all_gather_attention(Communicator& comm, SequenceLayout layout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  Tensor K = all_gather_sequence(k, comm, layout, 2), V = all_gather_sequence(v, comm, layout, 2);
  std::vector<Tensor> outs;
  for (const ShardPiece& p : shard_pieces(layout, comm.rank(), comm.size(), q.size(2))) {
    AttentionOptions piece = local_options(o);
    piece.q_offset = p.global_start;  // causal by global positions
    outs.push_back(scaled_dot_product_attention(q.narrow(2, p.local_start, p.length), K, V, piece));
  }
  return outs.size() == 1 ? outs.front() : cat(outs, 2);
}

// DeepSpeed's: sequence shards of all heads -> all positions of H/N heads, plain
// attention, and back.
Tensor ulysses_attention(Communicator& comm, SequenceLayout layout, const Tensor& q,
                         const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const int n = comm.size();
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2);
  RG_CHECK(h % n == 0, kOp, "expected the heads (", h, ") divisible by the ", n,
           " ranks for the Ulysses method (each rank takes H/N heads), got ", h, " % ", n, " = ",
           h % n);
  // (B, H, T/N, D) -> chunk j = head group j -> all-to-all -> chunk i = rank i's positions
  auto to_heads = [&](const Tensor& x) {
    Shape grouped{b, n, h / n, t, x.size(3)};
    Tensor chunks = all_to_all_op(x.reshape(grouped).transpose(0, 1).contiguous(), comm);
    std::vector<Tensor> shards;
    for (int r = 0; r < n; ++r) shards.push_back(chunks[r]);
    return to_sequence_order(shards, layout, 2);  // (B, H/N, T, D)
  };
  Tensor out = scaled_dot_product_attention(to_heads(q), to_heads(k), to_heads(v), local_options(o));
  // and back: chunk i = rank i's positions of my heads -> chunk j = head group j of mine
  std::vector<Tensor> per_rank;
  for (int r = 0; r < n; ++r) per_rank.push_back(shard_of(out, layout, r, n, 2));
  Tensor back = all_to_all_op(stack(per_rank, 0), comm);  // (N, B, H/N, T/N, Dv)
  return back.transpose(0, 1).reshape({b, h, t, out.size(3)});
}

// Attention inside the region: the ring over `comm`, with the call's own options.
Tensor region_attention(Communicator& comm, SequenceLayout layout, ContextParallelMethod method,
                        const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  RG_CHECK(!o.mask.defined(), kOp,
           "expected no attention mask inside a context-parallel region (masks are not "
           "supported there yet; causal attention is), got a mask of shape ",
           shape_str(o.mask.shape()));
  RG_CHECK(o.q_offset == 0 && o.k_offset == 0, kOp,
           "expected q_offset = k_offset = 0 (the ring sets positions itself), got ", o.q_offset,
           " and ", o.k_offset);
  if (q.dim() == 3 && k.dim() == 3 && v.dim() == 3)  // (N, T, D): one head
    return region_attention(comm, layout, method, q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), o)
        .squeeze(1);
  if (method == ContextParallelMethod::AllGather) return all_gather_attention(comm, layout, q, k, v, o);
  if (method == ContextParallelMethod::Ulysses) {
    // GQA: Ulysses splits by heads, so K/V get the query's heads first (AllGather gathers
    // the fewer K/V heads and the local kernel repeats them; the ring carries the fewer heads).
    if (o.enable_gqa && k.dim() == 4 && q.dim() == 4 && k.size(1) != q.size(1) && k.size(1) > 0) {
      const int64_t groups = q.size(1) / k.size(1);
      return ulysses_attention(comm, layout, q, repeat_kv_heads(k, groups),
                               repeat_kv_heads(v, groups), o);
    }
    return ulysses_attention(comm, layout, q, k, v, o);
  }
  RingAttentionOptions ro;
  ro.causal = o.causal;
  ro.scale = o.scale;
  ro.dropout_p = o.dropout_p;
  ro.generator = o.generator;
  ro.block_q = o.block_q, ro.block_k = o.block_k;
  ro.layout = layout;  // how the region sharded the sequence, whatever this call's causality
  return ring_attention(q, k, v, comm, ro);
}

}  // namespace

ContextParallel::ContextParallel(Communicator& comm, const std::vector<Tensor*>& buffers,
                                 const std::vector<int64_t>& seq_dims,
                                 ContextParallelOptions options)
    : comm_(comm),
      layout_(options.layout != SequenceLayout::Auto ? options.layout
              : options.causal                       ? SequenceLayout::Zigzag
                                                     : SequenceLayout::Contiguous) {
  RG_CHECK(seq_dims.size() == 1 || seq_dims.size() == buffers.size(), kOp,
           "expected one seq dim for all buffers or one per buffer (", buffers.size(), "), got ",
           seq_dims.size());
  const int64_t chunks = chunks_of(layout_, comm.size());
  // Check every buffer before changing any.
  for (size_t i = 0; i < buffers.size(); ++i) {
    RG_CHECK(buffers[i] && buffers[i]->defined(), kOp, "expected buffer ", i,
             " to be a defined tensor, got ",
             buffers[i] ? "an undefined tensor" : "a null pointer");
    const Tensor& t = *buffers[i];
    int64_t d = seq_dims.size() == 1 ? seq_dims[0] : seq_dims[i];
    d = normalize_dim(d, t.dim(), kOp);
    RG_CHECK(t.size(d) % chunks == 0, kOp, "expected buffer ", i, "'s sequence dim ", d,
             " (length ", t.size(d), ") divisible by ",
             layout_ == SequenceLayout::Zigzag ? "2·N = " : "N = ", chunks, " (N = ", comm.size(),
             " ranks", layout_ == SequenceLayout::Zigzag ? ", causal zigzag" : "", "), got shape ",
             shape_str(t.shape()));
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    int64_t d = seq_dims.size() == 1 ? seq_dims[0] : seq_dims[i];
    buffers_.push_back(buffers[i]);
    originals_.push_back(*buffers[i]);
    *buffers[i] = shard_sequence(*buffers[i], d);  // the caller's handle now holds the shard
  }
  Communicator* c = &comm_;
  SequenceLayout layout = layout_;
  ContextParallelMethod method = options.method;
  previous_ = nn::set_attention_impl(
      [c, layout, method](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
        return region_attention(*c, layout, method, q, k, v, o);
      });
}

ContextParallel::~ContextParallel() {
  nn::set_attention_impl(std::move(previous_));
  for (size_t i = buffers_.size(); i-- > 0;) *buffers_[i] = originals_[i];
}

Tensor ContextParallel::shard_sequence(const Tensor& full, int64_t seq_dim) const {
  const int64_t d = normalize_dim(seq_dim, full.dim(), kOp);
  const int64_t chunks = chunks_of(layout_, comm_.size());
  RG_CHECK(full.size(d) % chunks == 0, kOp, "expected a sequence length divisible by ", chunks,
           ", got shape ", shape_str(full.shape()), " (seq dim ", d, ")");
  const int64_t c = full.size(d) / chunks;
  const int r = comm_.rank(), n = comm_.size();
  if (layout_ == SequenceLayout::Contiguous) return full.narrow(d, r * c, c).contiguous();
  // Zigzag: chunks r and 2N−1−r, one after the other.
  return cat({full.narrow(d, r * c, c), full.narrow(d, (2 * int64_t(n) - 1 - r) * c, c)}, d);
}

Tensor ContextParallel::gather_sequence(const Tensor& shard, int64_t seq_dim) const {
  const int64_t d = normalize_dim(seq_dim, shard.dim(), kOp);
  NoGradGuard no_grad;
  const int n = comm_.size();
  Tensor all = comm_.all_gather(shard.detach().contiguous());  // (N, *shard.shape)
  std::vector<Tensor> chunks;
  if (layout_ == SequenceLayout::Contiguous) {
    for (int r = 0; r < n; ++r) chunks.push_back(all[r]);
  } else {
    RG_CHECK(shard.size(d) % 2 == 0, kOp, "expected an even shard length for zigzag, got shape ",
             shape_str(shard.shape()), " (seq dim ", d, ")");
    const int64_t c = shard.size(d) / 2;
    chunks.resize(2 * size_t(n));
    for (int r = 0; r < n; ++r) {
      chunks[r] = all[r].narrow(d, 0, c);              // chunk r: first half of rank r
      chunks[2 * n - 1 - r] = all[r].narrow(d, c, c);  // chunk 2N−1−r: its second half
    }
  }
  return cat(chunks, d);
}

ContextParallel context_parallel(Communicator& comm, const std::vector<Tensor*>& buffers,
                                 const std::vector<int64_t>& seq_dims,
                                 ContextParallelOptions options) {
  return ContextParallel(comm, buffers, seq_dims, options);
}

}  // namespace ringgrad::parallel
