// Unreliable datagram QPs (IBV_QPT_UD): each message is one UD_SEND_ONLY
// packet (or _WITH_IMMEDIATE) of at most the path MTU, addressed per work
// request, with a DETH carrying the Q_Key the receiving QP must hold and the
// sender's QPN. Nothing is acknowledged or retransmitted and PSNs are not
// checked; a datagram that finds no receive WQE, or the wrong Q_Key, is
// dropped and counted. The receive buffer gets a 40-byte GRH first: for
// RoCEv2 over IPv4, 20 zero bytes and then the packet's IPv4 header (as rxe
// and mlx5 place it), and the completion has IBV_WC_GRH and the source QPN.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/wire/headers.h"
#include "common/wire/opcode.h"
#include "common/wire/psn.h"
#include "rnic/core/qp.h"

namespace tandem::rnic {

using common::DropReason;

namespace {

inline constexpr uint32_t kGrhLen = 40;

// A UD send WQE keeps its destination in the fields an RC WQE uses for RDMA:
// remote_addr = path_seed << 32 | peer, rkey = Q_Key, recv_idx = remote QPN.
uint32_t ud_peer(const SendWqe& w) noexcept { return static_cast<uint32_t>(w.remote_addr); }
uint16_t ud_seed(const SendWqe& w) noexcept { return static_cast<uint16_t>(w.remote_addr >> 32); }

// The UDP source port of a datagram: one per (source, destination) QP pair
// in RoCEv2's dynamic range, so flows spread over ECMP like RC QPs do.
uint16_t ud_sport(uint32_t qpn, uint32_t dqpn, uint16_t seed) noexcept {
  const uint32_t h = (qpn * 2654435761u) ^ (dqpn * 40503u) ^ seed;
  return static_cast<uint16_t>(0xC000u | ((h ^ (h >> 14)) & 0x3FFFu));
}

// Copies `len` bytes from `src` into the WQE's scatter list from byte `off`.
void scatter(const RecvWqe& r, uint64_t off, const uint8_t* src, uint64_t len) noexcept {
  for (uint32_t j = 0; j < r.wr.num_sge && len > 0; ++j) {
    const uint64_t sl = r.wr.sg_list[j].length;
    if (off >= sl) {
      off -= sl;
      continue;
    }
    const uint64_t take = std::min(len, sl - off);
    std::memcpy(r.sge_ptr[j] + off, src, take);
    src += take;
    len -= take;
    off = 0;
  }
}

}  // namespace

bool Qp::ud_tx(uint64_t now) noexcept {
  (void)now;
  // What the previous poll queued has been taken by the I/O layer: complete it.
  for (; sq_head != sq_send; ++sq_head) {
    const SendWqe& w = wqe(sq_head);
    if (w.signaled)
      send_cq->push(Completion{w.wr_id, IBV_WC_SUCCESS, IBV_WC_SEND, 0, 0, qpn, w.recv_idx, wqe_wc_flags(w)});
  }
  una = nxt;
  while (sq_send != sq_tail) {
    if (tx_quota == 0) return true;  // the other QPs' turn (Transport::poll)
    SendWqe& w = wqe(sq_send);
    if (w.len > mtu()) {
      // The WR fails and, as for any failed send WR, the QP goes to ERROR.
      to_error(IBV_WC_LOC_LEN_ERR);
      return true;
    }
    if (!gather_live(w, 0, w.len)) [[unlikely]] {
      lost_region(sq_send);
      return true;
    }
    TxDesc* d = tx_slot();
    if (d == nullptr) return false;
    d->bth.opcode = w.op() == IBV_WR_SEND_WITH_IMM ? IBV_OPCODE_UD_SEND_ONLY_WITH_IMMEDIATE
                                                   : IBV_OPCODE_UD_SEND_ONLY;
    d->bth.se = w.solicited;
    d->bth.dqpn = w.recv_idx;
    d->bth.psn = nxt;
    d->remote_qpn = w.recv_idx;
    d->peer = ud_peer(w);
    d->deth = common::Deth{w.rkey, init.wire_qpn != 0 ? init.wire_qpn : qpn};
    d->imm = w.imm_data;
    d->payload_len = w.len;
    uint32_t k = 0;
    for (uint32_t j = 0; j < w.num_sge; ++j)
      if (w.sge[j].len != 0) d->segs[k++] = TxSeg{w.sge[j].ptr, w.sge[j].len, w.sge[j].lkey};
    d->num_segs = k;
    d->udp_sport = ud_sport(qpn, w.recv_idx, ud_seed(w));
    nxt = common::psn_add(nxt, 1);
    ++c.tx_pkts;
    ++c.tx_data_pkts;
    c.tx_bytes += w.len;
    t->txq().commit();
    --tx_quota;
    ++sq_send;
  }
  return true;
}

DropReason Qp::ud_on_packet(const common::RocePacket& pkt, const uint8_t* payload, uint32_t len) noexcept {
  if (pkt.deth.qkey != attr.qkey) return DropReason::kBadQkey;
  if (srq != nullptr ? !srq_fill(0) : rq_head == rq_tail) return DropReason::kNoRecvWqe;
  const RecvWqe& r = rwqe(rq_head);
  const bool imm = common::opcode_has(pkt.bth.opcode, common::kOpImm);
  Completion c{r.wr.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, kGrhLen + len, imm ? pkt.imm : 0, qpn,
               pkt.deth.src_qp, static_cast<uint32_t>(IBV_WC_GRH | (imm ? IBV_WC_WITH_IMM : 0))};
  bool live = true;
  for (uint32_t j = 0; j < r.wr.num_sge; ++j) live &= t->mr_live(r.wr.sg_list[j].lkey, recv_pd);
  if (!live) [[unlikely]] {
    // Its buffer was deregistered: the receive fails and the QP goes to ERROR.
    ++this->c.region_gone;
    prot_err_recv = rq_head;
    to_error(IBV_WC_WR_FLUSH_ERR);
    return DropReason::kRegionGone;
  }
  if (uint64_t{kGrhLen} + len > r.len) {
    c.status = IBV_WC_LOC_LEN_ERR;  // the datagram is lost; the QP stays usable
    c.byte_len = 0;
  } else {
    uint8_t grh[kGrhLen] = {};
    common::write_ipv4(grh + 20, pkt.ip);
    scatter(r, 0, grh, kGrhLen);
    scatter(r, kGrhLen, payload, len);
  }
  recv_done();
  recv_cq->push(c);
  ++this->c.rx_pkts;
  this->c.rx_bytes += len;
  return DropReason::kNone;
}

}  // namespace tandem::rnic
