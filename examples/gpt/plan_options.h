// gpt/plan_options.h — gpt's planner flags: --plan, --world, --machine, --check-plan.
//
//   gpt::PlanOptions plan;
//   plan.add_options(app);                              // before parsing
//   const int world_size = plan.world_size(world);      // checks the flags go together
//   if (plan.plan_only) return plan.print(world, config, layout), 0;
//
// --plan prints what each rank of the run the other flags describe will hold (gpt/plan.h) and,
// with --machine, how long its step will take (gpt/step_time.h), without training; --world N
// plans for N ranks without launching them; --check-plan trains, then prints the plan beside
// what the run held (gpt/report.h).
#pragma once

#include <ringgrad/parallel/world.h>
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "plan.h"
#include "report.h"
#include "step_time.h"

namespace gpt {

struct PlanOptions {
  bool plan_only = false, check_plan = false;
  int world = 0;        // --world: the world size to plan for (0: the one rgrun started)
  std::string machine;  // --machine: here | a100 | h100 | h200 (empty: no step time)

  void add_options(CLI::App& app) {
    app.add_flag("--plan", plan_only, "print what each rank will hold for the run the other flags describe "
                 "(gpt/plan.h), without training");
    app.add_flag("--check-plan", check_plan, "train, then print the plan beside the memory held (CHECK lines)");
    app.add_option("--world", world, "with --plan: the world size to plan for (default: this one's)")
        ->check(CLI::PositiveNumber);
    app.add_option("--machine", machine, "with --plan: predict the step's time on this machine (here: "
                   "measured by a short probe on the ranks rgrun started) or on a GPU cluster (a100, h100, h200: "
                   "published figures; gpt/step_time.h)")
        ->check(CLI::IsMember({"here", "a100", "h100", "h200"}));
  }

  // The world size the run's layout is for: --world's, else the launched one. Errors name a
  // flag given without --plan, and --machine here away from the ranks it would measure.
  int world_size(const ringgrad::parallel::World& launched) const {
    RG_CHECK(world == 0 || plan_only, "gpt", "expected --world only with --plan (a run's world is "
             "the number of processes rgrun starts), got --world ", world);
    RG_CHECK(machine.empty() || plan_only, "gpt", "expected --machine only with --plan, got --machine ", machine);
    const int size = world > 0 ? world : launched.size();
    RG_CHECK(machine != "here" || size == launched.size(), "gpt", "expected --machine here to run on the "
             "ranks it plans for (it measures them): rgrun -n ", size, " gpt ... --plan --machine here, got a "
             "world of ", launched.size(), " planning for ", size);
    return size;
  }

  // --plan: the plan, with --machine its step's time (every rank probes `here` at once, the
  // run's shapes); rank 0 prints.
  void print(ringgrad::parallel::World& launched, const GPTConfig& config, const PlanLayout& layout) const {
    std::optional<Machine> m;
    if (machine == "here")
      m = probe_machine(launched, config, layout);
    else if (!machine.empty())
      m = published_machine(machine, layout.precision);
    if (launched.is_main()) print_plan(config, layout, m ? &*m : nullptr);
  }
};

}  // namespace gpt
