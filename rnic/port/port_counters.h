// Every counter of the port logic, visited once: f(group, name, value, help).
// Those rows make the telemetry snapshot, --stats-json and the exit print
// alike (rnic/port/worker_snapshot.h); the I/O layer adds its own rows after
// the drops (`io_rows(f)`), the caller its last ones before live_qps (`more_rows(f)`).
#pragma once

#include <cstddef>
#include <iterator>

#include "rnic/port/port_logic.h"

namespace tandem::rnic::port {

// "drop_<reason>", the names of the core's drop rows (static: rows keep pointers).
const char* const* core_drop_names();
inline constexpr const char* kDropGroups[] = {"drops.parse", "drops.ingress", "drops.core", "drops.egress"};
static_assert(std::size(kDropGroups) == static_cast<std::size_t>(Stage::kCount));

template <class F, class IoRows, class MoreRows>
void PortLogic::visit_counters(F&& f, IoRows&& io_rows, MoreRows&& more_rows) const {
#define TANDEM_RNIC_COUNTER_VISIT(name, doc) f("worker", #name, k_.name, doc);
  TANDEM_FOREACH_RNIC_COUNTER(TANDEM_RNIC_COUNTER_VISIT)
#undef TANDEM_RNIC_COUNTER_VISIT
  for (std::size_t st = 0; st < static_cast<std::size_t>(Stage::kCount); ++st)
    for (std::size_t r = 1; r < common::kDropReasonCount; ++r)
      if (k_.drops[st][r])
        f(kDropGroups[st], common::drop_reason_name(static_cast<common::DropReason>(r)).data(), k_.drops[st][r],
          "packets dropped at this stage for this reason");
  io_rows(f);
  const TransportCounters& tc = core_.counters();
  f("core", "rx_pkts", tc.rx_pkts, "frames the transport core was given");
  for (std::size_t r = 1; r < common::kDropReasonCount; ++r)
    if (tc.drops[r]) f("core", core_drop_names()[r], tc.drops[r], "frames the core dropped for this reason");
  if (c_.bench_any_psn) {  // docs/pktgen.md "Looped replays"
    f("core", "bench_accepted", tc.bench_accepted, "--bench-any-psn: requests placed (or READs taken)");
    f("core", "bench_duplicate", tc.bench_duplicate, "--bench-any-psn: of them, restarts behind the expected PSN");
    f("core", "bench_gap", tc.bench_gap, "--bench-any-psn: of them, restarts ahead of the expected PSN");
  }
  const host::HostCounters& hc = host_.counters();
#define TANDEM_HOST_COUNTER_VISIT(name, doc) f("host", #name, hc.name, doc);
  TANDEM_FOREACH_HOST_COUNTER(TANDEM_HOST_COUNTER_VISIT)
#undef TANDEM_HOST_COUNTER_VISIT
  f("table", "version", table_.version(), "committed level-2 table version");
  f("table", "entries", table_.size(), "committed level-2 table entries");
  f("table", "full_buckets", table_.stats().full_buckets, "PUTs refused: both buckets of the key full (collisions)");
  f("table", "full_capacity", table_.stats().full_capacity, "PUTs refused: the table at --table-capacity");
  f("vnics", "count", vnics_.size(), "vNICs of the port");
  f("vnics", "withdrawn", vnics_withdrawn_, "vNICs the agent removed");
  f("vnics", "qps_on_withdrawn_vnic", qps_on_withdrawn_vnic_, "live QPs routed over a vNIC when it was removed");
  more_rows(f);
  f("", "live_qps", live_qps(), "QPs live now");
}

}  // namespace tandem::rnic::port
