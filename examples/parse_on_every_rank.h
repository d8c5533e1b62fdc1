// parse_on_every_rank.h — CLI11_PARSE for a program that runs on several ranks.
//
//   rg::parallel::World world(argc, argv);
//   CLI::App app{"…"};
//   ...options...
//   if (auto code = parse_on_every_rank(world, app, argc, argv)) return *code;
//
// CLI11_PARSE returns from main on the rank whose arguments are wrong (or that was
// asked for --help) while the others go on into their first collective and wait for it
// until the watchdog ends the job, minutes later. Here every rank parses, then all of
// them agree (parallel::agree_to_start): if one leaves, all leave at once, the others
// naming it. --help's text is printed once, by rank 0; argument errors by each rank
// that has them. Then every option's value (defaults included) is compared across
// ranks (parallel::check_same_across_ranks): ranks started with different arguments
// stop at once with an error naming the option, the ranks and both values.
#pragma once

#include <ringgrad/parallel/world.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <string>

inline std::optional<int> parse_on_every_rank(ringgrad::parallel::World& world, CLI::App& app,
                                              int argc, char** argv) {
  // A wrong setting (world.h): main_guard prints it on every rank and returns 1.
  if (!world.started()) return ringgrad::parallel::main_guard(world, [] { return 0; });
  std::optional<int> code;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // app.exit prints the help text (code 0) or the error, and gives the exit code.
    if (e.get_exit_code() != 0 || world.is_main())
      code = app.exit(e);
    else
      code = e.get_exit_code();
  }
  if (auto leave = ringgrad::parallel::agree_to_start(world.communicator(), code)) return leave;
  // Every option as "name=value" lines (CLI11's config writer, defaults included).
  std::map<std::string, std::string> options;
  std::istringstream lines(app.config_to_str(/*default_also=*/true, /*write_description=*/false));
  for (std::string line; std::getline(lines, line);)
    if (size_t eq = line.find('='); eq != std::string::npos) {
      std::string value = line.substr(eq + 1);
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
      options[line.substr(0, eq)] = value;
    }
  try {
    ringgrad::parallel::check_same_across_ranks(world.communicator(), options, "the command-line options");
  } catch (const ringgrad::Error& e) {
    if (world.is_main()) std::fprintf(stderr, "%s\n", e.what());  // the same on every rank: once
    return 1;
  }
  return std::nullopt;
}
