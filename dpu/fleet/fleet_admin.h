// tandemctl fleet: desired-state writes and fleet-wide reads against etcd.
// One JSON request in, one JSON reply out, like the agent's control API
// ({"cmd":"fleet.vnic.move",...} -> {"ok":true,...} or {"ok":false,"error":..}),
// so tandemctl prints both the same way. Each write is one etcd transaction
// whose compares make it all-or-nothing against concurrent writers; values are
// validated with the agents' own parser (desired_state.h) before they are written.
#pragma once

#include <nlohmann/json.hpp>

#include "dpu/fleet/etcd_client.h"

namespace tandem::dpu::fleet {

// Never throws: etcd errors and bad requests become {"ok":false,...}.
nlohmann::json fleet_command(const EtcdOptions& etcd, const nlohmann::json& request);

}  // namespace tandem::dpu::fleet
