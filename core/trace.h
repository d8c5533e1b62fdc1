// trace.h — record what each thread does, as a Chrome trace (open it in Perfetto).
//
//   rg::trace::start("out.json", world.rank(), world.size());
//   {
//     rg::trace::Span span("forward", "forward");   // a slice on this thread's track
//     …
//   }
//   rg::trace::stop();   // writes the file (also written at exit if still running)
//
// Open the file at https://ui.perfetto.dev ("Open trace file") or chrome://tracing.
// Each process is one group of tracks (pid = rank, named "rank R"); each thread that
// recorded something is one track in it (tid = a small per-thread number, named by
// set_thread_name: "compute" for the thread that called start(), "comm [0,1]" for the MPI
// communication thread of the communicator between world ranks 0 and 1: one per group).
// So a learner sees backward on the compute track and each bucket's all-reduce on the
// comm track, running at the same time.
//
// Files: in a world of one, `path` itself. With world_size > 1 every rank writes its
// own file, out.json -> out.rank<r>.json (ranks may be on different hosts, and only
// rank 0 writes shared outputs). On one host, merge() joins the rank files into one
// trace (the examples do it on rank 0 after a barrier): one process group per rank, on
// one time axis, since every process here reads the same monotonic clock. Clocks of
// different hosts are not aligned.
//
// Cost: when tracing is off, a Span is one relaxed atomic load. When it is on, events
// go to one mutex-protected buffer in memory (the comm thread records concurrently);
// nothing touches the disk before stop(). At most kMaxEvents are kept; later events are
// counted as dropped (the count is in the file's metadata).
//
// Event format (Chrome's JSON trace format): complete slices {"ph":"X", ts, dur} in
// microseconds, instants {"ph":"i"}, transfers that may overlap one another as async
// pairs {"ph":"b"} / {"ph":"e"}, and {"ph":"M"} metadata naming processes and threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ringgrad::trace {

namespace detail {
extern std::atomic<bool> g_enabled;
}

// Whether events are being recorded now: one relaxed load.
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

inline constexpr size_t kMaxEvents = 1'000'000;  // ~100 MB at most

// Starts recording (clearing anything recorded before). pid = rank; the calling thread
// is named "compute" unless set_thread_name gave it a name. Throws if already started.
void start(const std::string& path, int rank = 0, int world_size = 1);
// Stops recording and writes the file; returns its path ("" when not started).
std::string stop();
// The file that rank `rank` of `world_size` writes for `path` (see above).
std::string file_for_rank(const std::string& path, int rank, int world_size);
// Joins trace files (as written by stop) into one at `output`; returns how many
// events it holds. A missing or unreadable input is an Error naming it.
size_t merge(const std::vector<std::string>& inputs, const std::string& output);

// Names the calling thread's track ("compute", "comm", …). Cheap; may be called
// before start(): the name is kept and used whenever the thread records.
void set_thread_name(const std::string& name);

// Nanoseconds on the steady (monotonic) clock: the time axis of every event.
int64_t now_ns();

// A key/value shown in Perfetto's details pane for one event.
struct Arg {
  const char* key;   // a string literal
  std::string text;  // used when !is_number
  double number = 0;
  bool is_number = false;
};
using Args = std::vector<Arg>;
inline Arg arg(const char* key, double value) { return {key, {}, value, true}; }
inline Arg arg(const char* key, std::string value) { return {key, std::move(value), 0, false}; }

// A slice from construction to destruction on this thread's track. Spans on one thread
// nest (a child ends before its parent). A const char* name, and the category, are kept
// as pointers until stop() writes them: pass text that lives as long (string literals,
// Node::name). A std::string name is copied, so build it only when enabled(); an empty
// one records nothing:
//   trace::Span span(trace::enabled() ? describe() : std::string(), "comm");
class Span {
 public:
  Span(const char* name, const char* category) {
    if (enabled()) begin(name, std::string(), category);
  }
  Span(std::string name, const char* category) {
    if (enabled() && !name.empty()) begin(nullptr, std::move(name), category);
  }
  ~Span() {
    if (index_ >= 0) end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  // Adds a key/value to this slice (nothing when not recording).
  void add(Arg a) {
    if (index_ >= 0) add_arg(std::move(a));
  }

 private:
  void begin(const char* name, std::string dynamic_name, const char* category);
  void end();
  void add_arg(Arg a);
  int64_t index_ = -1;       // the event in the buffer, -1 when not recording
  uint64_t generation_ = 0;  // which recording session the index belongs to
};

// A point in time on this thread's track ("bucket 3 launched").
void instant(std::string name, const char* category, Args args = {});
// An interval measured by the caller (begin from now_ns()), for work that does not nest
// on one thread (sends and receives in flight together): drawn on its own async track
// of this process.
void interval(std::string name, const char* category, int64_t begin_ns, int64_t end_ns,
              Args args = {});

// "812 KB", "1.2 MB": byte counts for event names.
std::string format_bytes(double bytes);

}  // namespace ringgrad::trace
