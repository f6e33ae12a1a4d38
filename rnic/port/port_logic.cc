#include "rnic/port/port_logic.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <stdexcept>

#include "rnic/port/standalone_table.h"

namespace tandem::rnic::port {

const char* qp_state_name(ibv_qp_state s) noexcept {
  switch (s) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    default: return "?";
  }
}

PortLogic::PortLogic(const PortConfig& c, Level2Table& table, host::FastPath& host, AgentLink* agent)
    : c_(c),
      table_(table),
      host_(host),
      agent_(agent),
      pinned_(agent && agent->view() ? &agent->view()->snap : nullptr),
      core_(core_config(c)),
      vnics_(c.yaml_vnics) {
  core_cq_ = core_.create_cq(1, &relay_);
  if (core_cq_ == UINT32_MAX) throw std::runtime_error("transport core: cannot create its CQ");
  ctx_.resize(c.max_qps);
  host_index_.assign(kMaxHostQpSlots, UINT32_MAX);
  app_ready_.resize(std::max<uint32_t>(host.max_apps(), 1));
  ready_apps_.resize(app_ready_.size());
}

std::size_t PortLogic::live_qps() const noexcept {
  return static_cast<std::size_t>(std::count_if(ctx_.begin(), ctx_.end(), [](const QpCtx& q) { return q.live; }));
}

std::vector<host::VnicOwner> PortLogic::vnic_owners(const std::vector<DeviceOwner>& owners,
                                                    const std::vector<Vnic>& vnics) {
  std::vector<host::VnicOwner> out;
  for (const DeviceOwner& o : owners)
    for (const Vnic& v : vnics)
      if (v.id == o.vnic_id) out.push_back({v.overlay_ip, o.uid, o.gid});
  return out;
}

uint32_t PortLogic::vnic_id(const std::vector<Vnic>& vnics, uint32_t ip) noexcept {
  for (const Vnic& v : vnics)
    if (v.overlay_ip == ip) return v.id;
  return 0;
}

std::vector<uint32_t> PortLogic::vnic_ips(const std::vector<Vnic>& vnics) {
  std::vector<uint32_t> ips;
  for (const Vnic& v : vnics) ips.push_back(v.overlay_ip);
  return ips;
}

TransportConfig PortLogic::core_config(const PortConfig& c) {
  TransportConfig t{c.max_qps, kQpnBase, kCoreMrSlots, 4, 1024};
  t.owner_inflight_pkts = c.app_inflight_pkts;
  return t;
}

QpInitAttr PortLogic::core_qp_init(const PortConfig& c, uint32_t sq_depth, uint32_t rq_depth, bool ud) {
  QpInitAttr init;
  init.sq_depth = std::bit_ceil(std::max<uint32_t>(sq_depth, 1));
  // pump_qp posts in place (SendSlots): the core keeps inline bytes, and
  // completes every WR so that the host frees its ring slot.
  init.max_inline = host::kMaxInline;
  init.complete_unsignaled = true;
  init.rq_depth = std::bit_ceil(std::max<uint32_t>(rq_depth, 1));
  init.mode = c.mode;
  init.max_dest_rd_atomic = 16;
  init.policy.path = c.spray.c_str();
  init.policy.cc = c.cc.c_str();
  init.policy.cc_window_bytes = c.cc_window_bytes;
  init.policy.num_paths = 16;
  init.bench_any_psn = c.bench_any_psn;  // standalone only (tandem-rnic refuses it in DPU mode)
  if (ud) init.type = QpType::kUd;
  return init;
}

uint64_t PortLogic::qp_worker_bytes(const PortConfig& c, uint32_t sq_depth, uint32_t rq_depth, bool on_srq, bool ud) {
  QpInitAttr init = core_qp_init(c, sq_depth, rq_depth, ud);
  init.srq = on_srq ? 1 : 0;  // only whether it has an RQ of its own matters to the size
  return Transport::qp_footprint(init) + sizeof(QpCtx);
}

uint64_t PortLogic::srq_worker_bytes(uint32_t depth) { return Transport::srq_footprint(depth) + sizeof(SrqCtx); }

void PortLogic::on_qp_created(uint32_t host_qpn) {
  const host::QpInfo* info = host_.qp_info(host_qpn);
  if (info == nullptr) return;
  const bool ud = info->qp_type == IBV_QPT_UD;
  QpInitAttr init = core_qp_init(c_, info->sq_depth, info->rq_depth, ud);
  init.send_cq = core_cq_;
  init.recv_cq = core_cq_;
  init.max_rd_atomic = std::max<uint8_t>(info->max_rd_atomic, 1);
  init.pd = info->pd;
  init.owner = info->app_index + 1;  // TX turns per application, not per QP
  if (ud) init.wire_qpn = host_qpn;  // its datagrams' DETH names the QPN the application knows
  if (info->srq != 0) {
    const SrqCtx* s = srq_by_host(info->srq);
    init.srq = s != nullptr ? s->core_srq : UINT32_MAX;  // none: the core refuses the QP
  }
  const uint32_t core_qpn = core_.create_qp(init);
  if (core_qpn == 0) {
    ++k_.qps_core_refused;
    host_.qp_error(host_qpn);
    return;
  }
  QpCtx& q = ctx_[core_qpn - kQpnBase];
  q = QpCtx{};
  q.live = true;
  q.host_qpn = host_qpn;
  q.core_qpn = core_qpn;
  q.app_id = info->app_id;
  q.app_index = info->app_index;
  q.ud = ud;
  host_index_[host_qpn & (kMaxHostQpSlots - 1)] = core_qpn - kQpnBase;
  ++k_.qps_created;
}

void PortLogic::on_qp_state(uint32_t host_qpn, ibv_qp_state state, uint64_t now) {
  QpCtx* q = by_host(host_qpn);
  const host::QpInfo* info = host_.qp_info(host_qpn);
  if (q == nullptr || info == nullptr) return;
  q->state = state;
  QpAttr a;
  int rc = 0;
  switch (state) {
    case IBV_QPS_RESET:
      // Verbs lets a QP be used again after RESET (ERR -> RESET -> INIT ...):
      // the core forgets its queues and PSNs, and its route is looked up anew.
      q->route_pending = q->rts_pending = false;
      q->routed = false;
      q->route = EgressRoute{};
      a.state = QpState::kReset;
      rc = core_.modify_qp(q->core_qpn, a, IBV_QP_STATE);
      break;
    case IBV_QPS_INIT:
      a.state = QpState::kInit;
      a.qp_access_flags = info->qp_access_flags;
      a.qkey = info->qkey;
      rc = core_.modify_qp(q->core_qpn, a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | (q->ud ? IBV_QP_QKEY : 0));
      break;
    case IBV_QPS_RTR: {
      if (q->ud) {
        rc = apply_ud_rtr(*q, *info);
        break;
      }
      // The remote GID is the remote vNIC's overlay IPv4 (::ffff:a.b.c.d).
      const uint32_t remote = common::load_be32(info->dgid + 12);
      if (const Level2Entry* e = find_route(*q, *info, remote, now, agent_ != nullptr)) {
        rc = apply_rtr(*q, *info, *e, remote);
      } else if (agent_) {
        // Asked the agent (punted); the loop goes on serving everyone else.
        q->route_pending = true;
        q->rts_pending = false;
        q->route_deadline = now + kRouteWaitNs;
        q->route_asked_ns = now;
        route_wait_.push_back(host_qpn);
        return;
      } else {
        log_.log(log_key(LogKind::kNoRoute, q->app_id),
                 "%s: QP 0x%x: no egress entry for remote %u.%u.%u.%u: QP to ERR", c_.name.c_str(), host_qpn,
                 remote >> 24, (remote >> 16) & 0xFF, (remote >> 8) & 0xFF, remote & 0xFF);
        ++k_.qps_no_route;
        fail_qp(*q);
        return;
      }
      break;
    }
    case IBV_QPS_RTS:
      if (q->route_pending) {
        q->rts_pending = true;  // applied once the route is in
        return;
      }
      rc = apply_rts(*q, *info);
      break;
    case IBV_QPS_ERR:
      a.state = QpState::kError;
      core_.modify_qp(q->core_qpn, a, IBV_QP_STATE);  // flushes what the core holds
      break;
    default:
      break;
  }
  if (rc != 0) {
    log_.log(log_key(LogKind::kCoreRefusedQp, q->app_id), "%s: QP 0x%x: core refused %s (errno %d): QP to ERR",
             c_.name.c_str(), host_qpn, qp_state_name(state), rc);
    ++k_.qps_core_refused;
    fail_qp(*q);
  }
}

void PortLogic::on_qp_destroyed(uint32_t host_qpn, bool died) {
  QpCtx* q = by_host(host_qpn);
  if (q == nullptr) return;
  QpAttr a;
  a.state = QpState::kError;
  core_.modify_qp(q->core_qpn, a, IBV_QP_STATE);
  core_.destroy_qp(q->core_qpn);
  host_index_[host_qpn & (kMaxHostQpSlots - 1)] = UINT32_MAX;
  unready(*q);
  *q = QpCtx{};  // its flush completions are dropped: the application's CQ is gone
  ++(died ? k_.qps_app_died : k_.qps_destroyed);
}

void PortLogic::on_srq_created(uint32_t host_srq, uint32_t depth, uint32_t pd) {
  const uint32_t core_srq = core_.create_srq(depth, pd);
  SrqCtx* s = nullptr;
  for (SrqCtx& c : srqs_)
    if (!c.live) {
      s = &c;
      break;
    }
  if (core_srq == 0 || s == nullptr) {
    if (core_srq != 0) core_.destroy_srq(core_srq);
    log_.log(log_key(LogKind::kNoSrq, 0), "%s: SRQ 0x%x: the core has no room for it (%u SRQs): its QPs go to ERR",
             c_.name.c_str(), host_srq,
             kMaxSrqs);
    ++k_.srqs_core_refused;
    return;
  }
  *s = SrqCtx{};
  s->live = true;
  s->host_srq = host_srq;
  s->core_srq = core_srq;
  ++live_srqs_;
  ++k_.srqs_created;
}

void PortLogic::on_srq_destroyed(uint32_t host_srq) {
  SrqCtx* s = srq_by_host(host_srq);
  if (s == nullptr) return;
  // Its QPs were destroyed first (their flushes may still be in the core's
  // CQ, naming this SRQ's slots): take those before the slots go.
  completions();
  core_.destroy_srq(s->core_srq);
  *s = SrqCtx{};
  --live_srqs_;
}

// The core checks every local SGE and remote access against its own copy of
// the MR (same key, the application's addresses, its PD), so the host
// interface's keys go to the core unchanged, on the wire and in WQEs.
void PortLogic::on_mr_registered(const host::HostEvent& ev) noexcept {
  if (core_.reg_mr_with_key(ev.lkey, ev.va, ev.addr, ev.length, ev.access, ev.pd) != 0) {
    // Only if the two tables disagree (the core's is sized to the host's).
    ++k_.mrs_core_refused;
    log_.log(log_key(LogKind::kCoreRefusedMr, ev.app_id),
             "%s: MR key 0x%x: the core refused it; accesses to it will fail", c_.name.c_str(), ev.lkey);
  }
}

uint32_t PortLogic::host_events(uint64_t now) {
  host::HostEvent ev;
  uint32_t n = 0;
  while (host_.next_event(&ev)) {
    ++n;
    switch (ev.kind) {
      case host::HostEventKind::kAppAttached: ++k_.apps_attached; break;
      case host::HostEventKind::kAppDetached: ++k_.apps_detached; break;
      case host::HostEventKind::kQpCreated: on_qp_created(ev.qpn); break;
      case host::HostEventKind::kQpStateChanged: on_qp_state(ev.qpn, ev.state, now); break;
      case host::HostEventKind::kQpDestroyed: on_qp_destroyed(ev.qpn, ev.app_died); break;
      // Mapped for the device by the control thread before it got here (DmaRegistry).
      case host::HostEventKind::kMrRegistered: on_mr_registered(ev); break;
      case host::HostEventKind::kMrDeregistered: core_.dereg_mr(ev.lkey); break;
      case host::HostEventKind::kMrReregistered: core_.modify_mr(ev.lkey, ev.pd, ev.access); break;
      case host::HostEventKind::kSrqCreated: on_srq_created(ev.srq, ev.srq_depth, ev.pd); break;
      case host::HostEventKind::kSrqDestroyed: on_srq_destroyed(ev.srq); break;
    }
  }
  return n;
}

void PortLogic::flush_all(uint64_t now) {
  host_.set_port_active(false);  // applications hear PORT_ERR before their QPs flush
  for (QpCtx& q : ctx_) {
    if (!q.live) continue;
    q.route_pending = false;  // so pump_qp below flushes its WQEs too
    QpAttr a;
    a.state = QpState::kError;
    core_.modify_qp(q.core_qpn, a, IBV_QP_STATE);
  }
  completions();
  for (QpCtx& q : ctx_)
    if (q.live) host_.qp_error(q.host_qpn);
  host_.apply_control(now);  // the control thread has stopped: nothing new comes
  host_events(now);
  for (QpCtx& q : ctx_)
    if (q.live) pump_qp(q);  // flushes the WQEs still queued in shared memory
}

}  // namespace tandem::rnic::port
