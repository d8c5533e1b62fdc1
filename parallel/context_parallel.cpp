// context_parallel.cpp — the context-parallel region: shard buffers, route attention
// through the ring, and undo both at the end (see context_parallel.h).
//
// Sharding, N = 2, T = 8 positions p0…p7:
//   contiguous                rank 0: p0 p1 p2 p3            rank 1: p4 p5 p6 p7
//   zigzag (causal), 4 chunks rank 0: [p0 p1 | p6 p7]        rank 1: [p2 p3 | p4 p5]
// gather_sequence undoes either: all_gather the shards, put the chunks back in order.
#include "ringgrad/parallel/context_parallel.h"

#include <utility>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::parallel {

namespace {

constexpr const char* kOp = "context_parallel";

// How many chunks the sequence is cut into: N, or 2N for zigzag.
int64_t chunks_of(SequenceLayout layout, int size) {
  return layout == SequenceLayout::Zigzag ? 2 * int64_t(size) : int64_t(size);
}

// Attention inside the region: the ring over `comm`, with the call's own options.
Tensor region_attention(Communicator& comm, SequenceLayout layout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const AttentionOptions& o) {
  RG_CHECK(!o.mask.defined(), kOp,
           "expected no attention mask inside a context-parallel region (masks are not "
           "supported there yet; causal attention is), got a mask of shape ",
           shape_str(o.mask.shape()));
  RG_CHECK(o.q_offset == 0 && o.k_offset == 0, kOp,
           "expected q_offset = k_offset = 0 (the ring sets positions itself), got ", o.q_offset,
           " and ", o.k_offset);
  if (q.dim() == 3 && k.dim() == 3 && v.dim() == 3)  // (N, T, D): one head
    return region_attention(comm, layout, q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), o)
        .squeeze(1);
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
    : comm_(comm), layout_(options.causal ? SequenceLayout::Zigzag : SequenceLayout::Contiguous) {
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
  previous_ = nn::set_attention_impl(
      [c, layout](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
        return region_attention(*c, layout, q, k, v, o);
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
