// tandem-sim: deterministic discrete-event simulation of a leaf-spine fabric
// running the real RNIC transport core on every host.
#include <CLI/CLI.hpp>

#include <iostream>

#include "common/log/log_cli.h"
#include "common/log/log_stream.h"
#include "sim/run.h"

int main(int argc, char** argv) {
  using namespace tandem::rnic::sim;
  namespace log = tandem::common::log;
  log::init("tandem-sim");
  CLI::App app{"tandem-sim: run the RNIC transport core over a simulated fabric"};
  std::string log_level = "info";
  log::add_level_option(app, log_level);
  app.require_subcommand(1);
  app.add_subcommand("list", "list the built-in scenarios");
  auto* run_cmd = app.add_subcommand("run", "run a scenario (built-in name or YAML file)");
  RunOptions opt;
  uint64_t seed = 0;
  run_cmd->add_option("scenario", opt.scenario, "built-in scenario name or YAML file")->required();
  auto* seed_opt = run_cmd->add_option("--seed", seed, "random seed (default: the scenario's)");
  run_cmd->add_flag("--json", opt.json, "print one JSON object instead of a table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    log::error("{}", e.what());
    return 2;
  }
  log::set_level(*log::parse_level(log_level));
  log::LogStream err(log::Level::err);
  try {
    if (app.got_subcommand("list")) return list_scenarios(std::cout);
    if (*seed_opt) opt.seed = seed;
    return tandem::sim::run(opt, std::cout, err);
  } catch (const std::exception& e) {
    log::error("{}", e.what());
    return 2;
  }
}
