// ring_attention.cpp — ring attention, forward and backward, step by step.
//
// The problem. A sequence of T positions is too long for one device, so it is
// sharded: each of N ranks holds T/N positions of Q, K and V. Attention needs every
// query to meet every key. Gathering all of K and V on every rank would cost N
// times the memory; instead the K/V shards take turns visiting every rank.
//
// Forward. Rank r keeps its own Q_r. At step s it holds the K/V block of rank
// (r − s) mod N: it computes the local kernel on (Q_r, K_j, V_j), which returns a
// partial output O_j and the log-sum-exp lse_j of each query row over that block's
// keys, and folds it into the running result (core/attention.h, merge_attention_):
//     lse_new = log(exp(lse) + exp(lse_j)),  O = exp(lse − lse_new)·O + exp(lse_j − lse_new)·O_j
// which is exactly the softmax over the union of the keys seen so far. Before
// computing on the block it holds, the rank already posts the send of that block to
// r+1 and the receive of the next one from r−1 into a second buffer (double
// buffering): the transfer runs while the kernel computes, and after the last step
// every rank has met every key. N = 3, block j = the K/V shard of rank j:
//
//              rank 0       rank 1       rank 2       on the wire meanwhile
//     step 0   Q0·K0        Q1·K1        Q2·K2        K0→1  K1→2  K2→0
//     step 1   Q0·K2        Q1·K0        Q2·K1        K2→1  K0→2  K1→0
//     step 2   Q0·K1        Q1·K2        Q2·K0        (nothing: every block seen)
//
// Backward keeps the *global* O and lse (never the per-block ones): with them, the
// gradient contribution of one block is independent of the others,
//     P = exp(scale·Q·K_jᵀ − lse),  D = rowsum(dO ⊙ O),  dV_j = Pᵀ·dO,
//     dS = P ⊙ (dO·V_jᵀ − D),  dQ += scale·dS·K_j,  dK_j = scale·dSᵀ·Q
// (core/attention.h, attention_backward). dQ stays on the rank and accumulates.
// dK_j and dV_j belong to block j's owner, and every rank contributes to them: so
// the K/V blocks go round the ring a second time, and next to each travels an
// accumulator (dK_j, dV_j) to which each rank adds its part before passing it on.
// After N steps the accumulator has visited every rank and sits one rank before
// its owner; one final hop brings it home. N = 3, "dK1 += Q2" = rank 2 adds the
// gradient of (Q2, K1):
//
//              rank 0          rank 1          rank 2          then sent to the right
//     step 0   dK0 += Q0       dK1 += Q1       dK2 += Q2       dK0→1  dK1→2  dK2→0
//     step 1   dK2 += Q0       dK0 += Q1       dK1 += Q2       dK2→1  dK0→2  dK1→0
//     step 2   dK1 += Q0       dK2 += Q1       dK0 += Q2       dK1→1  dK2→2  dK0→0  (home)
//
// The K/V blocks themselves are double-buffered as in the forward (the next block is
// posted before computing); the accumulator can only leave once this rank has added
// to it, so its send follows the compute.
//
// Causal masking and the zigzag layout. With causal attention a query sees only
// keys at or before its own position. Cut contiguously, rank 0 would see almost
// nothing and rank N−1 almost everything. Zigzag cuts the sequence into 2N chunks
// and gives rank r chunks r and 2N−1−r, an early and a late one. N = 3:
//
//     chunks     0  1  2  3  4  5
//     rank       0  1  2  2  1  0          rank 0: [0|5], rank 1: [1|4], rank 2: [2|3]
//
// The local kernel takes one q_offset and one k_offset (where its blocks sit in the
// whole sequence), so each shard is handled as its pieces ("halves"): every
// (query half, key half) pair is one kernel call with its own offsets, and a pair
// whose keys all come after its queries is skipped. That skipping is the whole load
// balance: at step 0 (own block) three of the four pairs run, two of them causal
// diagonals (half the work each); a block from an earlier rank meets both query halves with only
// its first half of K/V; a block from a later rank meets only the second half of
// local Q with both of its halves. Every rank does the same work at every step.
// Dropout uses the global positions and one (seed, offset) for the whole sequence,
// so the mask is the one a single process would draw.
#include "ringgrad/parallel/ring_attention.h"

#include <cmath>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "ringgrad/autograd/function.h"
#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::parallel {

namespace {

constexpr const char* kOp = "ring_attention";
// Tags of their own (MPI matches by tag; NCCL by order, which is the same on both sides).
constexpr int kTagK = 0x5241, kTagV = kTagK + 1, kTagDK = kTagK + 2, kTagDV = kTagK + 3;

int mod(int a, int n) { return ((a % n) + n) % n; }

// Everything the forward fixes once and the backward reuses.
struct Ring {
  Communicator* comm = nullptr;
  int rank = 0, size = 1;
  SequenceLayout layout = SequenceLayout::Contiguous;
  bool causal = false;
  AttentionOptions base;             // scale, tiles, dropout counters, whole lengths
  int64_t tq = 0, tk = 0;            // local lengths
  int64_t groups = 1;                // query heads per K/V head (grouped-query attention)
  std::vector<ShardPiece> q_pieces;  // this rank's query pieces

  // The kernel's options for one (query piece, key piece) pair, with their global
  // offsets; false when, causally, every key of the pair comes after every query.
  //
  // Under the causal zigzag this one rule gives three cases. Rank r holds query
  // halves q0 = chunk r and q1 = chunk 2N−1−r; the block of rank j brings key/value
  // halves k0 = chunk j and k1 = chunk 2N−1−j. A "unit" is one full chunk × chunk:
  //
  //     block from               (q0,k0)    (q0,k1)   (q1,k0)   (q1,k1)    work
  //     itself (step 0, j = r)   diagonal   skipped   full      diagonal   2 units
  //     an earlier rank (j < r)  full       skipped   full      skipped    2 units
  //     a later rank (j > r)     skipped    skipped   full      full       2 units
  //
  // (diagonal: causal within the pair, half a unit.) So every rank does two units at
  // every step: the load balance the zigzag layout exists for.
  bool pair(const ShardPiece& qp, const ShardPiece& kp, AttentionOptions& o) const {
    if (causal && kp.global_start > qp.global_start + qp.length - 1) return false;
    o = base;
    o.q_offset = qp.global_start;
    o.k_offset = kp.global_start;
    return true;
  }
};

// The pieces of t (B, H, T, ·) along the sequence, each made contiguous.
std::vector<Tensor> split_pieces(const Tensor& t, const std::vector<ShardPiece>& pieces) {
  std::vector<Tensor> parts;
  for (const ShardPiece& p : pieces)
    parts.push_back(t.narrow(2, p.local_start, p.length).contiguous());
  return parts;
}

// A K/V block (B, H, Tk, D), (B, H, Tk, Dv) — or its dK/dV accumulator.
struct KV {
  Tensor k, v;
};

// One hop of the ring: post the sends of (a_out, b_out) to the right and the receives
// of the left neighbour's pair into (a_in, b_in). All non-blocking: the MPI backend has
// them in flight together (NCCL starts them in one group), so neighbours sending to
// each other cannot deadlock. The *_out tensors must not change before wait().
std::vector<WorkHandle> post_shift(Communicator& comm, int right, int left, const Tensor& a_out,
                                   const Tensor& b_out, Tensor& a_in, Tensor& b_in, int tag_a,
                                   int tag_b) {
  std::vector<WorkHandle> w;
  w.push_back(comm.send_async(a_out, right, tag_a));
  w.push_back(comm.send_async(b_out, right, tag_b));
  w.push_back(comm.recv_async(a_in, left, tag_a));
  w.push_back(comm.recv_async(b_in, left, tag_b));
  return w;
}

void wait_all(std::vector<WorkHandle>& works) {
  for (WorkHandle& w : works) w->wait();
  works.clear();
}

// ---- forward ----
// Folds block `owner`'s K/V into the running (out, lse) of each query piece.
void forward_block(const Ring& R, const std::vector<Tensor>& q_parts, const KV& block, int owner,
                   std::vector<Tensor>& out_parts, std::vector<Tensor>& lse_parts) {
  std::vector<ShardPiece> k_pieces = shard_pieces(R.layout, owner, R.size, R.tk);
  for (size_t i = 0; i < R.q_pieces.size(); ++i) {
    for (const ShardPiece& kp : k_pieces) {
      AttentionOptions o;
      if (!R.pair(R.q_pieces[i], kp, o)) continue;  // fully masked: skipped
      // q piece (B, H, tq_i, D) · k piece (B, H, tk_j, D) -> O_j (B, H, tq_i, Dv), lse_j (B, H,
      // tq_i)
      // GQA: the ring carries the Hkv heads; each is repeated for its query heads here.
      AttentionOutput r = attention_forward(
          q_parts[i], repeat_kv_heads(block.k.narrow(2, kp.local_start, kp.length), R.groups),
          repeat_kv_heads(block.v.narrow(2, kp.local_start, kp.length), R.groups), o);
      merge_attention_(out_parts[i], lse_parts[i], r.out, r.lse);
    }
  }
}

// ---- backward ----
// Adds block `owner`'s contribution to dq (local) and to the travelling dK/dV
// accumulators of that block.
void backward_block(const Ring& R, const std::vector<Tensor>& q_parts,
                    const std::vector<Tensor>& out_parts, const std::vector<Tensor>& lse_parts,
                    const std::vector<Tensor>& dout_parts, const KV& block, int owner,
                    std::vector<Tensor>& dq_parts, KV& acc) {
  std::vector<ShardPiece> k_pieces = shard_pieces(R.layout, owner, R.size, R.tk);
  for (size_t i = 0; i < R.q_pieces.size(); ++i) {
    for (const ShardPiece& kp : k_pieces) {
      AttentionOptions o;
      if (!R.pair(R.q_pieces[i], kp, o)) continue;
      AttentionGrads g = attention_backward(
          q_parts[i], repeat_kv_heads(block.k.narrow(2, kp.local_start, kp.length), R.groups),
          repeat_kv_heads(block.v.narrow(2, kp.local_start, kp.length), R.groups), out_parts[i],
          lse_parts[i], dout_parts[i], o);
      if (R.groups > 1) {  // GQA: each K/V head's gradient is the sum over its query heads
        auto fold = [&](const Tensor& d) {
          return d.reshape({d.size(0), d.size(1) / R.groups, R.groups, d.size(2), d.size(3)}).sum(2);
        };
        g.dk = fold(g.dk), g.dv = fold(g.dv);
      }
      dq_parts[i].add_(g.dq);
      acc.k.narrow(2, kp.local_start, kp.length).add_(g.dk);
      acc.v.narrow(2, kp.local_start, kp.length).add_(g.dv);
    }
  }
}

// The forward ring: N steps, K/V double-buffered. Fills (out, lse) per query piece.
void ring_forward(const Ring& R, const std::vector<Tensor>& q_parts, const Tensor& k,
                  const Tensor& v, std::vector<Tensor>& out_parts, std::vector<Tensor>& lse_parts) {
  Communicator& comm = *R.comm;
  const int N = R.size, r = R.rank;
  const int right = mod(r + 1, N), left = mod(r - 1, N);
  // The two K/V buffers: own copies, since incoming blocks overwrite them.
  KV cur{k.clone(), v.clone()}, nxt{empty_like(k), empty_like(v)};
  std::vector<WorkHandle> inflight;
  for (int s = 0; s < N; ++s) {
    // Post the next transfer before computing: cur leaves for r+1, r−1's block lands in nxt.
    if (s < N - 1)
      inflight = post_shift(comm, right, left, cur.k, cur.v, nxt.k, nxt.v, kTagK, kTagV);
    forward_block(R, q_parts, cur, mod(r - s, N), out_parts, lse_parts);  // block of rank r − s
    // cur may be overwritten (next step's receive) only once its send is done.
    wait_all(inflight);
    std::swap(cur, nxt);
  }
}

// The backward ring: K/V go round again, each with its dK/dV accumulator.
// Returns {dq, dk, dv} for this rank's shards.
AttentionGrads ring_backward(const Ring& R, const std::vector<Tensor>& q_parts, const Tensor& k,
                             const Tensor& v, const std::vector<Tensor>& out_parts,
                             const std::vector<Tensor>& lse_parts, const Tensor& dout) {
  Communicator& comm = *R.comm;
  const int N = R.size, r = R.rank;
  const int right = mod(r + 1, N), left = mod(r - 1, N);
  std::vector<Tensor> dout_parts = split_pieces(dout, R.q_pieces);
  std::vector<Tensor> dq_parts;
  for (const Tensor& qp : q_parts) dq_parts.push_back(zeros_like(qp));
  KV cur{k.clone(), v.clone()}, nxt{empty_like(k), empty_like(v)};  // K/V, double-buffered
  KV acc{zeros_like(k), zeros_like(v)}, acc_in{empty_like(k), empty_like(v)};  // dK/dV
  std::vector<WorkHandle> kv_flight, grad_flight;
  for (int s = 0; s < N; ++s) {
    if (s < N - 1)  // prefetch the next K/V block while this one is computed
      kv_flight = post_shift(comm, right, left, cur.k, cur.v, nxt.k, nxt.v, kTagK, kTagV);
    backward_block(R, q_parts, out_parts, lse_parts, dout_parts, cur, mod(r - s, N), dq_parts, acc);
    // The accumulator of block r − s now holds this rank's part too: pass it on.
    // At s = N−1 this is the final hop, to the block's owner r+1, and what arrives
    // from r−1 is this rank's own block, complete.
    if (N > 1)
      grad_flight = post_shift(comm, right, left, acc.k, acc.v, acc_in.k, acc_in.v, kTagDK, kTagDV);
    wait_all(kv_flight);
    wait_all(grad_flight);
    std::swap(cur, nxt);
    if (N > 1) std::swap(acc, acc_in);
  }
  return {dq_parts.size() == 1 ? dq_parts[0] : cat(dq_parts, 2), acc.k, acc.v};
}

}  // namespace

std::vector<ShardPiece> shard_pieces(SequenceLayout layout, int rank, int size, int64_t local_len) {
  RG_CHECK(layout != SequenceLayout::Auto, kOp,
           "expected a resolved layout (Contiguous or Zigzag), got Auto");
  if (layout == SequenceLayout::Contiguous) return {{0, local_len, rank * local_len}};
  // Zigzag: chunks r and 2N−1−r of length local_len/2.
  const int64_t c = local_len / 2;
  return {{0, c, rank * c}, {c, c, (2 * int64_t(size) - 1 - rank) * c}};
}

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, Communicator& comm,
                      const RingAttentionOptions& options) {
  for (const Tensor* t : {&q, &k, &v})
    RG_CHECK(t->defined() && t->dim() == 4, kOp,
             "expected q, k, v shards (B, H, T_local, D), got q ",
             q.defined() ? shape_str(q.shape()) : "undefined", ", k ",
             k.defined() ? shape_str(k.shape()) : "undefined", ", v ",
             v.defined() ? shape_str(v.shape()) : "undefined");
  RG_CHECK(k.size(2) == v.size(2) && k.size(0) == q.size(0) && k.size(1) > 0 &&
               q.size(1) % k.size(1) == 0 && v.size(0) == q.size(0) && v.size(1) == k.size(1) &&
               k.size(3) == q.size(3),
           kOp, "expected q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, Dv) with Hkv dividing "
           "H, got q ",
           shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));

  auto R = std::make_shared<Ring>();
  R->comm = &comm;
  R->rank = comm.rank(), R->size = comm.size();
  R->causal = options.causal;
  R->layout = options.layout != SequenceLayout::Auto
                  ? options.layout
                  : (options.causal ? SequenceLayout::Zigzag : SequenceLayout::Contiguous);
  R->tq = q.size(2), R->tk = k.size(2);
  R->groups = q.size(1) / k.size(1);
  if (R->layout == SequenceLayout::Zigzag)
    RG_CHECK(R->tq % 2 == 0 && R->tk % 2 == 0, kOp,
             "expected even local lengths for the zigzag layout (two chunks per rank), got q ",
             shape_str(q.shape()), ", k ", shape_str(k.shape()));
  R->q_pieces = shard_pieces(R->layout, R->rank, R->size, R->tq);

  const int N = R->size;
  const int64_t B = q.size(0), H = q.size(1), Dv = v.size(3);
  AttentionOptions& base = R->base;
  base.causal = options.causal;
  base.scale = options.scale;
  base.block_q = options.block_q, base.block_k = options.block_k;
  base.dropout_p = options.dropout_p;
  base.total_q = R->tq * N, base.total_k = R->tk * N;  // the whole sequence
  if (options.dropout_p > 0) {
    // One (seed, offset) for the whole sequence, as scaled_dot_product_attention
    // fixes it: every rank draws the mask a single process would (same generator state).
    Generator& gen = options.generator ? *options.generator : default_generator();
    base.dropout_seed = gen.seed();
    base.dropout_offset = gen.advance(uint64_t(B * H * base.total_q * base.total_k));
  }

  // Contiguous once, here: forward and backward both read these.
  Tensor qc = q.detach().contiguous(), kc = k.detach().contiguous(), vc = v.detach().contiguous();
  std::vector<Tensor> q_parts = split_pieces(qc, R->q_pieces);
  // Running result per query piece: O (B, H, len, Dv) = 0, lse (B, H, len) = −∞ (no key seen).
  std::vector<Tensor> out_parts, lse_parts;
  TensorOptions topts{.dtype = q.dtype(), .device = q.device()};
  for (const ShardPiece& p : R->q_pieces) {
    out_parts.push_back(zeros({B, H, p.length, Dv}, topts));
    lse_parts.push_back(full({B, H, p.length}, -std::numeric_limits<double>::infinity(), topts));
  }
  {
    NoGradGuard no_grad;  // the whole ring is one autograd node, recorded below
    ring_forward(*R, q_parts, kc, vc, out_parts, lse_parts);
  }

  Tensor out = out_parts.size() == 1 ? out_parts[0].detach() : cat(out_parts, 2);  // (B, H, Tq, Dv)
  // Backward needs this rank's q, k, v and the global out and lse, per query piece.
  autograd::record(
      kOp, out, {&q, &k, &v}, [R, q_parts, kc, vc, out_parts, lse_parts](const Tensor& dout) {
        AttentionGrads g = ring_backward(*R, q_parts, kc, vc, out_parts, lse_parts, dout);
        return autograd::Grads{g.dq, g.dk, g.dv};
      });
  return out;
}

}  // namespace ringgrad::parallel
