// shared_memory.cpp — making symmetric buffers (POSIX shared memory) and reducing through them.
//
// See shared_memory.h for the algorithm. Here: how the segments are named,
// sized and mapped; the barrier that ends each step; and the two loops
// (reduce my chunk, copy the others') that are the whole all-reduce.
#include "ringgrad/parallel/mpi/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "ringgrad/core/thread_pool.h"  // cpu_relax
#include "ringgrad/core/dispatch.h"
#include "ringgrad/core/error.h"
#include "ringgrad/core/kernel_math.h"
#include "ringgrad/parallel/mpi/comm_thread.h"
#include "ringgrad/parallel/mpi/reduced_precision.h"

namespace ringgrad::parallel::mpi {

namespace {

// Each segment: a page of header (this rank's barrier counter, alone on its
// cache line), then the data, so the data starts page-aligned.
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kLine = 64;

size_t segment_bytes(size_t nbytes) {
  return kHeaderBytes + std::max(kLine, (nbytes + kLine - 1) / kLine * kLine);
}

std::string segment_name(const uint64_t stem[2], int rank) {
  char name[80];
  std::snprintf(name, sizeof name, "/ringgrad-%llx-%llx-%d",
                static_cast<unsigned long long>(stem[0]), static_cast<unsigned long long>(stem[1]),
                rank);
  return name;
}

// Peers' counters are mapped read-only; an atomic load only reads.
inline std::atomic_ref<uint64_t> counter_at(char* base) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base));
}

// out[i] = in[0][i] ∘ in[1][i] ∘ … over [lo, hi), where in[0] is out itself
// (this rank's own buffer): each pass reads and writes out element for element.
template <typename T>
void reduce_chunk(T* out, const std::vector<const T*>& in, int64_t lo, int64_t hi, Reduce op) {
  const int n = static_cast<int>(in.size());
  if (op == Reduce::Max) {
    const T *a = in[0], *b = in[1];
    RG_SIMD
    for (int64_t i = lo; i < hi; ++i) out[i] = a[i] > b[i] ? a[i] : b[i];
    for (int p = 2; p < n; ++p) {
      const T* c = in[p];
      RG_SIMD
      for (int64_t i = lo; i < hi; ++i) out[i] = out[i] > c[i] ? out[i] : c[i];
    }
    return;
  }
  const T *a = in[0], *b = in[1];
  RG_SIMD
  for (int64_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
  for (int p = 2; p < n; ++p) {
    const T* c = in[p];
    RG_SIMD
    for (int64_t i = lo; i < hi; ++i) out[i] += c[i];
  }
  if (op == Reduce::Avg) {  // divided, not multiplied by 1/n: the MPI path's bits
    const T count = static_cast<T>(n);
    RG_SIMD
    for (int64_t i = lo; i < hi; ++i) out[i] /= count;
  }
}

}  // namespace

std::shared_ptr<HostLayout> HostLayout::create(MPI_Comm comm) {
  const char* op = "symmetric_empty";
  auto layout = std::make_shared<HostLayout>();
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (const int fake = test_ranks_per_host())  // a test hook: every k consecutive ranks "share a host"
    RG_MPI(op, MPI_Comm_split, comm, rank / fake, rank, &layout->local);
  else
    RG_MPI(op, MPI_Comm_split_type, comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &layout->local);
  MPI_Comm_rank(layout->local, &layout->local_rank);
  MPI_Comm_size(layout->local, &layout->local_size);
  RG_MPI(op, MPI_Comm_split, comm, layout->local_rank, rank, &layout->cross);
  MPI_Comm_size(layout->cross, &layout->hosts);
  // min and max ranks per host, and the most hosts any rank sees: the same on every rank
  // (with unequal hosts, cross groups differ in size)
  int sizes[3] = {layout->local_size, -layout->local_size, -layout->hosts};
  RG_MPI(op, MPI_Allreduce, MPI_IN_PLACE, sizes, 3, MPI_INT, MPI_MIN, comm);
  layout->uniform = sizes[0] == -sizes[1];
  layout->hosts = -sizes[2];
  return layout;
}

void HostLayout::free() {
  if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
  if (cross != MPI_COMM_NULL) MPI_Comm_free(&cross);
}

std::shared_ptr<SymmetricBuffer> SymmetricBuffer::create(MPI_Comm world_comm,
                                                         const HostLayout& hosts, size_t nbytes,
                                                         bool wanted) {
  const char* op = "symmetric_empty";
  int world_size = 1;
  MPI_Comm_size(world_comm, &world_size);

  // Symmetric means the same size everywhere: a mismatch is the caller's bug.
  // And shared memory only if every rank wants it.
  long long agree[3] = {static_cast<long long>(nbytes), -static_cast<long long>(nbytes),
                        wanted ? 1 : 0};
  RG_MPI(op, MPI_Allreduce, MPI_IN_PLACE, agree, 3, MPI_LONG_LONG, MPI_MIN, world_comm);
  RG_CHECK(agree[0] == -agree[1], op,
           "expected the same size on every rank (it is allocated by all ranks together), got ",
           nbytes, " bytes here, and sizes from ", agree[0], " to ", -agree[1], " across ranks");
  if (agree[2] == 0 || world_size == 1) return nullptr;
  // One host: the flat all-reduce through shared memory. Several hosts: hierarchical,
  // when each has the same number of ranks, more than one (with one rank per host there
  // is nothing to share: MPI's own all-reduce is the hierarchy). The same answer everywhere.
  const bool one_host = hosts.hosts == 1;
  if (!one_host && (!hosts.uniform || hosts.local_size == 1)) return nullptr;
  // From here on, "the ranks" are this host's: segments are shared within it.
  MPI_Comm comm = hosts.local;
  const int rank = hosts.local_rank, size = hosts.local_size;

  // Names no other job on this host uses: rank 0's pid and clock, then the rank.
  uint64_t stem[2] = {static_cast<uint64_t>(getpid()),
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  RG_MPI(op, MPI_Bcast, stem, 2, MPI_UINT64_T, 0, comm);

  std::shared_ptr<SymmetricBuffer> buffer(new SymmetricBuffer(rank, size, nbytes));
  buffer->world_size_ = world_size;
  if (!one_host) buffer->cross_ = hosts.cross, buffer->hosts_ = hosts.hosts;
  const size_t bytes = segment_bytes(nbytes);
  const std::string own_name = segment_name(stem, rank);

  // 1. Our own segment, its pages reserved now: a full /dev/shm (Docker gives
  //    64 MB) then fails here, cleanly, instead of with SIGBUS at first touch.
  const char* failed = nullptr;
  int fd = shm_open(own_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  int error = 0;
  // The name goes once every rank has tried to open every segment (the second
  // all-reduce below), or on the way out if an MPI call throws before that. The
  // memory stays until the last mapping goes, and a job that dies later leaves
  // nothing behind in /dev/shm.
  struct Unlink {
    const std::string& name;
    bool armed;
    ~Unlink() {
      if (armed) shm_unlink(name.c_str());
    }
  } unlink_name{own_name, fd >= 0};
  if (fd < 0) {
    failed = "shm_open", error = errno;
  } else {
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) failed = "ftruncate", error = errno;
    if (!failed && (error = posix_fallocate(fd, 0, static_cast<off_t>(bytes))) != 0)
      failed = "posix_fallocate";
    if (!failed) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED)
        failed = "mmap", error = errno;
      else
        buffer->base_[rank] = static_cast<char*>(p);
    }
    close(fd);
  }
  int ok = failed ? 0 : 1;
  RG_MPI(op, MPI_Allreduce, MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);

  // 2. Everyone else's, read-only.
  if (ok) {
    for (int p = 0; p < size && !failed; ++p) {
      if (p == rank) continue;
      int peer = shm_open(segment_name(stem, p).c_str(), O_RDONLY, 0);
      if (peer < 0) {
        failed = "shm_open (a peer's segment)", error = errno;
        break;
      }
      void* q = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, peer, 0);
      close(peer);
      if (q == MAP_FAILED)
        failed = "mmap (a peer's segment)", error = errno;
      else
        buffer->base_[p] = static_cast<char*>(q);
    }
    ok = failed ? 0 : 1;
    RG_MPI(op, MPI_Allreduce, MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  }
  if (!one_host) {  // every host must have its segments, or nobody uses them
    RG_MPI(op, MPI_Allreduce, MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, world_comm);
  }
  if (failed)
    std::fprintf(stderr,
                 "[rank %d/%d] note: no shared memory for a %zu-byte symmetric buffer (%s: %s); "
                 "using ordinary memory and MPI's all-reduce\n",
                 rank, size, nbytes, failed, std::strerror(error));
  return ok ? buffer : nullptr;
}

SymmetricBuffer::~SymmetricBuffer() {
  for (char* base : base_)
    if (base) munmap(base, segment_bytes(nbytes_));
}

void* SymmetricBuffer::data_of(int r) const { return base_[r] + kHeaderBytes; }

int64_t SymmetricBuffer::chunk_start(int r, int64_t count, int64_t element) const {
  if (r == size_) return count;
  const int64_t line = static_cast<int64_t>(kLine) / element, b = count * r / size_;
  return b - b % line;
}

int64_t SymmetricBuffer::cross_host_bytes(DType dtype, int64_t count) const {
  if (!hierarchical()) return 0;
  const int64_t element = static_cast<int64_t>(element_size(dtype));
  const int64_t chunk = chunk_start(rank_ + 1, count, element) - chunk_start(rank_, count, element);
  return static_cast<int64_t>(2.0 * (hosts_ - 1) / hosts_ * double(chunk * element));
}

// No time limit here, as none inside MPI_Allreduce: the caller's wait() has
// the watchdog (RINGGRAD_COMM_TIMEOUT_S), which ends the job if a peer is gone.
void SymmetricBuffer::barrier(const std::function<void()>& progress) {
  ++epoch_;
  counter_at(base_[rank_]).store(epoch_, std::memory_order_release);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    std::atomic_ref<uint64_t> peer = counter_at(base_[p]);
    // Spin briefly (peers usually arrive within microseconds), then yield the
    // core, then nap: with more ranks than cores the one we wait for needs it.
    // Meanwhile MPI moves what is in flight: now and then while spinning, at
    // every turn after that.
    for (uint32_t spins = 0; peer.load(std::memory_order_acquire) < epoch_; ++spins) {
      if (progress && (spins >= 256 || spins % 32 == 31)) progress();
      if (spins < 256)
        cpu::cpu_relax();
      else if (spins < 4096)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

// Step 2 (and 2b) for bfloat16 and float16: my chunk summed over this host's buffers in
// float32 and rounded once (reduced_precision.h); across hosts, MPI's all-reduce of the
// rounded chunks with the 16-bit MPI_Op (one more rounding per host added), and Avg's
// division after it (one more). One host, any op: exactly one rounding.
void SymmetricBuffer::reduce_reduced_precision_chunk(DType dtype, int64_t lo, int64_t hi,
                                                     Reduce op, Reduce local_op) {
  std::vector<const void*> in{data()};  // my contribution first, then the others'
  for (int p = 0; p < size_; ++p)
    if (p != rank_) in.push_back(data_of(p));
  if (size_ > 1) reduce_reduced_precision(dtype, data(), in, lo, hi, local_op);
  if (!hierarchical()) return;
  char* own = static_cast<char*>(data()) + lo * static_cast<int64_t>(element_size(dtype));
  RG_MPI("all_reduce (hierarchical)", MPI_Allreduce, MPI_IN_PLACE, own, static_cast<int>(hi - lo),
         MPI_UINT16_T, reduced_precision_op(dtype, op), cross_);
  if (op == Reduce::Avg) divide_reduced_precision(dtype, own, hi - lo, world_size_);
}

void SymmetricBuffer::all_reduce(DType dtype, int64_t count, Reduce op,
                                 const std::function<void()>& progress) {
  RG_CHECK(supports(dtype), "all_reduce", "shared-memory all-reduce of ", dtype,
           " is not supported");
  const int64_t element = static_cast<int64_t>(element_size(dtype));
  RG_CHECK(count >= 0 && count * element <= static_cast<int64_t>(nbytes_), "all_reduce",
           "expected at most ", nbytes_ / element, " elements, got ", count);
  // Chunk r: elements [bound(r), bound(r + 1)).
  auto bound = [&](int r) { return chunk_start(r, count, element); };
  barrier(progress);  // 1. arrive: every contribution is in place
  const int64_t lo = bound(rank_), hi = bound(rank_ + 1);
  // Across hosts, Avg is a sum here and a division by every host's ranks after 2b.
  const Reduce local_op = hierarchical() && op == Reduce::Avg ? Reduce::Sum : op;
  if (is_reduced_precision(dtype)) {
    reduce_reduced_precision_chunk(dtype, lo, hi, op, local_op);
  } else {
    dispatch_all(dtype, [&]<typename T>() {  // 2. my chunk, from every buffer on this host
      if constexpr (!std::is_same_v<T, bool>) {  // bool: refused above
        T* own = static_cast<T*>(data());
        std::vector<const T*> in{own};  // my contribution first, then the others'
        for (int p = 0; p < size_; ++p)
          if (p != rank_) in.push_back(static_cast<const T*>(data_of(p)));
        if (size_ > 1) reduce_chunk(own, in, lo, hi, local_op);
        if (hierarchical()) {  // 2b. my chunk with its owners on the other hosts, through MPI
          MPI_Datatype type = std::is_same_v<T, float>    ? MPI_FLOAT
                              : std::is_same_v<T, double> ? MPI_DOUBLE
                                                          : MPI_INT64_T;
          RG_MPI("all_reduce (hierarchical)", MPI_Allreduce, MPI_IN_PLACE, own + lo,
                 static_cast<int>(hi - lo), type, op == Reduce::Max ? MPI_MAX : MPI_SUM, cross_);
          if (op == Reduce::Avg) {  // divided, as the flat paths do
            const T n = static_cast<T>(world_size_);
            for (int64_t i = lo; i < hi; ++i) own[i] /= n;
          }
        }
      }
    });
  }
  barrier(progress);  // every chunk is reduced
  char* own = static_cast<char*>(data());
  for (int p = 0; p < size_; ++p) {  // 3. everyone else's chunk, from its owner
    if (p == rank_) continue;
    const int64_t from = bound(p), to = bound(p + 1);
    std::memcpy(own + from * element, static_cast<const char*>(data_of(p)) + from * element,
                static_cast<size_t>((to - from) * element));
  }
  barrier(progress);  // 4. leave: nobody reads my buffer any more
}

}  // namespace ringgrad::parallel::mpi
