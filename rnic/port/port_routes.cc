// PortLogic's routes and vNICs: a QP's egress entry at RTR, the QPs waiting
// for the DPU agent to install one (and their deadline), and the agent's vNICs.
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>

#include "rnic/port/port_logic.h"
#include "rnic/port/standalone_table.h"

namespace tandem::rnic::port {

namespace {

std::string hex16(uint16_t v) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%04x", v);
  return b;
}

uint32_t mtu_bytes(ibv_mtu m) noexcept {
  return (m >= IBV_MTU_256 && m <= IBV_MTU_4096) ? (128u << m) : 1024u;
}

}  // namespace

const Level2Entry* PortLogic::find_route(QpCtx& q, const host::QpInfo& info, uint32_t remote, uint64_t now,
                                      bool punt) {
  const Level2Table::Snapshot snap = snapshot();
  for (const Vnic& v : vnics_) {
    if (info.vnic_ip != 0 && v.overlay_ip != info.vnic_ip) continue;
    if (const Level2Entry* e = table_.lookup(snap, common::egress_key(v.id, remote))) {
      q.vnic = v.id;
      q.vni = v.vni;
      q.pkey = common::wire_pkey(v.pkey);
      return e;
    }
  }
  if (punt && agent_ && agent_->active())
    for (const Vnic& v : vnics_)
      if (info.vnic_ip == 0 || v.overlay_ip == info.vnic_ip)
        agent_->punt(common::egress_key(v.id, remote), now);
  return nullptr;
}

int PortLogic::apply_rtr(QpCtx& q, const host::QpInfo& info, const Level2Entry& e, uint32_t remote) {
  q.remote_overlay = remote;
  q.remote_underlay = e.egress.underlay_dst_ip;
  q.dest_qpn = info.dest_qp_num;
  q.route.invalidate();  // the vNIC may have changed
  q.mtu = std::min(mtu_bytes(info.path_mtu), c_.mtu);
  QpAttr a;
  a.state = QpState::kRtr;
  a.qp_access_flags = info.qp_access_flags;
  a.path_mtu = q.mtu;
  a.dest_qp_num = info.dest_qp_num;
  a.rq_psn = info.rq_psn;
  a.peer = remote;
  a.path_seed = static_cast<uint16_t>(q.host_qpn ^ (q.host_qpn >> 16));
  a.min_rnr_timer = info.min_rnr_timer;
  a.reorder_delay_ns = c_.reorder_delay_ns;
  a.standard_peer = (e.egress.flags & common::kEgressPeerRoce) != 0;
  q.roce_peer = a.standard_peer;
  const int rc = core_.modify_qp(q.core_qpn, a,
                                 IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                     IBV_QP_RQ_PSN | IBV_QP_AV | IBV_QP_MIN_RNR_TIMER);
  if (rc == 0) {
    q.routed = true;
    if (q.roce_peer) ++k_.qps_roce_peer;
  }
  return rc;
}

int PortLogic::apply_rts(QpCtx& q, const host::QpInfo& info) {
  QpAttr a;
  a.state = QpState::kRts;
  a.sq_psn = info.sq_psn;
  // The application's local ACK timeout (4.096 us << timeout, as verbs)
  // when it set one; the worker's --timeout-us otherwise. Never below the
  // worker's: a too-short RTO retransmits whatever is still queued.
  a.timeout_ns = info.timeout ? std::max<uint64_t>(c_.timeout_ns, uint64_t{4096} << std::min<uint8_t>(info.timeout, 31))
                              : c_.timeout_ns;
  a.retry_cnt = info.retry_cnt ? info.retry_cnt : 7;
  a.rnr_retry = info.rnr_retry;
  // READs and atomics in flight: the application's max_rd_atomic (set by now, at RTS), at least 1.
  a.max_rd_atomic = std::max<uint8_t>(info.max_rd_atomic, 1);
  return core_.modify_qp(q.core_qpn, a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                            IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

void PortLogic::update_vnics(const LcoreView& ch) {
  const bool agent = ch.vnics_from_agent;
  std::vector<Vnic> next;
  if (agent) {
    for (const common::VnicAction& a : ch.vnics)
      next.push_back(Vnic{a.vnic_id, a.overlay_ip, a.overlay_mac, a.vni, a.pkey});
    if (!c_.yaml_vnics.empty() && !yaml_vnics_warned_) {
      log_.log(log_key(LogKind::kVnics, 0),
               "%s: the agent programs this port's vNICs (protocol v%u); the %zu vNICs in %s are ignored",
               c_.name.c_str(), unsigned{ch.negotiated_version}, c_.yaml_vnics.size(), c_.table_file.c_str());
      yaml_vnics_warned_ = true;
    }
  } else {
    next = c_.yaml_vnics;  // an agent older than v3 sends none: the YAML's, as before
  }
  // A vNIC the agent removed: its egress entries went in the same commit, so
  // QPs on it no longer resolve a route (their packets count as table_miss
  // drops, their punts are refused); count them here.
  for (const Vnic& v : vnics_) {
    bool kept = false;
    for (const Vnic& n : next) kept = kept || n.id == v.id;
    if (kept) continue;
    ++vnics_withdrawn_;
    for (const QpCtx& q : ctx_)
      if (q.live && q.routed && q.vnic == v.id) ++qps_on_withdrawn_vnic_;
  }
  {
    std::lock_guard<std::mutex> g(vnics_mu_);
    vnics_.swap(next);
  }
  // A vNIC's partition can arrive later (an agent that moved to v4): its
  // QPs stamp and require the new key from their next packet on.
  for (QpCtx& q : ctx_)
    for (const Vnic& v : vnics_)
      if (q.live && q.routed && q.vnic == v.id && q.pkey != common::wire_pkey(v.pkey)) {
        q.pkey = common::wire_pkey(v.pkey);
        q.route.invalidate();
      }
  vnics_from_agent_ = agent;
  vnics_generation_ = ch.vnics_generation;
  vnics_version_ = ch.snap.version;
  host_.set_vnic_ips(vnic_ips(vnics_));
  host_.set_vnic_owners(vnic_owners(c_.device_owners, vnics_));
  std::string list;
  for (const Vnic& v : vnics_) {
    list += (list.empty() ? "" : ", ") + std::to_string(v.id) + "=" + format_ipv4(v.overlay_ip);
    if (v.pkey) list += " pkey " + hex16(v.pkey);
  }
  // Through the ring: the lcore runs this (follow_agent); a long list is cut at the ring's line length.
  if (agent)
    log_.info(log_key(LogKind::kVnics, 1), "%s: vNICs from the agent (table v%llu): %s", c_.name.c_str(),
              static_cast<unsigned long long>(vnics_version_), list.empty() ? "none" : list.c_str());
  else
    log_.info(log_key(LogKind::kVnics, 1), "%s: vNICs from %s (agent protocol v%u sends none): %s", c_.name.c_str(),
              c_.table_file.c_str(), unsigned{ch.negotiated_version}, list.empty() ? "none" : list.c_str());
}

// DPU mode: QPs whose RTR waits for the agent. Each iteration looks their
// routes up again (a handful of QPs, control path); a route that arrived
// completes RTR (and RTS if the application got there) and lets the QP's
// WQEs flow; past the deadline (the agent denied it, or is gone) the QP
// goes to ERR and its application sees the failure.
uint32_t PortLogic::pending_routes(uint64_t now) {
  // A route can only appear with a commit: look again when the table version
  // moved, and otherwise once per kRouteRescanNs (deadlines, re-punting what
  // the budget or the agent dropped). A tenant holding thousands of QPs in RTR
  // then costs the loop nothing between commits.
  const uint64_t version = snapshot().version;
  const bool timer = now >= next_route_scan_ns_;
  if (version == routes_seen_version_ && !timer) return 0;
  routes_seen_version_ = version;
  if (timer) next_route_scan_ns_ = now + kRouteRescanNs;
  uint32_t done = 0;
  for (std::size_t i = 0; i < route_wait_.size();) {
    QpCtx* q = by_host(route_wait_[i]);
    const host::QpInfo* info = host_.qp_info(route_wait_[i]);
    bool finished = q == nullptr || info == nullptr || !q->route_pending;
    if (!finished) {
      const uint32_t remote = common::load_be32(info->dgid + 12);
      if (const Level2Entry* e = find_route(*q, *info, remote, now, timer)) {
        q->route_pending = false;
        q->route_wait_ns = now - q->route_asked_ns;
        int rc = apply_rtr(*q, *info, *e, remote);
        if (rc == 0 && q->rts_pending) rc = apply_rts(*q, *info);
        if (rc != 0) {
          ++k_.qps_core_refused;
          fail_qp(*q);
        } else if (!q->queued) {
          q->backlog = true;  // WQEs posted meanwhile wait in the rings
          ready(*q);
        }
        finished = true;
      } else if (now >= q->route_deadline) {
        log_.log(log_key(LogKind::kNoRoute, q->app_id),
                 "%s: QP 0x%x: the agent installed no route to %u.%u.%u.%u: QP to ERR", c_.name.c_str(), q->host_qpn,
                 remote >> 24, (remote >> 16) & 0xFF, (remote >> 8) & 0xFF, remote & 0xFF);
        ++k_.qps_no_route;
        q->route_pending = false;
        fail_qp(*q);
        if (!q->queued) {
          q->backlog = true;  // flushes the WQEs posted meanwhile: the application sees errors
          ready(*q);
        }
        finished = true;
      }
    }
    if (finished) {
      route_wait_[i] = route_wait_.back();
      route_wait_.pop_back();
      ++done;
    } else {
      ++i;
    }
  }
  return done;
}

// DPU mode, after the lcore adopted a view (commit_fanout.h): follows the
// committed vNIC entries of that version (a v3 agent) or falls back to the
// YAML's (an older agent). Two compares when nothing changed.
void PortLogic::refresh_vnics() {
  const LcoreView* ch = agent_->view();
  if (ch == nullptr || !ch->channel) return;
  const bool agent = ch->vnics_from_agent;
  if (agent == vnics_from_agent_ && ch->vnics_generation == vnics_generation_) [[likely]] {
    if (!agent && !old_agent_warned_ && ch->negotiated_version != 0 && c_.yaml_vnics.empty()) {
      log_.log(log_key(LogKind::kVnics, 2),
               "%s: the agent speaks protocol v%u (< v%u) and sends no vNICs, and %s lists none: QPs of this "
               "port cannot be routed until a newer agent connects",
               c_.name.c_str(), unsigned{ch->negotiated_version}, unsigned{common::kProtocolVersionVnic},
               c_.table_file.c_str());
      old_agent_warned_ = true;
    }
    return;
  }
  update_vnics(*ch);
}

uint32_t PortLogic::follow_agent(uint64_t now) {
  if (agent_ == nullptr) return 0;
  refresh_vnics();
  return route_wait_.empty() ? 0 : pending_routes(now);
}

}  // namespace tandem::rnic::port
