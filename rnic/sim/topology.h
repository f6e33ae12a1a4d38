// Builds the fabric a scenario names. Link names (used by failure events):
// parallel: "host0", "host1", "path0".."pathN-1"; leaf-spine: "host<i>",
// "leaf<j>-spine<k>"; fat-tree: "host<i>", "tor<t>-agg<a>", "agg<a>-core<c>".
#pragma once

#include "rnic/sim/fabric.h"
#include "rnic/sim/scenario.h"

namespace tandem::rnic::sim {

// Adds hosts, switches and links to an empty fabric and computes routes.
void build_topology(Fabric& fabric, const TopologySpec& spec);

}  // namespace tandem::rnic::sim
