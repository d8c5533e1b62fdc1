// test_trace.cpp — Chrome traces (core/trace.h): well-formed JSON, nesting, names of
// forward modules and backward ops, threads on their own tracks, nothing when off.
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_helpers.h"

namespace {

using nlohmann::json;

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);  // throws (fails the test) on malformed JSON
}

// The events of a trace file other than metadata ("M").
std::vector<json> events_of(const json& doc) {
  std::vector<json> out;
  for (const json& e : doc.at("traceEvents"))
    if (e.at("ph") != "M") out.push_back(e);
  return out;
}

const json* find_event(const std::vector<json>& events, const std::string& name) {
  for (const json& e : events)
    if (e.at("name") == name) return &e;
  return nullptr;
}

// A small model: Linear -> ReLU -> Linear.
struct Tiny : rg::nn::Module {
  rg::nn::Linear fc1{4, 8}, fc2{8, 3};
  Tiny() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  rg::Tensor forward(const rg::Tensor& x) override { return fc2(rg::relu(fc1(x))); }
};

}  // namespace

TEST_CASE("trace: spans nest and the file is well-formed JSON") {
  test::TempDir dir;
  std::string path = (dir.path / "t.json").string();
  CHECK_FALSE(rg::trace::enabled());
  rg::trace::start(path);
  CHECK(rg::trace::enabled());
  {
    rg::trace::Span outer("outer", "test");
    {
      rg::trace::Span inner(std::string("inner ") + std::to_string(7), "test");
      inner.add(rg::trace::arg("bytes", 1024.0));
      inner.add(rg::trace::arg("what", std::string("a \"quoted\" name")));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    rg::trace::instant("mark", "test", {rg::trace::arg("n", 3.0)});
  }
  int64_t t0 = rg::trace::now_ns();
  rg::trace::interval("transfer", "test", t0, t0 + 5000);
  CHECK(rg::trace::stop() == path);
  CHECK_FALSE(rg::trace::enabled());
  CHECK(rg::trace::stop().empty());  // a second stop has nothing to write

  json doc = read_json(path);
  REQUIRE(doc.at("traceEvents").is_array());
  CHECK(doc.at("otherData").at("rank") == 0);
  auto events = events_of(doc);
  const json* outer = find_event(events, "outer");
  const json* inner = find_event(events, "inner 7");
  REQUIRE(outer);
  REQUIRE(inner);
  CHECK(outer->at("ph") == "X");
  CHECK(outer->at("pid") == 0);
  CHECK(outer->at("tid") == inner->at("tid"));
  // inner lies within outer, and lasted at least the 2 ms it slept
  double o0 = outer->at("ts"), o1 = o0 + outer->at("dur").get<double>();
  double i0 = inner->at("ts"), i1 = i0 + inner->at("dur").get<double>();
  CHECK(o0 <= i0);
  CHECK(i1 <= o1);
  CHECK(inner->at("dur").get<double>() >= 2000.0);
  CHECK(inner->at("args").at("bytes") == 1024.0);
  CHECK(inner->at("args").at("what") == "a \"quoted\" name");
  const json* mark = find_event(events, "mark");
  REQUIRE(mark);
  CHECK(mark->at("ph") == "i");
  // the interval is an async begin/end pair with one id
  int begins = 0, ends = 0;
  for (const json& e : events)
    if (e.at("name") == "transfer") (e.at("ph") == "b" ? begins : ends) += 1;
  CHECK(begins == 1);
  CHECK(ends == 1);
  // the calling thread's track is named "compute", the process "rank 0"
  bool compute = false, process = false;
  for (const json& e : doc.at("traceEvents")) {
    if (e.at("ph") != "M") continue;
    if (e.at("name") == "thread_name" && e.at("args").at("name") == "compute" &&
        e.at("tid") == outer->at("tid"))
      compute = true;
    if (e.at("name") == "process_name" && e.at("args").at("name") == "rank 0") process = true;
  }
  CHECK(compute);
  CHECK(process);
}

TEST_CASE("trace: forward modules and backward ops of a small model") {
  test::TempDir dir;
  std::string path = (dir.path / "model.json").string();
  rg::manual_seed(0);
  Tiny model;
  rg::Tensor x = rg::randn({5, 4});
  rg::trace::start(path);
  rg::Tensor loss = model(x).pow(2).mean();
  loss.backward();
  rg::trace::stop();

  auto events = events_of(read_json(path));
  int forward_linear = 0, backward_nodes = 0, accumulate = 0;
  const json* pass = nullptr;
  for (const json& e : events) {
    if (e.at("cat") == "forward" && e.at("name") == "Linear") ++forward_linear;
    if (e.at("cat") == "backward") {
      if (e.at("name") == "backward")
        pass = &e;
      else
        ++backward_nodes;
      if (e.at("name") == "AccumulateGrad") ++accumulate;
    }
  }
  CHECK(forward_linear == 2);
  REQUIRE(find_event(events, "Tiny"));
  CHECK(find_event(events, "Tiny")->at("cat") == "forward");
  REQUIRE(pass);
  CHECK(accumulate == 4);  // fc1/fc2 weight and bias
  CHECK(backward_nodes >= 7);
  // every backward node ran inside the backward pass
  double p0 = pass->at("ts"), p1 = p0 + pass->at("dur").get<double>();
  for (const json& e : events) {
    if (e.at("cat") != "backward" || &e == pass) continue;
    CHECK(e.at("ts").get<double>() >= p0);
    CHECK(e.at("ts").get<double>() + e.at("dur").get<double>() <= p1 + 1e-3);
  }
  // op names, not just "node": the ops this model ran
  CHECK(find_event(events, "mean"));
}

TEST_CASE("trace: nothing is recorded while tracing is off") {
  test::TempDir dir;
  std::string path = (dir.path / "off.json").string();
  Tiny model;
  {
    rg::trace::Span before("before start", "test");  // opened while off: never recorded
    model(rg::randn({2, 4})).sum().backward();
    rg::trace::instant("off", "test");
    rg::trace::start(path);
  }
  rg::trace::Span after_stop_holder("ignored", "test");  // keeps running across stop
  { rg::trace::Span unnamed(std::string(), "test"); }    // an empty name records nothing
  rg::trace::stop();
  {
    rg::trace::Span span("after", "test");
    model(rg::randn({2, 4})).sum().backward();
  }
  auto events = events_of(read_json(path));
  CHECK(find_event(events, "before start") == nullptr);
  CHECK(find_event(events, "off") == nullptr);
  CHECK(find_event(events, "Linear") == nullptr);
  CHECK(find_event(events, "after") == nullptr);
  CHECK(find_event(events, "") == nullptr);
  // a span still open at stop() is cut there
  REQUIRE(find_event(events, "ignored"));
  CHECK(find_event(events, "ignored")->at("args").at("cut_at_stop") == 1.0);
}

TEST_CASE("trace: threads get their own named tracks; rank files and merge") {
  test::TempDir dir;
  std::string path = (dir.path / "ranks.json").string();
  CHECK(rg::trace::file_for_rank(path, 0, 1) == path);
  CHECK(rg::trace::file_for_rank("out.json", 1, 2) == "out.rank1.json");
  CHECK(rg::trace::file_for_rank("dir.v2/out", 0, 2) == "dir.v2/out.rank0");
  CHECK(rg::trace::format_bytes(812e3) == "812 KB");
  CHECK(rg::trace::format_bytes(1.2e6) == "1.2 MB");

  std::vector<std::string> files;
  for (int rank = 0; rank < 2; ++rank) {
    rg::trace::start(path, rank, 2);
    { rg::trace::Span span("main work", "test"); }
    std::thread worker([] {
      rg::trace::set_thread_name("comm");
      rg::trace::Span span("all_reduce 4 KB", "comm");
    });
    worker.join();
    files.push_back(rg::trace::stop());
  }
  CHECK(files[1] == (dir.path / "ranks.rank1.json").string());
  std::string merged = (dir.path / "merged.json").string();
  CHECK(rg::trace::merge(files, merged) > 4);

  json doc = read_json(merged);
  // per rank: "main work" and the all_reduce on a thread named "comm", another track
  for (int rank = 0; rank < 2; ++rank) {
    std::map<int, std::string> names;
    int main_tid = -1, comm_tid = -2;
    for (const json& e : doc.at("traceEvents")) {
      if (e.at("pid") != rank) continue;
      if (e.at("name") == "thread_name") names[e.at("tid")] = e.at("args").at("name");
      if (e.at("name") == "main work") main_tid = e.at("tid");
      if (e.at("name") == "all_reduce 4 KB") comm_tid = e.at("tid");
    }
    CHECK(main_tid != comm_tid);
    CHECK(names[comm_tid] == "comm");
    CHECK(names[main_tid] == "compute");
  }
  std::string missing = test::error_of([&] { rg::trace::merge({path + ".missing"}, merged); });
  CHECK(missing.find("[trace::merge] expected a trace file at") != std::string::npos);
}

TEST_CASE("trace: start twice is an error") {
  test::TempDir dir;
  std::string path = (dir.path / "twice.json").string();
  rg::trace::start(path);
  std::string message = test::error_of([&] { rg::trace::start(path); });
  rg::trace::stop();
  CHECK(message.find("[trace::start] expected tracing to be off") != std::string::npos);
}
