// Desired state + this server's name + the agent's level 1 -> the changes
// that make level 1 what etcd says, in an order each passes its check:
// removals of vNICs and mappings first, then tenants, RNICs, vNICs,
// mappings and peerings added, tenants removed last. Sans-I/O and pure.
//
// What this server's level 1 should hold: every tenant and peering; its own
// RNICs; the vNICs placed on them; a mapping for every vNIC placed on another
// server's RNIC (derived: (vni, overlay IP) -> that RNIC's underlay IP, MAC
// and name), and the extra mappings written under mappings/ (a vNIC's
// address wins over an extra mapping of the same key).
#pragma once

#include <string>
#include <vector>

#include "dpu/fleet/desired_state.h"
#include "dpu/model/level1_state.h"

namespace tandem::dpu::fleet {

struct Plan {
  std::vector<Change> changes;
  // What level 1 cannot express or etcd asks the impossible (an RNIC's address
  // changed, a peering removed, a tenant renamed): left as it is, said here.
  std::vector<std::string> unsupported;
};

Plan plan_changes(const DesiredState& d, const std::string& server, const Level1State& s, const Touched& t);

}  // namespace tandem::dpu::fleet
