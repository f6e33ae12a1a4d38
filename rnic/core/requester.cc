// Requester side of a QP: work requests -> packets (lazy segmentation, PSNs,
// ACK requests, READ requests), ACK/SACK/NAK processing, READ response
// placement, selective or go-back-N retransmission, timeouts and RNR waits.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/wire/opcode.h"
#include "common/wire/psn.h"
#include "rnic/core/credit_wire.h"
#include "common/wire/icrc.h"
#include "rnic/core/qp.h"

namespace tandem::rnic {

using common::DropReason;
using common::psn_add;
using common::psn_diff;
using common::psn_le;
using common::psn_lt;

namespace {

// A READ is sent as several read requests of at most this share of the
// window, so that a 64 MB read never needs more PSN records than exist.
uint32_t read_chunk_pkts(uint32_t window) noexcept { return std::max(1u, window / 4); }

// A data packet's opcode by WR opcode (RDMA_WRITE, RDMA_WRITE_WITH_IMM,
// SEND, SEND_WITH_IMM: ibv_wr_opcode 0-3) and its place in the message
// (first | last << 1): one load instead of a branch per question.
constexpr uint8_t kRequestOpcode[4][4] = {
    {IBV_OPCODE_RC_RDMA_WRITE_MIDDLE, IBV_OPCODE_RC_RDMA_WRITE_FIRST, IBV_OPCODE_RC_RDMA_WRITE_LAST,
     IBV_OPCODE_RC_RDMA_WRITE_ONLY},
    {IBV_OPCODE_RC_RDMA_WRITE_MIDDLE, IBV_OPCODE_RC_RDMA_WRITE_FIRST,
     IBV_OPCODE_RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, IBV_OPCODE_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE},
    {IBV_OPCODE_RC_SEND_MIDDLE, IBV_OPCODE_RC_SEND_FIRST, IBV_OPCODE_RC_SEND_LAST, IBV_OPCODE_RC_SEND_ONLY},
    {IBV_OPCODE_RC_SEND_MIDDLE, IBV_OPCODE_RC_SEND_FIRST, IBV_OPCODE_RC_SEND_LAST_WITH_IMMEDIATE,
     IBV_OPCODE_RC_SEND_ONLY_WITH_IMMEDIATE},
};
static_assert(IBV_WR_RDMA_WRITE == 0 && IBV_WR_RDMA_WRITE_WITH_IMM == 1 && IBV_WR_SEND == 2 &&
              IBV_WR_SEND_WITH_IMM == 3);

// Points the descriptor at `len` bytes of the WR's gather list from `off`.
inline void gather(const SendWqe& w, uint64_t off, uint32_t len, TxDesc* d) noexcept {
  if (w.num_sge == 1) {  // the common case, without the walk
    d->segs[0] = TxSeg{w.sge[0].ptr + off, len, w.sge[0].lkey};
    d->num_segs = len ? 1 : 0;
    return;
  }
  uint32_t k = 0;
  for (uint32_t j = 0; j < w.num_sge && len > 0; ++j) {
    const uint32_t sl = w.sge[j].len;
    if (off >= sl) { off -= sl; continue; }
    const uint32_t take = static_cast<uint32_t>(std::min<uint64_t>(len, sl - off));
    d->segs[k++] = TxSeg{w.sge[j].ptr + off, take, w.sge[j].lkey};
    len -= take;
    off = 0;
  }
  d->num_segs = k;
}

}  // namespace

// Inline into Transport::post_send (its only callers): a call per posted WR.
// The WR's fields into the next SQ slot, then the checks every post shares.
[[gnu::always_inline]] inline int Qp::post_send(const SendWr& wr) noexcept {
  // A full SQ's next slot may still hold an outstanding WR: the spare takes
  // the fields, and post_filled says ENOMEM (or flushes it on a QP in ERROR).
  SendWqe& w = sq_tail - sq_head < init.sq_depth ? wqe(sq_tail) : sq_spare;
  __builtin_prefetch(&wqe(sq_tail + 1), 1);  // the next post's slot, last written a ring ago
  w.wr_id = wr.wr_id;
  const uint32_t op = static_cast<uint32_t>(wr.opcode);
  w.opcode = op < 256 ? op : 255;  // 255: refused as any opcode past the postable ones
  w.imm_data = wr.imm_data;
  if (ud) [[unlikely]] {
    fill_ud_dest(w, wr.ud);
  } else {
    w.remote_addr = wr.remote_addr;
    w.rkey = wr.rkey;
  }
  w.num_sge = static_cast<uint8_t>(std::min<uint32_t>(wr.num_sge, 255));
  if (wr.num_sge <= kMaxSge && !(wr.send_flags & IBV_SEND_INLINE)) [[likely]] {
    // Resolved here, from the WR (a READ or an atomic lands in its gather
    // list: local write); one refused marks the WR, which post_filled then
    // refuses after its state check.
    const bool is_read = op == IBV_WR_RDMA_READ || is_atomic_wr(op);
    for (uint32_t j = 0; j < wr.num_sge; ++j) {
      const Sge& g = wr.sg_list[j];
      if (!resolve_sge(*t, init.pd, is_read, g.addr, g.length, g.lkey, w.sge[j])) {
        w.num_sge = 255;
        break;
      }
    }
  } else {
    for (uint32_t j = 0, n = std::min<uint32_t>(wr.num_sge, kMaxSge); j < n; ++j)
      w.sge[j] = WqeSge{reinterpret_cast<uint8_t*>(wr.sg_list[j].addr), wr.sg_list[j].length};
  }
  if (is_atomic_wr(op)) [[unlikely]] w.set_atomic(wr.compare_add, wr.swap);  // post_filled: one entry at most
  return post_filled(w, wr.send_flags, nullptr);
}

int Transport::post_send(uint32_t qpn, const SendWr& wr) noexcept {
  Qp* qp = find_qp(qpn);
  if (qp == nullptr) return EINVAL;
  const int r = qp->post_send(wr);
  if (r == 0) activate(qp);
  return r;
}

int Transport::post_send(uint32_t qpn, const SendWr* wrs, uint32_t n, uint32_t* bad) noexcept {
  Qp* qp = find_qp(qpn);
  uint32_t i = 0;
  int r = qp == nullptr ? EINVAL : 0;
  if (qp != nullptr) {
    for (; i < n; ++i)
      if ((r = qp->post_send(wrs[i])) != 0) break;
    if (i) activate(qp);
  }
  if (bad != nullptr) *bad = i;
  return r;
}

// Inline: once per data packet, from tx_requests and send_psn (this file).
[[gnu::always_inline]] inline void Qp::fill_request(TxDesc* d, const SendWqe& w, uint32_t pkt_idx, uint64_t off,
                                                    uint32_t len) noexcept {
  const bool first = pkt_idx == 0, last = pkt_idx + 1 == w.npkts;
  const uint32_t op = w.opcode;  // not a READ here (0-3)
  const uint8_t opcode = kRequestOpcode[op & 3][uint32_t{first} | uint32_t{last} << 1];
  d->bth.opcode = opcode;
  d->bth.ack_req = last || (pkt_idx + 1) % attr.ack_every == 0;
  d->bth.se = last && w.solicited && (op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM);
  d->bth.resv7 = next_echo();  // a response's path (irn_wire.h; none in go-back-N)
  const uint32_t f = common::opcode_info(opcode).flags;
  if (f & common::kOpReth) d->reth = common::Reth{w.remote_addr, w.rkey, w.len};
  if (f & common::kOpImm) d->imm = w.imm_data;
  if (irn()) {
    const bool write = op <= IBV_WR_RDMA_WRITE_WITH_IMM;
    d->has_xeth = true;
    d->xeth = Xeth{w.recv_idx, static_cast<uint32_t>(off), w.len, write ? w.rkey : 0,
                   write ? w.remote_addr : 0};
  }
  d->payload_len = len;
  gather(w, off, len, d);
}

// Queues the packet for `psn` (its record is filled): a retransmission or a
// new READ request (new data is sent by tx_requests itself). Returns false
// when the TX queue is full; sets cc_stop when congestion control says wait.
bool Qp::send_psn(uint32_t psn, bool retx, uint64_t now, bool& cc_stop) noexcept {
  PsnRec& r = rec(psn);
  SendWqe& w = wqe(r.wqe);
  const bool is_read = (r.flags & kRecRead) != 0;
  if (retx && !is_read && !cc_can_send(inflight_bytes, r.len, now)) {
    cc_stop = true;
    return true;
  }
  if (!is_read && !gather_live(w, uint64_t{r.pkt_idx} * mtu(), r.len)) [[unlikely]] {
    lost_region(r.wqe);
    cc_stop = true;  // the QP is in ERROR: nothing more goes
    return true;
  }
  TxDesc* d = tx_slot();
  if (d == nullptr) return false;
  d->bth.psn = psn;
  d->retransmit = retx;
  const uint64_t off = uint64_t{r.pkt_idx} * mtu();
  if (r.flags & kRecAtomic) [[unlikely]] {
    // The same request each time: the responder answers a duplicate from
    // what it saved, never running it twice.
    const bool cas = w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
    d->bth.opcode = cas ? IBV_OPCODE_RC_COMPARE_SWAP : IBV_OPCODE_RC_FETCH_ADD;
    d->bth.ack_req = true;
    d->reth.va = w.remote_addr;
    d->reth.rkey = w.rkey;
    d->atomic = AtomicArgs{cas ? w.atomic_swap() : w.atomic_compare_add(), cas ? w.atomic_compare_add() : 0};
    if (r.flags & kRecLost) { r.flags &= ~kRecLost; --lost; }
    r.sent_at = now;
    r.sent_seq = tx_seq;
    if (retx) r.flags |= kRecRetx;
  } else if (is_read) {
    // A retry asks only for the run of missing responses starting here.
    uint32_t last_idx = r.chunk_last;
    if (retx) {
      last_idx = r.pkt_idx;
      while (last_idx < r.chunk_last &&
             !(rec(psn_add(psn, last_idx + 1 - r.pkt_idx)).flags & kRecAcked))
        ++last_idx;
    }
    const uint64_t end = std::min<uint64_t>(w.len, uint64_t{last_idx + 1} * mtu());
    d->bth.opcode = IBV_OPCODE_RC_RDMA_READ_REQUEST;
    d->bth.ack_req = false;
    d->bth.resv7 = next_echo();
    d->reth = common::Reth{w.remote_addr + off, w.rkey, static_cast<uint32_t>(end - off)};
    for (uint32_t i = r.pkt_idx; i <= last_idx; ++i) {
      PsnRec& q = rec(psn_add(psn, i - r.pkt_idx));
      if (q.flags & kRecLost) { q.flags &= ~kRecLost; --lost; }
      q.sent_at = now;
      q.sent_seq = tx_seq;
      if (retx) q.flags |= kRecRetx;
    }
  } else {
    fill_request(d, w, r.pkt_idx, off, r.len);
    r.prev_sent = static_cast<uint32_t>(r.sent_at);
    r.sent_at = now;
    r.sent_seq = tx_seq;
    if (retx) r.flags |= kRecRetx;
    if (r.flags & kRecLost) { r.flags &= ~kRecLost; --lost; }
    inflight_add(r.len);
    cc_on_sent(r.len, now);
  }
  ++tx_seq;
  ++c.tx_data_pkts;
  if (retx) {
    ++c.retx_pkts;
    c.retx_bytes += d->payload_len;
    // Not on the path that lost it (path_policy.h choose_retransmit).
    tx_commit_port(d, path_choose_retx(psn, r.sport, now));
    r.prev_sport = r.sport;
  } else {
    tx_commit(d, now);
  }
  r.sport = d->udp_sport;
  r.path = path_pick();
  return true;
}

bool Qp::tx_requests(uint64_t now) noexcept {
  if (rnr_wait) {
    if (now < rnr_until) return true;
    rnr_wait = false;
    mark_lost_from(una);  // everything not acknowledged goes again
  }
  bool cc_stop = false;
  cc_blocked = false;
  // Retransmissions first, oldest first.
  while (lost > 0 && psn_lt(rtx_cursor, nxt)) {
    PsnRec& r = rec(rtx_cursor);
    if (!(r.flags & kRecLost)) { rtx_cursor = psn_add(rtx_cursor, 1); continue; }
    if (!send_psn(rtx_cursor, true, now, cc_stop)) return false;
    if (cc_stop) { cc_blocked = true; return true; }
  }
  if (lost == 0) rtx_cursor = nxt;
  const uint32_t window = wmask + 1;
  while (sq_send != sq_tail) {
    if (tx_quota == 0) return true;  // the other QPs' turn (Transport::poll)
    SendWqe& w = wqe(sq_send);
    // The next WRs and PSN records: with a few hundred WRs posted per QP
    // they are no longer in L1 when segmentation reaches them.
    __builtin_prefetch(&wqe(sq_send + 2));
    __builtin_prefetch(&rec(psn_add(nxt, 2)), 1);
    const bool is_read = w.opcode == IBV_WR_RDMA_READ || is_atomic_wr(w.opcode);
    if (!is_read) {
      // New data, one PSN: the same steps as below and send_psn's, with the
      // record and descriptor filled in one go (send_psn is for READs and
      // retransmissions).
      if (w.pkts_sent == 0) w.first_psn = nxt;
      if (static_cast<uint32_t>(psn_diff(nxt, una)) + 1 > window - 1) return true;
      const uint32_t psn = nxt;
      const uint32_t idx = w.pkts_sent;
      const uint64_t off = uint64_t{idx} * mtu();
      const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(mtu(), w.len - off));
      if (!cc_can_send(inflight_bytes, len, now)) {
        cc_blocked = true;
        return true;
      }
      if (owner != nullptr && !owner->may_send()) return true;  // its owner's share is out (owner_share.h)
      if (credit_mode) {
        if (!psn_lt(nxt, credit_limit) && !credit_probe(now)) {
          cc->on_credit_stall(now);
          return true;  // the next ACK carrying credit calls poll again
        }
        if (++credit_new_sent > credit_unsched) cc_credit_used(now);
      }
      if (!gather_live(w, off, len)) [[unlikely]] {
        lost_region(sq_send);
        return true;
      }
      if (una == nxt) last_progress = now;  // the retransmission timer starts
      TxDesc* d = tx_slot();
      if (d == nullptr) return false;
      nxt = psn_add(nxt, 1);
      d->bth.psn = psn;
      fill_request(d, w, idx, off, len);
      // The PSN's record in one go (it is not in flight until nxt passed it).
      PsnRec& r = rec(psn);
      r = PsnRec{now, tx_seq, sq_send, idx, idx, static_cast<uint16_t>(len)};
      inflight_add(len);
      cc_on_sent(len, now);
      ++tx_seq;
      ++c.tx_data_pkts;
      tx_commit(d, now);
      r.sport = d->udp_sport;
      r.path = path_pick();
      // In an owner's shared turn a message's first packet costs one more:
      // the WQE fetched and the completion written are work too, so many
      // tiny messages (a zero-length WRITE storm) take no more of the lcore
      // than big ones.
      tx_quota -= idx == 0 && owner != nullptr && tx_quota > 1 ? 2 : 1;
      if (++w.pkts_sent == w.npkts) ++sq_send;
      continue;
    }
    // A READ: a request for up to a chunk of response PSNs, all recorded.
    // An atomic is a one-PSN READ of its kind: the same resources
    // (max_rd_atomic), done only by its response.
    if (w.pkts_sent == 0) {
      if (reads_inflight >= init.max_rd_atomic) return true;
      w.first_psn = nxt;
    }
    const uint32_t n = std::min(w.npkts - w.pkts_sent, read_chunk_pkts(window));
    if (static_cast<uint32_t>(psn_diff(nxt, una)) + n > window - 1) return true;
    for (uint32_t i = 0; i < n; ++i) {
      PsnRec& r = rec(psn_add(nxt, i));
      r = PsnRec{};
      r.wqe = sq_send;
      r.pkt_idx = w.pkts_sent + i;
      r.chunk_last = w.pkts_sent + n - 1;
      r.flags = is_atomic_wr(w.opcode) ? kRecRead | kRecAtomic : kRecRead;
    }
    if (is_atomic_wr(w.opcode)) sent_atomics = true;
    if (una == nxt) last_progress = now;  // the retransmission timer starts
    const uint32_t psn = nxt;
    if (t->txq().full()) return false;
    nxt = psn_add(nxt, n);
    bool stop = false;
    send_psn(psn, false, now, stop);
    --tx_quota;
    if (w.pkts_sent == 0) ++reads_inflight;
    w.pkts_sent += n;
    if (w.pkts_sent == w.npkts) ++sq_send;
  }
  return true;
}

// Inline: once per acknowledged PSN, from the ACK and SACK paths (this file).
[[gnu::always_inline]] inline void Qp::ack_rec(uint32_t psn, uint64_t now, uint64_t& bytes, uint64_t& rtt) noexcept {
  PsnRec& r = rec(psn);
  if (r.flags & kRecAcked) return;
  r.flags |= kRecAcked;
  uint64_t late = 0;  // a spurious loss: how long the copy that arrived took
  if (r.flags & kRecLost) {
    r.flags &= ~kRecLost;
    --lost;
    // Declared lost, not yet resent: the latest copy arrived.
    if (r.flags & kRecRack) late = std::max<uint64_t>(1, now - r.sent_at);
  } else if (!(r.flags & kRecRead)) {  // (a READ's or atomic's PSNs are not in flight: send_psn)
    inflight_sub(r.len);
  }
  bytes += r.len;
  if (!(r.flags & kRecRetx) && now >= r.sent_at) {
    rtt = now - r.sent_at;
    srtt_ns = srtt_ns ? (7 * srtt_ns + rtt) / 8 : rtt;
    if (rtt < min_rtt_ns || min_rtt_ns == 0) min_rtt_ns = rtt;
    path_on_ack(r, rtt, now);
  } else {
    if ((r.flags & kRecRack) && now - r.sent_at < min_rtt_ns / 4) {
      // Answered within a quarter of the shortest RTT seen since it was
      // resent: the answer is to an earlier copy, which was late, not lost
      // (TCP's Eifel test, by the clock; a quarter because with cumulative
      // ACKs and queues the shortest sample overstates a path's RTT).
      late = std::max<uint32_t>(1, static_cast<uint32_t>(now) - r.prev_sent);
    }
    // A resent packet is done: whichever copy arrived, its latest path will
    // tell nothing more about it (no RTT sample; without this a path whose
    // last packet was a resend would look silent), and the earlier copy's
    // path may have delivered it (path_health.h, on_late).
    if (r.flags & kRecRetx) {
      path_on_ack(r, 0, now);
      // After the retransmission timer's loss only if the answer came too
      // soon to be the resend's (an answer the owner's stall held back): a
      // copy that had its whole RTO counted against its path (on_timeout),
      // and where a path's RTT spread exceeds the RTO (a jittery host)
      // on_late would credit the dead path that lost it and clear its run
      // of losses, so that it never went out (issue 33).
      if (!path_single && ((r.flags & kRecRack) || now - r.sent_at < min_rtt_ns / 2)) path->on_late(psn, now);
      // The responder says a request arrived twice: the earlier copy's path
      // delivered, the response to it was lost (irn_wire.h kRespDup).
      if (ack_dup && r.prev_sport != 0 && !path_single) path->on_ack(r.prev_sport, 0, now);
    }
  }
  if (late) [[unlikely]] {
    on_spurious_loss(late, now);
  } else if (r.sent_seq >= rack_seq) {
    rack_seq = r.sent_seq + 1;
    rack_rtt_ns = now - r.sent_at;
  }
}

void Qp::mark_lost(uint32_t psn, bool timeout) noexcept {
  PsnRec& r = rec(psn);
  if (r.flags & (kRecAcked | kRecLost)) return;
  r.flags = static_cast<uint8_t>((r.flags & ~kRecRack) | kRecLost);  // RACK's callers set kRecRack
  ++lost;
  if (!(r.flags & kRecRead)) inflight_sub(r.len);
  if (psn_lt(psn, rtx_cursor) || lost == 1) rtx_cursor = psn;
  if (timeout) path->on_timeout(r.sport, r.sent_at, 0);
  else path->on_loss(r.sport, r.sent_at, 0);
}

void Qp::mark_lost_from(uint32_t psn) noexcept {
  uint32_t n = 0;
  for (uint32_t p = psn; psn_lt(p, nxt); p = psn_add(p, 1)) {
    const uint32_t before = lost;
    mark_lost(p);
    n += lost - before;
  }
  if (n) cc->on_loss(n, 0);
}

void Qp::cum_ack(uint32_t psn, uint64_t now) noexcept {
  uint64_t bytes = 0, rtt = 0;
  // una .. psn, those sent: a count, not two PSN compares per record.
  const int32_t n = std::min(psn_diff(psn, una) + 1, psn_diff(nxt, una));
  const uint32_t before = una;
  uint32_t acked = 0;  // records from una on now acknowledged, without a gap
  for (int32_t i = 0; i < n; ++i) {
    const uint32_t p = psn_add(before, static_cast<uint32_t>(i));
    // READ PSNs are done only by their responses.
    if (!(rec(p).flags & kRecRead)) {
      ack_rec(p, now, bytes, rtt);
      if (acked == static_cast<uint32_t>(i)) ++acked;
    }
  }
  if (bytes || rtt) cc->on_ack(bytes, rtt, now);
  una = psn_add(una, acked);  // advance_una goes on from there (SACKed records)
  advance_una(now, before);
}

void Qp::advance_una(uint64_t now) noexcept { advance_una(now, una); }

void Qp::advance_una(uint64_t now, uint32_t before) noexcept {
  while (una != nxt && (rec(una).flags & kRecAcked)) una = psn_add(una, 1);
  if (una != before) {
    last_progress = now;
    retries = 0;
    backoff = 0;
    rnr_retries = 0;
    if (lost == 0 || psn_lt(rtx_cursor, una)) rtx_cursor = lost ? una : nxt;
    complete_sends();
  }
}

void Qp::on_sack(uint64_t sack, uint64_t now) noexcept {
  const uint32_t base = sack_base(sack);
  const uint64_t bm = sack_bitmap(sack);
  uint64_t bytes = 0, rtt = 0, latest = 0;
  bool any = false;
  int top = -1;
  for (uint32_t i = 0; i < kSackBits; ++i) {
    if (!((bm >> i) & 1)) continue;
    const uint32_t p = psn_add(base, i);
    if (psn_lt(p, una) || !psn_lt(p, nxt)) continue;
    PsnRec& r = rec(p);
    if (r.flags & kRecRead) continue;
    latest = std::max(latest, r.sent_seq);
    any = true;
    top = static_cast<int>(i);
    ack_rec(p, now, bytes, rtt);
  }
  uint32_t lost_now = 0;
  // RACK: a packet has had its time once it has been out the RTT of the
  // latest-sent delivered packet plus the reorder window (with no window,
  // as soon as a packet sent after it is reported).
  const uint64_t wait = rack_rtt_ns + reo_wnd_ns;
  for (int i = 0; i < top; ++i) {
    if ((bm >> i) & 1) continue;
    const uint32_t p = psn_add(base, i);
    if (psn_lt(p, una) || !psn_lt(p, nxt)) continue;
    PsnRec& r = rec(p);
    // Lost only if something sent after it has arrived (RACK-like), so a
    // retransmission still in flight is not sent again.
    if (!any || (r.flags & (kRecAcked | kRecLost | kRecRead)) || r.sent_seq >= latest) continue;
    if (reo_wnd_ns != 0 && r.sent_at + wait > now) {  // maybe only late: look again when its time is up
      rack_timer = std::min(rack_timer, r.sent_at + wait);
      continue;
    }
    mark_lost(p);
    r.flags |= kRecRack;
    ++lost_now;
  }
  if (top >= 0) {
    const uint32_t past = psn_add(base, static_cast<uint32_t>(top) + 1);
    if (psn_lt(rack_high, past)) rack_high = past;
  }
  if (bytes || rtt) cc->on_ack(bytes, rtt, now);
  if (lost_now) {
    cc->on_loss(lost_now, now);
    rack_losses_declared(now);
  }
  advance_una(now);
}

// The window's ceiling: RACK's (the smoothed RTT), and never more than a
// quarter of the QP's timeout, so that a real loss is still repaired well
// before the timeout would.
uint64_t Qp::reo_wnd_max() const noexcept { return std::min(srtt_ns, attr.timeout_ns / 4); }

void Qp::on_spurious_loss(uint64_t late_ns, uint64_t now) noexcept {
  ++rack_spurious;
  reo_episodes = 0;
  if (!t->rack_adaptive()) return;
  // As late as this one was, and a quarter more for the ones behind it...
  uint64_t w = late_ns > rack_rtt_ns ? (late_ns - rack_rtt_ns) * 5 / 4 : 0;
  // ...and at least a step more once per round trip (RACK's growth).
  if (now >= reo_grow_after) {
    reo_grow_after = now + srtt_ns;
    w = std::max(w, reo_wnd_ns + std::max<uint64_t>(min_rtt_ns / 8, kReoWndMinStepNs));
  }
  reo_wnd_ns = std::max(reo_wnd_ns, std::min(reo_wnd_max(), w));
}

void Qp::rack_losses_declared(uint64_t now) noexcept {
  // Counted at most once per round trip, as RACK counts recoveries.
  if (reo_wnd_ns == 0 || now < reo_event_after) return;
  reo_event_after = now + srtt_ns;
  if (++reo_episodes < kReoDecayEpisodes) return;
  reo_episodes = 0;
  reo_wnd_ns /= 2;  // real losses all along: wait less for the next one
}

void Qp::rack_on_timer(uint64_t now) noexcept {
  rack_timer = kNever;
  const uint64_t wait = rack_rtt_ns + reo_wnd_ns;
  uint32_t n = 0;
  for (uint32_t p = una; psn_lt(p, rack_high) && psn_lt(p, nxt); p = psn_add(p, 1)) {
    PsnRec& r = rec(p);
    if ((r.flags & (kRecAcked | kRecLost | kRecRead)) || r.sent_seq + 1 >= rack_seq) continue;
    if (r.sent_at + wait > now) {
      rack_timer = std::min(rack_timer, r.sent_at + wait);
      continue;
    }
    mark_lost(p);
    r.flags |= kRecRack;
    ++n;
  }
  if (n) {
    cc->on_loss(n, now);
    rack_losses_declared(now);
  }
}

void Qp::complete_sends() noexcept {
  // In locals: a completion's store into the CQ ring could alias the QP's
  // fields, and the compiler would reload them for every WR.
  uint32_t head = sq_head;
  const uint32_t send = sq_send, done_below = una;
  Cq* const cq = send_cq;
  while (head != send) {
    const SendWqe& w = wqe(head);
    __builtin_prefetch(&wqe(head + 2));
    if (!psn_lt(psn_add(w.first_psn, w.npkts - 1), done_below)) break;
    const bool lands = w.opcode == IBV_WR_RDMA_READ || is_atomic_wr(w.opcode);
    if (w.signaled || w.status != IBV_WC_SUCCESS) {
      cq->push(Completion{w.wr_id, w.wc_status(), send_wc_opcode(w.op()), lands ? w.len : 0, 0, qpn,
                          attr.dest_qp_num, wqe_wc_flags(w)});
    }
    if (lands) --reads_inflight;
    ++head;
  }
  sq_head = head;
}

bool Qp::gather_live(const SendWqe& w, uint64_t off, uint32_t len) const noexcept {
  if (w.num_sge == 1) return t->mr_live(w.sge[0].lkey, init.pd);
  for (uint32_t j = 0; j < w.num_sge && len > 0; ++j) {
    const uint32_t sl = w.sge[j].len;
    if (off >= sl) { off -= sl; continue; }
    if (!t->mr_live(w.sge[j].lkey, init.pd)) return false;
    len -= static_cast<uint32_t>(std::min<uint64_t>(len, sl - off));
    off = 0;
  }
  return true;
}

void Qp::lost_region(uint32_t wqe_idx) noexcept {
  ++c.region_gone;
  wqe(wqe_idx).status = IBV_WC_LOC_PROT_ERR;
  to_error(IBV_WC_WR_FLUSH_ERR);
}

void Qp::to_error(ibv_wc_status first_status) noexcept {
  state = QpState::kError;
  if (first_status != IBV_WC_WR_FLUSH_ERR && sq_head != sq_tail)
    wqe(sq_head).status = static_cast<uint8_t>(first_status);
  // A WR marked with an error (by a NAK) reports it; every other one is flushed.
  for (; sq_head != sq_tail; ++sq_head) {
    SendWqe& w = wqe(sq_head);
    const ibv_wc_status st = w.status != IBV_WC_SUCCESS ? w.wc_status() : IBV_WC_WR_FLUSH_ERR;
    send_cq->push(Completion{w.wr_id, st, send_wc_opcode(w.op()), 0, 0, qpn,
                             attr.dest_qp_num, wqe_wc_flags(w)});
  }
  // On an SRQ these are the WQEs it took for messages under way: verbs
  // flushes those, and leaves the ones still on the SRQ to the other QPs.
  while (rq_head != rq_tail) {
    // The one whose buffer was found deregistered (responder) says so.
    const ibv_wc_status st = rq_head == prot_err_recv ? IBV_WC_LOC_PROT_ERR : IBV_WC_WR_FLUSH_ERR;
    recv_cq->push(Completion{rwqe(rq_head).wr.wr_id, st, IBV_WC_RECV, 0, 0, qpn, attr.dest_qp_num, 0});
    recv_done();
  }
  prot_err_recv = kNoRecv;
  sq_send = sq_head;
  una = nxt;
  rtx_cursor = nxt;
  lost = 0;
  inflight_clear();
  reads_inflight = 0;
  rnr_wait = false;
  read_hole_since = kNever;
  rack_timer = kNever;
  ack_pending = nak_pending = false;
  hole_since = kNever;
  reads_head = reads_tail;
  for (AtomicRes& a : atomic_res) a.reply = false;  // saved values stay; no response goes out
  atomic_replies = 0;
}

// With `pend` (a READ response whose ICRC is still to be checked: RxPacketRef::
// icrc_pending) nothing acts on the packet before the verdict: a refusal checks
// the whole ICRC first; placement computes it in the pass that copies the
// payload. The place is this requester's own: the READ WR and offset its
// unacknowledged READ PSN names, which that PSN's good response (or the
// response to the READ asked again from there) writes before the WR can
// complete (rnic/core/README.md "ICRC").
DropReason Qp::on_read_response(const common::RocePacket& pkt, const uint8_t* payload,
                                uint32_t len, uint64_t now, const RxPacketRef* pend) noexcept {
  const uint32_t psn = pkt.bth.psn;
  bool pending = pend != nullptr;
  // Before a pending packet counts for anything: true if it is corrupt.
  auto corrupt = [&]() noexcept {
    if (!pending) return false;
    pending = false;
    if (!icrc_rest_ok(*pend)) return true;
    note_response(pkt);
    return false;
  };
  auto refuse = [&](DropReason why) noexcept { return corrupt() ? DropReason::kBadIcrc : why; };
  if (!psn_lt(psn, nxt)) return refuse(DropReason::kUnsentPsn);  // nothing was ever asked for there
  if (psn_lt(psn, una)) return refuse(DropReason::kDuplicate);
  PsnRec& r = rec(psn);
  // A READ response answers a READ PSN, an atomic ACK an atomic's.
  const bool atomic = pkt.bth.opcode == IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE;
  if (!(r.flags & kRecRead) || atomic != ((r.flags & kRecAtomic) != 0)) return refuse(DropReason::kInvalidRequest);
  if (r.flags & kRecAcked) return refuse(DropReason::kDuplicate);
  SendWqe& w = wqe(r.wqe);
  const uint64_t off = uint64_t{r.pkt_idx} * mtu();
  const uint32_t want = atomic ? 0 : static_cast<uint32_t>(std::min<uint64_t>(mtu(), w.len - off));
  if (len != want) return refuse(DropReason::kInvalidRequest);
  if (!irn()) {
    // In order only: an earlier READ PSN still missing means a response was
    // lost; re-request from there (only what was requested before this one).
    for (uint32_t p = una; psn_lt(p, psn); p = psn_add(p, 1)) {
      PsnRec& q = rec(p);
      if ((q.flags & kRecRead) && !(q.flags & kRecAcked)) {
        if (corrupt()) return DropReason::kBadIcrc;
        bool any = false;
        for (uint32_t x = p; psn_lt(x, psn); x = psn_add(x, 1)) {
          PsnRec& y = rec(x);
          if ((y.flags & kRecRead) && !(y.flags & (kRecLost | kRecAcked)) &&
              y.sent_seq <= r.sent_seq) {
            mark_lost(x);
            any = true;
          }
        }
        if (any) cc->on_loss(1, now);
        return DropReason::kPsnOutOfWindow;
      }
    }
  }
  if (!gather_live(w, off, len)) [[unlikely]] {
    if (corrupt()) return DropReason::kBadIcrc;
    lost_region(r.wqe);  // its landing buffer was deregistered: the WR fails, nothing is written
    return DropReason::kRegionGone;
  }
  // The original value into the atomic's 8-byte entry (post_filled), in host
  // order as verbs gives it; a READ's data scattered into the WR's list (a
  // pending one's CRC computed as it is copied).
  if (atomic) std::memcpy(w.sge[0].ptr, &pkt.atomic_ack, sizeof pkt.atomic_ack);
  uint32_t crc = pending ? pend->icrc_head : 0;
  uint64_t o = off;
  uint32_t left = len;
  const uint8_t* src = payload;
  for (uint32_t j = 0; j < w.num_sge && left > 0; ++j) {
    const uint32_t sl = w.sge[j].len;
    if (o >= sl) { o -= sl; continue; }
    const uint32_t take = static_cast<uint32_t>(std::min<uint64_t>(left, sl - o));
    if (pending)
      crc = common::crc32_copy(crc, w.sge[j].ptr + o, src, take);
    else
      std::memcpy(w.sge[j].ptr + o, src, take);
    src += take;
    left -= take;
    o = 0;
  }
  if (pending) {
    // The verdict before the response counts: a bad one leaves its PSN
    // unacknowledged (its bytes are overwritten by the good response).
    if (common::crc32_update(crc, payload + len, pkt.bth.pad) != pkt.icrc) [[unlikely]]
      return DropReason::kBadIcrc;
    note_response(pkt);
  }
  // A READ response implicitly acknowledges every earlier request.
  uint64_t bytes = 0, rtt = 0;
  for (uint32_t p = una; psn_lt(p, psn); p = psn_add(p, 1)) {
    if (!(rec(p).flags & kRecRead)) ack_rec(p, now, bytes, rtt);
  }
  ++c.rx_pkts;
  c.rx_bytes += len;
  ack_rec(psn, now, bytes, rtt);
  r.sent_at = now;  // from here on: when the response arrived
  if (psn_lt(read_high, psn)) read_high = psn;
  if (bytes || rtt) cc->on_ack(bytes, rtt, now);
  advance_una(now);
  if (irn() && psn_lt(una, psn) && read_hole_since == kNever) read_hole_since = now;
  return DropReason::kNone;
}

DropReason Qp::on_response(const common::RocePacket& pkt, const uint8_t* payload, uint32_t len,
                           uint64_t now, const RxPacketRef* pend) noexcept {
  DropReason why = DropReason::kNone;
  const uint8_t op = pkt.bth.opcode;
  if (pend == nullptr) note_response(pkt);  // a pending one's once its ICRC is known good
  // An ATOMIC_ACKNOWLEDGE answers an atomic unless it is IRN's SACK (irn_wire.h).
  const bool atomic_ack = op == IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE &&
                          (!irn() || (sent_atomics && !(pkt.bth.resv7 & kSackMark)));
  if (common::opcode_has(op, common::kOpReadResp) || atomic_ack) {
    why = on_read_response(pkt, payload, len, now, pend);
    if (why != DropReason::kNone) drop(why);
    return why;
  }
  const uint32_t psn = pkt.bth.psn;
  // Valid ACK PSNs: una - 1 .. nxt - 1. One for a PSN never sent (forged,
  // or from a peer that lost track) must not complete or fail anything.
  if (psn_diff(psn, una) < -1) { drop(DropReason::kDuplicate); return DropReason::kDuplicate; }
  if (!psn_lt(psn, nxt)) { drop(DropReason::kUnsentPsn); return DropReason::kUnsentPsn; }
  const uint8_t syn = pkt.aeth.syndrome;
  switch (common::aeth_kind(syn)) {
    case common::kAethAck:
      if (credit_mode && common::aeth_value(syn) != kCreditInvalid) {
        const uint32_t limit = psn_add(psn, 1 + credit_decode(common::aeth_value(syn)));
        if (psn_lt(credit_limit, limit)) {
          cc->on_credit(static_cast<uint32_t>(psn_diff(limit, credit_limit)), now);
          credit_limit = limit;
          credit_stall_since = kNever;
        }
      }
      if (op == IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE) {
        if (!irn()) { drop(DropReason::kInvalidRequest); return DropReason::kInvalidRequest; }
        ++c.sacks_rx;
        cum_ack(psn, now);
        if (state == QpState::kRts) on_sack(pkt.atomic_ack, now);
      } else {
        ++c.acks_rx;
        cum_ack(psn, now);
      }
      if (pkt.bth.becn) cc->on_ecn_echo(now);
      return DropReason::kNone;
    case common::kAethRnrNak: {
      ++c.rnr_naks_rx;
      // In go-back-N the refused PSN is the responder's expected one, so
      // everything before it arrived; in IRN it may lie past a gap.
      if (!irn()) cum_ack(psn_add(psn, -1), now);
      if (rnr_wait) return DropReason::kNone;  // already waiting
      if (attr.rnr_retry != 7 && ++rnr_retries > attr.rnr_retry) {
        to_error(IBV_WC_RNR_RETRY_EXC_ERR);
        return DropReason::kNone;
      }
      rnr_wait = true;
      rnr_psn = psn;
      rnr_until = now + rnr_timer_ns(common::aeth_value(syn));
      return DropReason::kNone;
    }
    case common::kAethNak: {
      ++c.naks_rx;
      if (!irn()) cum_ack(psn_add(psn, -1), now);  // as for RNR: IRN's NAK PSN may lie past a gap
      const uint8_t code = common::aeth_value(syn);
      if (code == common::kNakPsnSeqError) {
        mark_lost_from(psn);
        return DropReason::kNone;
      }
      const ibv_wc_status st = code == common::kNakRemoteAccess ? IBV_WC_REM_ACCESS_ERR
                               : code == common::kNakRemoteOp   ? IBV_WC_REM_OP_ERR
                                                                 : IBV_WC_REM_INV_REQ_ERR;
      // The WR the refused PSN belongs to gets the error; the ones before it
      // completed (or are flushed), the ones after it are flushed.
      for (uint32_t i = sq_head; i != sq_tail; ++i) {
        SendWqe& w = wqe(i);
        if (i == sq_send && w.pkts_sent == 0) break;
        if (psn_diff(psn, w.first_psn) >= 0 && psn_diff(psn, w.first_psn) < static_cast<int32_t>(w.npkts)) {
          w.status = static_cast<uint8_t>(st);
          break;
        }
      }
      to_error(IBV_WC_WR_FLUSH_ERR);
      return DropReason::kNone;
    }
    default:
      drop(DropReason::kInvalidRequest);
      return DropReason::kInvalidRequest;
  }
}

void Qp::on_timers_requester(uint64_t now) noexcept {
  if (now >= rack_timer) rack_on_timer(now);
  if (una != nxt && now >= last_progress + rto()) {
    ++c.timeouts;
    // retry_cnt counts expiries of the QP's timeout, as verbs defines it. IRN's
    // RTO_low fires sooner to repair a tail; those do not use up the retries
    // until the backoff has grown them to the timeout (or to its cap), else a
    // stall of a few RTTs (a path going down, a descheduled peer) ends the QP.
    const bool counts = rto() >= attr.timeout_ns || backoff >= kMaxBackoff;
    if (counts && ++retries > attr.retry_cnt) {
      to_error(IBV_WC_RETRY_EXC_ERR);
      return;
    }
    const uint64_t base = rto_base();
    backoff = std::min<uint32_t>(backoff + 1, kMaxBackoff);
    last_progress = now;
    cc->on_timeout(now);
    if (irn()) {
      // Selective: only what has been out for a whole timeout (the oldest
      // always is); go-back-N resends everything from the oldest. A tail
      // (at most kRtoLowPkts, e.g. the one packet of a latency-bound QP)
      // lost this way is evidence against the paths it took; a whole
      // window timing out is the peer or the network, not a path.
      auto due = [&](uint32_t p) {
        const PsnRec& r = rec(p);
        return !(r.flags & (kRecAcked | kRecLost)) && (p == una || r.sent_at + base <= now);
      };
      uint32_t tail = 0;
      for (uint32_t p = una; psn_lt(p, nxt) && tail <= kRtoLowPkts; p = psn_add(p, 1)) tail += due(p);
      uint32_t n = 0;
      for (uint32_t p = una; psn_lt(p, nxt); p = psn_add(p, 1)) {
        if (due(p)) {
          mark_lost(p, tail <= kRtoLowPkts);
          ++n;
        }
      }
      if (n) cc->on_loss(n, now);
    } else {
      mark_lost_from(una);
    }
  }
  if (read_hole_since != kNever && now >= read_hole_since + attr.reorder_delay_ns) {
    // A missing READ response is lost once a response the responder sent
    // after it (same or later request) has been here for the reorder delay.
    read_hole_since = kNever;
    uint32_t n = 0;
    uint64_t seq_limit = 0;
    bool aged = false, holes = false;
    for (uint32_t p = read_high; psn_le(una, read_high); p = psn_add(p, -1)) {
      PsnRec& r = rec(p);
      if (r.flags & kRecRead) {
        if (r.flags & kRecAcked) {
          // sent_at holds the arrival time of a received response.
          if (r.sent_at + attr.reorder_delay_ns <= now) {
            seq_limit = std::max(seq_limit, r.sent_seq);
            aged = true;
          } else {
            holes = true;  // arrived recently: look again later
          }
        } else if (!(r.flags & kRecLost)) {
          if (aged && r.sent_seq <= seq_limit) {
            mark_lost(p);
            ++n;
          } else {
            holes = true;
          }
        }
      }
      if (p == una) break;
    }
    if (holes) read_hole_since = now;
    if (n) cc->on_loss(n, now);
  }
}

// Out of credit with nothing in flight, no ACK will come to bring more: the
// receiver's kicks (transport.cc grant_credits) are bounded, and all of them
// can die with a burst of loss (an overloaded receiving port). After an RTO
// without credit one new packet goes anyway, as TCP's zero-window probe; its
// ACK carries the receiver's grant. With packets in flight their ACKs, or
// the retransmission timer, do this.
bool Qp::credit_probe(uint64_t now) noexcept {
  if (una != nxt) {
    credit_stall_since = kNever;
    return false;
  }
  if (credit_stall_since == kNever) {
    credit_stall_since = now;
    return false;
  }
  if (now < credit_stall_since + rto()) return false;
  credit_stall_since = kNever;
  ++c.credit_probes;
  return true;
}

uint64_t Qp::requester_deadline() const noexcept {
  uint64_t d = kNever;
  if (credit_stall_since != kNever) d = credit_stall_since + rto();
  if (una != nxt) d = std::min(last_progress + rto(), rack_timer);
  if (rnr_wait) d = std::min(d, rnr_until);
  if (read_hole_since != kNever) d = std::min(d, read_hole_since + attr.reorder_delay_ns);
  if (cc_blocked) {
    // A rate-based policy (dcqcn) says when it may send again.
    const uint64_t t = cc->next_send_time(0);
    if (t != 0) d = std::min(d, t);
  }
  return d;
}

}  // namespace tandem::rnic
