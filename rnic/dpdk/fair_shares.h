// The worker's fair shares: of its host interface (rnic/host/resource_quota.h),
// the limits its flags and defaults give the host servers, and the per-vNIC usage
// and refusals; of the agent's slow path, the per-vNIC punt budgets
// (rnic/port/punt_budget.h). As --stats-json, /tandem/rnic/limits and
// /tandem/rnic/punts show them. Both tables are atomics with one writer (the
// control thread, the lcore), so any thread may read them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "rnic/dpdk/worker_config.h"
#include "rnic/host/resource_quota.h"
#include "rnic/port/punt_budget.h"

namespace tandem::rnic::dpdk {

// What the worker can hold of each resource, the base of the default shares:
// QPs and CQs --max-qps, MRs twice that, PDs --max-qps (so one vNIC's share of
// mappings, one per QP, CQ and MR, stays under Linux's vm.max_map_count of
// 65,530 at the default --max-qps), bytes the machine's memory, SRQs the
// transport cores' room (64 per lcore), queue_bytes what --max-qps QPs of
// 1024 x 1024 cost (rings and transport records), at most a quarter of memory.
host::ResourceAmounts worker_capacity(const WorkerConfig& c);
// Per vNIC: --limit-per-vnic, else 3/4 of worker_capacity (default_vnic_share).
// Per application: --limit-per-app, else none beyond its vNIC's.
host::ResourceLimits host_limits(const WorkerConfig& c);

// The worker's id of the vNIC with that overlay IPv4 (0: not one of the
// port's vNICs now); accounts are keyed vnic<id>, ip_a_b_c_d or unbound.
using VnicIdOf = std::function<uint32_t(uint32_t vnic_ip)>;
nlohmann::json limits_json(const host::TenantQuotas& quotas, const VnicIdOf& id_of);
// /tandem/rnic/limits: the limits and, per vNIC account, used_* and refused_*.
void register_limits_telemetry(const host::TenantQuotas& quotas, VnicIdOf id_of);

// Per vNIC (vnic<id>; "overflow" for those past the table) punts admitted and
// refused by the budget. Telemetry: /tandem/rnic/punts.
nlohmann::json punt_budget_json(const port::PuntBudget& budget);
void register_punt_telemetry(const port::PuntBudget& budget);

}  // namespace tandem::rnic::dpdk
