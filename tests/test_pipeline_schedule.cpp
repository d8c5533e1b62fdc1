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
