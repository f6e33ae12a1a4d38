// Prints a scenario's results: one JSON object (for scripts and plot.py) or
// a table for people.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rnic/sim/run_result.h"
#include "rnic/sim/scenario.h"

namespace tandem::rnic::sim {

nlohmann::ordered_json results_json(const Scenario& s, uint64_t seed, const std::vector<RunResult>& results);
void print_table(std::ostream& out, const Scenario& s, uint64_t seed, const std::vector<RunResult>& results);

}  // namespace tandem::rnic::sim
