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
    wr_id = id_;
    int rc = EINVAL;
    if (RecvWr* r = slot()) {
      r->wr_id = id_;
      r->num_sge = num_sge;
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

uint32_t PortLogic::pump_qp(QpCtx& q) noexcept {
  if (q.route_pending) {
    q.backlog = false;  // pending_routes() puts it back once routed
    return 0;
  }
  uint32_t n = 0;
  // Each receive WQE goes from the ring straight into the core's RQ slot.
  CoreRecvSink rsink{core_, q.core_qpn, false};
  const std::size_t rn = host_.fetch_recv_into(q.host_qpn, std::min<uint32_t>(kBurst, core_.recv_room(q.core_qpn)),
                                               rsink);
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
  const std::size_t sn = host_.fetch_send_into(q.host_qpn, std::min<uint32_t>(kBurst, slots.room()), sink);
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
      if (q == nullptr) continue;  // its QP is gone (its SRQ's slot is the core's)
      bool ok;
      // Both carry the application's wr_id: the opcode tells a receive.
      if (wc[i].opcode & IBV_WC_RECV) {
        ok = host_.complete_recv(q->host_qpn, wc[i].wr_id, wc[i].status, wc[i].byte_len, wc[i].opcode,
                                 (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0, htonl(wc[i].imm_data), wc[i].src_qp,
                                 (wc[i].wc_flags & IBV_WC_GRH) != 0);
        ++k_.cqe_recv;
      } else {
        ok = host_.complete_send(q->host_qpn, wc[i].wr_id, wc[i].opcode, wc[i].byte_len,
                                 (wc[i].wc_flags & kWcUnsignaled) == 0, wc[i].status);
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
  // Receives done free SRQ slots in the core: SRQs left waiting may fetch more.
  if (total != 0 && live_srqs_ != 0)
    for (SrqCtx& s : srqs_)
      if (s.live && !s.backlog && host_.srq_queued(s.host_srq) > 0) s.backlog = true;
  return total;
}

}  // namespace tandem::rnic::port
