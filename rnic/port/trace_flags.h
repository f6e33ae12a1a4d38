// A trace rule compiled into flags on a QP (issue 17: a rule that matches
// nothing must cost the fast path next to nothing). The worker compiles them
// when its lcore adopts a rule and whenever a QP's route is resolved (which
// every binding change forces); the RX path then tests the flag of the QP the
// tenant check already looked up, and TX the flag of the QP it sends for,
// instead of matching every packet against the rule. A set flag is only a
// "may match": the packet is still matched in full before it is recorded, so
// a flag that is too wide costs time, never a wrong record. Packets without
// a QP (foreign, unbound) are matched in full where they are dropped.
#pragma once

#include <cstdint>

#include "common/trace/tracer.h"
#include "rnic/port/egress_route.h"

namespace tandem::rnic::port {

struct TraceFlags {
  bool rx = false;  // packets from the route's remote to this port for the QP may match
  bool tx = false;  // packets the QP sends over the route may match (their BTH QPN is checked per packet)
};

// `local`: this port's underlay address (what arriving packets must be sent
// to); `wire_qpn`: the QP's number as arriving packets carry it; `r`: the QP's
// resolved route (its underlay addresses and the tenant's P_Key).
inline TraceFlags compile_trace_flags(const common::trace::Tracer& t, uint32_t local, const EgressRoute& r,
                                      uint32_t wire_qpn) noexcept {
  if (!t.active()) return {};
  const common::trace::Rule& rule = t.rule();
  return TraceFlags{rule.matches(r.underlay, local, wire_qpn, r.tmpl.pkey),
                    rule.matches_pair(r.local_underlay, r.underlay, r.tmpl.pkey)};
}

}  // namespace tandem::rnic::port
