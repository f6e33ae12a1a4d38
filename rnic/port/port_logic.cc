#include "rnic/port/port_logic.h"

#include <arpa/inet.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <span>
#include <stdexcept>

#include "rnic/port/port_counters.h"
#include "rnic/port/standalone_table.h"

namespace tandem::rnic::port {

namespace {

constexpr uint64_t kRecvTag = uint64_t{1} << 32;  // core wr_id = slot (| kRecvTag for RECVs)
// SRQ receives: wr_id = kRecvTag | kSrqTag | SrqCtx index << 16 | slot.
constexpr uint64_t kSrqTag = uint64_t{1} << 33;

std::string hex16(uint16_t v) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%04x", v);
  return b;
}

uint32_t mtu_bytes(ibv_mtu m) noexcept {
  return (m >= IBV_MTU_256 && m <= IBV_MTU_4096) ? (128u << m) : 1024u;
}

}  // namespace

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

PortLogic::PortLogic(const PortConfig& c, Level2Table& table, host::HostServer& host, AgentLink* agent)
    : c_(c),
      table_(table),
      host_(host),
      agent_(agent),
      core_(TransportConfig{c.max_qps, kQpnBase, 8, 4, 1024}),
      vnics_(c.yaml_vnics) {
  core_cq_ = core_.create_cq(1u << 16);
  const MemoryRegion mr = core_.reg_mr(kIdentityBase, reinterpret_cast<uint8_t*>(kIdentityBase), kIdentityLen,
                                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (mr.lkey == 0 || core_cq_ == UINT32_MAX) throw std::runtime_error("transport core: cannot create CQ/MR");
  ident_key_ = mr.lkey;
  ctx_.resize(c.max_qps);
  host_index_.assign(kMaxHostQpSlots, UINT32_MAX);
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

void PortLogic::on_qp_created(uint32_t host_qpn) {
  const host::QpInfo* info = host_.qp_info(host_qpn);
  if (info == nullptr) return;
  QpInitAttr init;
  init.send_cq = core_cq_;
  init.recv_cq = core_cq_;
  init.sq_depth = std::bit_ceil(std::max<uint32_t>(info->sq_depth, 1));
  init.rq_depth = std::bit_ceil(std::max<uint32_t>(info->rq_depth, 1));
  init.mode = c_.mode;
  init.max_rd_atomic = std::max<uint8_t>(info->max_rd_atomic, 1);
  init.max_dest_rd_atomic = 16;
  init.policy.path = c_.spray.c_str();
  init.policy.cc = c_.cc.c_str();
  init.policy.cc_window_bytes = c_.cc_window_bytes;
  init.policy.num_paths = 16;
  init.bench_any_psn = c_.bench_any_psn;  // standalone only (tandem-rnic refuses it in DPU mode)
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
  q.send_slots.resize(init.sq_depth);
  q.recv_slots.resize(init.rq_depth);
  for (uint32_t i = init.sq_depth; i-- > 0;) q.send_free.push_back(i);
  for (uint32_t i = init.rq_depth; i-- > 0;) q.recv_free.push_back(i);
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
    case IBV_QPS_INIT:
      a.state = QpState::kInit;
      a.qp_access_flags = info->qp_access_flags;
      rc = core_.modify_qp(q->core_qpn, a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
      break;
    case IBV_QPS_RTR: {
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
        std::fprintf(stderr, "%s: QP 0x%x: no egress entry for remote %s: QP to ERR\n", c_.name.c_str(), host_qpn,
                     format_ipv4(remote).c_str());
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
    std::fprintf(stderr, "%s: QP 0x%x: core refused %s (errno %d): QP to ERR\n", c_.name.c_str(), host_qpn,
                 qp_state_name(state), rc);
    ++k_.qps_core_refused;
    fail_qp(*q);
  }
}

const Level2Entry* PortLogic::find_route(QpCtx& q, const host::QpInfo& info, uint32_t remote, uint64_t now,
                                      bool punt) {
  const Level2Table::Snapshot snap = table_.begin_read();
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
  const int rc = core_.modify_qp(q.core_qpn, a,
                                 IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                     IBV_QP_RQ_PSN | IBV_QP_AV | IBV_QP_MIN_RNR_TIMER);
  if (rc == 0) q.routed = true;
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
  return core_.modify_qp(q.core_qpn, a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                            IBV_QP_RNR_RETRY);
}

void PortLogic::update_vnics(const RnicChannel& ch) {
  const bool agent = ch.vnics_from_agent();
  std::vector<Vnic> next;
  if (agent) {
    for (const common::VnicAction& a : ch.vnics().committed())
      next.push_back(Vnic{a.vnic_id, a.overlay_ip, a.overlay_mac, a.vni, a.pkey});
    if (!c_.yaml_vnics.empty() && !yaml_vnics_warned_) {
      std::fprintf(stderr, "%s: warning: the agent programs this port's vNICs (protocol v%u); the %zu vNICs in %s are ignored\n",
                   c_.name.c_str(), unsigned{ch.negotiated_version()}, c_.yaml_vnics.size(), c_.table_file.c_str());
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
  vnics_generation_ = ch.vnics().generation();
  vnics_version_ = ch.vnics().version();
  host_.set_vnic_ips(vnic_ips(vnics_));
  host_.set_vnic_owners(vnic_owners(c_.device_owners, vnics_));
  std::string list;
  for (const Vnic& v : vnics_) {
    list += (list.empty() ? "" : ", ") + std::to_string(v.id) + "=" + format_ipv4(v.overlay_ip);
    if (v.pkey) list += " pkey " + hex16(v.pkey);
  }
  if (agent)
    std::printf("%s: vNICs from the agent (table v%llu): %s\n", c_.name.c_str(),
                static_cast<unsigned long long>(vnics_version_), list.empty() ? "none" : list.c_str());
  else
    std::printf("%s: vNICs from %s (agent protocol v%u sends none): %s\n", c_.name.c_str(), c_.table_file.c_str(),
                unsigned{ch.negotiated_version()}, list.empty() ? "none" : list.c_str());
  std::fflush(stdout);
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
  const uint64_t version = table_.version();
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
        } else if (!q->backlog) {
          q->backlog = true;  // WQEs posted meanwhile wait in the rings
          backlog_.push_back(q->host_qpn);
        }
        finished = true;
      } else if (now >= q->route_deadline) {
        std::fprintf(stderr, "%s: QP 0x%x: the agent installed no route to %s: QP to ERR\n", c_.name.c_str(),
                     q->host_qpn, format_ipv4(remote).c_str());
        ++k_.qps_no_route;
        q->route_pending = false;
        fail_qp(*q);
        if (!q->backlog) {
          q->backlog = true;  // flushes the WQEs posted meanwhile: the application sees errors
          backlog_.push_back(q->host_qpn);
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

void PortLogic::on_qp_destroyed(uint32_t host_qpn, bool died) {
  QpCtx* q = by_host(host_qpn);
  if (q == nullptr) return;
  QpAttr a;
  a.state = QpState::kError;
  core_.modify_qp(q->core_qpn, a, IBV_QP_STATE);
  core_.destroy_qp(q->core_qpn);
  host_index_[host_qpn & (kMaxHostQpSlots - 1)] = UINT32_MAX;
  *q = QpCtx{};  // its flush completions are dropped: the application's CQ is gone
  ++(died ? k_.qps_app_died : k_.qps_destroyed);
}

void PortLogic::on_srq_created(uint32_t host_srq, uint32_t depth) {
  const uint32_t core_srq = core_.create_srq(depth);
  SrqCtx* s = nullptr;
  for (SrqCtx& c : srqs_)
    if (!c.live) {
      s = &c;
      break;
    }
  if (core_srq == 0 || s == nullptr) {
    if (core_srq != 0) core_.destroy_srq(core_srq);
    std::fprintf(stderr, "%s: SRQ 0x%x: the core has no room for it (%u SRQs): its QPs go to ERR\n", c_.name.c_str(),
                 host_srq, kMaxSrqs);
    ++k_.srqs_core_refused;
    return;
  }
  *s = SrqCtx{};
  s->live = true;
  s->host_srq = host_srq;
  s->core_srq = core_srq;
  s->slots.resize(depth);
  s->free.reserve(depth);
  for (uint32_t i = depth; i-- > 0;) s->free.push_back(i);
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

// A validated receive WQE as the core's RecvWr (QP and SRQ receives alike).
RecvWr PortLogic::core_recv(const host::RecvWork& w, uint64_t wr_id) const noexcept {
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.num_sge = w.num_sge;
  for (uint32_t g = 0; g < w.num_sge; ++g)
    wr.sg_list[g] = Sge{reinterpret_cast<uint64_t>(w.sge[g].addr), w.sge[g].length, ident_key_};
  return wr;
}

uint32_t PortLogic::pump_srq(SrqCtx& s) noexcept {
  host::RecvWork rw[kBurst];
  const std::size_t rn = host_.fetch_srq_recv(s.host_srq, std::span(rw, std::min<std::size_t>(kBurst, s.free.size())));
  const uint64_t tag = kRecvTag | kSrqTag | (uint64_t{static_cast<uint32_t>(&s - srqs_.data())} << 16);
  for (std::size_t i = 0; i < rn; ++i) {
    const uint32_t slot = s.free.back();
    s.free.pop_back();
    s.slots[slot] = rw[i];
    if (core_.post_srq_recv(s.core_srq, core_recv(rw[i], tag | slot)) != 0) {
      ++k_.wqe_refused;  // cannot happen with the identity MR; no QP owns it to fail
      s.free.push_back(slot);
    } else {
      ++k_.srq_wqe_recv;
    }
  }
  s.backlog = !s.free.empty() && host_.srq_queued(s.host_srq) > 0;
  return static_cast<uint32_t>(rn);
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
      case host::HostEventKind::kMrRegistered: break;
      case host::HostEventKind::kMrDeregistered: break;
      case host::HostEventKind::kSrqCreated: on_srq_created(ev.srq, ev.srq_depth); break;
      case host::HostEventKind::kSrqDestroyed: on_srq_destroyed(ev.srq); break;
    }
  }
  return n;
}

uint32_t PortLogic::pump_qp(QpCtx& q) noexcept {
  if (q.route_pending) {
    q.backlog = false;  // pending_routes() puts it back once routed
    return 0;
  }
  uint32_t n = 0;
  host::RecvWork rw[kBurst];
  const std::size_t rn = host_.fetch_recv(q.host_qpn, std::span(rw, std::min<std::size_t>(kBurst, q.recv_free.size())));
  for (std::size_t i = 0; i < rn; ++i) {
    const uint32_t slot = q.recv_free.back();
    q.recv_free.pop_back();
    q.recv_slots[slot] = rw[i];
    if (core_.post_recv(q.core_qpn, core_recv(rw[i], slot | kRecvTag)) != 0) {
      ++k_.wqe_refused;
      host_.complete_recv(q.host_qpn, rw[i], IBV_WC_LOC_QP_OP_ERR, 0, IBV_WC_RECV, false, 0, 0);
      q.recv_free.push_back(slot);
    } else {
      ++k_.wqe_recv;
    }
  }
  host::SendWork sw[kBurst];
  SendWr* const wrs = post_list_.data();
  const std::size_t sn = host_.fetch_send(q.host_qpn, std::span(sw, std::min<std::size_t>(kBurst, q.send_free.size())));
  for (std::size_t i = 0; i < sn; ++i) {
    const uint32_t slot = q.send_free.back();
    q.send_free.pop_back();
    host::SendWork& w = q.send_slots[slot];
    w = sw[i];
    SendWr& wr = wrs[i];
    wr.wr_id = slot;
    wr.opcode = w.opcode;
    wr.send_flags = IBV_SEND_SIGNALED | (w.send_flags & IBV_SEND_SOLICITED);
    wr.imm_data = ntohl(w.imm_data);
    wr.remote_addr = w.remote_addr;
    wr.rkey = w.rkey;
    if (w.inline_len > 0 || (w.send_flags & IBV_SEND_INLINE)) {
      wr.num_sge = w.inline_len ? 1 : 0;
      wr.sg_list[0] = Sge{reinterpret_cast<uint64_t>(w.inline_data), w.inline_len, ident_key_};
    } else {
      wr.num_sge = w.num_sge;
      for (uint32_t s = 0; s < w.num_sge; ++s)
        wr.sg_list[s] = Sge{reinterpret_cast<uint64_t>(w.sge[s].addr), w.sge[s].length, ident_key_};
    }
  }
  // The fetched WQEs as one list (one QP lookup for the burst, as
  // ibv_post_send takes a list); a WR the core refuses fails alone, with
  // LOC_QP_OP_ERR, and the rest of the list is posted after it.
  for (uint32_t from = 0; from < sn;) {
    uint32_t posted = 0;
    const int rc = core_.post_send(q.core_qpn, wrs + from, static_cast<uint32_t>(sn) - from, &posted);
    k_.wqe_send += posted;
    if (rc == 0) break;
    const uint32_t slot = static_cast<uint32_t>(wrs[from + posted].wr_id);
    ++k_.wqe_refused;
    host_.complete_send(q.host_qpn, q.send_slots[slot], IBV_WC_LOC_QP_OP_ERR);
    q.send_free.push_back(slot);
    from += posted + 1;
  }
  n = static_cast<uint32_t>(rn + sn);
  // Edge-triggered doorbells: keep the QP while WQEs are left to fetch.
  q.backlog = host_.send_queued(q.host_qpn) > 0 || host_.recv_queued(q.host_qpn) > 0;
  return n;
}

uint32_t PortLogic::pump_work() noexcept {
  uint32_t ready[64];
  uint32_t n = 0;
  std::size_t r;
  while ((r = host_.ready_qps(std::span(ready, 64))) > 0) {
    for (std::size_t i = 0; i < r; ++i) {
      if (ready[i] & host::kSrqDoorbell) {
        if (SrqCtx* s = srq_by_host(ready[i] & ~host::kSrqDoorbell)) n += pump_srq(*s);
        continue;
      }
      QpCtx* q = by_host(ready[i]);
      if (q == nullptr) {
        // Unknown to the core (creation refused): let the host flush it.
        host::SendWork sw[8];
        host::RecvWork rw[8];
        host_.fetch_send(ready[i], std::span(sw, 8));
        host_.fetch_recv(ready[i], std::span(rw, 8));
        continue;
      }
      const bool was = q->backlog;
      n += pump_qp(*q);
      if (q->backlog && !was) backlog_.push_back(q->host_qpn);
    }
    if (r < 64) break;
  }
  // SRQs whose rings hold more than the core had room for.
  if (live_srqs_ != 0)
    for (SrqCtx& s : srqs_)
      if (s.live && s.backlog) n += pump_srq(s);
  // QPs left over from earlier iterations.
  for (std::size_t i = 0; i < backlog_.size();) {
    QpCtx* q = by_host(backlog_[i]);
    if (q != nullptr && q->backlog) n += pump_qp(*q);
    if (q == nullptr || !q->backlog) {
      backlog_[i] = backlog_.back();
      backlog_.pop_back();
    } else {
      ++i;
    }
  }
  return n;
}

uint32_t PortLogic::completions() noexcept {
  Completion wc[64];
  uint32_t total = 0;
  uint32_t n;
  while ((n = core_.poll_cq(core_cq_, wc, 64)) > 0) {
    total += n;
    for (uint32_t i = 0; i < n; ++i) {
      QpCtx* q = by_core(wc[i].qp_num);
      if (wc[i].wr_id & kSrqTag) {
        // The slot is the SRQ's: freed even if the QP that took it is gone.
        const uint32_t si = static_cast<uint32_t>(wc[i].wr_id >> 16) & 0xFFFF;
        const uint32_t slot = static_cast<uint32_t>(wc[i].wr_id & 0xFFFF);
        if (si >= srqs_.size() || !srqs_[si].live || slot >= srqs_[si].slots.size()) continue;
        SrqCtx& s = srqs_[si];
        if (q != nullptr &&
            !host_.complete_recv(q->host_qpn, s.slots[slot], wc[i].status, wc[i].byte_len, wc[i].opcode,
                                 (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0, htonl(wc[i].imm_data), wc[i].src_qp))
          ++k_.cqe_lost;
        s.free.push_back(slot);
        ++k_.cqe_recv;
        if (!s.backlog && host_.srq_queued(s.host_srq) > 0) s.backlog = true;
        continue;
      }
      if (q == nullptr) continue;
      bool ok;
      if (wc[i].wr_id & kRecvTag) {
        const uint32_t slot = static_cast<uint32_t>(wc[i].wr_id & 0xFFFFFFFF);
        if (slot >= q->recv_slots.size()) continue;
        ok = host_.complete_recv(q->host_qpn, q->recv_slots[slot], wc[i].status, wc[i].byte_len,
                                 wc[i].opcode, (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0, htonl(wc[i].imm_data),
                                 wc[i].src_qp);
        q->recv_free.push_back(slot);
        ++k_.cqe_recv;
      } else {
        const uint32_t slot = static_cast<uint32_t>(wc[i].wr_id);
        if (slot >= q->send_slots.size()) continue;
        ok = host_.complete_send(q->host_qpn, q->send_slots[slot], wc[i].status);
        q->send_free.push_back(slot);
        ++k_.cqe_send;
      }
      if (!ok) ++k_.cqe_lost;
      // Freed slots may let a QP fetch more.
      if (!q->backlog && (host_.send_queued(q->host_qpn) > 0 || host_.recv_queued(q->host_qpn) > 0)) {
        q->backlog = true;
        backlog_.push_back(q->host_qpn);
      }
    }
    if (n < 64) break;
  }
  return total;
}



// DPU mode, after each channel service: follows the channel's committed vNIC
// entries (a v3 agent) or falls back to the YAML's (an older agent). Two
// compares when nothing changed.
void PortLogic::refresh_vnics() {
  const RnicChannel* ch = agent_->channel();
  if (ch == nullptr) return;
  const bool agent = ch->vnics_from_agent();
  if (agent == vnics_from_agent_ && ch->vnics().generation() == vnics_generation_) [[likely]] {
    if (!agent && !old_agent_warned_ && ch->negotiated_version() != 0 && c_.yaml_vnics.empty()) {
      std::fprintf(stderr, "%s: warning: the agent speaks protocol v%u (< v%u) and sends no vNICs, and %s lists "
                   "none: QPs of this port cannot be routed until a newer agent connects\n",
                   c_.name.c_str(), unsigned{ch->negotiated_version()}, unsigned{common::kProtocolVersionVnic},
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

void PortLogic::flush_all(uint64_t now) {
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

// ----------------------------------------------------------------- counters

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
    r.mtu = q.mtu;
    r.route_pending = q.route_pending;
    r.route_wait_us = q.route_wait_ns / 1000;
    if (const QpCounters* qc = core_.qp_counters(q.core_qpn)) {
      r.has_counters = true;
      r.tx_pkts = qc->tx_pkts;
      r.rx_pkts = qc->rx_pkts;
      r.retx_pkts = qc->retx_pkts;
      r.sacks_rx = qc->sacks_rx;
      r.timeouts = qc->timeouts;
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
