// The transmit side's trace unit (common/trace): one record per frame the
// rule matches, with the path (UDP source port) it leaves on and whether the
// core resent it. The worker's drain loop and the tx-pipeline benchmark call
// it only while a rule is in force (`tracing`, tested once per burst).
#pragma once

#include <cstdint>

#include "common/trace/tracer.h"
#include "rnic/core/tx_desc.h"
#include "rnic/port/egress_route.h"

namespace tandem::rnic::port {

// `now()` is read only for a packet the rule matches (a clock read costs more
// than the match).
template <class Now>
inline void trace_tx(common::trace::Tracer& t, const TxDesc& d, const EgressRoute& r, uint16_t sport, uint16_t ip_id,
                     Now&& now) noexcept {
  if (!t.matches(r.local_underlay, r.underlay, d.bth.dqpn, r.tmpl.pkey)) [[likely]] return;
  common::trace::Record x;
  x.ts_ns = now();
  x.src_ip = r.local_underlay;
  x.dst_ip = r.underlay;
  x.dqpn = d.bth.dqpn;
  x.psn = d.bth.psn;
  x.sport = sport;
  x.ip_id = ip_id;
  x.stage = common::trace::Stage::kTx;
  x.opcode = d.bth.opcode;
  x.flags = d.retransmit ? common::trace::kFlagRetransmit : 0;
  t.record(x);
}

}  // namespace tandem::rnic::port
