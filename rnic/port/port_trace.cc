// The trace rule compiled into every QP's flags (trace_flags.h), when the
// lcore adopted a new rule or a stop: a loop over the QPs, never per packet.
#include "rnic/port/port_logic.h"

namespace tandem::rnic::port {

void PortLogic::compile_trace() noexcept {
  trace_generation_ = tracer_->generation();
  trace_tx_flags_ = false;
  for (QpCtx& q : ctx_) {
    // An unresolved route has no addresses yet: fresh_route compiles it.
    if (!q.live || !q.routed || q.route.version == EgressRoute::kUnresolved) {
      q.trace = {};
      continue;
    }
    q.trace = compile_trace_flags(*tracer_, c_.underlay_ip, q.route, q.host_qpn);
    trace_tx_flags_ |= q.trace.tx;
  }
}

}  // namespace tandem::rnic::port
