// Finds, for a pair of hosts, a set of UDP source ports (RoCEv2 entropy
// values) that the fabric's ECMP hashes onto distinct routes, by walking the
// switches' routing decisions for candidate ports: what Pegasus-style path
// probing learns on a real fabric, computed here from the model.
#pragma once

#include <cstdint>
#include <vector>

#include "rnic/sim/fabric.h"

namespace tandem::rnic::sim {

// The ports of the distinct routes found among the first `candidates`
// entropy values (at most `max_paths`), first-found first.
std::vector<uint16_t> discover_paths(const Fabric& fabric, uint32_t src_host, uint32_t dst_host,
                                     uint32_t max_paths = 64, uint32_t candidates = 2048);

// The sequence of egress ports a frame with this source port takes from
// src_host to dst_host (empty if it cannot get there).
std::vector<uint32_t> trace_route(const Fabric& fabric, uint32_t src_host, uint32_t dst_host, uint16_t sport);

}  // namespace tandem::rnic::sim
