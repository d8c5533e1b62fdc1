// ring_allreduce.cpp — the ring all-reduce, step by step.
//
// The problem. N ranks each hold a tensor of n elements (say, gradients); all
// of them want the element-wise sum. Sending everything to rank 0 and back
// makes rank 0 move N·n elements while the others idle. The ring keeps every
// link busy and every rank equally loaded.
//
// The idea. Cut the (flattened) tensor into N chunks. Arrange the ranks in a
// ring: rank r sends only to r+1 and receives only from r-1 (mod N).
//
//   Phase 1, reduce-scatter (N-1 steps). At step s, rank r sends chunk
//   (r-s) mod N to the right and receives chunk (r-s-1) mod N from the left,
//   adding it into its own copy. A chunk travels around the ring collecting
//   one more rank's contribution per hop; after N-1 hops, rank r holds the
//   complete sum of chunk (r+1) mod N.
//
//   Phase 2, all-gather (N-1 steps). At step s, rank r sends chunk (r-s+1) mod N
//   (the complete one it has, or just received) to the right and receives chunk
//   (r-s) mod N from the left, overwriting its copy. After N-1 hops every rank
//   holds every complete chunk.
//
//   N = 3, chunks a b c, rank r's copy of chunk a written a_r, "a012" = a0+a1+a2:
//
//                       rank 0          rank 1          rank 2
//     start             a0  b0  c0      a1  b1  c1      a2  b2  c2
//     reduce-scatter 1  a0  b0  c02     a01 b1  c1      a2  b12 c2
//     reduce-scatter 2  a0  b012 c02    a01 b1  c012    a012 b12 c2
//     all-gather 1      a012 b012 c02   a01 b012 c012   a012 b12 c012
//     all-gather 2      a012 b012 c012  a012 b012 c012  a012 b012 c012
//
// The cost. Each rank sends 2·(N-1) chunks of n/N elements: 2·(N-1)/N · bytes
// in all — for N = 2 one tensor's worth, and never more than twice the tensor
// whatever N is. The time is set by the slowest link, not by N: that is why
// the ring scales. (Latency grows with the 2·(N-1) steps; for small tensors a
// tree is faster, which is why libraries switch algorithms by size.)
//
// Overlap. In each step the send and the receive are both posted before
// waiting for either (send_async + recv_async): the link carries data in both
// directions at once, and no rank waits for its neighbour to finish sending
// before it starts receiving. Blocking send-then-recv on every rank would
// deadlock as soon as messages were too large for MPI to buffer.
//
// 16 bits. A bfloat16 or float16 chunk travels in 16 bits (half of float32's bytes);
// each hop adds the received partial sum to the local chunk in float32 and rounds the
// result once (add_ on a 16-bit tensor computes in float32), so a complete chunk has been
// rounded N-1 times, as in NCCL's ring (the backend's shared-memory path reads every
// rank's buffer, sums in float32 and rounds once). Avg rounds once more.
//
// Uneven sizes. n need not divide by N: chunk i is [i·n/N, (i+1)·n/N) with
// integer division, so chunk sizes differ by at most one (and may be empty
// when n < N; an empty message is still sent, keeping every rank in step).
#include "ringgrad/parallel/ring_allreduce.h"

#include <vector>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"

namespace ringgrad::parallel {

namespace {

// A tag of its own, so the ring's messages never match a user's send/recv.
constexpr int kRingTag = 0x5247;  // "RG"; MPI promises tags up to 32767

int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

void ring_all_reduce(Communicator& comm, Tensor& t, Reduce op) {
  RG_CHECK(t.defined(), "ring_all_reduce", "expected a defined tensor, got an undefined one");
  RG_CHECK(t.dtype() != kBool, "ring_all_reduce",
           "expected a float32, float64, bfloat16, float16 or int64 tensor, got ", t.dtype());
  RG_CHECK(op != Reduce::Avg || is_floating(t.dtype()), "ring_all_reduce",
           "expected a floating-point tensor for Reduce::Avg, got ", t.dtype());
  const int N = comm.size();
  const int r = comm.rank();
  if (N == 1) return;   // the reduction over one rank is its own tensor
  NoGradGuard no_grad;  // communication is not part of any autograd graph

  // Work on a flat, contiguous view of t (a copy only if t is strided).
  const bool copied = !t.is_contiguous();
  Tensor work = copied ? t.contiguous() : t;
  Tensor flat = work.reshape({-1});  // (n,), shares work's storage
  const int64_t n = flat.numel();

  // Chunk i covers [i·n/N, (i+1)·n/N).
  std::vector<Tensor> chunk(N);
  for (int i = 0; i < N; ++i) {
    int64_t begin = i * n / N, end = (i + 1) * n / N;
    chunk[i] = flat.narrow(0, begin, end - begin);
  }
  const int right = mod(r + 1, N), left = mod(r - 1, N);
  // Incoming chunks land here before being added in (phase 1 only). The
  // largest chunk has ceil(n/N) elements; smaller ones use a prefix of it.
  Tensor incoming = empty({(n + N - 1) / N}, {.dtype = t.dtype()});

  // ---- phase 1: reduce-scatter ----
  for (int s = 0; s < N - 1; ++s) {
    Tensor& out = chunk[mod(r - s, N)];
    Tensor& in = chunk[mod(r - s - 1, N)];
    Tensor received = incoming.narrow(0, 0, in.numel());
    WorkHandle sent = comm.send_async(out, right, kRingTag);
    WorkHandle got = comm.recv_async(received, left, kRingTag);
    got->wait();
    if (op == Reduce::Max)
      in.copy_(maximum(in, received));
    else
      in.add_(received);  // Sum, and Avg (divided at the end); 16-bit: in float32, rounded
    sent->wait();         // `out` may be changed again only once it has left
  }
  // Rank r now holds the complete reduction of chunk (r+1) mod N.

  // ---- phase 2: all-gather ----
  for (int s = 0; s < N - 1; ++s) {
    Tensor& out = chunk[mod(r - s + 1, N)];
    Tensor& in = chunk[mod(r - s, N)];
    WorkHandle sent = comm.send_async(out, right, kRingTag);
    WorkHandle got = comm.recv_async(in, left, kRingTag);  // overwrites our partial copy
    got->wait();
    sent->wait();
  }

  if (op == Reduce::Avg) flat.copy_(flat / double(N));  // a true division, as MPI's Avg does
  if (copied) t.copy_(work);
}

}  // namespace ringgrad::parallel
