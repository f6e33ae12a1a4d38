// Reads a policy's transport options (the scenario's `transport:` keys with
// the policy's own keys on top) into HostOptions; unknown keys or bad values
// throw ScenarioError.
#pragma once

#include "rnic/sim/scenario.h"
#include "rnic/sim/sim_host.h"

namespace tandem::rnic::sim {

HostOptions parse_host_options(const Scenario& s, const PolicySpec& p);

}  // namespace tandem::rnic::sim
