// communicator.cpp — the contract every Communicator keeps, checked once; and
// the world of one.
//
// The public collectives check their arguments here and call the backend's
// do_* method: a backend never repeats these checks, and a new one (a process
// group, say) gets them for free.
//
// The world of one: a program started without mpirun runs with this backend, so the same training
// code works alone and in a group. Every collective over one rank is the
// identity: the sum (or average, or max) of one tensor is that tensor, a
// broadcast from rank 0 to rank 0 moves nothing. The Work handles it returns
// are complete from the start. Point to point has no peer to talk to, so send
// and recv are errors rather than silent no-ops (a recv could never be matched).
#include "ringgrad/parallel/communicator.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/core/factory.h"

namespace ringgrad::parallel {

// ---- the contract ----

void Communicator::check(const Tensor& t, const char* op) const {
  RG_CHECK(t.defined(), op, "expected a defined tensor, got an undefined one");
  check_tensor(t, op);
}

void Communicator::check_rank(int r, const char* op, const char* what) const {
  RG_CHECK(r >= 0 && r < size(), op, "expected ", what, " in [0, ", size(), "), got ", r);
}

// An integer average would have to round: refused on every backend alike, so a
// program that works alone also works under mpirun.
static void check_reduce(const Tensor& t, Reduce op, const char* name) {
  RG_CHECK(op != Reduce::Avg || is_floating(t.dtype()), name,
           "expected a floating-point tensor for Reduce::Avg, got ", t.dtype());
}

namespace {

// A Work that was done before anyone asked.
class CompletedWork : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

WorkHandle completed() { return std::make_shared<CompletedWork>(); }

}  // namespace

const char* collective_name(Collective kind) {
  static const char* names[kCollectives] = {"all_reduce", "broadcast",  "reduce", "all_gather",
                                            "reduce_scatter", "all_to_all", "send"};
  return names[size_t(kind)];
}

void Communicator::count_wire_bytes(Collective kind, double fraction, const Tensor& t) {
  count_wire_bytes(kind, static_cast<int64_t>(fraction * double(t.nbytes())));
}

void Communicator::count_wire_bytes(Collective kind, int64_t bytes) {
  wire_bytes_ += bytes;
  by_kind_[size_t(kind)].bytes += bytes;
  if (size() > 1) ++by_kind_[size_t(kind)].operations;  // a world of one sends nothing
}

WorkHandle Communicator::all_reduce_async(Tensor& t, Reduce op) {
  check(t, "all_reduce");
  check_reduce(t, op, "all_reduce");
  count_wire_bytes(Collective::AllReduce, 2.0 * (size() - 1) / size(), t);
  // A group of one (a mesh axis of size 1): the reduction is t itself. Done here, not by a
  // backend's communication thread, which the caller would wait on for nothing.
  if (size() == 1) return completed();
  return do_all_reduce_async(t, op);
}

WorkHandle Communicator::broadcast_async(Tensor& t, int root) {
  check(t, "broadcast");
  check_rank(root, "broadcast", "root");
  count_wire_bytes(Collective::Broadcast, double(size() - 1) / size(), t);
  if (size() == 1) return completed();  // root's t is already every rank's
  return do_broadcast_async(t, root);
}

WorkHandle Communicator::reduce_async(Tensor& t, int root, Reduce op) {
  check(t, "reduce");
  check_rank(root, "reduce", "root");
  check_reduce(t, op, "reduce");
  count_wire_bytes(Collective::Reduce, double(size() - 1) / size(), t);
  if (size() == 1) return completed();
  return do_reduce_async(t, root, op);
}

Tensor Communicator::all_gather(const Tensor& t) {
  check(t, "all_gather");
  Shape shape = t.shape();
  shape.insert(shape.begin(), size());
  Tensor out = empty(shape, {.dtype = t.dtype(), .device = t.device()});
  count_wire_bytes(Collective::AllGather, size() - 1, t);
  do_all_gather_async(out, t)->wait();
  return out;
}

// The buffers of a gather or scatter: `whole` holds size() chunks of part.numel().
void Communicator::check_chunks(const Tensor& whole, const Tensor& part, const Tensor& out,
                                const char* op) const {
  check(whole, op);
  check(part, op);
  RG_CHECK(whole.dtype() == part.dtype() && whole.device() == part.device(), op,
           "expected both tensors of one dtype on one device, got ", whole.describe(), " and ",
           part.describe());
  RG_CHECK(out.is_contiguous(), op, "expected a contiguous output buffer, got ", out.describe());
  RG_CHECK(whole.numel() == part.numel() * size(), op, "expected ", size(), " × ", part.numel(),
           " = ", part.numel() * size(), " elements in the whole buffer (one chunk per rank), got ",
           whole.describe());
}

WorkHandle Communicator::all_gather_async(Tensor& out, const Tensor& in) {
  check_chunks(out, in, out, "all_gather");
  count_wire_bytes(Collective::AllGather, size() - 1, in);
  return do_all_gather_async(out, in);
}

Communicator::Exchange Communicator::exchange_of(std::vector<int64_t> counts) {
  std::vector<int64_t> offset(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offset[r] = offset[r - 1] + counts[r - 1];
  return {std::move(counts), std::move(offset)};
}

// An all-to-all's buffers, either form: defined, one dtype on one device, out contiguous.
void Communicator::check_exchange(const Tensor& in, const Tensor& out) const {
  const char* op = "all_to_all";
  check(in, op);
  check(out, op);
  RG_CHECK(in.dtype() == out.dtype() && in.device() == out.device(), op,
           "expected both tensors of one dtype on one device, got ", in.describe(), " and ",
           out.describe());
  RG_CHECK(out.is_contiguous(), op, "expected a contiguous output buffer, got ", out.describe());
}

WorkHandle Communicator::all_to_all_async(Tensor& out, const Tensor& in) {
  check_exchange(in, out);
  RG_CHECK(in.numel() == out.numel() && in.numel() % size() == 0, "all_to_all",
           "expected in and out of one size, divisible into ", size(),
           " chunks (one per rank), got ", in.describe(), " and ", out.describe());
  count_wire_bytes(Collective::AllToAll, double(size() - 1) / size(), in);
  const Exchange chunks = exchange_of(std::vector<int64_t>(size_t(size()), in.numel() / size()));
  return do_all_to_all_async(out, in, chunks, chunks);
}

WorkHandle Communicator::all_to_all_async(Tensor& out, const Tensor& in,
                                          const std::vector<int64_t>& send_rows,
                                          const std::vector<int64_t>& recv_rows) {
  const char* op = "all_to_all";
  check_exchange(in, out);
  RG_CHECK(in.dim() >= 1 && out.dim() >= 1 &&
               Shape(in.shape().begin() + 1, in.shape().end()) ==
                   Shape(out.shape().begin() + 1, out.shape().end()),
           op, "expected in and out of one shape after dim 0 (rows), got ", in.describe(),
           " and ", out.describe());
  const auto n = static_cast<size_t>(size());
  RG_CHECK(send_rows.size() == n && recv_rows.size() == n, op, "expected ", n,
           " send and receive counts (one per rank), got ", send_rows.size(), " and ",
           recv_rows.size());
  int64_t sent = 0, received = 0;
  for (size_t r = 0; r < n; ++r) {
    RG_CHECK(send_rows[r] >= 0 && recv_rows[r] >= 0, op, "expected counts >= 0, got ",
             send_rows[r], " rows to and ", recv_rows[r], " rows from rank ", r);
    sent += send_rows[r];
    received += recv_rows[r];
  }
  RG_CHECK(sent == in.size(0) && received == out.size(0), op, "expected the counts to add up to ",
           "in's and out's rows, got ", sent, " of ", in.size(0), " to send and ", received, " of ",
           out.size(0), " to receive");
  int64_t row = 1;  // elements per row
  for (int64_t d = 1; d < in.dim(); ++d) row *= in.size(d);
  std::vector<int64_t> send(n), recv(n);
  for (size_t r = 0; r < n; ++r) send[r] = send_rows[r] * row, recv[r] = recv_rows[r] * row;
  // What leaves this rank: every row but those it keeps.
  count_wire_bytes(Collective::AllToAll, (sent - send_rows[size_t(rank())]) * row *
                                            int64_t(element_size(in.dtype())));
  return do_all_to_all_async(out, in.contiguous(), exchange_of(std::move(send)),
                             exchange_of(std::move(recv)));
}

Tensor Communicator::reduce_scatter(const Tensor& t, Reduce op) {
  check(t, "reduce_scatter");
  check_reduce(t, op, "reduce_scatter");
  RG_CHECK(t.dim() >= 1 && t.size(0) % size() == 0, "reduce_scatter",
           "expected dim 0 divisible by the world size ", size(), ", got shape ", t.shape());
  Shape shape = t.shape();
  shape[0] /= size();
  Tensor out = empty(shape, {.dtype = t.dtype(), .device = t.device()});
  count_wire_bytes(Collective::ReduceScatter, double(size() - 1) / size(), t);
  do_reduce_scatter_async(out, t, op)->wait();
  return out;
}

WorkHandle Communicator::reduce_scatter_async(Tensor& out, const Tensor& in, Reduce op) {
  check_chunks(in, out, out, "reduce_scatter");
  check_reduce(in, op, "reduce_scatter");
  count_wire_bytes(Collective::ReduceScatter, double(size() - 1) / size(), in);
  return do_reduce_scatter_async(out, in, op);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  RG_CHECK(color >= 0 || color == kNoGroup, "split", "expected a color >= 0 (or kNoGroup), got ",
           color);
  return do_split(color, key);
}

std::unique_ptr<Communicator> Communicator::new_group(const std::vector<int>& ranks) {
  RG_CHECK(!ranks.empty(), "new_group", "expected at least one rank, got none");
  std::vector<bool> seen(static_cast<size_t>(size()), false);
  int position = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    check_rank(ranks[i], "new_group", "ranks");
    RG_CHECK(!seen[static_cast<size_t>(ranks[i])], "new_group", "expected distinct ranks, got ",
             ranks[i], " twice");
    seen[static_cast<size_t>(ranks[i])] = true;
    if (ranks[i] == rank()) position = static_cast<int>(i);
  }
  return split(position >= 0 ? 0 : kNoGroup, position);
}

WorkHandle Communicator::send_async(const Tensor& t, int dst, int tag) {
  check(t, "send");
  check_rank(dst, "send", "dst");
  RG_CHECK(tag >= 0, "send", "expected a tag >= 0, got ", tag);
  count_wire_bytes(Collective::Send, 1.0, t);
  return do_send_async(t, dst, tag);
}

WorkHandle Communicator::recv_async(Tensor& t, int src, int tag) {
  check(t, "recv");
  check_rank(src, "recv", "src");
  RG_CHECK(tag >= 0, "recv", "expected a tag >= 0, got ", tag);
  return do_recv_async(t, src, tag);
}

double comm_timeout_seconds() {
  const char* text = std::getenv("RINGGRAD_COMM_TIMEOUT_S");
  if (!text) return 300.0;
  const std::string value = text;
  if (value == "off") return 0.0;  // no watchdog: only when asked for in words
  errno = 0;
  char* end = nullptr;
  double seconds = std::strtod(text, &end);
  RG_CHECK(end != text && *end == '\0' && errno == 0 && std::isfinite(seconds) && seconds > 0,
           "RINGGRAD_COMM_TIMEOUT_S",
           "expected a number of seconds > 0, or 'off' for no time limit, got '", value, "'");
  return seconds;
}

bool shared_memory_allreduce() {
  const char* text = std::getenv("RINGGRAD_SHM_ALLREDUCE");
  if (!text) return true;
  const std::string value = text;
  RG_CHECK(value == "0" || value == "1", "RINGGRAD_SHM_ALLREDUCE",
           "expected 1 (all-reduce through shared memory, the default) or 0 (through MPI), got '", value, "'");
  return value == "1";
}

int test_ranks_per_host() {
  const char* text = std::getenv("RINGGRAD_TEST_RANKS_PER_HOST");
  if (!text) return 0;
  errno = 0;
  char* end = nullptr;
  const long k = std::strtol(text, &end, 10);
  RG_CHECK(end != text && *end == '\0' && errno == 0 && k >= 1 && k <= 1 << 20, "RINGGRAD_TEST_RANKS_PER_HOST",
           "expected a whole number of ranks per pretended host >= 1, got '", text, "'");
  return int(k);
}

// Backends without memory their peers can reach: ordinary memory.
Tensor Communicator::symmetric_empty(const Shape& shape, TensorOptions options) {
  return empty(shape, options);
}

namespace {

// Checks nothing itself: the contract (above) is the same as on a real world.
class SingleCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "single"; }
  void barrier() override {}
  void abort(int) override {}  // nobody else to stop

 protected:
  WorkHandle do_all_reduce_async(Tensor&, Reduce) override { return completed(); }
  WorkHandle do_broadcast_async(Tensor&, int) override { return completed(); }
  WorkHandle do_reduce_async(Tensor&, int, Reduce) override { return completed(); }
  // One rank: its chunk is the whole buffer, copied (as on a real world, the
  // output never shares memory with the input).
  WorkHandle do_all_gather_async(Tensor& out, const Tensor& in) override {
    out.copy_(in.reshape(out.shape()));
    return completed();
  }
  WorkHandle do_reduce_scatter_async(Tensor& out, const Tensor& in, Reduce) override {
    out.copy_(in.reshape(out.shape()));
    return completed();
  }
  WorkHandle do_all_to_all_async(Tensor& out, const Tensor& in, const Exchange&,
                                 const Exchange&) override {
    out.copy_(in.reshape(out.shape()));
    return completed();
  }
  std::unique_ptr<Communicator> do_split(int color, int) override {
    if (color == kNoGroup) return nullptr;
    return make_single_communicator();
  }
  WorkHandle do_send_async(const Tensor&, int, int) override {
    fail("send", "expected a peer rank, got a world of one");
  }
  WorkHandle do_recv_async(Tensor&, int, int) override {
    fail("recv", "expected a peer rank, got a world of one");
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator() {
  return std::make_unique<SingleCommunicator>();
}

void broadcast_tensors(Communicator& comm, const std::vector<Tensor>& tensors, int root) {
  NoGradGuard no_grad;
  for (const Tensor& t : tensors) {
    Tensor data = t.detach();
    comm.broadcast(data, root);
  }
}

void all_reduce_grads(const std::vector<Tensor>& params, Communicator& comm, Reduce op) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) comm.all_reduce(g, op);
  }
}

namespace {

// Each rank's text, gathered on every rank (an all_gather of the lengths, then of the
// bytes padded to the longest, one int64 per byte: small settings, not bulk data).
std::vector<std::string> all_gather_text(Communicator& comm, const std::string& mine) {
  Tensor length = full({1}, static_cast<double>(mine.size()), {.dtype = kInt64});
  std::vector<int64_t> lengths = comm.all_gather(length).tolist<int64_t>();
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<int64_t> bytes(static_cast<size_t>(std::max<int64_t>(longest, 1)), 0);
  for (size_t i = 0; i < mine.size(); ++i) bytes[i] = static_cast<unsigned char>(mine[i]);
  Tensor payload = from_vector(bytes, {static_cast<int64_t>(bytes.size())});
  std::vector<int64_t> all = comm.all_gather(payload).tolist<int64_t>();
  std::vector<std::string> texts;
  for (int r = 0; r < comm.size(); ++r) {
    std::string text;
    for (int64_t i = 0; i < lengths[static_cast<size_t>(r)]; ++i)
      text.push_back(static_cast<char>(all[static_cast<size_t>(r) * bytes.size() + i]));
    texts.push_back(std::move(text));
  }
  return texts;
}

// "key \x1f value \x1e" per entry, and back (the separators cannot appear in arguments
// typed on a command line; a value that holds one only makes the comparison stricter).
std::string encode(const std::map<std::string, std::string>& values) {
  std::string text;
  for (const auto& [key, value] : values) text.append(key).append(1, '\x1f').append(value).append(1, '\x1e');
  return text;
}
std::map<std::string, std::string> decode(const std::string& text) {
  std::map<std::string, std::string> values;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t sep = text.find('\x1f', pos), end = text.find('\x1e', pos);
    if (sep == std::string::npos || end == std::string::npos || sep > end) break;
    values[text.substr(pos, sep - pos)] = text.substr(sep + 1, end - sep - 1);
    pos = end + 1;
  }
  return values;
}

}  // namespace

void check_same_across_ranks(Communicator& comm, const std::map<std::string, std::string>& values,
                             const std::string& what) {
  if (comm.size() == 1) return;
  const std::vector<std::string> texts = all_gather_text(comm, encode(values));
  const std::map<std::string, std::string> first = decode(texts[0]);
  auto shown = [](const std::map<std::string, std::string>& m, const std::string& key) {
    auto it = m.find(key);
    return it == m.end() ? std::string("nothing") : "'" + it->second + "'";
  };
  for (int r = 1; r < comm.size(); ++r) {
    if (texts[static_cast<size_t>(r)] == texts[0]) continue;
    const std::map<std::string, std::string> other = decode(texts[static_cast<size_t>(r)]);
    std::string key;  // the first setting (in name order) on which they differ
    for (const auto& [k, v] : first)
      if (other.count(k) == 0 || other.at(k) != v) { key = k; break; }
    for (const auto& [k, v] : other)
      if (first.count(k) == 0 && (key.empty() || k < key)) key = k;
    fail("check_same_across_ranks", "ranks disagree on ", what, ": ", key, " is ", shown(first, key),
         " on rank 0 and ", shown(other, key), " on rank ", r,
         ". Every rank must run with the same settings: start them with the same arguments "
         "(and the same data)");
  }
}

void check_same_layout_across_ranks(Communicator& comm, const NamedTensors& state,
                                    const std::string& what) {
  std::map<std::string, std::string> layout;
  for (const auto& [name, t] : state) {
    using detail::operator<<;  // a shape as [2, 3]
    std::ostringstream os;
    os << dtype_name(t.dtype()) << " " << t.shape();
    layout[name] = os.str();
  }
  check_same_across_ranks(comm, layout, what);
}

std::optional<int> agree_to_start(Communicator& comm, std::optional<int> exit_code) {
  if (comm.size() == 1) return exit_code;
  Tensor mine = full({1}, exit_code ? static_cast<double>(*exit_code) : -1.0, {.dtype = kInt64});
  const std::vector<int64_t> codes = comm.all_gather(mine).tolist<int64_t>();
  for (int r = 0; r < comm.size(); ++r) {
    const int64_t code = codes[static_cast<size_t>(r)];
    if (code < 0) continue;
    if (exit_code) return exit_code;  // this rank leaves too, with its own code
    std::fprintf(stderr, "[rank %d/%d] stopping: rank %d ended before the start (%s)\n", comm.rank(),
                 comm.size(), r,
                 code == 0 ? "it was asked for --help or --version only"
                           : ("exit code " + std::to_string(code) + "; its message says why").c_str());
    return code == 0 ? 1 : static_cast<int>(code);  // not a success for a rank that wanted to run
  }
  return std::nullopt;
}

}  // namespace ringgrad::parallel
