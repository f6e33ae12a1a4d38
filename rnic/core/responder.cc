// Responder side of a QP: request checks (QPN state, PSN window, R_Key,
// bounds, access), placement of WRITE and SEND data (in order in GoBackN
// mode, out of order through the XETH in IRN mode), in-order completion of
// RECVs, READ execution, and ACK / SACK / NAK / RNR NAK generation.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/wire/icrc.h"
#include "common/wire/opcode.h"
#include "common/wire/psn.h"
#include "common/wire/small_copy.h"
#include "rnic/core/credit_wire.h"
#include "rnic/core/qp.h"

namespace tandem::rnic {

using common::DropReason;
using common::psn_add;
using common::psn_diff;
using common::psn_lt;

namespace {

inline constexpr uint8_t kAckNoCredit = common::kAethAck | 0x1F;  // no end-to-end credits
inline constexpr uint32_t kMaxSackChunks = 4;

bool range_in_mr(const MemoryRegion* mr, uint64_t va, uint64_t len) noexcept {
  return mr != nullptr && va >= mr->addr && va - mr->addr <= mr->len &&
         len <= mr->len - (va - mr->addr);
}

// A remote access of `len` bytes at (rkey, va) with `need` (IBV_ACCESS_REMOTE_*)
// on a QP of protection domain `pd` that allows `qp_access`: where it lands, or
// nullptr if refused. A zero-length access names no memory and its R_Key is not
// checked (IBTA C9-88: verbs libraries fence with zero-length writes on rkey 0);
// it gets a non-null pointer no byte is written through. Inline: once per
// WRITE packet, and its eight arguments cost more as a call than its body.
[[gnu::always_inline]] inline uint8_t* remote_ptr(const Transport& t, uint32_t rkey, uint64_t va, uint64_t len, uint32_t need, uint32_t pd,
                    uint32_t qp_access, const MemoryRegion*& cache) noexcept {
  if (!(qp_access & need)) return nullptr;
  if (len == 0) {
    static uint8_t nothing;
    return &nothing;
  }
  // The cached region is valid while the burst lasts (regions change only
  // between calls into the core); the burst may hold several QPs' packets.
  const MemoryRegion* mr =
      cache != nullptr && cache->lkey == rkey && cache->pd == pd ? cache : t.find_mr(rkey, pd);
  if (!range_in_mr(mr, va, len) || !(mr->access & need)) return nullptr;
  cache = mr;
  return mr->host_ptr + (va - mr->addr);
}

// Placement: a small WRITE's payload inline (common/wire/small_copy.h).
inline void place(uint8_t* dst, const uint8_t* src, uint32_t n) noexcept {
  if (!common::copy_16_to_64(dst, src, n) && n != 0) std::memcpy(dst, src, n);
}

}  // namespace

bool make_recv_wqe(const Transport& t, const RecvWr& wr, uint32_t pd, RecvWqe& w) noexcept {
  w.wr = wr;
  return check_recv_wqe(t, pd, w);
}

bool check_recv_wqe(const Transport& t, uint32_t pd, RecvWqe& w) noexcept {
  if (w.wr.num_sge > kMaxSge) return false;
  w.len = 0;
  if (w.wr.invalid) {
    w.wr.num_sge = 0;  // nothing of it is ever written
    return true;
  }
  for (uint32_t j = 0; j < w.wr.num_sge; ++j) {
    const Sge& g = w.wr.sg_list[j];
    const MemoryRegion* mr = t.find_mr(g.lkey, pd);
    if (!range_in_mr(mr, g.addr, g.length) || !(mr->access & IBV_ACCESS_LOCAL_WRITE))
      return false;
    w.sge_ptr[j] = mr->host_ptr + (g.addr - mr->addr);
    w.len += g.length;
  }
  return true;
}

int Qp::post_recv(const RecvWr& wr) noexcept {
  if (srq != nullptr || state == QpState::kError || rq_tail - rq_head >= rq.size()) return post_recv_slot(&wr);
  rwqe(rq_tail).wr = wr;
  return post_recv_slot(nullptr);
}

// The WR in rwqe(rq_tail) (or `flushed`'s, which takes no slot) checked and posted.
int Qp::post_recv_slot(const RecvWr* flushed) noexcept {
  if (srq != nullptr) return EINVAL;  // its receives are posted to the SRQ
  if (state == QpState::kError) {
    const uint64_t wr_id = flushed != nullptr ? flushed->wr_id : rwqe(rq_tail).wr.wr_id;
    recv_cq->push(Completion{wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, qpn, attr.dest_qp_num, 0});
    return 0;
  }
  if (state == QpState::kReset) return EINVAL;
  if (rq_tail - rq_head >= rq.size()) return ENOMEM;
  if (!check_recv_wqe(*t, init.pd, rwqe(rq_tail))) return EINVAL;
  ++rq_tail;
  rnr_armed = true;
  return 0;
}

void Qp::nak(uint8_t syndrome, uint32_t psn) noexcept {
  if (nak_pending) return;  // the first reason wins until it is sent
  nak_pending = true;
  // As rxe does for these (IBA class C responder errors): after the NAK the
  // QP goes to ERROR, so nothing later is placed.
  const uint8_t code = common::aeth_value(syndrome);
  if (common::aeth_kind(syndrome) == common::kAethNak && code != common::kNakPsnSeqError)
    error_after_nak = true;
  nak_syndrome = syndrome;
  nak_psn = psn;
}

// Validates a READ request and queues its responses. False: `why` says why.
bool Qp::read_job(uint32_t psn, const common::Reth& reth, DropReason& why, bool retry) noexcept {
  const MemoryRegion* cache = nullptr;
  uint8_t* const p = remote_ptr(*t, reth.rkey, reth.va, reth.len, IBV_ACCESS_REMOTE_READ, init.pd,
                                attr.qp_access_flags, cache);
  if (p == nullptr) {
    why = DropReason::kAccessViolation;
    return false;
  }
  if (reads_tail - reads_head >= reads.size()) {
    why = DropReason::kNoBuffer;  // the requester asks again
    return false;
  }
  ReadJob& j = reads[reads_tail++ % reads.size()];
  j.psn = psn;
  j.ptr = p;
  j.rkey = reth.len == 0 ? 0 : reth.rkey;  // a zero-length READ names no region (C9-88)
  j.len = reth.len;
  j.npkts = read_pkts(reth.len);
  j.next_pkt = 0;
  j.msn = msn;
  j.retry = retry;
  return true;
}

const ReadRec* Qp::find_read(uint32_t psn) const noexcept {
  for (const ReadRec& r : read_log)
    if (r.npkts != 0 && psn_diff(psn, r.psn) >= 0 && static_cast<uint32_t>(psn_diff(psn, r.psn)) < r.npkts) return &r;
  return nullptr;
}

uint32_t Qp::on_requests(const RxPacketRef* in, uint32_t n, uint64_t now, DropReason* why) noexcept {
  uint32_t taken = 0;
  const MemoryRegion* mr = nullptr;  // the last WRITE's region (R_Keys repeat within a burst)
  for (uint32_t i = 0; i < n; ++i) {
    const DropReason r = on_request(in[i], now, mr);
    why[i] = r;
    taken += r == DropReason::kNone;
  }
  if (init.bench_any_psn) [[unlikely]] t->qp_side_counters().bench_accepted += taken;
  return taken;
}

// Inline in on_requests, its only caller: the loop over a burst's requests
// then costs no call, prologue and epilogue per request.
//
// A request whose ICRC is pending (in.icrc_pending) acts on nothing before
// the verdict: a path that refuses it or answers it without placing its
// payload checks the whole ICRC first (`corrupt`), and placement checks it in
// the pass that copies the payload (crc32_copy), before the PSN's slot, the
// message state, the ACK state or a completion learn of the packet. A bad
// packet is dropped (kBadIcrc) with its slot unarrived, so the retransmission
// places the payload again; its bytes may sit at ePSN's place until then, and
// only where nothing of this QP reads them (rnic/core/README.md "ICRC").
[[gnu::always_inline]] inline DropReason Qp::on_request(const RxPacketRef& in, uint64_t now,
                                                        const MemoryRegion*& mr_cache) noexcept {
  const common::RocePacket& pkt = *in.pkt;
  const uint8_t* const payload = in.payload;
  const uint32_t len = in.payload_len;
  const uint8_t op = pkt.bth.opcode;
  const uint32_t psn = pkt.bth.psn;
  const uint32_t window = wmask + 1;
  auto fail = [&](DropReason r) {
    drop(r);
    return r;
  };
  bool pending = in.icrc_pending;
  if (error_after_nak) return fail(pending && !icrc_rest_ok(in) ? DropReason::kBadIcrc : DropReason::kBadQpState);
  if (init.bench_any_psn && psn != epsn) [[unlikely]] {
    if (pending && !icrc_rest_ok(in)) return fail(DropReason::kBadIcrc);
    pending = false;
    bench_restart(psn);
  }
  const int32_t d = psn_diff(psn, epsn);
  // The request's arrival as the credit grantor, ECN and the counters see it
  // (a pending packet's once its ICRC is known good).
  auto arrive = [&]() noexcept {
    last_rx_ns = now;
    if (pkt.bth.resv7 & kReqEcho) note_echo(pkt.bth.resv7, now);  // irn_wire.h
    if ((pkt.ip.tos & 3) == 3) {
      ++c.ecn_ce_rx;
      ecn_echo = true;
      if (attr.cnp_interval_ns && (!cnp_sent_once || now >= last_cnp + attr.cnp_interval_ns))
        cnp_pending = true;
    }
    if (d > 0) c.reorder_depth_max = std::max<uint32_t>(c.reorder_depth_max, static_cast<uint32_t>(d));
  };
  if (!pending) arrive();
  // Before a pending packet is refused or answered: true if it is corrupt.
  auto corrupt = [&]() noexcept {
    if (!pending) return false;
    pending = false;
    if (!icrc_rest_ok(in)) return true;
    arrive();
    return false;
  };
  if (d < 0) {
    if (corrupt()) return fail(DropReason::kBadIcrc);
    // Duplicate: answer it (a retried READ is executed again, an atomic
    // answered from its saved value), place nothing.
    if (common::opcode_has(op, common::kOpAtomicEth)) [[unlikely]] return on_atomic(pkt, d, now);
    if (op == IBV_OPCODE_RC_RDMA_READ_REQUEST) {
      // Not while a bad packet's bytes may sit at ePSN's place: the requester
      // asks again (its retry comes before ePSN's packet again, which clears it).
      if (ahead.any_taint() && placed_bad()) return fail(DropReason::kNoBuffer);
      // Executed again only as far as the READ this responder received asked
      // (IBA 9.7.5.1.3): its R_Key, from its address for the PSN, never more
      // than its length. A request it has no record of is dropped: one small
      // packet must not make the responder send what nobody asked for.
      const ReadRec* r = find_read(psn);
      const uint64_t off = r == nullptr ? 0 : uint64_t{static_cast<uint32_t>(psn_diff(psn, r->psn))} * mtu();
      if (r == nullptr || pkt.reth.rkey != r->rkey || pkt.reth.va != r->va + off || (off != 0 && off >= r->len))
        return fail(DropReason::kUnknownRead);
      const common::Reth again{pkt.reth.va, r->rkey,
                               static_cast<uint32_t>(std::min<uint64_t>(pkt.reth.len, r->len - off))};
      DropReason why;
      // Its responses answer a retry: never a probe of a path that is out,
      // a path that answers lately (else a requester whose timeout has
      // backed off past the probe interval gets every answer on the dead
      // path it probes, until its retries run out).
      if (!read_job(psn, again, why, true)) {
        if (why == DropReason::kAccessViolation) nak(common::kAethNak | common::kNakRemoteAccess, psn);
        return fail(why);
      }
      path->on_duplicate(psn, now);  // the responses that told of it may have died on their path
    } else {
      ack_pending = true;
      resp_dup = true;
      path->on_duplicate(psn, now);  // the ACKs that told of it may have died on their path
    }
    return fail(DropReason::kDuplicate);
  }
  if (!irn() && d > 0) {
    if (corrupt()) return fail(DropReason::kBadIcrc);
    if (!seq_nak_sent) {
      nak(common::kAethNak | common::kNakPsnSeqError, epsn);
      seq_nak_sent = true;
    }
    return fail(DropReason::kPsnOutOfWindow);
  }
  if (d >= static_cast<int32_t>(window))
    return fail(corrupt() ? DropReason::kBadIcrc : DropReason::kPsnOutOfWindow);
  RxSlot& s = slot(psn);
  if (s.flags & kSlotArrived) {
    if (corrupt()) return fail(DropReason::kBadIcrc);
    ack_pending = true;
    resp_dup = true;
    return fail(DropReason::kDuplicate);
  }
  const bool first = common::opcode_has(op, common::kOpFirst);
  const bool last = common::opcode_has(op, common::kOpLast);
  const bool has_imm = common::opcode_has(op, common::kOpImm);

  if (common::opcode_has(op, common::kOpAtomicEth)) [[unlikely]] return on_atomic(pkt, d, now);
  if (op == IBV_OPCODE_RC_RDMA_READ_REQUEST) {
    if (corrupt()) return fail(DropReason::kBadIcrc);
    if (pkt.reth.len > kMaxMsgLen) {  // IBA: a DMA length of at most 2^31
      nak(common::kAethNak | common::kNakInvalidRequest, psn);
      return fail(DropReason::kInvalidRequest);
    }
    const uint32_t npkts = read_pkts(pkt.reth.len);
    if (uint64_t{static_cast<uint32_t>(d)} + npkts > window) return fail(DropReason::kPsnOutOfWindow);
    if (remote_ptr(*t, pkt.reth.rkey, pkt.reth.va, pkt.reth.len, IBV_ACCESS_REMOTE_READ, init.pd,
                   attr.qp_access_flags, mr_cache) == nullptr) {
      nak(common::kAethNak | common::kNakRemoteAccess, psn);
      return fail(DropReason::kAccessViolation);
    }
    // Executed when ePSN reaches it, so it sees every earlier WRITE.
    for (uint32_t i = 0; i < npkts; ++i) {
      slot(psn_add(psn, i)).flags = kSlotArrived;
      slot(psn_add(psn, i)).arrived_at = now;
    }
    s.flags = kSlotArrived | kSlotRead | kSlotMsgEnd;
    s.read_va = pkt.reth.va;
    s.read_len = pkt.reth.len;
    s.read_rkey = pkt.reth.rkey;
    read_log[read_log_next++ % read_log.size()] = ReadRec{psn, npkts, pkt.reth.va, pkt.reth.rkey, pkt.reth.len};
    ++c.rx_pkts;
    if (psn_lt(high, psn_add(psn, npkts))) high = psn_add(psn, npkts);
    c.reorder_depth_max = std::max<uint32_t>(c.reorder_depth_max, static_cast<uint32_t>(d));
    advance_epsn(now);
    return DropReason::kNone;
  }

  // SEND / WRITE: where does this packet go? (Nothing is written to the QP
  // before the payload is placed and its ICRC known.)
  const bool is_write = common::opcode_has(op, common::kOpWrite);
  const uint8_t* data = payload;
  uint32_t dlen = len;
  uint32_t recv_idx = 0, offset = 0, msg_len = 0, rkey = 0;
  uint64_t va = 0;
  // A refusal with a NAK (the QP to ERROR for most): a corrupt packet must not.
  auto refuse = [&](uint8_t syndrome, DropReason r) {
    if (corrupt()) return fail(DropReason::kBadIcrc);
    nak(syndrome, psn);
    return fail(r);
  };
  constexpr uint8_t kInvalid = common::kAethNak | common::kNakInvalidRequest;
  Xeth x;
  if (irn()) {
    if (!read_xeth(payload, len, x)) return refuse(kInvalid, DropReason::kInvalidRequest);
    data += kXethLen;
    dlen -= kXethLen;
    recv_idx = init.bench_any_psn ? rq_head & 0xFFFFFF : x.recv_idx;  // a replay repeats recv_idx
    offset = x.msg_offset;
    msg_len = x.msg_len;
    rkey = x.rkey;
    va = x.va;
    if (uint64_t{offset} + dlen > msg_len || (last && offset + dlen != msg_len) ||
        (first && offset != 0))
      return refuse(kInvalid, DropReason::kInvalidRequest);
  } else {
    const uint8_t kind = is_write ? 2 : 1;
    if (first != (gbn_kind == 0) || (!first && gbn_kind != kind)) return refuse(kInvalid, DropReason::kInvalidRequest);
    // A first packet starts the message (its RETH, for a WRITE); the rest
    // continue the one in progress.
    const bool reth = first && is_write;
    recv_idx = rq_head & 0xFFFFFF;
    offset = first ? 0 : gbn_offset;
    msg_len = is_write ? (reth ? pkt.reth.len : gbn_len) : offset + dlen;
    rkey = reth ? pkt.reth.rkey : gbn_rkey;
    va = reth ? pkt.reth.va : gbn_va;
    if ((is_write && uint64_t{offset} + dlen > msg_len) ||
        (is_write && last && offset + dlen != msg_len))
      return refuse(kInvalid, DropReason::kInvalidRequest);
  }
  if (dlen > mtu() || (!last && dlen != mtu())) return refuse(kInvalid, DropReason::kInvalidRequest);

  const bool consumes_recv = !is_write || (last && has_imm);
  RecvWqe* rw = nullptr;
  if (consumes_recv) {
    const uint32_t delta = (recv_idx - rq_head) & 0xFFFFFF;
    if (delta >= rq_tail - rq_head) {
      // An SRQ's WQEs are taken, or the sender told to wait, for a good packet only.
      if (corrupt()) return fail(DropReason::kBadIcrc);
      if (srq == nullptr || !srq_fill(delta)) {
        if (rnr_armed || !psn_lt(rnr_nak_psn, psn)) {
          nak(common::kAethRnrNak | (attr.min_rnr_timer & 0x1F), psn);
          rnr_armed = false;
          rnr_nak_psn = psn;
        }
        if (!irn()) seq_nak_sent = true;  // later packets are dropped quietly
        return fail(DropReason::kNoBuffer);
      }
    }
    rw = &rwqe(rq_head + delta);
    if (rw->wr.invalid) [[unlikely]] {
      if (corrupt()) return fail(DropReason::kBadIcrc);
      // A receive the host refused (bad lkey, PD or bounds): it fails with
      // LOC_PROT_ERR, the sender hears a remote operational error, the QP
      // goes to ERROR (IBA class B: as a deregistered buffer, below).
      prot_err_recv = rq_head + delta;
      nak(common::kAethNak | common::kNakRemoteOp, psn);
      return fail(DropReason::kBadRecvWqe);
    }
  }
  // Placed before its ICRC is known only where a bad packet's bytes are sure
  // to be overwritten before anything of this QP reads them (README "ICRC"):
  // the place of a PSN whose good packet is still to come, as the QP's own
  // state names it (go-back-N at ePSN: a WRITE going on with a message whose
  // first packet was good, or a SEND into the head receive at the message's
  // offset; IRN: a message a verified packet told of, at the offset of this
  // PSN), with no READ response being read from memory. A RETH, or the XETH
  // of a message not known yet, names the place itself: checked first.
  if (pending) {
    bool early = reads_head == reads_tail && ahead.can_taint();
    if (irn())
      early = early && std::has_single_bit(mtu()) && ahead.knows(x, psn, epsn, mtu_shift());
    else
      early = early && !(first && is_write);
    if (!early && corrupt()) return fail(DropReason::kBadIcrc);
  }
  // The pending ICRC's stream so far: headers (icrc_head) and the XETH.
  uint32_t crc = 0;
  if (pending) crc = common::crc32_update(in.icrc_head, payload, static_cast<std::size_t>(data - payload));
  if (is_write) {
    // The whole message's range is checked with each packet (IRN places them
    // in any order; each carries the message's rkey, va and length).
    uint8_t* const p = remote_ptr(*t, rkey, va, msg_len, IBV_ACCESS_REMOTE_WRITE, init.pd,
                                  attr.qp_access_flags, mr_cache);
    if (p == nullptr) {
      if (corrupt()) return fail(DropReason::kBadIcrc);
      nak(common::kAethNak | common::kNakRemoteAccess, psn);
      if (!irn()) gbn_kind = 0;
      return fail(DropReason::kAccessViolation);
    }
    if (pending)
      crc = common::crc32_copy(crc, p + offset, data, dlen);
    else
      place(p + offset, data, dlen);
  } else {
    if (uint64_t{offset} + dlen > rw->len) return refuse(kInvalid, DropReason::kInvalidRequest);
    uint64_t o = offset;
    uint32_t left = dlen;
    const uint8_t* src = data;
    for (uint32_t j = 0; j < rw->wr.num_sge && left > 0; ++j) {
      const uint32_t sl = rw->wr.sg_list[j].length;
      if (o >= sl) { o -= sl; continue; }
      if (!t->mr_live(rw->wr.sg_list[j].lkey, recv_pd)) [[unlikely]] {
        if (pending) {
          // The rest of the stream, unplaced: the verdict before the refusal.
          crc = common::crc32_update(crc, src, left);
          pending = false;
          if (common::crc32_update(crc, payload + len, pkt.bth.pad) != pkt.icrc) {
            ahead.taint(psn);
            return fail(DropReason::kBadIcrc);
          }
          arrive();
        }
        // The receive's buffer was deregistered: it fails (LOC_PROT_ERR) and the
        // sender is told (remote operational error); the QP goes to ERROR.
        ++c.region_gone;
        prot_err_recv = rq_head + ((recv_idx - rq_head) & 0xFFFFFF);
        nak(common::kAethNak | common::kNakRemoteOp, psn);
        return fail(DropReason::kRegionGone);
      }
      const uint32_t take = static_cast<uint32_t>(std::min<uint64_t>(left, sl - o));
      if (pending)
        crc = common::crc32_copy(crc, rw->sge_ptr[j] + o, src, take);
      else
        std::memcpy(rw->sge_ptr[j] + o, src, take);
      src += take;
      left -= take;
      o = 0;
    }
  }
  if (pending) {
    // The verdict, before the packet counts: a bad one leaves ePSN's slot
    // unarrived (its bytes are overwritten by ePSN's packet when it comes).
    if (common::crc32_update(crc, payload + len, pkt.bth.pad) != pkt.icrc) [[unlikely]] {
      ahead.taint(psn);
      return fail(DropReason::kBadIcrc);
    }
    arrive();
  }
  // A message of several packets: the place its other packets go is known.
  if (irn() && !(first && last) && std::has_single_bit(mtu())) ahead.learn(x, psn, mtu_shift());
  if (!irn()) {
    if (first && is_write) {
      gbn_va = va;
      gbn_rkey = rkey;
      gbn_len = msg_len;
    }
    gbn_kind = last ? 0 : (is_write ? 2 : 1);
    gbn_offset = offset + dlen;
  }
  s.flags = kSlotArrived;
  s.arrived_at = now;
  if (last) {
    s.flags |= kSlotMsgEnd;
    if (consumes_recv) {
      s.flags |= kSlotRecvDone;
      s.recv_idx = recv_idx;
      s.msg_len = is_write ? msg_len : offset + dlen;
      s.imm = pkt.imm;
      s.has_imm = has_imm;
      s.wc_kind = is_write ? 1 : 0;
    }
  }
  ++c.rx_pkts;
  c.rx_bytes += dlen;
  // Filling the gap at ePSN is acknowledged at once (as TCP does), so the
  // requester learns of the recovery without waiting for the next AckReq.
  if (pkt.bth.ack_req || ++unacked >= attr.ack_every || (d == 0 && psn_lt(psn_add(psn, 1), high)))
    ack_pending = true;
  if (psn_lt(high, psn_add(psn, 1))) high = psn_add(psn, 1);
  advance_epsn(now);
  return DropReason::kNone;
}

// Benchmark only (QpInitAttr::bench_any_psn): the requester is taken to have
// restarted at `psn` (a replayed pcap starting its next pass, or frames lost
// before it), so the window and the message in progress are forgotten and
// the packet is processed as the expected one.
void Qp::bench_restart(uint32_t psn) noexcept {
  ++(psn_lt(psn, epsn) ? t->qp_side_counters().bench_duplicate : t->qp_side_counters().bench_gap);
  for (uint32_t p = epsn; psn_lt(p, high); p = psn_add(p, 1)) slot(p) = RxSlot{};
  epsn = high = psn;
  hole_since = kNever;
  seq_nak_sent = false;
  ahead.clear();
  gbn_kind = 0;
  gbn_offset = 0;
}

// Inline in on_request (its only callers are here).
[[gnu::always_inline]] inline void Qp::advance_epsn(uint64_t now) noexcept {
  sack_news = true;  // called for every accepted request
  const uint32_t before = epsn;
  while (slot(epsn).flags & kSlotArrived) {
    RxSlot& s = slot(epsn);
    // A READ or atomic reads memory: not while a bad packet's bytes may sit
    // at a later PSN's place (IRN); its good packet's arrival comes back here.
    if ((s.flags & (kSlotRead | kSlotAtomic)) && ahead.any_taint() && placed_bad()) [[unlikely]] break;
    if (s.flags & kSlotRead) {
      DropReason why;
      common::Reth reth{s.read_va, s.read_rkey, s.read_len};
      if (!read_job(epsn, reth, why)) drop(why);  // the requester's retry re-executes it
    }
    if (s.flags & kSlotAtomic) [[unlikely]] run_atomic(epsn);
    if (s.flags & kSlotRecvDone) {
      RecvWqe& w = rwqe(rq_head);
      recv_cq->push(Completion{w.wr.wr_id, IBV_WC_SUCCESS,
                               s.wc_kind ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV, s.msg_len,
                               s.has_imm ? s.imm : 0, qpn, attr.dest_qp_num,
                               s.has_imm ? static_cast<uint32_t>(IBV_WC_WITH_IMM) : 0u});
      recv_done();
    }
    if (s.flags & kSlotMsgEnd) msn = (msn + 1) & 0xFFFFFF;
    s = RxSlot{};
    epsn = psn_add(epsn, 1);
  }
  if (epsn != before) {
    seq_nak_sent = false;
    rnr_armed = true;
  }
  if (psn_lt(epsn, high)) {
    // The gap at ePSN is as old as the first arrival after it.
    if (hole_since == kNever || epsn != before) {
      uint32_t p = epsn;
      while (psn_lt(p, high) && !(slot(p).flags & kSlotArrived)) p = psn_add(p, 1);
      hole_since = psn_lt(p, high) ? slot(p).arrived_at : now;
    }
  } else {
    high = epsn;
    hole_since = kNever;
  }
}

bool Qp::tx_responses(uint64_t now) noexcept {
  // Atomic answers first: an ACK covering an atomic's PSN must not reach the
  // requester before its answer (a standard RNIC would complete the atomic
  // WR without its value, as it does a READ: ack_point).
  if (atomic_replies != 0 && !tx_atomic_replies(now)) return false;
  if (nak_pending && error_after_nak && irn()) {
    // IRN: the NAK's PSN may lie past a gap, so say first what did arrive,
    // letting the requester complete the WRs before the refused one.
    ack_pending = true;
  }
  if (ack_pending && error_after_nak) {
    TxDesc* d = tx_slot();
    if (d == nullptr) return false;
    d->bth.opcode = IBV_OPCODE_RC_ACKNOWLEDGE;
    uint32_t apsn, amsn;
    ack_point(apsn, amsn);
    d->bth.psn = apsn;
    d->aeth = common::Aeth{ack_syndrome(), amsn};
    ++c.acks_tx;
    tx_commit_response(d, now);
    ack_pending = false;
  }
  if (nak_pending) {
    TxDesc* d = tx_slot();
    if (d == nullptr) return false;
    d->bth.opcode = IBV_OPCODE_RC_ACKNOWLEDGE;
    d->bth.psn = nak_psn;
    d->aeth = common::Aeth{nak_syndrome, msn};
    if (common::aeth_kind(nak_syndrome) == common::kAethRnrNak) ++c.rnr_naks_tx;
    else ++c.naks_tx;
    tx_commit_response(d, now);
    nak_pending = false;
    if (error_after_nak) {
      to_error(IBV_WC_WR_FLUSH_ERR);
      return true;
    }
  }
  if (cnp_pending) {
    TxDesc* d = tx_slot();
    if (d == nullptr) return false;
    d->bth.opcode = common::kOpcodeCnp;
    d->bth.becn = true;  // RoCEv2 CNP: BECN set, PSN 0
    d->bth.psn = 0;
    ++c.cnp_tx;
    tx_commit_response(d, now);
    cnp_pending = false;
    cnp_sent_once = true;
    last_cnp = now;
  }
  if (irn() && hole_since != kNever && now >= sack_due()) {
    // Up to kMaxSackChunks chunks, each starting at a gap.
    uint32_t base = epsn;
    for (uint32_t k = 0; k < kMaxSackChunks && psn_lt(base, high); ++k) {
      // Every arrival is reported, but only up to the last one older than
      // the reorder delay: a gap before a younger arrival may still be mere
      // reordering, and the requester infers loss from the highest bit.
      uint64_t bm = 0;
      int top = -1;
      for (uint32_t i = 0; i < kSackBits; ++i) {
        const uint32_t p = psn_add(base, i);
        if (!psn_lt(p, high)) break;
        const RxSlot& q = slot(p);
        if (!(q.flags & kSlotArrived)) continue;
        bm |= 1ull << i;
        if (q.arrived_at + attr.reorder_delay_ns <= now) top = static_cast<int>(i);
      }
      bm &= top < 0 ? 0 : (top == 63 ? ~0ull : (2ull << top) - 1);
      TxDesc* d = tx_slot();
      if (d == nullptr) return false;
      d->bth.opcode = IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE;
      d->bth.resv7 = kSackMark;  // not an atomic's answer (irn_wire.h)
      d->bth.psn = psn_add(epsn, -1);
      d->bth.becn = ecn_echo;
      d->aeth = common::Aeth{ack_syndrome(), msn};
      d->atomic_ack = sack_encode(base, bm);
      ++c.sacks_tx;
      tx_commit_response(d, now);
      // The next chunk starts at the next gap past this one.
      base = psn_add(base, kSackBits);
      while (psn_lt(base, high) && (slot(base).flags & kSlotArrived)) base = psn_add(base, 1);
    }
    last_sack = now;
    sack_backoff = sack_news ? 0 : static_cast<uint8_t>(std::min(sack_backoff + 1, 8));
    sack_news = false;
    ecn_echo = false;
    ack_pending = false;  // resp_dup stays: a SACK cannot carry it (irn_wire.h)
    unacked = 0;
  }
  if (ack_pending) {
    TxDesc* d = tx_slot();
    if (d == nullptr) return false;
    d->bth.opcode = IBV_OPCODE_RC_ACKNOWLEDGE;
    uint32_t apsn, amsn;
    ack_point(apsn, amsn);
    d->bth.psn = apsn;
    d->bth.becn = ecn_echo;
    d->aeth = common::Aeth{ack_syndrome(), amsn};
    ++c.acks_tx;
    tx_commit_response(d, now);
    ack_pending = false;
    resp_dup = false;
    ecn_echo = false;
    unacked = 0;
  }
  while (reads_head != reads_tail) {
    if (tx_quota == 0) return true;  // the other QPs' turn (Transport::poll)
    ReadJob& j = reads[reads_head % reads.size()];
    const uint32_t k = j.next_pkt;
    if (!t->mr_live(j.rkey, init.pd)) [[unlikely]] {
      // Deregistered while being read: the rest is refused as an access
      // error (the requester's WR fails), nothing more is read from it.
      ++c.region_gone;
      nak(common::kAethNak | common::kNakRemoteAccess, psn_add(j.psn, k));
      reads_head = reads_tail;
      return true;
    }
    TxDesc* d = tx_slot();
    if (d == nullptr) return false;
    const bool first = k == 0, last = k + 1 == j.npkts;
    d->bth.opcode = first && last ? IBV_OPCODE_RC_RDMA_READ_RESPONSE_ONLY
                    : first       ? IBV_OPCODE_RC_RDMA_READ_RESPONSE_FIRST
                    : last        ? IBV_OPCODE_RC_RDMA_READ_RESPONSE_LAST
                                  : IBV_OPCODE_RC_RDMA_READ_RESPONSE_MIDDLE;
    d->bth.psn = psn_add(j.psn, k);
    d->aeth = common::Aeth{kAckNoCredit, (j.msn + 1) & 0xFFFFFF};  // the READ's own MSN
    const uint64_t off = uint64_t{k} * mtu();
    const uint32_t dlen = static_cast<uint32_t>(std::min<uint64_t>(mtu(), j.len - off));
    d->payload_len = dlen;
    d->num_segs = dlen ? 1 : 0;
    d->segs[0] = TxSeg{j.ptr + off, dlen, j.rkey};
    ++c.tx_data_pkts;
    tx_commit_response(d, now, j.retry);
    --tx_quota;
    if (++j.next_pkt == j.npkts) ++reads_head;
  }
  return true;
}

// An ACK acknowledges every request up to ePSN - 1, except, in standard RoCE
// (go-back-N), a READ whose responses are not all out: its last response is
// its acknowledgement (IBA 9.7.5.1), and a plain RNIC (Linux's rxe) completes
// a READ WQE that a covering ACK reaches first, without its data. So the ACK
// stops short of the oldest pending READ. (IRN's requester reads a covering
// ACK as a hint that a response was lost, so IRN keeps ePSN - 1.)
void Qp::ack_point(uint32_t& psn, uint32_t& msn_out) const noexcept {
  psn = psn_add(epsn, -1);
  msn_out = msn;
  if (irn() || reads_head == reads_tail) return;
  const ReadJob& j = reads[reads_head % reads.size()];
  if (psn_lt(j.psn, epsn)) {
    psn = psn_add(j.psn, -1);
    msn_out = j.msn;
  }
}

// An atomic request (CMP_SWAP, FETCH_ADD) at `d` PSNs past ePSN. New: the
// address must be 8-byte aligned (else NAK invalid request) and its 8 bytes in
// an MR with remote atomic access on a QP that allows it (else NAK remote
// access); it is recorded and runs when ePSN reaches it, after every earlier
// request. A duplicate is answered from its record, never run again; one older
// than the saved records is dropped (IBA class D: the requester's retry and
// timeout decide).
DropReason Qp::on_atomic(const common::RocePacket& pkt, int32_t d, uint64_t now) noexcept {
  const uint32_t psn = pkt.bth.psn;
  auto fail = [&](DropReason r) {
    drop(r);
    return r;
  };
  if (d < 0) {
    path->on_duplicate(psn, now);
    for (AtomicRes& a : atomic_res) {
      if (a.state != kAtomicDone || a.psn != psn) continue;
      if (!a.reply) {
        a.reply = true;
        ++atomic_replies;
      }
      a.replay = true;
      ++c.atomic_replays;
      return fail(DropReason::kDuplicate);
    }
    ++c.atomic_replay_misses;
    return fail(DropReason::kDuplicate);
  }
  const common::AtomicEth& a = pkt.atomic;
  if (a.va & 7) {
    nak(common::kAethNak | common::kNakInvalidRequest, psn);
    return fail(DropReason::kInvalidRequest);
  }
  const MemoryRegion* cache = nullptr;
  if (remote_ptr(*t, a.rkey, a.va, 8, IBV_ACCESS_REMOTE_ATOMIC, init.pd, attr.qp_access_flags, cache) == nullptr) {
    nak(common::kAethNak | common::kNakRemoteAccess, psn);
    return fail(DropReason::kAccessViolation);
  }
  // A free record, else the one of the oldest PSN among those neither waiting
  // for ePSN nor owed a response. The requester completes atomics in order and
  // keeps at most max_rd_atomic out, so that is one it has completed: a record
  // it may still ask for again is never taken while such a one exists. None:
  // more atomics outstanding than max_dest_rd_atomic; refused, and resent.
  AtomicRes* r = nullptr;
  int32_t oldest = -1;
  for (AtomicRes& x : atomic_res) {
    if (x.state == kAtomicFree) {
      r = &x;
      break;
    }
    if (x.state == kAtomicWaiting || x.reply) continue;
    const int32_t age = psn_diff(epsn, x.psn);
    if (age > oldest) {
      oldest = age;
      r = &x;
    }
  }
  if (r == nullptr) return fail(DropReason::kNoBuffer);
  *r = AtomicRes{psn, kAtomicWaiting, false, false, pkt.bth.opcode, a.rkey, a.va, a.swap_add, a.compare, 0};
  RxSlot& s = slot(psn);
  s.flags = kSlotArrived | kSlotAtomic | kSlotMsgEnd;
  s.arrived_at = now;
  ++c.rx_pkts;
  if (psn_lt(high, psn_add(psn, 1))) high = psn_add(psn, 1);
  advance_epsn(now);
  return DropReason::kNone;
}

// The atomic at `psn` runs on the registered memory with the CPU's own atomic
// instructions, so it is atomic against every other atomic of the port on any
// lcore (and against the application's own atomics on that memory).
void Qp::run_atomic(uint32_t psn) noexcept {
  for (AtomicRes& r : atomic_res) {
    if (r.state != kAtomicWaiting || r.psn != psn) continue;
    const MemoryRegion* cache = nullptr;
    // Looked up again: the region may have gone while earlier PSNs were missing.
    uint8_t* const p = remote_ptr(*t, r.rkey, r.va, 8, IBV_ACCESS_REMOTE_ATOMIC, init.pd, attr.qp_access_flags, cache);
    if (p == nullptr || (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
      r.state = kAtomicFree;
      nak(common::kAethNak | (p == nullptr ? common::kNakRemoteAccess : common::kNakInvalidRequest), psn);
      return;
    }
    auto* const word = reinterpret_cast<uint64_t*>(p);
    if (r.opcode == IBV_OPCODE_RC_COMPARE_SWAP) {
      uint64_t seen = r.compare;  // the original value either way once the call returns
      __atomic_compare_exchange_n(word, &seen, r.swap_add, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      r.orig = seen;
    } else {
      r.orig = __atomic_fetch_add(word, r.swap_add, __ATOMIC_SEQ_CST);
    }
    r.state = kAtomicDone;
    r.reply = true;
    ++atomic_replies;
    ++c.atomics_executed;
    return;
  }
}

// The atomic responses owed: RC_ATOMIC_ACKNOWLEDGE with the request's PSN
// and the original value (never kSackMark).
bool Qp::tx_atomic_replies(uint64_t now) noexcept {
  for (AtomicRes& r : atomic_res) {
    if (atomic_replies == 0) break;
    if (!r.reply) continue;
    TxDesc* d = tx_slot();
    if (d == nullptr) return false;
    d->bth.opcode = IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE;
    d->bth.psn = r.psn;
    d->aeth = common::Aeth{ack_syndrome(), msn};
    d->atomic_ack = r.orig;
    ++c.acks_tx;
    // A response (its path echoed back, never a probe when it answers a retry).
    tx_commit_response(d, now, r.replay);
    r.reply = false;
    r.replay = false;
    --atomic_replies;
  }
  return true;
}

uint8_t Qp::ack_syndrome() const noexcept {
  if (!credit_mode) return kAckNoCredit;
  const int32_t ahead = psn_diff(grant_psn, epsn);
  return common::kAethAck | credit_encode(ahead > 0 ? static_cast<uint32_t>(ahead) : 0);
}

uint64_t Qp::sack_due() const noexcept {
  // At most a few SACK events per reorder delay (the requester's RACK rule
  // keeps repeated SACKs from causing repeated retransmissions), and fewer
  // and fewer while nothing new arrives (the repair is then up to the
  // requester's timeout).
  const uint64_t interval = std::max<uint64_t>(attr.reorder_delay_ns / 4, 1) << sack_backoff;
  return std::max(hole_since + attr.reorder_delay_ns, last_sack + interval);
}

uint64_t Qp::responder_deadline() const noexcept {
  if (!irn() || hole_since == kNever) return kNever;
  return sack_due();
}

}  // namespace tandem::rnic
