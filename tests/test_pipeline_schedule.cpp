// test_pipeline_schedule.cpp — the pipeline schedules run on paper (parallel::ideal_bubble):
// GPipe and 1F1B give the textbook bubble, ZB-H1 less, and every stage agrees.
#include <doctest/doctest.h>
#include <ringgrad/parallel/pipeline.h>
#include <ringgrad/ringgrad.h>

#include "test_helpers.h"

namespace par = ringgrad::parallel;
using test::contains;
using test::error_of;

TEST_CASE("pipeline schedule: GPipe and 1F1B on paper give (p - 1) / (m + p - 1) on every stage") {
  for (auto s : {par::PipelineSchedule::GPipe, par::PipelineSchedule::OneFOneB})
    for (int64_t p = 1; p <= 6; ++p)
      for (int64_t m = 1; m <= 16; ++m)
        for (int64_t r = -1; r < p; ++r) {
          const double want = double(p - 1) / double(m + p - 1);
          CHECK_MESSAGE(par::ideal_bubble(s, p, m, r) == doctest::Approx(want).epsilon(1e-12),
                        par::schedule_name(s), " p=", p, " m=", m, " rank ", r);
        }
}

TEST_CASE("pipeline schedule: ZB-H1's W's fill part of 1F1B's bubble") {
  for (int64_t p = 2; p <= 6; ++p)
    for (int64_t m = 1; m <= 16; ++m) {
      const double zb = par::ideal_bubble(par::PipelineSchedule::ZeroBubbleH1, p, m);
      const double onef1b = double(p - 1) / double(m + p - 1);
      const double paper = double(p - 1) / double(3 * m + p - 1);  // the paper's order
      CHECK_MESSAGE(zb < onef1b, "p=", p, " m=", m, ": ", zb, " against 1F1B's ", onef1b);
      CHECK_MESSAGE(zb >= paper - 1e-12, "p=", p, " m=", m, ": ", zb, " against ", paper);
      if (m >= p)  // enough micro-batches: the paper's ZB-H1 bubble exactly
        CHECK_MESSAGE(zb == doctest::Approx(paper).epsilon(1e-12), "p=", p, " m=", m, ": ", zb,
                      " against the paper's ", paper);
    }
  CHECK(par::ideal_bubble(par::PipelineSchedule::ZeroBubbleH1, 1, 4) == 0);  // one stage: none
  CHECK(contains(error_of([] { par::ideal_bubble(par::PipelineSchedule::OneFOneB, 2, 0); }),
                 "expected p >= 1 stages, m >= 1 micro-batches"));
}

TEST_CASE("pipeline schedule: interleaved stages divide the bubble by v, without deadlock") {
  for (int64_t p = 2; p <= 6; ++p)
    for (int64_t v = 1; v <= 4; ++v)
      for (int64_t m = p; m <= 4 * p; m += p) {
        const double want = double(p - 1) / double(v * m + p - 1);
        CHECK_MESSAGE(par::ideal_bubble(par::PipelineSchedule::Interleaved1F1B, p, m, -1, v) ==
                          doctest::Approx(want).epsilon(1e-12),
                      "p=", p, " v=", v, " m=", m);
      }
  // Every (micro-batch, chunk) once forward and once backward on every rank, forwards first.
  for (int64_t r = 0; r < 3; ++r) {
    auto steps = par::pipeline_order(par::PipelineSchedule::Interleaved1F1B, 3, r, 6, 2);
    std::vector<int> f(12, 0), b(12, 0);
    for (const par::PipelineStep& s : steps) {
      const size_t k = size_t(s.micro_batch * 2 + s.chunk);
      if (s.forward) ++f[k];
      else CHECK_MESSAGE(f[k] == 1, "rank ", r, ": a backward before its forward");
      if (!s.forward) ++b[k];
    }
    for (size_t k = 0; k < 12; ++k) CHECK((f[k] == 1 && b[k] == 1));
  }
  CHECK(contains(error_of([] { par::pipeline_order(par::PipelineSchedule::Interleaved1F1B, 4, 0, 6, 2); }),
                 "multiple of the ranks"));
  CHECK(contains(error_of([] { par::pipeline_order(par::PipelineSchedule::OneFOneB, 4, 0, 8, 2); }),
                 "expected one chunk per rank under 1f1b"));
}
