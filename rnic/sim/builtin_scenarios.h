// The named scenarios compiled into tandem-sim (from rnic/sim/scenarios/).
#pragma once

#include <string>
#include <vector>

namespace tandem::rnic::sim {

struct BuiltinScenario {
  const char* name;
  const char* yaml;
};

const std::vector<BuiltinScenario>& builtin_scenarios();

}  // namespace tandem::rnic::sim
