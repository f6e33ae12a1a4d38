// PortLogic's work: WQEs from the host interface's rings to the core (QPs,
// SRQs, the backlog of QPs with more to fetch) and completions back.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "rnic/core/send_slots.h"
#include "rnic/host/wqe_fetch.h"
#include "rnic/port/port_logic.h"

namespace tandem::rnic::port {

namespace {

// fetch_recv_into / fetch_srq_recv_into's sink (wqe_fetch.h): the fields into
// the core's receive slot (a QP's RQ or an SRQ's pool).
struct CoreRecvSink {
  Transport& core;
  uint32_t id;  // core QPN, or core SRQ
  bool srq;
  uint32_t posted = 0;
  bool refused = false;  // the last WR taken: the core said no
  uint64_t wr_id = 0;

  RecvWr* w = nullptr;   // the slot the WQE being taken goes into (looked up once per WQE)

  RecvWr* slot() noexcept {
    if (w == nullptr) w = srq ? core.srq_recv_slot(id) : core.recv_slot(id);
    return w;
  }
  void segment(std::size_t, uint32_t j, const host::Segment& s) noexcept {
    if (RecvWr* r = slot(); r != nullptr && j < kMaxSge) r->sg_list[j] = Sge{s.va, s.length, s.lkey};
  }
  bool taken(std::size_t, uint64_t id_, uint32_t num_sge, uint32_t) noexcept {
    return post(id_, num_sge, false);
  }
  // A QP's receive whose buffer failed the checks (wqe_fetch.h): queued
  // marked, so it fails when a message needs it.
  bool taken_invalid(std::size_t, uint64_t id_) noexcept { return post(id_, 0, true); }
  bool post(uint64_t id_, uint32_t num_sge, bool invalid) noexcept {
    wr_id = id_;
    int rc = EINVAL;
    if (RecvWr* r = slot()) {
      r->wr_id = id_;
      r->num_sge = num_sge;
      r->invalid = invalid;
      rc = srq ? core.post_srq_recv_slot(id) : core.post_recv_slot(id);
    }
    w = nullptr;  // posted or refused: the next WQE asks for its own slot
    if (rc != 0) return !(refused = true);
    ++posted;
    return true;
  }
};

// fetch_send_into's sink (wqe_fetch.h): the fields into the core's SQ slot.
struct CoreSendSink {
  SendSlots& slots;
  bool ud;
  uint32_t posted = 0;
  bool refused = false;  // the last WR taken: the core said no (its id, opcode, flags below)
  uint64_t wr_id = 0;
  ibv_wr_opcode op = IBV_WR_SEND;
  uint32_t flags = 0;

  void header(std::size_t, uint64_t id, ibv_wr_opcode o, uint32_t send_flags, uint32_t imm_data,
              uint64_t remote_addr, uint32_t rkey) noexcept {
    wr_id = id;
    op = o;
    flags = send_flags;
    slots.begin(id, o, send_flags & (IBV_SEND_SIGNALED | IBV_SEND_SOLICITED), ntohl(imm_data), remote_addr, rkey);
    if (ud)  // queue_layout.h: remote QPN << 32 | destination IPv4; rkey = Q_Key
      slots.ud_dest(UdDest{static_cast<uint32_t>(remote_addr), 0, static_cast<uint32_t>(remote_addr >> 32), rkey});
  }
  void atomic(std::size_t, uint64_t compare_add, uint64_t swap) noexcept { slots.atomic(compare_add, swap); }
  void segment(std::size_t, uint32_t j, const host::Segment& s) noexcept { slots.sge(j, s.va, s.length, s.lkey); }
  void inline_bytes(std::size_t, const uint8_t* ring, uint32_t len) noexcept {
    if (uint8_t* d = slots.inline_data(len)) std::memcpy(d, ring, len);
  }
  bool taken(std::size_t, uint32_t) noexcept {
    if (slots.post() != 0) return !(refused = true);
    ++posted;
    return true;
  }
};

}  // namespace

uint32_t PortLogic::pump_srq(SrqCtx& s) noexcept {
  // As pump_qp: each WQE straight into the core SRQ's free slot. One the core
  // refuses has no QP to fail (the host checked it against the same MRs).
  CoreRecvSink sink{core_, s.core_srq, true};
  const std::size_t rn = host_.fetch_srq_recv_into(s.host_srq, std::min<uint32_t>(kBurst, core_.srq_room(s.core_srq)),
                                                   sink);
  k_.srq_wqe_recv += sink.posted;
  if (sink.refused) ++k_.wqe_refused;
  s.backlog = core_.srq_room(s.core_srq) > 0 && host_.srq_queued(s.host_srq) > 0;
  return static_cast<uint32_t>(rn);
}

uint32_t PortLogic::pump_qp(QpCtx& q, uint32_t max_wqes) noexcept {
  if (q.route_pending) {
    q.backlog = false;  // pending_routes() puts it back once routed
    return 0;
  }
  const uint32_t per_ring = std::max<uint32_t>(1, std::min<uint32_t>(kBurst, max_wqes / 2));
  uint32_t n = 0;
  // Each receive WQE goes from the ring straight into the core's RQ slot.
  CoreRecvSink rsink{core_, q.core_qpn, false};
  const std::size_t rn =
      host_.fetch_recv_into(q.host_qpn, std::min<uint32_t>(per_ring, core_.recv_room(q.core_qpn)), rsink);
  k_.wqe_recv += rsink.posted;
  if (rsink.refused) {
    ++k_.wqe_refused;
    host_.complete_recv(q.host_qpn, rsink.wr_id, IBV_WC_LOC_QP_OP_ERR, 0, IBV_WC_RECV, false, 0, 0);
  }
  // Each send WQE goes from the ring straight into the core's SQ slot (one
  // copy; every WR completes, so the host frees its ring slot per WR). A WR
  // the core refuses fails alone, with LOC_QP_OP_ERR, which moves the QP to ERR.
  SendSlots slots(core_, q.core_qpn);
  CoreSendSink sink{slots, q.ud};
  const std::size_t sn = host_.fetch_send_into(q.host_qpn, std::min<uint32_t>(per_ring, slots.room()), sink);
  k_.wqe_send += sink.posted;
  if (sink.refused) {
    ++k_.wqe_refused;
    host_.complete_send(q.host_qpn, sink.wr_id, host::wc_opcode_of(static_cast<uint8_t>(sink.op)), 0,
                        (sink.flags & IBV_SEND_SIGNALED) != 0, IBV_WC_LOC_QP_OP_ERR);
  }
  n = static_cast<uint32_t>(rn + sn);
  // Edge-triggered doorbells: keep the QP while WQEs are left to fetch.
  q.backlog = host_.send_queued(q.host_qpn) > 0 || host_.recv_queued(q.host_qpn) > 0;
  return n;
}

void PortLogic::ready(QpCtx& q) noexcept {
  if (q.queued || q.app_index >= app_ready_.size()) return;
  const auto i = static_cast<uint32_t>(&q - ctx_.data());
  AppReady& a = app_ready_[q.app_index];
  q.queued = true;
  q.ready_prev = a.tail;
  q.ready_next = kNoCtx;
  if (a.tail != kNoCtx) ctx_[a.tail].ready_next = i;
  else a.head = i;
  a.tail = i;
  ++a.count;
  if (!a.listed) {
    a.listed = true;
    ready_apps_[(ready_apps_head_ + ready_apps_n_++) % ready_apps_.size()] = q.app_index;
  }
}

void PortLogic::unready(QpCtx& q) noexcept {
  if (!q.queued) return;
  AppReady& a = app_ready_[q.app_index];
  if (q.ready_prev != kNoCtx) ctx_[q.ready_prev].ready_next = q.ready_next;
  else a.head = q.ready_next;
  if (q.ready_next != kNoCtx) ctx_[q.ready_next].ready_prev = q.ready_prev;
  else a.tail = q.ready_prev;
  --a.count;
  q.queued = false;
  q.ready_prev = q.ready_next = kNoCtx;  // an emptied list leaves ready_apps_ when its turn comes
}

// One application's turn: its listed QPs in order, up to its quantum of WQEs
// (and the turn's budgets); a QP with more to fetch goes to the back of its list.
uint32_t PortLogic::serve_app(uint32_t app, uint32_t& visits, uint32_t& wqes) noexcept {
  AppReady& a = app_ready_[app];
  uint32_t got = 0;
  // Each QP listed now is visited at most once this turn.
  uint32_t left = a.count;
  while (left-- > 0 && a.head != kNoCtx && got < kWqesPerApp && visits < kVisitsPerTurn && wqes < kWqesPerTurn) {
    QpCtx& q = ctx_[a.head];
    unready(q);
    ++visits;
    const uint32_t n = pump_qp(q, std::min(kWqesPerApp - got, kWqesPerTurn - wqes));
    got += n;
    wqes += n;
    if (q.backlog) ready(q);
  }
  return got;
}

uint32_t PortLogic::pump_work() noexcept {
  uint32_t n = 0;
  // Doorbells, from a different application each turn; what is not read
  // this turn stays rung in the application's page.
  uint32_t rung[kDoorbellsPerTurn];
  const std::size_t r = host_.ready_qps(std::span(rung, kDoorbellsPerTurn), doorbell_app_);
  if (++doorbell_app_ >= app_ready_.size()) doorbell_app_ = 0;
  for (std::size_t i = 0; i < r; ++i) {
    if (rung[i] & host::kSrqDoorbell) {
      if (SrqCtx* s = srq_by_host(rung[i] & ~host::kSrqDoorbell)) n += pump_srq(*s);
      continue;
    }
    QpCtx* q = by_host(rung[i]);
    if (q == nullptr) {
      // Unknown to the core (creation refused): let the host flush it.
      host::SendWork sw[8];
      host::RecvWork rw[8];
      host_.fetch_send(rung[i], std::span(sw, 8));
      host_.fetch_recv(rung[i], std::span(rw, 8));
      continue;
    }
    q->backlog = true;
    ready(*q);
  }
  // SRQs whose rings hold more than the core had room for.
  if (live_srqs_ != 0)
    for (SrqCtx& s : srqs_)
      if (s.live && s.backlog) n += pump_srq(s);
  // The applications in turn, each listed once: one served goes to the back.
  uint32_t visits = 0, wqes = 0;
  for (uint32_t k = ready_apps_n_; k > 0 && visits < kVisitsPerTurn && wqes < kWqesPerTurn; --k) {
    const uint32_t app = ready_apps_[ready_apps_head_];
    ready_apps_head_ = (ready_apps_head_ + 1) % static_cast<uint32_t>(ready_apps_.size());
    --ready_apps_n_;
    n += serve_app(app, visits, wqes);
    AppReady& a = app_ready_[app];
    if (a.head == kNoCtx) {
      a.listed = false;
    } else {
      ready_apps_[(ready_apps_head_ + ready_apps_n_++) % ready_apps_.size()] = app;
    }
  }
  return n;
}

void PortLogic::complete(const Completion& wc) noexcept {
  ++completed_;
  QpCtx* q = by_core(wc.qp_num);
  if (q == nullptr) return;  // its QP is gone (its SRQ's slot is the core's)
  bool ok;
  // Both carry the application's wr_id: the opcode tells a receive.
  if (wc.opcode & IBV_WC_RECV) {
    ok = host_.complete_recv(q->host_qpn, wc.wr_id, wc.status, wc.byte_len, wc.opcode,
                             (wc.wc_flags & IBV_WC_WITH_IMM) != 0, htonl(wc.imm_data), wc.src_qp,
                             (wc.wc_flags & IBV_WC_GRH) != 0);
    ++k_.cqe_recv;
  } else {
    ok = host_.complete_send(q->host_qpn, wc.wr_id, wc.opcode, wc.byte_len, (wc.wc_flags & kWcUnsignaled) == 0,
                             wc.status);
    ++k_.cqe_send;
  }
  if (!ok) ++k_.cqe_lost;
  // Freed slots may let a QP fetch more.
  if (!q->queued && (host_.send_queued(q->host_qpn) > 0 || host_.recv_queued(q->host_qpn) > 0)) {
    q->backlog = true;
    ready(*q);
  }
}

uint32_t PortLogic::completions() noexcept {
  const uint32_t total = completed_;
  completed_ = 0;
  // Receives done free SRQ slots in the core: SRQs left waiting may fetch more;
  // an armed limit sees how many WQEs are left (the core's and the ring's).
  if (total != 0 && live_srqs_ != 0)
    for (SrqCtx& s : srqs_) {
      if (!s.live) continue;
      if (!s.backlog && host_.srq_queued(s.host_srq) > 0) s.backlog = true;
      if (host_.srq_limit(s.host_srq) != 0) [[unlikely]]
        host_.check_srq_limit(s.host_srq, core_.srq_posted(s.core_srq) + host_.srq_queued(s.host_srq));
    }
  return total;
}

}  // namespace tandem::rnic::port
