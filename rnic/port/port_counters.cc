// PortLogic's telemetry rows: the core's drop names and one row per live QP.
#include <array>
#include <string>

#include "rnic/port/port_counters.h"

namespace tandem::rnic::port {

// "drop_<reason>", the names of the core's drop rows (static: rows keep pointers).
const char* const* core_drop_names() {
  static const auto names = [] {
    static std::array<std::string, common::kDropReasonCount> core;
    static std::array<const char*, common::kDropReasonCount> out{};
    for (std::size_t r = 1; r < common::kDropReasonCount; ++r) {
      core[r] = "drop_" + std::string(common::drop_reason_name(static_cast<common::DropReason>(r)));
      out[r] = core[r].c_str();
    }
    return out.data();
  }();
  return names;
}
void PortLogic::fill_qp_rows(QpRows& out) const noexcept {
  out.n = 0;
  for (const QpCtx& q : ctx_) {
    if (!q.live || out.n == out.rows.size()) continue;
    QpRow& r = out.rows[out.n++];
    r = QpRow{};
    r.host_qpn = q.host_qpn;
    r.core_qpn = q.core_qpn;
    r.app_id = q.app_id;
    r.state = q.state;
    r.vnic = q.vnic;
    r.vni = q.vni;
    r.remote_overlay = q.remote_overlay;
    r.remote_underlay = q.remote_underlay;
    r.dest_qpn = q.dest_qpn;
    r.mtu = q.mtu;
    r.route_pending = q.route_pending;
    r.roce_peer = q.roce_peer;
    r.route_wait_us = q.route_wait_ns / 1000;
    if (const QpCounters* qc = core_.qp_counters(q.core_qpn)) {
      r.has_counters = true;
      r.tx_pkts = qc->tx_pkts;
      r.rx_pkts = qc->rx_pkts;
      r.retx_pkts = qc->retx_pkts;
      r.sacks_rx = qc->sacks_rx;
      r.timeouts = qc->timeouts;
      r.credit_probes = qc->credit_probes;
      r.reorder_depth_max = qc->reorder_depth_max;
    }
    if (const PathPolicy* pp = core_.path_policy(q.core_qpn)) {
      r.paths = pp->path_count();
      for (uint32_t i = 0; i < r.paths; ++i) {
        const auto& ps = pp->path_stats(i);
        r.path_removals += ps.removals;
        r.path_returns += ps.returns;
        if (i >= kRowPaths) continue;
        r.pkts[i] = ps.pkts;
        r.removals[i] = ps.removals;
        r.silent_removals[i] = ps.silent_removals;
        r.loss_removals[i] = ps.loss_removals;
        r.stall_excused[i] = ps.stall_excused;
        r.acks[i] = ps.acks;
        r.losses[i] = ps.losses;
        r.srtt_ns[i] = ps.srtt_ns;
        r.up_mask |= uint32_t{ps.up} << i;
        r.ports[i] = pp->path_port(i);
        if (q.route.version != EgressRoute::kUnresolved) r.wire_ports[i] = q.route.sport(r.ports[i]);
      }
    }
    if (const CcPolicy* cc = core_.cc_policy(q.core_qpn)) {
      const CcStats st = cc->stats();
      r.cc = cc->uses_credits() ? "credit" : (st.rate_gbps > 0 ? "rate" : "window");
      r.credits_received = st.credits_received;
      r.credits_used = st.credits_used;
      r.credit_stalls = st.credit_stalls;
      r.rate_cuts = st.rate_cuts;
      r.rate_mbps = static_cast<uint64_t>(st.rate_gbps * 1000);
    }
  }
}

}  // namespace tandem::rnic::port
