// The sans-I/O RoCEv2 reliable-connection transport of one RNIC port: QPs,
// CQs and memory regions, driven by received packets, posted work requests
// and the current time, producing packets to send, a next deadline and
// completions.
//
// How an I/O layer (the DPDK worker, the simulator, a test) drives it
// ---------------------------------------------------------------------
// Control (may allocate, returns 0 or an errno value):
//   Transport t(TransportConfig{...});
//   MemoryRegion mr = t.reg_mr(ptr, len, IBV_ACCESS_LOCAL_WRITE | ...);
//   uint32_t cq = t.create_cq(4096);
//   uint32_t qpn = t.create_qp(QpInitAttr{.send_cq = cq, .recv_cq = cq, ...});
//   t.modify_qp(qpn, attr, IBV_QP_STATE | ...)  RESET -> INIT -> RTR -> RTS,
//     exactly as ibv_modify_qp: RTR needs IBV_QP_DEST_QPN, IBV_QP_RQ_PSN,
//     IBV_QP_PATH_MTU and IBV_QP_AV (QpAttr::peer, ::path_seed); RTS needs
//     IBV_QP_SQ_PSN. Any state -> ERROR flushes outstanding work requests with
//     IBV_WC_WR_FLUSH_ERR completions. QP numbers come from the Transport
//     (qpn_base + index), so the two ends exchange them out of band (as
//     verbs applications do).
//
// Fast path (noexcept, no allocation, no clock; `now` is ns on any clock that
// only moves forward and is the same for all calls):
//   inputs
//     t.post_send(qpn, wr) / t.post_recv(qpn, wr)       work requests
//     t.post_send(qpn, wrs, n, &bad)                    a list of them in one call
//     t.on_packet(pkt, payload, payload_len, now)       a parsed frame:
//         `pkt` from common::parse_roce, `payload` = frame + pkt.payload_offset,
//         `payload_len` = pkt.payload_len. Returns kNone or the DropReason it
//         counted. pkt.ip.tos carries ECN (CE = 3).
//     t.on_packets(in, n, now, why)   a burst of parsed frames, in order:
//         the same as on_packet on each (why[i] its verdict, returns how many
//         were accepted), with one QP lookup and state check per run of
//         requests to one QP; a request may come with its ICRC still to be
//         checked (RxPacketRef::icrc_pending), which placement does.
//     t.poll(now)   runs expired timers (retransmission, RNR wait, IRN reorder
//         delay) and fills the TX queue with whatever may be sent now: ACKs,
//         NAKs, SACKs, READ responses, retransmissions, new data (segmented
//         lazily: a 64 MB message never exists as packets). Returns how many
//         descriptors it queued.
//   outputs
//     t.tx(): the TxQueue of TxDesc to send, oldest first (front()/pop() or
//         pop_burst()). Each carries its transport headers as fields, the
//         peer id and the chosen UDP source port, and the payload as
//         pointers into registered memory (zero copy). write_transport_headers
//         or build_frame (frame.h) serialise one.
//     t.next_deadline(): the earliest `now` at which poll() has timer work;
//         kNever if none. Call poll() by then even if nothing arrives.
//     t.poll_cq(cq, out, n): completions (ibv_wc-like), as ibv_poll_cq.
//   the loop
//     for each received frame: parse_roce, then on_packet
//     poll(now); drain tx(); while pending(): poll(now) again after draining
//     (pending() means poll stopped because the TX queue was full)
//     sleep or simulate until the next frame or next_deadline()
//
// The core places received data with memcpy into registered memory (that is
// the "DMA"); pointers in TxDesc point into registered memory, so a WR's
// buffers must stay registered until it completes (as with verbs).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "common/wire/drop_reason.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/cc_credit.h"
#include "rnic/core/cc_policy.h"
#include "rnic/core/owner_share.h"
#include "rnic/core/path_policy.h"
#include "rnic/core/qp_counters.h"
#include "rnic/core/tx_desc.h"
#include "rnic/core/verbs_types.h"

namespace tandem::rnic {

inline constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

struct TransportConfig {
  uint32_t max_qps = 64;
  uint32_t qpn_base = 0x100;        // QPN of the first QP (QPN = base + index; at least 2)
  uint32_t max_mrs = 256;
  uint32_t max_cqs = 64;
  uint32_t tx_queue_capacity = 256; // power of two
  CreditConfig credit;              // how this port grants credit (cc "credit" QPs)
  // IRN requesters: widen the RACK reorder window when a packet a SACK
  // declared lost turns out to have arrived (false: the window stays 0, a
  // packet is lost as soon as one sent after it is reported).
  bool rack_adaptive = true;
  uint32_t max_srqs = 64;
  // The I/O layer calls poll/on_packets at least this often while it runs
  // (a busy loop: every few us): a longer gap between two calls' `now` is
  // the loop not running (descheduled, stalled), and path health and the
  // credit grantor do not count that time as anyone's silence. 0: never.
  uint64_t loop_gap_ns = 50'000;
  // Data packets (new and resent) the QPs that have an owner
  // (QpInitAttr::owner) may have in flight, shared equally by the owners
  // that have some: one owner alone may use it all, two half each. So a
  // tenant with many QPs, or with zero-length packets that cost its byte
  // windows nothing, cannot flood the receivers and rings the others share.
  // About what one QP's window fills alone. 0: no limit.
  uint32_t owner_inflight_pkts = 1024;
};

// Every received packet and every drop, per reason: those no QP took
// (unknown QPN) and, summed over QPs, those a QP refused.
struct TransportCounters {
  uint64_t rx_pkts = 0;
  std::array<uint64_t, common::kDropReasonCount> drops{};
  // QpInitAttr::bench_any_psn QPs: requests accepted, and of them those that
  // restarted the sequence from behind (RC: duplicates) or ahead (RC: a gap).
  uint64_t bench_accepted = 0;
  uint64_t bench_duplicate = 0;
  uint64_t bench_gap = 0;
  uint64_t drop(common::DropReason r) const noexcept {
    return drops[static_cast<std::size_t>(r)];
  }
};

// One received frame for Transport::on_packets: what on_packet takes, and
// whether its ICRC is still to be checked.
struct RxPacketRef {
  const common::RocePacket* pkt;
  const uint8_t* payload;
  uint32_t payload_len;
  // False: the I/O layer checked the ICRC (and dropped the packet if it was
  // wrong). True (SEND/WRITE requests, READ responses): the core checks it in the pass that
  // places the payload (common::crc32_copy) and before the packet has any
  // effect; icrc_head is the CRC (crc32_update's) of the ICRC's stream up to
  // `payload` (common::icrc_headers), which goes on over payload_len bytes and
  // then pkt->bth.pad bytes of pad and must come to pkt->icrc. A packet that
  // fails is dropped as kBadIcrc (rnic/core/README.md "ICRC").
  bool icrc_pending = false;
  uint32_t icrc_head = 0;
};

// A pending ICRC's verdict without placing anything: the CRC from icrc_head
// over the payload and pad (a packet refused or answered before placement).
bool icrc_rest_ok(const RxPacketRef& r) noexcept;

// Where a CQ's completions go when it has one (create_cq): straight to their
// consumer (the worker writes each into the application's CQ ring), instead
// of a ring the I/O layer drains; so no completion waits in, or can overflow,
// a queue that several tenants share. Called from within the core's calls.
class CompletionSink {
 public:
  virtual void on_completion(const Completion& c) noexcept = 0;

 protected:
  ~CompletionSink() = default;
};

struct Qp;  // internal (qp.h)
struct Cq;
struct Srq;

class Transport {
 public:
  explicit Transport(const TransportConfig& cfg = {});
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // --- control plane ---
  // lkey == rkey; {} (len 0, keys 0) if the table is full.
  MemoryRegion reg_mr(void* host_ptr, uint64_t len, uint32_t access) noexcept;
  // Registers memory whose host-visible address `addr` differs from where
  // this process sees it (`host_ptr`), e.g. mapped from the application.
  MemoryRegion reg_mr(uint64_t addr, uint8_t* host_ptr, uint64_t len, uint32_t access, uint32_t pd = 0) noexcept;
  // With the caller's key (a host interface that hands out its own keys:
  // index = key >> 8, the low byte a generation) and protection domain.
  // EINVAL: key 0, index out of the table or its slot in use. A Transport
  // is given keys this way or takes them from reg_mr above, not both.
  int reg_mr_with_key(uint32_t key, uint64_t addr, uint8_t* host_ptr, uint64_t len, uint32_t access,
                      uint32_t pd) noexcept;
  // The region goes at once: work still holding it fails when it next needs
  // it (IBV_WC_LOC_PROT_ERR, the QP to ERROR; a READ being answered is NAKed),
  // and descriptors queued for the I/O layer that point into it are dropped
  // (TxQueue::dropped), so nothing reads or writes its memory after this.
  int dereg_mr(uint32_t lkey) noexcept;
  // ibv_rereg_mr's new PD and access for a registered region (its memory and
  // keys stay, so work holding it keeps valid pointers); later accesses are
  // checked against them. EINVAL if no region has that key.
  int modify_mr(uint32_t lkey, uint32_t pd, uint32_t access) noexcept;

  // Returns the CQ id, or UINT32_MAX if no more can be created. With a sink,
  // its completions go there as they happen (poll_cq finds none).
  uint32_t create_cq(uint32_t capacity, CompletionSink* sink = nullptr);
  // A shared receive queue of `capacity` WQEs (ibv_create_srq): QPs created
  // with QpInitAttr::srq take their receive WQEs from it, oldest first, one
  // when a message needs it. Returns its id (never 0), or 0 if no more can
  // be created or capacity is 0.
  uint32_t create_srq(uint32_t capacity, uint32_t pd = 0);
  // EBUSY while QPs use it, EINVAL if there is no such SRQ.
  int destroy_srq(uint32_t srq) noexcept;
  // WQEs posted and not yet taken by a QP (0 for an unknown SRQ).
  uint32_t srq_posted(uint32_t srq) const noexcept;
  // How many times a message found the SRQ empty (its QP sent an RNR NAK).
  uint64_t srq_empty(uint32_t srq) const noexcept;
  // Returns the QPN, or 0 on bad attributes (unknown CQ, SRQ or policy name,
  // window not a power of two, ...).
  uint32_t create_qp(const QpInitAttr& init);
  // The bytes create_qp(init) and create_srq(capacity) allocate (footprint.cc),
  // for a caller that charges them before asking (the host interface's
  // queue_bytes share): SQ/RQ slots, inline bytes, PSN and reorder records.
  static std::size_t qp_footprint(const QpInitAttr& init) noexcept;
  static std::size_t srq_footprint(uint32_t capacity) noexcept;
  int modify_qp(uint32_t qpn, const QpAttr& attr, int attr_mask) noexcept;
  int destroy_qp(uint32_t qpn) noexcept;
  // Changes the IRN reorder delay of a live QP (e.g. from the measured
  // spread of path delays); takes effect for the next gap.
  int set_reorder_delay(uint32_t qpn, uint64_t ns) noexcept;
  QpState qp_state(uint32_t qpn) const noexcept;
  const QpCounters* qp_counters(uint32_t qpn) const noexcept;
  // The QP's policies, for their counters (nullptr if no such QP).
  const PathPolicy* path_policy(uint32_t qpn) const noexcept;
  // The requester's RACK reorder window (ns), and how many of the losses it
  // declared turned out spurious (the original was acknowledged).
  uint64_t reorder_window(uint32_t qpn) const noexcept;
  uint64_t spurious_losses(uint32_t qpn) const noexcept;
  const CcPolicy* cc_policy(uint32_t qpn) const noexcept;
  // The same, to hand a policy what only the I/O layer sees (INT echoes:
  // CcPolicy::on_int, just before on_packet with the ACK that carried them).
  CcPolicy* cc_policy(uint32_t qpn) noexcept {
    return const_cast<CcPolicy*>(static_cast<const Transport*>(this)->cc_policy(qpn));
  }
  const TransportCounters& counters() const noexcept { return counters_; }
  // QPs poll() visits: those with something to send or a timer running
  // (posted WRs, packets in flight, pending ACK/NAK/SACK/CNP, READ
  // responses, waits). Idle QPs cost poll() and next_deadline() nothing.
  std::size_t active_qps() const noexcept { return active_n_; }
  // Packets of credit this port granted to its senders (cc "credit").
  uint64_t credits_granted() const noexcept { return grantor_.granted_pkts(); }
  // Kicks of credit to silent senders (grant_credits).
  uint64_t credit_kicks() const noexcept { return credit_kicks_; }
  // Gaps in the calls longer than TransportConfig::loop_gap_ns (the loop
  // did not run), and kicks the grantor held back after its own stall.
  uint64_t loop_gaps() const noexcept { return loop_gaps_; }
  uint64_t credit_kicks_excused() const noexcept { return credit_kicks_excused_; }
  // QPs grant_credits visits: credit QPs whose senders have sent something
  // and are not yet known to be idle (silent with credit out, kicks spent).
  std::size_t granting_qps() const noexcept { return granting_.size(); }

  // New packets (data, READ requests, READ responses) one QP queues per turn
  // of poll() before the other active QPs get a turn (ACKs and
  // retransmissions are not counted). QPs with the same QpInitAttr::owner
  // share one quantum per turn.
  static constexpr uint32_t kTxQuantum = 64;
  static constexpr uint32_t kMaxOwner = 4096;  // create_qp refuses a larger QpInitAttr::owner

  // --- fast path ---
  // 0, ENOMEM (queue full), EINVAL (bad state, opcode, SGE count, lkey or
  // bounds, missing local write access for RECV/READ buffers). (post_send is
  // defined with the requester, where the QP's half of it inlines.)
  int post_send(uint32_t qpn, const SendWr& wr) noexcept;
  // Posts wrs[0..n) in order in one call, as ibv_post_send posts its linked
  // list (the QP is found and activated once, not per WR). Stops at the
  // first WR refused: returns 0 if all n were posted, else that WR's error
  // (as above) with *bad = its index (*bad = n on success), as ibv_post_send
  // returns bad_wr. The WRs before it are posted.
  int post_send(uint32_t qpn, const SendWr* wrs, uint32_t n, uint32_t* bad = nullptr) noexcept;
  int post_recv(uint32_t qpn, const RecvWr& wr) noexcept;  // EINVAL on an SRQ QP
  // 0, ENOMEM (SRQ full), EINVAL (unknown SRQ, SGE count, lkey, bounds or
  // missing local write access).
  int post_srq_recv(uint32_t srq, const RecvWr& wr) noexcept;
  // Receives posted in place (the worker's one copy of a WQE): the caller
  // writes the WR into the slot these give (nullptr: no such QP or SRQ, a QP
  // on an SRQ, or no room), then post_*_slot checks and posts it as
  // post_recv / post_srq_recv would. Sends: send_slots.h.
  RecvWr* recv_slot(uint32_t qpn) noexcept;
  int post_recv_slot(uint32_t qpn) noexcept;
  RecvWr* srq_recv_slot(uint32_t srq) noexcept;
  int post_srq_recv_slot(uint32_t srq) noexcept;
  uint32_t srq_room(uint32_t srq) const noexcept;  // receives post_srq_recv can take now
  uint32_t recv_room(uint32_t qpn) const noexcept;  // receives post_recv can take now (0: none, an SRQ QP)

  common::DropReason on_packet(const common::RocePacket& pkt, const uint8_t* payload,
                               uint32_t payload_len, uint64_t now) noexcept;
  uint32_t on_packets(const RxPacketRef* in, uint32_t n, uint64_t now, common::DropReason* why) noexcept;
  uint32_t poll(uint64_t now) noexcept;
  TxQueue& tx() noexcept { return tx_; }
  bool pending() const noexcept { return tx_blocked_; }
  uint64_t next_deadline() const noexcept;

  uint32_t poll_cq(uint32_t cq, Completion* out, uint32_t n) noexcept;

  // Internal, used by the QP code.
  // The region of `key` if it is in protection domain `pd`.
  const MemoryRegion* find_mr(uint32_t key, uint32_t pd) const noexcept {
    // Key 0 never matches: every key's low byte (its generation) is non-zero.
    const uint32_t i = key >> 8;
    if (i >= mrs_.size()) return nullptr;
    const MemoryRegion& m = mrs_[i];
    return (m.host_ptr != nullptr && m.lkey == key && m.pd == pd) ? &m : nullptr;
  }
  // Whether `key` names a registered region now (0: bytes the core holds
  // itself, such as inline data). Outstanding work checks the keys of the
  // regions it reads or writes before each use, so a deregistered region's
  // memory is never touched again (its pages may be unmapped at once).
  // A region moved to another protection domain (ibv_rereg_mr) is gone for
  // work of the old one, as an RNIC that checks keys when it uses them sees it.
  bool mr_live(uint32_t key, uint32_t pd) const noexcept {
    const uint32_t i = key >> 8;
    return key == 0 || (i < mrs_.size() && mrs_[i].lkey == key && mrs_[i].host_ptr != nullptr && mrs_[i].pd == pd);
  }
  Cq* cq(uint32_t id) noexcept;
  Srq* srq(uint32_t id) const noexcept {
    return id != 0 && id <= srqs_.size() ? srqs_[id - 1].get() : nullptr;
  }
  TxQueue& txq() noexcept { return tx_; }
  TransportCounters& qp_side_counters() noexcept { return counters_; }
  bool rack_adaptive() const noexcept { return cfg_.rack_adaptive; }

 private:
  friend class SendSlots;  // send_slots.h: posting in place
  // Puts a QP on the active list (a no-op if it is there already): every
  // input that can give a QP work calls it.
  void activate(Qp* qp) noexcept;
  Qp* find_qp(uint32_t qpn) const noexcept {
    const uint32_t i = (qpn - cfg_.qpn_base) & 0xFFFFFF;
    return i < qps_.size() ? qps_[i].get() : nullptr;
  }
  void grant_credits(uint64_t now) noexcept;
  // A READ response to `qp` (in RTS) whose ICRC is pending (on_packets).
  common::DropReason on_read_response(Qp& qp, const RxPacketRef& in, uint64_t now) noexcept;
  // Every input notes its `now`: a gap longer than the loop period is time
  // the loop did not run (path health is told; on_loop_gap).
  void note_clock(uint64_t now) noexcept {
    if (cfg_.loop_gap_ns != 0 && last_call_ns_ != 0 && now > last_call_ns_ + cfg_.loop_gap_ns) on_loop_gap(now);
    if (now > last_call_ns_) last_call_ns_ = now;
  }
  void on_loop_gap(uint64_t now) noexcept;

  TransportConfig cfg_;
  TxQueue tx_;
  bool tx_blocked_ = false;
  std::size_t rr_ = 0;  // active QP poll() starts with
  std::vector<MemoryRegion> mrs_;        // index = key >> 8
  std::vector<std::unique_ptr<Qp>> qps_; // index = qpn - qpn_base
  std::vector<Qp*> live_;                // the QPs that exist
  std::vector<Qp*> active_;              // [0, active_n_): the QPs poll() visits (sized max_qps)
  // By QpInitAttr::owner (capacity kMaxOwner + 1, never moved: QPs point at theirs).
  std::vector<OwnerShare> owners_;
  OwnerShares shares_;  // what the owners' in-flight parts are now
  uint64_t turn_ = 0;
  uint32_t tx_quota_for(const Qp& qp) noexcept;
  void tx_charge(const Qp& qp, uint32_t given) noexcept;
  std::vector<Qp*> quota_hit_;           // poll(): QPs that used their whole kTxQuantum (reserved max_qps)
  std::size_t active_n_ = 0;
  std::vector<std::unique_ptr<Cq>> cqs_;
  std::vector<std::unique_ptr<Srq>> srqs_;  // index = id - 1; nullptr when free
  TransportCounters counters_;
  uint32_t mr_generation_ = 1;
  CreditGrantor grantor_;
  bool grantor_ready_ = false;
  std::vector<Qp*> granting_;  // what grant_credits visits (reserved for max_qps)
  std::size_t credit_rr_ = 0;
  uint64_t credit_wake_ = kNever;  // when grant_credits has work again
  uint64_t credit_kicks_ = 0;
  uint64_t last_call_ns_ = 0;         // the latest `now` any input was given
  uint64_t loop_gaps_ = 0;
  uint64_t credit_gap_end_ = 0;       // the grantor ran late until here: silences start no earlier
  uint64_t credit_kicks_excused_ = 0;
};

}  // namespace tandem::rnic
