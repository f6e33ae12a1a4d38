// PortLogic's work: WQEs from the host interface's rings to the core (QPs,
// SRQs, the backlog of QPs with more to fetch) and completions back.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "rnic/core/send_slots.h"
#include "rnic/host/send_fetch.h"
#include "rnic/port/port_logic.h"

namespace tandem::rnic::port {

namespace {

constexpr uint64_t kRecvTag = uint64_t{1} << 32;  // core wr_id = slot (| kRecvTag for RECVs)
// SRQ receives: wr_id = kRecvTag | kSrqTag | SrqCtx index << 16 | slot.
constexpr uint64_t kSrqTag = uint64_t{1} << 33;

// fetch_send_into's sink (send_fetch.h): the fields into the core's SQ slot.
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

// A validated receive WQE as the core's RecvWr (QP and SRQ receives alike).
RecvWr PortLogic::core_recv(const host::RecvWork& w, uint64_t wr_id) const noexcept {
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.num_sge = w.num_sge;
  for (uint32_t g = 0; g < w.num_sge; ++g)
    wr.sg_list[g] = Sge{w.sge[g].va, w.sge[g].length, w.sge[g].lkey};
  return wr;
}

uint32_t PortLogic::pump_srq(SrqCtx& s) noexcept {
  // As pump_qp: each WQE straight into its slot (the free ones from the back).
  host::RecvWork* dst[kBurst];
  const std::size_t max = std::min<std::size_t>(kBurst, s.free.size());
  for (std::size_t i = 0; i < max; ++i) dst[i] = &s.slots[s.free[s.free.size() - 1 - i]];
  const std::size_t rn = host_.fetch_srq_recv(s.host_srq, dst, max);
  const uint64_t tag = kRecvTag | kSrqTag | (uint64_t{static_cast<uint32_t>(&s - srqs_.data())} << 16);
  for (std::size_t i = 0; i < rn; ++i) {
    const uint32_t slot = s.free.back();
    s.free.pop_back();
    if (core_.post_srq_recv(s.core_srq, core_recv(s.slots[slot], tag | slot)) != 0) {
      ++k_.wqe_refused;  // the core disagrees with the host's MR check; no QP owns it to fail
      s.free.push_back(slot);
    } else {
      ++k_.srq_wqe_recv;
    }
  }
  s.backlog = !s.free.empty() && host_.srq_queued(s.host_srq) > 0;
  return static_cast<uint32_t>(rn);
}

uint32_t PortLogic::pump_qp(QpCtx& q) noexcept {
  if (q.route_pending) {
    q.backlog = false;  // pending_routes() puts it back once routed
    return 0;
  }
  uint32_t n = 0;
  // The host interface writes each WQE straight into the slot it is held in
  // until completion: the free slots from the back, in pop_back order.
  host::RecvWork* rdst[kBurst];
  const std::size_t rmax = std::min<std::size_t>(kBurst, q.recv_free.size());
  for (std::size_t i = 0; i < rmax; ++i) rdst[i] = &q.recv_slots[q.recv_free[q.recv_free.size() - 1 - i]];
  const std::size_t rn = host_.fetch_recv(q.host_qpn, rdst, rmax);
  for (std::size_t i = 0; i < rn; ++i) {
    const uint32_t slot = q.recv_free.back();
    q.recv_free.pop_back();
    const host::RecvWork& rw = q.recv_slots[slot];
    if (core_.post_recv(q.core_qpn, core_recv(rw, slot | kRecvTag)) != 0) {
      ++k_.wqe_refused;
      host_.complete_recv(q.host_qpn, rw, IBV_WC_LOC_QP_OP_ERR, 0, IBV_WC_RECV, false, 0, 0);
      q.recv_free.push_back(slot);
    } else {
      ++k_.wqe_recv;
    }
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
      // Receives carry the port's slot tags; sends the application's wr_id.
      const bool recv = (wc[i].opcode & IBV_WC_RECV) != 0;
      if (recv && (wc[i].wr_id & kSrqTag)) {
        // The slot is the SRQ's: freed even if the QP that took it is gone.
        const uint32_t si = static_cast<uint32_t>(wc[i].wr_id >> 16) & 0xFFFF;
        const uint32_t slot = static_cast<uint32_t>(wc[i].wr_id & 0xFFFF);
        if (si >= srqs_.size() || !srqs_[si].live || slot >= srqs_[si].slots.size()) continue;
        SrqCtx& s = srqs_[si];
        if (q != nullptr &&
            !host_.complete_recv(q->host_qpn, s.slots[slot], wc[i].status, wc[i].byte_len, wc[i].opcode,
                                 (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0, htonl(wc[i].imm_data), wc[i].src_qp,
                                 (wc[i].wc_flags & IBV_WC_GRH) != 0))
          ++k_.cqe_lost;
        s.free.push_back(slot);
        ++k_.cqe_recv;
        if (!s.backlog && host_.srq_queued(s.host_srq) > 0) s.backlog = true;
        continue;
      }
      if (q == nullptr) continue;
      bool ok;
      if (recv) {
        const uint32_t slot = static_cast<uint32_t>(wc[i].wr_id & 0xFFFFFFFF);
        if (slot >= q->recv_slots.size()) continue;
        ok = host_.complete_recv(q->host_qpn, q->recv_slots[slot], wc[i].status, wc[i].byte_len,
                                 wc[i].opcode, (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0, htonl(wc[i].imm_data),
                                 wc[i].src_qp, (wc[i].wc_flags & IBV_WC_GRH) != 0);
        q->recv_free.push_back(slot);
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
  return total;
}

}  // namespace tandem::rnic::port
