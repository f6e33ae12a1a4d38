// The tandem-sim command: list the built-in scenarios, or run one (by name
// or YAML file) and print its results. Returns the process exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "rnic/sim/conn_gate.h"
#include "rnic/sim/scenario.h"

namespace tandem::rnic::sim {

struct RunOptions {
  std::string scenario;          // built-in name or path to a YAML file
  std::optional<uint64_t> seed;  // overrides the scenario's
  bool json = false;
};

// Built-in name -> scenario, else a file path; throws ScenarioError.
Scenario resolve_scenario(const std::string& name_or_path);

int list_scenarios(std::ostream& out);
// Exit codes: 0 ran (whatever data_ok says), 2 bad scenario or options.
// `gate`: what scenarios with a dpu: section need (sim/ passes the DPU model).
int run(const RunOptions& opt, std::ostream& out, std::ostream& err, const GateFactory& gate = {});

}  // namespace tandem::rnic::sim
