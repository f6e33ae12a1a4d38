// Internal state of a queue pair and a completion queue: the requester
// (send queue, PSN records, retransmission) and the responder (receive queue,
// reorder window, ACK/SACK/NAK state, READ responses). Everything is sized at
// creation; the fast path only indexes rings.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/wire/opcode.h"
#include "common/wire/psn.h"
#include "rnic/core/cc_credit.h"
#include "rnic/core/cc_fixed_window.h"
#include "rnic/core/cc_policy.h"
#include "rnic/core/irn_wire.h"
#include "rnic/core/path_policy.h"
#include "rnic/core/path_round_robin.h"
#include "rnic/core/path_single.h"
#include "rnic/core/placed_ahead.h"
#include "rnic/core/qp_counters.h"
#include "rnic/core/srq.h"
#include "rnic/core/transport.h"
#include "rnic/core/verbs_types.h"

namespace tandem::rnic {

struct Cq {
  std::vector<Completion> ring;
  uint32_t mask = 0;
  uint32_t head = 0;
  uint32_t tail = 0;
  uint64_t overflows = 0;
  CompletionSink* sink = nullptr;  // completions go there, not into the ring

  bool push(const Completion& c) noexcept {
    if (sink != nullptr) {
      sink->on_completion(c);
      return true;
    }
    if (tail - head > mask) { ++overflows; return false; }
    ring[tail++ & mask] = c;
    return true;
  }
};

inline constexpr uint8_t kWqeSignaled = 1;          // IBV_SEND_SIGNALED
inline constexpr uint8_t kWqeReportUnsignaled = 2;  // unsignalled, completed anyway (complete_unsignaled)

// One gather entry of a posted send: where this process reads (or, for a
// READ, writes) the bytes, how many, and the region's key (0: inline bytes,
// in no region). The key is looked at again before each use: the region may
// be deregistered while the WR is outstanding (Transport::mr_live).
struct WqeSge {
  uint8_t* ptr = nullptr;
  uint32_t len = 0;
  uint32_t lkey = 0;
};

// A posted send WR as the send path needs it, not the whole SendWr: the
// fields segmentation and completion read, and the gather list resolved to
// host pointers. A one-SGE WR (the common case) is one cache line; deep send
// queues times many QPs would otherwise stream ~260-byte copies through the
// cache on every post, segment and completion.
struct alignas(64) SendWqe {
  uint64_t wr_id = 0;
  uint64_t remote_addr = 0;  // WRITE / READ
  uint32_t rkey = 0;         // WRITE / READ
  uint32_t imm_data = 0;     // host order
  uint32_t len = 0;          // total bytes (<= 2^31)
  uint32_t npkts = 1;        // PSNs the message uses (READ: response packets)
  uint32_t first_psn = 0;    // valid once started
  uint32_t pkts_sent = 0;    // PSNs assigned so far (lazy segmentation)
  uint32_t recv_idx : 24 = 0;          // SEND / WRITE_WITH_IMM: ordinal among RECV consumers
  uint32_t opcode : 8 = IBV_WR_SEND;   // ibv_wr_opcode
  uint8_t status = IBV_WC_SUCCESS;     // ibv_wc_status
  uint8_t num_sge = 0;
  uint8_t signaled = kWqeSignaled;  // completes: kWqeSignaled or kWqeReportUnsignaled; 0: silently
  bool solicited = false;    // IBV_SEND_SOLICITED
  std::array<WqeSge, kMaxSge> sge{};

  ibv_wr_opcode op() const noexcept { return static_cast<ibv_wr_opcode>(opcode); }
  ibv_wc_status wc_status() const noexcept { return static_cast<ibv_wc_status>(status); }
  // An atomic's operands (ibv_send_wr.wr.atomic). It has one gather entry (its
  // 8-byte result buffer), so they sit in the second entry's bytes and the WQE
  // keeps its one-line layout.
  void set_atomic(uint64_t compare_add, uint64_t swap) noexcept {
    auto* p = reinterpret_cast<uint8_t*>(&sge[1]);
    std::memcpy(p, &compare_add, 8);
    std::memcpy(p + 8, &swap, 8);
  }
  uint64_t atomic_compare_add() const noexcept {
    uint64_t v;
    std::memcpy(&v, &sge[1], 8);
    return v;
  }
  uint64_t atomic_swap() const noexcept {
    uint64_t v;
    std::memcpy(&v, reinterpret_cast<const uint8_t*>(&sge[1]) + 8, 8);
    return v;
  }
};
static_assert(sizeof(WqeSge) == 16, "an atomic's two operands fill one gather entry");
static_assert(offsetof(SendWqe, sge) + sizeof(WqeSge) <= 64, "a one-SGE send WR fits one cache line");

struct RecvWqe {
  RecvWr wr;
  std::array<uint8_t*, kMaxSge> sge_ptr{};
  uint64_t len = 0;
};

// Resolves one gather entry (va, len, lkey) to `out`: it must lie in a region
// of protection domain `pd` (with local write when `local_write`).
[[gnu::always_inline]] inline bool resolve_sge(const Transport& t, uint32_t pd, bool local_write, uint64_t va,
                                               uint32_t len, uint32_t lkey, WqeSge& out) noexcept {
  const MemoryRegion* mr = t.find_mr(lkey, pd);
  if (mr == nullptr || va < mr->addr || va - mr->addr > mr->len || len > mr->len - (va - mr->addr) ||
      (local_write && !(mr->access & IBV_ACCESS_LOCAL_WRITE)))
    return false;
  out = WqeSge{mr->host_ptr + (va - mr->addr), len, lkey};
  return true;
}

inline ibv_wc_opcode send_wc_opcode(ibv_wr_opcode op) noexcept {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    default: return IBV_WC_SEND;
  }
}

constexpr bool is_atomic_wr(uint32_t op) noexcept {
  return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

// What a posted WR's completion says (Completion::wc_flags), and whether it
// has one at all (signaled), from its send flags.
inline uint8_t wqe_signal(uint32_t send_flags, bool complete_unsignaled) noexcept {
  return (send_flags & IBV_SEND_SIGNALED) ? kWqeSignaled : complete_unsignaled ? kWqeReportUnsignaled : 0;
}
inline uint32_t wqe_wc_flags(const SendWqe& w) noexcept {
  return w.signaled == kWqeReportUnsignaled ? kWcUnsignaled : 0;
}

// Checks a receive WR against the transport's MRs (lkey, bounds, local write)
// and fills `w` with it. False: EINVAL.
bool make_recv_wqe(const Transport& t, const RecvWr& wr, uint32_t pd, RecvWqe& w) noexcept;
// The same for a WR already written into w.wr (posting in place).
bool check_recv_wqe(const Transport& t, uint32_t pd, RecvWqe& w) noexcept;

// Requester record per PSN in flight (ring indexed by psn & window mask).
struct PsnRec {
  uint64_t sent_at = 0;
  uint64_t sent_seq = 0;   // transmission order (RACK: time ties are common)
  uint32_t wqe = 0;        // absolute SQ index
  uint32_t pkt_idx = 0;    // packet index in the message
  uint32_t chunk_last = 0; // READ: last packet index of this read request
  uint16_t len = 0;        // data bytes (at most a path MTU, 4096)
  uint16_t sport = 0;
  uint16_t prev_sport = 0; // the path of the copy before the latest (0: none)
  uint8_t flags = 0;
  uint8_t path = 0;        // sport's index in a round_robin QP's path set (Qp::path_pick)
  uint32_t prev_sent = 0;  // low 32 bits of the send time of the copy before the latest (RACK)
};
static_assert(sizeof(PsnRec) == 40, "prev_sent, prev_sport and path fill the record's padding");
inline constexpr uint8_t kRecAcked = 1;   // acknowledged / READ response received
inline constexpr uint8_t kRecLost = 2;    // must be retransmitted
inline constexpr uint8_t kRecRetx = 4;    // retransmitted at least once (no RTT sample)
inline constexpr uint8_t kRecRead = 8;    // PSN of a READ (done only by its response)
inline constexpr uint8_t kRecRack = 16;   // declared lost by a SACK (RACK), not by a timeout
inline constexpr uint8_t kRecAtomic = 32; // an atomic's PSN (with kRecRead: done only by its response)

// Responder record per PSN of the reorder window.
struct RxSlot {
  uint8_t flags = 0;
  uint8_t has_imm = 0;
  uint8_t wc_kind = 0;      // 0: RECV, 1: RECV_RDMA_WITH_IMM
  uint32_t recv_idx = 0;
  uint32_t msg_len = 0;
  uint32_t imm = 0;
  uint32_t read_rkey = 0;
  uint32_t read_len = 0;
  uint64_t read_va = 0;     // READ: requested address
  uint64_t arrived_at = 0;  // for the reorder delay of the gaps before it
};
inline constexpr uint8_t kSlotArrived = 1;
inline constexpr uint8_t kSlotRecvDone = 2;  // completes a RECV when passed in order
inline constexpr uint8_t kSlotMsgEnd = 4;    // ends a message (MSN + 1)
inline constexpr uint8_t kSlotRead = 8;      // first PSN of a READ request
inline constexpr uint8_t kSlotAtomic = 16;   // an atomic request (its AtomicRes holds it)

// Responder: one atomic request (IBA 9.7.5.1.3). Run when ePSN reaches it,
// then kept with the original value, so that a duplicate is answered with
// that value and never run a second time.
struct AtomicRes {
  uint32_t psn = 0;
  uint8_t state = 0;     // kAtomicFree, kAtomicWaiting (arrived, ePSN not there yet), kAtomicDone
  bool reply = false;    // its response is owed
  bool replay = false;   // ... to a duplicate request (the earlier answer may have died on its path)
  uint8_t opcode = 0;    // IBV_OPCODE_RC_COMPARE_SWAP or IBV_OPCODE_RC_FETCH_ADD
  uint32_t rkey = 0;
  uint64_t va = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;
  uint64_t orig = 0;     // kAtomicDone: the value the memory held before
};
inline constexpr uint8_t kAtomicFree = 0;
inline constexpr uint8_t kAtomicWaiting = 1;
inline constexpr uint8_t kAtomicDone = 2;

// A READ request the responder received, kept after it was executed: a
// duplicate is answered again only within one of these (IBA 9.7.5.1.3).
struct ReadRec {
  uint32_t psn = 0;
  uint32_t npkts = 0;  // 0: empty
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t len = 0;
};

// IBA's largest message (and READ DMA length): 2^31 bytes.
inline constexpr uint64_t kMaxMsgLen = uint64_t{1} << 31;

struct ReadJob {
  uint32_t psn = 0;
  const uint8_t* ptr = nullptr;
  uint32_t rkey = 0;      // its region, looked at before each response (Transport::mr_live)
  uint32_t len = 0;
  uint32_t npkts = 1;
  uint32_t next_pkt = 0;  // packets already emitted
  uint32_t msn = 0;       // the MSN before this READ: its responses carry msn + 1, an ACK short of it msn
  bool retry = false;     // run again for a duplicate request: its responses go as answers to one
};

struct Qp {
  Transport* t = nullptr;
  uint32_t qpn = 0;
  QpInitAttr init;           // init.mode: the mode in force (a standard peer's QP is go-back-N from RTR)
  Reliability created_mode = Reliability::kIrn;  // what create_qp asked (a reconnect starts from it)
  QpAttr attr;
  QpState state = QpState::kReset;
  QpCounters c;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  std::unique_ptr<PathPolicy> path;
  std::unique_ptr<CcPolicy> cc;
  // The default policies and the lab's (final classes) are called directly
  // from the per-packet paths (cc_can_send, cc_on_sent, cc_credit_used,
  // path_choose, path_on_ack): a virtual call each, four or five per packet,
  // cost more than the work.
  bool cc_fixed = false;     // cc is a CcFixedWindow
  bool cc_credit = false;    // cc is a CcCredit
  bool path_single = false;  // path is a PathSingle
  bool path_rr = false;      // path is a PathRoundRobin
  uint32_t wmask = 0;  // window_pkts - 1

  // --- requester ---
  std::vector<SendWqe> sq;      // power-of-two ring, >= init.sq_depth slots
  SendWqe* sq_ring = nullptr;   // sq.data()
  uint32_t sq_mask = 0;         // sq.size() - 1
  SendWqe sq_spare;             // what SendSlots fills when the SQ is full (post_filled: ENOMEM)
  std::vector<uint8_t> sq_inline;  // SendSlots' inline bytes: init.max_inline per SQ slot
  uint32_t sq_head = 0;  // oldest not completed
  uint32_t sq_send = 0;  // next to segment
  uint32_t sq_tail = 0;  // next free
  uint32_t next_recv_idx = 0;
  std::vector<PsnRec> recs;
  PsnRec* recs_ring = nullptr;  // recs.data()
  uint32_t una = 0;      // oldest PSN not done
  uint32_t nxt = 0;      // next new PSN
  uint32_t lost = 0;     // records flagged kRecLost
  uint32_t rtx_cursor = 0;
  uint64_t inflight_bytes = 0;
  uint32_t inflight_pkts = 0;     // data packets in inflight_bytes
  OwnerShare* owner = nullptr;    // QpInitAttr::owner's share (Transport::owners_); none: nullptr
  void inflight_add(uint32_t len) noexcept {
    inflight_bytes += len;
    ++inflight_pkts;
    if (owner != nullptr) owner->add(1);
  }
  void inflight_sub(uint32_t len) noexcept {
    inflight_bytes -= len;
    --inflight_pkts;
    if (owner != nullptr) owner->sub(1);
  }
  void inflight_clear() noexcept {
    if (owner != nullptr) owner->sub(inflight_pkts);
    inflight_bytes = 0;
    inflight_pkts = 0;
  }
  uint32_t reads_inflight = 0;
  uint64_t last_progress = 0;
  uint64_t srtt_ns = 0;  // smoothed RTT of first transmissions (EWMA 1/8)
  uint64_t min_rtt_ns = 0;  // smallest RTT of a first transmission (0: none yet)
  // RACK (requester.cc): a SACK declares a packet lost once a packet sent
  // after it was delivered and it has been out rack_rtt_ns + reo_wnd_ns
  // (rack_rtt_ns: the RTT of the latest-sent delivered packet). The window
  // starts at 0 and grows when a loss so declared turns out spurious: with
  // spraying, a packet on a slower or queued path is overtaken, not lost.
  uint64_t rack_seq = 0;       // sent_seq + 1 of the latest-sent delivered packet (0: none)
  uint64_t rack_rtt_ns = 0;    // its RTT
  uint32_t rack_high = 0;      // PSN past the highest a SACK reported
  uint64_t rack_timer = kNever;  // when a packet waiting out the window is due
  uint64_t reo_wnd_ns = 0;
  uint64_t reo_grow_after = 0; // the window grows at most once per RTT
  uint64_t reo_event_after = 0;  // loss events count at most once per RTT
  uint32_t reo_episodes = 0;   // loss events since a spurious one (decay)
  uint64_t rack_spurious = 0;  // losses found spurious (telemetry, tests)
  uint32_t backoff = 0;
  uint32_t retries = 0;
  uint64_t rnr_until = 0;
  uint32_t rnr_retries = 0;
  uint32_t rnr_psn = 0;
  bool rnr_wait = false;
  uint64_t read_hole_since = kNever;
  uint32_t read_high = 0;
  bool cc_blocked = false;
  uint64_t tx_seq = 0;     // transmissions so far
  uint32_t retx_psn = 0;   // the PSN resent last, and how many times in a row (path_choose_retx)
  uint32_t retx_run = 0;
  // Path feedback (irn_wire.h): echo_mask holds, for each path of the
  // responder's set and each color (bit 2 x path + color), whether a
  // response came there with that color since it was last echoed; each
  // request carries one of them, in turn from echo_next (a request with
  // none waiting carries 0). Both colors wait: responses overtake each
  // other, and only the responder knows which color is current. ack_dup:
  // the response being handled says the request it answers had arrived
  // before (the earlier copy's path works).
  uint64_t echo_mask = 0;
  uint8_t echo_next = 0;
  bool ack_dup = false;
  // A response's path bits: its path (and color) wait to be echoed.
  void note_response_path(uint8_t bits) noexcept {
    if ((bits & kNoEchoPath) == kNoEchoPath) return;
    echo_mask |= 1ull << ((bits & kPathBitsMask) * 2 + ((bits & kPathColor) ? 1 : 0));
  }
  // The bits the next request carries.
  uint8_t next_echo() noexcept {
    if (echo_mask == 0) return 0;
    const uint64_t ahead = echo_mask & (~0ull << echo_next);
    const uint32_t i = static_cast<uint32_t>(__builtin_ctzll(ahead ? ahead : echo_mask));
    echo_mask &= ~(1ull << i);
    echo_next = static_cast<uint8_t>((i + 1) & 63);
    return req_echo_bits(i / 2, i & 1);
  }
  // Receiver-driven credits (cc_credit.h, credit_wire.h)
  bool credit_mode = false;
  uint32_t credit_limit = 0;     // requester: new PSNs below this may go
  uint32_t credit_new_sent = 0;  // requester: new packets sent (the first unscheduled ones free)
  uint64_t credit_stall_since = kNever;  // requester: out of credit, nothing in flight, since (persist timer)
  uint32_t credit_unsched = 0;   // requester: cc->unscheduled_pkts(), read once at RTR

  // --- responder ---
  std::vector<RecvWqe> rq;   // empty on an SRQ QP
  uint32_t rq_head = 0;
  uint32_t rq_tail = 0;
  static constexpr uint32_t kNoRecv = 0xFFFFFFFF;
  uint32_t prot_err_recv = kNoRecv;  // the receive whose buffer was deregistered (to_error: LOC_PROT_ERR)
  // On an SRQ: the SRQ slots this QP took for its messages rq_head..rq_tail
  // (ring of window_pkts: every such message has a PSN in the window).
  Srq* srq = nullptr;
  uint32_t recv_pd = 0;  // the PD its receives' MRs are checked in (the SRQ's on an SRQ)
  std::vector<uint32_t> srq_stage;
  std::vector<RxSlot> slots;
  uint32_t epsn = 0;
  uint32_t high = 0;        // highest PSN + 1 that arrived (IRN)
  uint32_t msn = 0;
  bool ack_pending = false;
  bool ecn_echo = false;
  bool cnp_pending = false;
  uint64_t last_cnp = 0;
  bool cnp_sent_once = false;
  uint32_t unacked = 0;
  bool resp_dup = false;     // a duplicate request arrived since the last response (irn_wire.h kRespDup)
  uint64_t hole_since = kNever;
  uint64_t last_sack = 0;
  bool sack_news = false;     // a request arrived since the last SACK
  uint8_t sack_backoff = 0;   // SACKs sent with nothing new: the interval doubles
  bool nak_pending = false;
  bool error_after_nak = false;  // access / invalid request: the QP goes to ERROR
  uint8_t nak_syndrome = 0;
  uint32_t nak_psn = 0;
  bool seq_nak_sent = false;  // GoBackN: one NAK per expected PSN
  PlacedAhead ahead;          // placement ahead of the ICRC: IRN's known messages, bad packets' PSNs (README "ICRC")
  bool rnr_armed = true;      // one RNR NAK until a RECV is posted or ePSN moves,
  uint32_t rnr_nak_psn = 0;   // or until the NAKed PSN comes again
  // GoBackN in-order message state
  uint8_t gbn_kind = 0;       // 0 none, 1 send, 2 write
  uint32_t gbn_offset = 0;
  uint64_t gbn_va = 0;
  uint32_t gbn_rkey = 0;
  uint32_t gbn_len = 0;
  std::vector<ReadJob> reads;
  uint32_t reads_head = 0;
  uint32_t reads_tail = 0;
  std::vector<ReadRec> read_log;  // the latest READ requests received (a ring)
  uint32_t read_log_next = 0;
  uint32_t grant_psn = 0;        // responder: the limit granted to the requester
  uint32_t grant_unacked = 0;    // credit granted since the last ACK
  uint64_t last_rx_ns = 0;       // responder: when a request last arrived
  uint64_t credits_granted = 0;
  uint64_t credit_kick_ns = 0;   // responder: last kick of a silent sender
  uint64_t credit_kick_rx_ns = 0;  // responder: last_rx_ns the kick round belongs to
  uint32_t credit_kick_round = 0;  // responder: kicks in this silence
  uint64_t credit_kicks = 0;     // responder: kicks given (grant_credits)
  // Atomics (responder.cc): max_dest_rd_atomic records, the oldest reused
  // (on_atomic); one still waiting or owing its response is never reused.
  std::vector<AtomicRes> atomic_res;
  uint32_t atomic_replies = 0;   // records with a response owed
  bool sent_atomics = false;     // requester: an atomic went out (irn_wire.h: unmarked ATOMIC_ACKs are answers)

  uint32_t tx_quota = 0;         // new packets it may still queue this turn (Transport::kTxQuantum)
  bool ud = false;               // QpType::kUd (ud.cc)
  bool active = false;           // on Transport's active list
  bool granting = false;         // on Transport's granting list (cc credit)

  uint32_t mtu() const noexcept { return attr.path_mtu; }
  uint32_t mtu_shift() const noexcept { return static_cast<uint32_t>(std::countr_zero(attr.path_mtu)); }
  // True while a bad packet placed ahead of its ICRC may have left bytes at
  // a PSN's place that its good packet has not overwritten yet.
  bool placed_bad() noexcept {
    return ahead.tainted([this](uint32_t p) { return common::psn_lt(p, epsn) || (slot(p).flags & kSlotArrived); });
  }
  // Sets the policy kinds above from the policies' types.
  void note_policy_kinds() noexcept {
    cc_fixed = dynamic_cast<CcFixedWindow*>(cc.get()) != nullptr;
    cc_credit = dynamic_cast<CcCredit*>(cc.get()) != nullptr;
    path_single = dynamic_cast<PathSingle*>(path.get()) != nullptr;
    path_rr = dynamic_cast<PathRoundRobin*>(path.get()) != nullptr;
  }
  bool cc_can_send(uint64_t inflight, uint32_t bytes, uint64_t now) noexcept {
    if (cc_fixed) return static_cast<CcFixedWindow*>(cc.get())->CcFixedWindow::can_send(inflight, bytes, now);
    if (cc_credit) return static_cast<CcCredit*>(cc.get())->CcCredit::can_send(inflight, bytes, now);
    return cc->can_send(inflight, bytes, now);
  }
  void cc_on_sent(uint32_t bytes, uint64_t now) noexcept {
    if (cc_fixed) static_cast<CcFixedWindow*>(cc.get())->CcFixedWindow::on_sent(bytes, now);
    else if (cc_credit) static_cast<CcCredit*>(cc.get())->CcCredit::on_sent(bytes, now);
    else cc->on_sent(bytes, now);
  }
  // A new packet past the unscheduled ones (a credit QP).
  void cc_credit_used(uint64_t now) noexcept {
    if (cc_credit) static_cast<CcCredit*>(cc.get())->CcCredit::on_credit_used(now);
    else cc->on_credit_used(now);
  }
  [[gnu::always_inline]] uint16_t path_choose(uint32_t psn, bool retransmit, uint64_t now) noexcept {
    if (path_single) return static_cast<PathSingle*>(path.get())->PathSingle::choose(psn, retransmit, now);
    if (path_rr) return static_cast<PathRoundRobin*>(path.get())->choose_fast(psn, retransmit, now);
    return path->choose(psn, retransmit, now);
  }
  // The path index of the packet tx_commit just chose, kept in its PsnRec
  // for path_on_ack and carried by a response for the requester's echo.
  uint8_t path_pick() const noexcept {
    if (path_rr) return static_cast<uint8_t>(static_cast<const PathRoundRobin*>(path.get())->PathRoundRobin::last_pick());
    return path_single ? 0 : static_cast<uint8_t>(path->last_pick());
  }
  // A request resent after its copy on `lost_sport` was lost (rare: out of line).
  uint16_t path_choose_retx(uint32_t psn, uint16_t lost_sport, uint64_t now) noexcept {
    retx_run = psn == retx_psn && retx_run > 0 ? retx_run + 1 : 1;
    retx_psn = psn;
    return path->choose_retransmit(psn, lost_sport, retx_run, now);
  }
  [[gnu::always_inline]] uint16_t path_choose_response(uint32_t psn, bool retry, uint64_t now) noexcept {
    if (path_single) return static_cast<PathSingle*>(path.get())->PathSingle::choose(psn, retry, now);
    if (path_rr) return static_cast<PathRoundRobin*>(path.get())->PathRoundRobin::choose_response(psn, retry, now);
    return path->choose_response(psn, retry, now);
  }
  // Responder: a request echoing a response's path (irn_wire.h).
  void note_echo(uint8_t bits, uint64_t now) noexcept {
    if (irn() && !path_single) path->on_echo(bits & kPathBitsMask, (bits & kPathColor) != 0, now);
  }
  // The color of path i of this QP's set (irn_wire.h).
  bool path_color(uint32_t i) const noexcept {
    if (path_rr) return static_cast<const PathRoundRobin*>(path.get())->health().color(i);
    return !path_single && path->path_color(i);
  }
  [[gnu::always_inline]] void path_on_ack(const PsnRec& r, uint64_t rtt_ns, uint64_t now) noexcept {
    if (path_single) static_cast<PathSingle*>(path.get())->PathSingle::on_ack(r.sport, rtt_ns, now);
    else if (path_rr) static_cast<PathRoundRobin*>(path.get())->PathRoundRobin::on_ack(r.sport, r.path, rtt_ns, now);
    else path->on_ack(r.sport, rtt_ns, now);
  }
  // Whether poll() has anything to do for this QP now or later without a
  // new input (a packet, a WR, a state change): something to send, or a
  // timer (retransmission, RNR wait, READ or IRN reorder delay, pacing).
  bool has_work() const noexcept {
    if (state != QpState::kRtr && state != QpState::kRts) return false;
    if (ack_pending || nak_pending || cnp_pending || hole_since != kNever ||
        reads_head != reads_tail || atomic_replies != 0)
      return true;
    return state == QpState::kRts &&
           (sq_send != sq_tail || lost > 0 || una != nxt || rnr_wait ||
            read_hole_since != kNever || cc_blocked);
  }
  bool irn() const noexcept { return init.mode == Reliability::kIrn; }
  PsnRec& rec(uint32_t psn) noexcept { return recs_ring[psn & wmask]; }
  RxSlot& slot(uint32_t psn) noexcept { return slots[psn & wmask]; }
  SendWqe& wqe(uint32_t idx) noexcept { return sq_ring[idx & sq_mask]; }
  RecvWqe& rwqe(uint32_t idx) noexcept {
    return srq != nullptr ? srq->pool[srq_stage[idx & wmask]] : rq[idx % rq.size()];
  }
  // The receive at rq_head completed or was flushed: an SRQ slot is free again.
  void recv_done() noexcept {
    if (srq != nullptr) srq->release(srq_stage[rq_head & wmask]);
    ++rq_head;
  }
  // SRQ: takes WQEs from the SRQ until message rq_head + delta has one.
  // False if the SRQ ran out (the sender gets an RNR NAK) or delta is past
  // the window (no honest sender has that many messages outstanding).
  bool srq_fill(uint32_t delta) noexcept {
    if (delta > wmask) return false;
    while (rq_tail - rq_head <= delta) {
      uint32_t slot;
      if (!srq->take(slot)) return false;
      srq_stage[rq_tail++ & wmask] = slot;
    }
    return true;
  }
  void drop(common::DropReason r) noexcept { ++c.drops[static_cast<std::size_t>(r)]; }

  void reset_state() noexcept;

  // requester.cc
  int post_send(const SendWr& wr) noexcept;
  // Checks and posts the WR written into `w` (wqe(sq_tail), or sq_spare when
  // the SQ was full): its fields as posted, each gather entry's ptr holding
  // its VA until resolved here against lkeys[j] (lkeys null: resolved by the
  // caller; with IBV_SEND_INLINE: the bytes themselves, in no MR). Every send
  // post ends here: SendWr or in place, RC or UD. 0 (posted, or completed FLUSH_ERR on a QP in ERROR),
  // ENOMEM, EINVAL.
  int post_filled(SendWqe& w, uint32_t send_flags, const uint32_t* lkeys) noexcept;
  void fill_ud_dest(SendWqe& w, const UdDest& d) const noexcept {
    // A UD WQE keeps its destination where an RC one keeps its RDMA fields.
    w.remote_addr = uint64_t{d.path_seed} << 32 | d.peer;
    w.rkey = (d.remote_qkey & 0x80000000u) ? attr.qkey : d.remote_qkey;
    w.recv_idx = d.remote_qpn & 0xFFFFFF;
  }
  // `pend`: a READ response whose ICRC is checked while it is placed.
  common::DropReason on_response(const common::RocePacket& pkt, const uint8_t* payload,
                                 uint32_t len, uint64_t now, const RxPacketRef* pend = nullptr) noexcept;
  // What a response tells the requester before anything else (IRN: the path
  // it came on, goes back in a request, irn_wire.h; whether it answers a duplicate).
  void note_response(const common::RocePacket& pkt) noexcept {
    if (!irn()) return;
    note_response_path(pkt.bth.resv7);
    ack_dup = pkt.bth.opcode != IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE && (pkt.bth.resv7 & kRespDup) != 0;
  }
  bool tx_requests(uint64_t now) noexcept;  // false: TX queue full
  void on_timers_requester(uint64_t now) noexcept;
  uint64_t requester_deadline() const noexcept;
  bool credit_probe(uint64_t now) noexcept;  // out of credit: may one packet go anyway? (requester.cc)
  uint64_t credit_probe_wait() const noexcept { return std::max<uint64_t>(rto(), attr.timeout_ns); }
  void to_error(ibv_wc_status first_status) noexcept;
  // Whether the regions holding bytes [off, off + len) of the WR's gather
  // list are all still registered; else lost_region fails the WR with
  // IBV_WC_LOC_PROT_ERR and the QP goes to ERROR (as a hardware RNIC's DMA
  // into an invalidated region does): its memory is never touched again.
  bool gather_live(const SendWqe& w, uint64_t off, uint32_t len) const noexcept;
  void lost_region(uint32_t wqe_idx) noexcept;
  void complete_sends() noexcept;
  bool send_psn(uint32_t psn, bool retx, uint64_t now, bool& cc_stop) noexcept;
  // A request packet's opcode, flags, RETH/ImmDt/XETH and payload.
  void fill_request(TxDesc* d, const SendWqe& w, uint32_t pkt_idx, uint64_t off,
                    uint32_t len) noexcept;
  void ack_rec(uint32_t psn, uint64_t now, uint64_t& bytes, uint64_t& rtt) noexcept;
  // `timeout`: declared by the retransmission timer (evidence against its path).
  void mark_lost(uint32_t psn, bool timeout = false) noexcept;
  void mark_lost_from(uint32_t psn) noexcept;
  // RACK: the window's bounds, its growth on a spurious loss, its decay, and
  // the timer that declares packets lost once they have waited it out.
  uint64_t reo_wnd_max() const noexcept;
  // `late_ns`: the late packet's RTT, as far as it is known (0: not).
  void on_spurious_loss(uint64_t late_ns, uint64_t now) noexcept;
  void rack_losses_declared(uint64_t now) noexcept;
  static constexpr uint64_t kReoWndMinStepNs = 1'000;
  static constexpr uint32_t kReoDecayEpisodes = 16;  // RACK's: halve after 16 without a spurious one
  void rack_on_timer(uint64_t now) noexcept;
  void cum_ack(uint32_t psn, uint64_t now) noexcept;
  void advance_una(uint64_t now) noexcept;
  // The same, when una has already moved on from `before` (cum_ack).
  void advance_una(uint64_t now, uint32_t before) noexcept;
  void on_sack(uint64_t sack, uint64_t now) noexcept;
  common::DropReason on_read_response(const common::RocePacket& pkt, const uint8_t* payload,
                                      uint32_t len, uint64_t now, const RxPacketRef* pend) noexcept;
  // IRN's RTO_low: with at most kRtoLowPkts out (a tail, or what is left
  // after losses) no later packet will reveal a loss, and a whole timeout
  // is the cost; a timer of a few RTTs recovers them, at worst sending a
  // duplicate. The QP's timeout stays the ceiling.
  static constexpr uint32_t kRtoLowPkts = 3;
  static constexpr uint32_t kMaxBackoff = 10;  // the RTO doubles at most this often
  static constexpr uint64_t kRtoLowMinNs = 100'000;
  uint64_t rto_base() const noexcept {
    if (irn() && srtt_ns != 0 && inflight_bytes <= uint64_t{kRtoLowPkts} * mtu())
      return std::min(attr.timeout_ns, std::max(kRtoLowMinNs, 4 * srtt_ns));
    return attr.timeout_ns;
  }
  uint64_t rto() const noexcept { return rto_base() << backoff; }

  // responder.cc
  int post_recv(const RecvWr& wr) noexcept;
  int post_recv_slot(const RecvWr* flushed) noexcept;  // responder.cc
  // Requests (SEND, WRITE, READ) in[0..n) to this QP in RTR/RTS, in order:
  // why[i] is each one's verdict (kNone: taken), counted in c.drops; returns
  // how many were taken. The per-request body, on_request, is inline in it.
  uint32_t on_requests(const RxPacketRef* in, uint32_t n, uint64_t now, common::DropReason* why) noexcept;
  // One request; with in.icrc_pending its ICRC is checked while its payload
  // is placed, and before anything else acts on it.
  common::DropReason on_request(const RxPacketRef& in, uint64_t now, const MemoryRegion*& mr_cache) noexcept;
  bool tx_responses(uint64_t now) noexcept;  // false: TX queue full
  uint64_t responder_deadline() const noexcept;
  uint64_t sack_due() const noexcept;
  void advance_epsn(uint64_t now) noexcept;
  void bench_restart(uint32_t psn) noexcept;  // QpInitAttr::bench_any_psn only
  void nak(uint8_t syndrome, uint32_t psn) noexcept;
  bool read_job(uint32_t psn, const common::Reth& reth, common::DropReason& why, bool retry = false) noexcept;
  const ReadRec* find_read(uint32_t psn) const noexcept;  // the received READ whose PSNs hold psn
  uint32_t read_pkts(uint32_t len) const noexcept {       // response packets of a READ of len bytes
    return len == 0 ? 1 : static_cast<uint32_t>((uint64_t{len} + mtu() - 1) / mtu());
  }
  // An atomic request at `psn`, `d` PSNs past ePSN (< 0: a duplicate), its
  // checks and record; run_atomic executes it when ePSN reaches it (both out
  // of the per-packet path); tx_atomic_replies sends the responses owed.
  common::DropReason on_atomic(const common::RocePacket& pkt, int32_t d, uint64_t now) noexcept;
  void run_atomic(uint32_t psn) noexcept;
  bool tx_atomic_replies(uint64_t now) noexcept;  // false: TX queue full
  uint8_t ack_syndrome() const noexcept;  // ACK with the credit field (credit_wire.h)
  void ack_point(uint32_t& psn, uint32_t& msn_out) const noexcept;  // what an ACK may acknowledge (responder.cc)
  uint32_t rx_front() const noexcept { return common::psn_lt(high, epsn) ? epsn : high; }

  // ud.cc: a UD QP's whole data path. Its send WQEs keep the destination
  // where an RC WQE keeps RDMA fields (ud_dest), each is one packet, and it
  // completes on the poll after the one that queued it (the I/O layer has
  // taken the packet by then); una trails nxt until then. No ACKs, timers
  // or PSN checks.
  bool ud_tx(uint64_t now) noexcept;  // false: TX queue full
  common::DropReason ud_on_packet(const common::RocePacket& pkt, const uint8_t* payload,
                                  uint32_t len) noexcept;

  // shared helpers: a TX queue slot with this QP's addressing and every
  // field a packet kind may leave unset cleared (the rest is the caller's),
  // and its publication with the path chosen. Inline: called per packet.
  TxDesc* tx_slot() noexcept;
  void tx_commit(TxDesc* d, uint64_t now) noexcept;
  // The same with the source port chosen (a retransmission's).
  void tx_commit_port(TxDesc* d, uint16_t sport) noexcept;
  // A response's (ACK, SACK, NAK, CNP, READ response): its path chosen as
  // one (path_choose_response), and in IRN mode its path bits set.
  // `dup`: it answers a duplicate request (path_choose_response's retry; kRespDup).
  void tx_commit_response(TxDesc* d, uint64_t now, bool dup) noexcept;
  void tx_commit_response(TxDesc* d, uint64_t now) noexcept { tx_commit_response(d, now, resp_dup); }
};

inline void Transport::activate(Qp* qp) noexcept {
  if (qp->active) return;
  qp->active = true;
  active_[active_n_++] = qp;  // room for every QP
}

inline TxDesc* Qp::tx_slot() noexcept {
  TxDesc* d = t->txq().reserve();
  if (d == nullptr) return nullptr;
  d->bth = common::Bth{};
  d->bth.dqpn = attr.dest_qp_num;
  d->imm = 0;
  d->atomic_ack = 0;
  d->has_xeth = false;
  d->local_qpn = qpn;
  d->remote_qpn = attr.dest_qp_num;
  d->peer = attr.peer;
  d->retransmit = false;
  d->payload_len = 0;
  d->num_segs = 0;
  return d;
}

[[gnu::always_inline]] inline int Qp::post_filled(SendWqe& w, uint32_t send_flags, const uint32_t* lkeys) noexcept {
  const uint32_t op = w.opcode;
  if (state != QpState::kRts && state != QpState::kRtr) [[unlikely]] {
    if (state != QpState::kError) return EINVAL;
    send_cq->push(Completion{w.wr_id, IBV_WC_WR_FLUSH_ERR, send_wc_opcode(w.op()), 0, 0, qpn,
                             ud ? 0 : attr.dest_qp_num, 0});
    return 0;
  }
  if (sq_tail - sq_head >= init.sq_depth) return ENOMEM;
  // The opcodes posted here, and those that consume a RECV at the responder,
  // as bit sets: one test each instead of a switch and a chain of compares.
  constexpr uint32_t kRc = 1u << IBV_WR_RDMA_WRITE | 1u << IBV_WR_RDMA_WRITE_WITH_IMM | 1u << IBV_WR_SEND |
                           1u << IBV_WR_SEND_WITH_IMM | 1u << IBV_WR_RDMA_READ | 1u << IBV_WR_ATOMIC_CMP_AND_SWP |
                           1u << IBV_WR_ATOMIC_FETCH_AND_ADD;
  // READ and atomics land in their gather list (local write needed) and send nothing.
  constexpr uint32_t kLands = 1u << IBV_WR_RDMA_READ | 1u << IBV_WR_ATOMIC_CMP_AND_SWP |
                              1u << IBV_WR_ATOMIC_FETCH_AND_ADD;
  constexpr uint32_t kUd = 1u << IBV_WR_SEND | 1u << IBV_WR_SEND_WITH_IMM;
  constexpr uint32_t kConsumesRecv = 1u << IBV_WR_SEND | 1u << IBV_WR_SEND_WITH_IMM | 1u << IBV_WR_RDMA_WRITE_WITH_IMM;
  if (op >= 32 || !(((ud ? kUd : kRc) >> op) & 1) || w.num_sge > kMaxSge) return EINVAL;
  const bool is_read = ((kLands >> op) & 1) != 0;
  uint64_t len = 0;
  if (send_flags & IBV_SEND_INLINE) [[unlikely]] {
    if (is_read) return EINVAL;  // a READ or an atomic has nothing to send
    for (uint32_t j = 0; j < w.num_sge; ++j) len += w.sge[j].len;
  } else if (lkeys != nullptr) {
    // A READ lands in its gather list: it needs local write access.
    for (uint32_t j = 0; j < w.num_sge; ++j) {
      if (!resolve_sge(*t, init.pd, is_read, reinterpret_cast<uint64_t>(w.sge[j].ptr), w.sge[j].len, lkeys[j],
                       w.sge[j]))
        return EINVAL;
      len += w.sge[j].len;
    }
  } else {
    for (uint32_t j = 0; j < w.num_sge; ++j) len += w.sge[j].len;  // resolved by the caller
  }
  if (len > kMaxMsgLen) return EINVAL;
  // An atomic's result: one 8-byte entry (verbs' rule; one the core can write at once).
  if (is_atomic_wr(op) && (w.num_sge != 1 || len != 8)) [[unlikely]] return EINVAL;
  w.len = static_cast<uint32_t>(len);
  // UD: one datagram; one over the MTU completes with LOC_LEN_ERR in its
  // turn (ud_tx), as a hardware RNIC reports it.
  w.npkts = ud || w.len <= mtu() ? 1 : (w.len + mtu() - 1) / mtu();
  w.pkts_sent = 0;
  if (!ud && ((kConsumesRecv >> op) & 1)) {
    w.recv_idx = next_recv_idx;
    next_recv_idx = (next_recv_idx + 1) & 0xFFFFFF;
  }
  w.status = IBV_WC_SUCCESS;
  w.signaled = wqe_signal(send_flags, init.complete_unsignaled);
  w.solicited = (send_flags & IBV_SEND_SOLICITED) != 0;
  ++sq_tail;
  return 0;
}

[[gnu::always_inline]] inline void Qp::tx_commit(TxDesc* d, uint64_t now) noexcept {
  d->udp_sport = path_choose(d->bth.psn, d->retransmit, now);
  ++c.tx_pkts;
  c.tx_bytes += d->payload_len;
  t->txq().commit();
}

inline void Qp::tx_commit_port(TxDesc* d, uint16_t sport) noexcept {
  d->udp_sport = sport;
  ++c.tx_pkts;
  c.tx_bytes += d->payload_len;
  t->txq().commit();
}

[[gnu::always_inline]] inline void Qp::tx_commit_response(TxDesc* d, uint64_t now, bool dup) noexcept {
  d->udp_sport = path_choose_response(d->bth.psn, dup, now);
  if (irn() && d->bth.opcode != common::kOpcodeCnp) {
    const uint32_t pick = path_pick();
    // RC_ATOMIC_ACKNOWLEDGE keeps bit 6 for kSackMark (irn_wire.h).
    const bool aack = d->bth.opcode == IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE;
    d->bth.resv7 = static_cast<uint8_t>(resp_path_bits(pick, path_color(pick), dup && !aack) |
                                        (aack ? d->bth.resv7 & kSackMark : 0));
  }
  ++c.tx_pkts;
  c.tx_bytes += d->payload_len;
  t->txq().commit();
}

}  // namespace tandem::rnic
