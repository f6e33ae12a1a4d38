// `tandemctl flow show`, the agent's half: for one virtual flow (tenant,
// overlay source, overlay destination) what level 1 says (the vNICs, the
// mapping, the store's version), and on each RNIC holding one end the level-2
// entries level 1 derives against those the agent's shadow holds, with the
// shadow's version and digest next to what the RNIC says it committed (its
// BAR). Both directions: the return traffic's entries are the other half of
// the same flow. The QP, path and credit half comes from the workers'
// telemetry (apps/tandemctl/flow_show.cc).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "dpu/api/control_api.h"

namespace tandem::dpu {

// Throws RequestError if the tenant is unknown or neither address is one of
// its vNICs (nothing of the flow is on a managed RNIC).
nlohmann::json flow_view(const Level1State& state, const Store& store, const AgentHooks* hooks, uint32_t vni,
                         uint32_t src_ip, uint32_t dst_ip);

}  // namespace tandem::dpu
