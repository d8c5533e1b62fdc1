// trace.cpp — the event buffer, thread ids and names, and the Chrome-trace JSON writer.
//
// One Recorder per process holds every event in a vector behind a mutex. A Span pushes
// its event when it begins (so parents come before their children in the file) and
// fills in the duration when it ends; a generation number tells a span that ends after
// stop() (or after a later start()) that its event is gone. stop() moves the events out
// under the lock and writes them without it, one event per line: easy to grep.
#include "ringgrad/core/trace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "ringgrad/core/error.h"

namespace ringgrad::trace {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

using nlohmann::json;

struct Event {
  char phase = 'X';                   // 'X' slice, 'i' instant, 'b' async interval (+ its 'e')
  const char* static_name = nullptr;  // used when set, else `name`
  std::string name;
  const char* category = "";
  int tid = 0;
  int64_t ts_ns = 0;
  int64_t dur_ns = -1;  // -1: a slice still open
  Args args;
};

struct Recorder {
  std::mutex mutex;
  bool active = false;
  uint64_t generation = 0;
  std::string path;
  int rank = 0, world_size = 1;
  std::vector<Event> events;
  size_t dropped = 0;
  std::map<int, std::string> thread_names;  // tid -> track name, every thread that got a tid
};

// Never destroyed: threads (and the exit handler) may record after main's statics go.
Recorder& recorder() {
  static Recorder* r = new Recorder;
  return *r;
}

std::atomic<int> next_tid{1};
thread_local int t_tid = 0;  // 0: none yet
thread_local std::string t_name;

// This thread's id, handed out on first use. Call with the recorder's mutex held.
int this_tid(Recorder& r) {
  if (t_tid == 0) {
    t_tid = next_tid.fetch_add(1);
    r.thread_names[t_tid] = t_name.empty() ? "thread " + std::to_string(t_tid) : t_name;
  }
  return t_tid;
}

// Appends an event if recording and there is room; returns its index or -1.
int64_t push(Recorder& r, Event e) {
  if (!r.active) return -1;
  if (r.events.size() >= kMaxEvents) {
    ++r.dropped;
    return -1;
  }
  e.tid = this_tid(r);
  r.events.push_back(std::move(e));
  return static_cast<int64_t>(r.events.size()) - 1;
}

double us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

json args_json(const Args& args) {
  json out = json::object();
  for (const Arg& a : args) {
    if (a.is_number)
      out[a.key] = a.number;
    else
      out[a.key] = a.text;
  }
  return out;
}

// The JSON objects of one event (two for an async interval).
void to_json_events(const Event& e, int pid, std::vector<json>& out) {
  json j;
  j["name"] = e.static_name ? std::string(e.static_name) : e.name;
  j["cat"] = e.category;
  j["ph"] = std::string(1, e.phase);
  j["ts"] = us(e.ts_ns);
  j["pid"] = pid;
  j["tid"] = e.tid;
  if (!e.args.empty()) j["args"] = args_json(e.args);
  if (e.phase == 'X') {
    j["dur"] = us(e.dur_ns);
  } else if (e.phase == 'i') {
    j["s"] = "t";  // drawn on its thread's track
  } else if (e.phase == 'b') {
    // Ids are matched per process, but merged files hold every rank: make them unique.
    static std::atomic<uint64_t> next_id{1};
    uint64_t id = (static_cast<uint64_t>(pid) << 32) | next_id.fetch_add(1);
    j["id"] = id;
    json end = {
        {"name", j["name"]}, {"cat", e.category}, {"ph", "e"}, {"ts", us(e.ts_ns + e.dur_ns)},
        {"pid", pid},        {"tid", e.tid},      {"id", id}};
    out.push_back(std::move(j));
    out.push_back(std::move(end));
    return;
  }
  out.push_back(std::move(j));
}

json metadata(const char* name, int pid, int tid, json args) {
  return {{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

// {"traceEvents":[ one event per line ], "displayTimeUnit":"ms", "otherData":{…}}
void write_trace(const std::string& path, const std::vector<json>& events, const json& other) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  RG_CHECK(out.good(), "trace", "expected a writable file at ", path,
           ", got an error opening it (does its directory exist?)");
  out << "{\"traceEvents\":[\n";
  for (size_t i = 0; i < events.size(); ++i)
    out << events[i].dump() << (i + 1 < events.size() ? ",\n" : "\n");
  out << "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":" << other.dump() << "}\n";
  out.flush();
  RG_CHECK(out.good(), "trace", "expected to write ", path, ", got a write error (disk full?)");
}

void stop_at_exit() {
  try {
    std::string path = stop();
    if (!path.empty()) std::fprintf(stderr, "trace: written at exit to %s\n", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trace: could not write the trace at exit: %s\n", e.what());
  }
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string file_for_rank(const std::string& path, int rank, int world_size) {
  if (world_size <= 1) return path;
  std::string tag = ".rank" + std::to_string(rank);
  size_t slash = path.find_last_of('/');
  size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1))
    return path + tag;  // no extension
  return path.substr(0, dot) + tag + path.substr(dot);
}

void start(const std::string& path, int rank, int world_size) {
  RG_CHECK(!path.empty(), "trace::start", "expected a file path, got an empty one");
  RG_CHECK(rank >= 0 && rank < std::max(world_size, 1), "trace::start",
           "expected 0 <= rank < world_size, got rank ", rank, " of ", world_size);
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    RG_CHECK(!r.active, "trace::start", "expected tracing to be off, got it already recording to ",
             r.path);
    if (t_name.empty()) t_name = "compute";
    if (t_tid != 0) r.thread_names[t_tid] = t_name;
    this_tid(r);
    r.active = true;
    ++r.generation;
    r.path = file_for_rank(path, rank, world_size);
    r.rank = rank;
    r.world_size = world_size;
    r.events.clear();
    r.dropped = 0;
    static bool exit_handler = false;
    if (!exit_handler) exit_handler = std::atexit(stop_at_exit) == 0;
  }
  detail::g_enabled.store(true, std::memory_order_relaxed);
}

std::string stop() {
  Recorder& r = recorder();
  std::vector<Event> events;
  std::map<int, std::string> names;
  std::string path;
  int rank = 0, world_size = 1;
  size_t dropped = 0;
  int64_t end = now_ns();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.active) return "";
    detail::g_enabled.store(false, std::memory_order_relaxed);
    r.active = false;
    events = std::move(r.events);
    r.events.clear();
    names = r.thread_names;
    path = r.path;
    rank = r.rank;
    world_size = r.world_size;
    dropped = r.dropped;
  }
  std::vector<json> out;
  out.reserve(events.size() + 2 * names.size() + 2);
  out.push_back(metadata("process_name", rank, 0, {{"name", "rank " + std::to_string(rank)}}));
  out.push_back(metadata("process_sort_index", rank, 0, {{"sort_index", rank}}));
  std::map<int, bool> used;
  for (const Event& e : events) used[e.tid] = true;
  for (const auto& [tid, on] : used) {
    out.push_back(metadata("thread_name", rank, tid, {{"name", names[tid]}}));
    out.push_back(metadata("thread_sort_index", rank, tid, {{"sort_index", tid}}));
  }
  for (Event& e : events) {
    if (e.phase == 'X' && e.dur_ns < 0) {  // still open when tracing stopped: cut it there
      e.dur_ns = end - e.ts_ns;
      e.args.push_back(arg("cut_at_stop", 1.0));
    }
    to_json_events(e, rank, out);
  }
  json other = {{"producer", "ringgrad"},
                {"rank", rank},
                {"world_size", world_size},
                {"dropped_events", dropped}};
  write_trace(path, out, other);
  return path;
}

size_t merge(const std::vector<std::string>& inputs, const std::string& output) {
  std::vector<json> events;
  json other = {{"producer", "ringgrad"}, {"merged_from", inputs}};
  for (const std::string& file : inputs) {
    std::ifstream in(file, std::ios::binary);
    RG_CHECK(in.good(), "trace::merge", "expected a trace file at ", file, ", got none");
    json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
    RG_CHECK(!doc.is_discarded() && doc.is_object() && doc.contains("traceEvents") &&
                 doc["traceEvents"].is_array(),
             "trace::merge", "expected a Chrome trace ({\"traceEvents\":[…]}) in ", file,
             ", got something else");
    for (json& e : doc["traceEvents"]) events.push_back(std::move(e));
  }
  write_trace(output, events, other);
  return events.size();
}

void set_thread_name(const std::string& name) {
  t_name = name;
  if (t_tid != 0) {
    Recorder& r = recorder();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.thread_names[t_tid] = name;
  }
}

void Span::begin(const char* name, std::string dynamic_name, const char* category) {
  Event e;
  e.phase = 'X';
  e.static_name = name;
  e.name = std::move(dynamic_name);
  e.category = category;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  e.ts_ns = now_ns();  // under the lock: events of one thread stay in time order
  index_ = push(r, std::move(e));
  generation_ = r.generation;
}

void Span::end() {
  int64_t t = now_ns();
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.active && r.generation == generation_) {
    Event& e = r.events[static_cast<size_t>(index_)];
    e.dur_ns = t - e.ts_ns;
  }
  index_ = -1;
}

void Span::add_arg(Arg a) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.active && r.generation == generation_)
    r.events[static_cast<size_t>(index_)].args.push_back(std::move(a));
}

void instant(std::string name, const char* category, Args args) {
  if (!enabled()) return;
  Event e;
  e.phase = 'i';
  e.name = std::move(name);
  e.category = category;
  e.args = std::move(args);
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  e.ts_ns = now_ns();
  push(r, std::move(e));
}

void interval(std::string name, const char* category, int64_t begin_ns, int64_t end_ns, Args args) {
  if (!enabled()) return;
  Event e;
  e.phase = 'b';
  e.name = std::move(name);
  e.category = category;
  e.ts_ns = begin_ns;
  e.dur_ns = std::max<int64_t>(0, end_ns - begin_ns);
  e.args = std::move(args);
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  push(r, std::move(e));
}

std::string format_bytes(double bytes) {
  char text[32];
  if (bytes < 1e3)
    std::snprintf(text, sizeof text, "%.0f B", bytes);
  else if (bytes < 1e6)
    std::snprintf(text, sizeof text, "%.0f KB", bytes / 1e3);
  else if (bytes < 1e9)
    std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  else
    std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  return text;
}

}  // namespace ringgrad::trace
