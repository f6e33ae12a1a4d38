#include "rnic/core/transport.h"

#include <algorithm>
#include <cerrno>

#include "common/wire/icrc.h"
#include "common/wire/opcode.h"
#include "common/wire/psn.h"
#include "rnic/core/policy_factory.h"
#include "rnic/core/qp.h"

namespace tandem::rnic {

using common::DropReason;

uint64_t rnr_timer_ns(uint8_t code) noexcept {
  // IBA table 45, in microseconds x 100 (code 0 is the longest).
  static constexpr uint32_t kTenUs[32] = {
      65536, 1,    2,    3,    4,    6,    8,     12,    16,    24,    32,
      48,    64,   96,   128,  192,  256,  384,   512,   768,   1024,  1536,
      2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return uint64_t{kTenUs[code & 31]} * 10'000;
}

TxQueue::TxQueue(uint32_t capacity_pow2)
    : cap_(capacity_pow2), mask_(capacity_pow2 - 1), ring_(capacity_pow2) {}

uint32_t TxQueue::pop_burst(TxDesc* out, uint32_t n) noexcept {
  uint32_t k = 0;
  while (k < n && !empty()) {
    out[k++] = front();
    pop();
  }
  return k;
}

uint32_t TxQueue::drop_region(uint32_t lkey) noexcept {
  uint32_t n = 0;
  for (uint32_t i = head_; i != tail_; ++i) {
    TxDesc& d = ring_[i & mask_];
    for (uint32_t j = 0; j < d.num_segs; ++j) {
      if (d.segs[j].lkey != lkey) continue;
      d.local_qpn = 0;
      d.num_segs = 0;
      d.payload_len = 0;
      ++n;
      break;
    }
  }
  return n;
}

namespace {
uint32_t pow2_at_least(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}
}  // namespace

Transport::Transport(const TransportConfig& cfg)
    : cfg_(cfg), tx_(pow2_at_least(cfg.tx_queue_capacity ? cfg.tx_queue_capacity : 1)) {
  // QPNs 0 and 1 are InfiniBand's special QPs, and TxQueue::dropped marks with 0.
  cfg_.qpn_base = std::max<uint32_t>(cfg_.qpn_base, 2);
  mrs_.resize(cfg_.max_mrs);
  qps_.resize(cfg_.max_qps);
  live_.reserve(cfg_.max_qps);
  granting_.reserve(cfg_.max_qps);
  quota_hit_.reserve(cfg_.max_qps);
  owners_.reserve(kMaxOwner + 1);  // never moved (QPs point into it); grown by create_qp
  shares_.budget = cfg_.owner_inflight_pkts;
  shares_.set(0);
  active_.resize(cfg_.max_qps);
  cqs_.reserve(cfg_.max_cqs);
}

Transport::~Transport() = default;

MemoryRegion Transport::reg_mr(void* host_ptr, uint64_t len, uint32_t access) noexcept {
  auto* p = static_cast<uint8_t*>(host_ptr);
  return reg_mr(reinterpret_cast<uint64_t>(p), p, len, access);
}

MemoryRegion Transport::reg_mr(uint64_t addr, uint8_t* host_ptr, uint64_t len, uint32_t access,
                               uint32_t pd) noexcept {
  // Index 0 is never used, so key 0 is never valid.
  for (std::size_t i = 1; i < mrs_.size(); ++i) {
    if (mrs_[i].host_ptr != nullptr) continue;
    mr_generation_ = (mr_generation_ + 1) & 0xFF;
    if (mr_generation_ == 0) mr_generation_ = 1;
    const uint32_t key = static_cast<uint32_t>(i << 8) | mr_generation_;
    mrs_[i] = MemoryRegion{addr, len, host_ptr, key, key, access, pd};
    return mrs_[i];
  }
  return {};
}

int Transport::reg_mr_with_key(uint32_t key, uint64_t addr, uint8_t* host_ptr, uint64_t len, uint32_t access,
                               uint32_t pd) noexcept {
  const uint32_t i = key >> 8;
  if ((key & 0xFF) == 0 || i >= mrs_.size() || mrs_[i].host_ptr != nullptr || host_ptr == nullptr)
    return EINVAL;
  mrs_[i] = MemoryRegion{addr, len, host_ptr, key, key, access, pd};
  return 0;
}

int Transport::dereg_mr(uint32_t lkey) noexcept {
  const uint32_t i = lkey >> 8;
  if ((lkey & 0xFF) == 0 || i >= mrs_.size() || mrs_[i].lkey != lkey || mrs_[i].host_ptr == nullptr)
    return EINVAL;
  mrs_[i] = MemoryRegion{};
  // Work holding it finds it gone when it next needs it (mr_live); what was
  // queued for the I/O layer already is dropped here.
  tx_.drop_region(lkey);
  return 0;
}

int Transport::modify_mr(uint32_t lkey, uint32_t pd, uint32_t access) noexcept {
  const uint32_t i = lkey >> 8;
  if ((lkey & 0xFF) == 0 || i >= mrs_.size() || mrs_[i].lkey != lkey || mrs_[i].host_ptr == nullptr)
    return EINVAL;
  mrs_[i].pd = pd;
  mrs_[i].access = access;
  return 0;
}

uint32_t Transport::create_cq(uint32_t capacity, CompletionSink* sink) {
  if (cqs_.size() >= cfg_.max_cqs) return UINT32_MAX;
  auto cq = std::make_unique<Cq>();
  cq->sink = sink;
  const uint32_t cap = sink != nullptr ? 1 : pow2_at_least(capacity ? capacity : 1);
  cq->ring.resize(cap);
  cq->mask = cap - 1;
  cqs_.push_back(std::move(cq));
  return static_cast<uint32_t>(cqs_.size() - 1);
}

Cq* Transport::cq(uint32_t id) noexcept { return id < cqs_.size() ? cqs_[id].get() : nullptr; }

uint32_t Transport::poll_cq(uint32_t id, Completion* out, uint32_t n) noexcept {
  Cq* q = cq(id);
  if (q == nullptr) return 0;
  // Indices in locals: the copies into `out` could alias the CQ's fields,
  // and the compiler would reload them for every completion.
  const uint32_t head = q->head, avail = q->tail - head, mask = q->mask;
  const Completion* ring = q->ring.data();
  const uint32_t k = std::min(n, avail);
  for (uint32_t i = 0; i < k; ++i) out[i] = ring[(head + i) & mask];
  q->head = head + k;
  return k;
}

uint32_t Transport::create_qp(const QpInitAttr& init) {
  if (cq(init.send_cq) == nullptr || cq(init.recv_cq) == nullptr) return 0;
  const uint32_t w = init.window_pkts;
  if (w < 2 || w > (1u << 16) || (w & (w - 1)) != 0) return 0;
  if (init.sq_depth == 0 || init.rq_depth == 0 || init.max_dest_rd_atomic == 0) return 0;
  if (init.max_inline > kMaxInlineHeld) return 0;
  Srq* shared = nullptr;
  if (init.srq != 0 && (shared = srq(init.srq)) == nullptr) return 0;
  // A UD QP sends single datagrams: no spraying, no congestion window.
  const bool ud = init.type == QpType::kUd;
  auto path = make_path_policy(ud ? "single" : init.policy.path);
  auto cc = make_cc_policy(ud ? "fixed_window" : init.policy.cc);
  if (!path || !cc) return 0;
  if (init.owner > kMaxOwner) return 0;
  while (owners_.size() <= init.owner) {
    owners_.emplace_back().all = &shares_;
  }
  for (std::size_t i = 0; i < qps_.size(); ++i) {
    if (qps_[i]) continue;
    auto qp = std::make_unique<Qp>();
    qp->t = this;
    qp->qpn = (cfg_.qpn_base + static_cast<uint32_t>(i)) & 0xFFFFFF;
    qp->init = init;
    if (init.owner != 0) qp->owner = &owners_[init.owner];
    qp->created_mode = init.mode;
    qp->ud = ud;
    qp->send_cq = cq(init.send_cq);
    qp->recv_cq = cq(init.recv_cq);
    qp->path = std::move(path);
    qp->cc = std::move(cc);
    qp->note_policy_kinds();
    qp->wmask = w - 1;
    // A power-of-two ring (slot = index & mask); at most sq_depth WRs are
    // outstanding whatever its size.
    qp->sq.resize(pow2_at_least(init.sq_depth));
    qp->sq_ring = qp->sq.data();
    qp->sq_mask = static_cast<uint32_t>(qp->sq.size()) - 1;
    qp->sq_inline.resize(qp->sq.size() * init.max_inline);
    qp->recv_pd = shared != nullptr ? shared->pd : init.pd;
    if (shared != nullptr) {
      qp->srq = shared;
      qp->srq_stage.resize(w);
      ++shared->qps;
    } else {
      qp->rq.resize(init.rq_depth);
    }
    qp->recs.resize(w);
    qp->recs_ring = qp->recs.data();
    qp->slots.resize(w);
    qp->reads.resize(init.max_dest_rd_atomic);
    // Enough to remember every READ request a requester may have out: its
    // READ WRs, each in up to four chunks (requester.cc read_chunk_pkts).
    qp->read_log.resize(std::clamp<uint32_t>(4 * init.max_dest_rd_atomic, 16, 1024));
    qp->atomic_res.resize(init.max_dest_rd_atomic);
    qp->reset_state();
    qps_[i] = std::move(qp);
    live_.push_back(qps_[i].get());
    return qps_[i]->qpn;
  }
  return 0;
}

int Transport::destroy_qp(uint32_t qpn) noexcept {
  const uint32_t i = (qpn - cfg_.qpn_base) & 0xFFFFFF;
  if (i >= qps_.size() || !qps_[i]) return EINVAL;
  live_.erase(std::find(live_.begin(), live_.end(), qps_[i].get()));
  if (qps_[i]->granting) granting_.erase(std::find(granting_.begin(), granting_.end(), qps_[i].get()));
  if (qps_[i]->active) {
    Qp** end = active_.data() + active_n_;
    Qp** at = std::find(active_.data(), end, qps_[i].get());
    std::copy(at + 1, end, at);  // keeps the order (the rotation's fairness)
    --active_n_;
  }
  if (Srq* shared = qps_[i]->srq) {
    qps_[i]->reset_state();  // WQEs it took and did not use go back to the SRQ
    --shared->qps;
  }
  qps_[i]->inflight_clear();  // its packets no longer count against its owner's share
  qps_[i].reset();
  return 0;
}

int Transport::set_reorder_delay(uint32_t qpn, uint64_t ns) noexcept {
  Qp* qp = find_qp(qpn);
  if (qp == nullptr) return EINVAL;
  qp->attr.reorder_delay_ns = ns;
  return 0;
}

QpState Transport::qp_state(uint32_t qpn) const noexcept {
  const Qp* qp = find_qp(qpn);
  return qp ? qp->state : QpState::kReset;
}

const QpCounters* Transport::qp_counters(uint32_t qpn) const noexcept {
  const Qp* qp = find_qp(qpn);
  return qp ? &qp->c : nullptr;
}

const PathPolicy* Transport::path_policy(uint32_t qpn) const noexcept {
  const Qp* qp = find_qp(qpn);
  return qp ? qp->path.get() : nullptr;
}

uint64_t Transport::reorder_window(uint32_t qpn) const noexcept {
  const Qp* qp = find_qp(qpn);
  return qp ? qp->reo_wnd_ns : 0;
}

uint64_t Transport::spurious_losses(uint32_t qpn) const noexcept {
  const Qp* qp = find_qp(qpn);
  return qp ? qp->rack_spurious : 0;
}

const CcPolicy* Transport::cc_policy(uint32_t qpn) const noexcept {
  const Qp* qp = find_qp(qpn);
  return qp ? qp->cc.get() : nullptr;
}

void Qp::reset_state() noexcept {
  sq_head = sq_send = sq_tail = 0;
  next_recv_idx = 0;
  for (auto& r : recs) r = PsnRec{};
  una = nxt = rtx_cursor = 0;
  lost = 0;
  inflight_clear();
  reads_inflight = 0;
  last_progress = 0;
  srtt_ns = 0;
  min_rtt_ns = 0;
  rack_seq = rack_rtt_ns = 0;
  rack_high = 0;
  rack_timer = kNever;
  reo_wnd_ns = reo_grow_after = reo_event_after = 0;
  reo_episodes = 0;
  rack_spurious = 0;
  backoff = retries = 0;
  rnr_until = 0;
  rnr_retries = 0;
  rnr_wait = false;
  read_hole_since = kNever;
  read_high = 0;
  cc_blocked = false;
  if (srq != nullptr)
    while (rq_tail != rq_head) srq->give_back(srq_stage[--rq_tail & wmask]);
  rq_head = rq_tail = 0;
  for (auto& s : slots) s = RxSlot{};
  epsn = high = msn = 0;
  ack_pending = ecn_echo = false;
  cnp_pending = cnp_sent_once = false;
  last_cnp = 0;
  unacked = 0;
  hole_since = kNever;
  last_sack = 0;
  sack_news = false;
  sack_backoff = 0;
  nak_pending = false;
  error_after_nak = false;
  tx_seq = 0;
  retx_psn = retx_run = 0;
  echo_mask = 0;
  echo_next = 0;
  ack_dup = resp_dup = false;
  seq_nak_sent = false;
  ahead.clear();
  gbn_kind = 0;
  gbn_offset = 0;
  reads_head = reads_tail = 0;
  std::fill(read_log.begin(), read_log.end(), ReadRec{});
  read_log_next = 0;
  prot_err_recv = kNoRecv;
  for (auto& a : atomic_res) a = AtomicRes{};
  atomic_replies = 0;
  sent_atomics = false;
  credit_limit = credit_new_sent = 0;
  credit_stall_since = kNever;
  grant_psn = grant_unacked = 0;
  last_rx_ns = credit_kick_ns = credit_kick_rx_ns = 0;
  credit_kicks = 0;
  credit_kick_round = 0;
  credits_granted = 0;
}

int Transport::modify_qp(uint32_t qpn, const QpAttr& a, int mask) noexcept {
  Qp* qp = find_qp(qpn);
  if (qp == nullptr) return EINVAL;
  const QpState from = qp->state;
  const QpState to = (mask & IBV_QP_STATE) ? a.state : from;
  bool ok = false;
  switch (to) {
    case QpState::kReset: ok = true; break;
    case QpState::kError: ok = true; break;
    case QpState::kInit: ok = from == QpState::kReset || from == QpState::kInit; break;
    case QpState::kRtr:
      if (qp->ud) {  // a UD QP has no peer: nothing is required
        ok = from == QpState::kInit || (from == QpState::kRtr && !(mask & IBV_QP_STATE));
        break;
      }
      ok = (from == QpState::kInit &&
            (mask & (IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU | IBV_QP_AV)) ==
                (IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU | IBV_QP_AV)) ||
           (from == QpState::kRtr && !(mask & IBV_QP_STATE));
      break;
    case QpState::kRts:
      ok = (from == QpState::kRtr && (mask & IBV_QP_SQ_PSN)) || from == QpState::kRts;
      break;
  }
  // A UD QP's Q_Key is set on the way to INIT (ibv_modify_qp requires it).
  if (qp->ud && to == QpState::kInit && from == QpState::kReset && !(mask & IBV_QP_QKEY)) ok = false;
  if (!ok) return EINVAL;
  if (mask & IBV_QP_QKEY) qp->attr.qkey = a.qkey;
  if (mask & IBV_QP_PATH_MTU) {
    const uint32_t m = a.path_mtu;
    if (m != 256 && m != 512 && m != 1024 && m != 2048 && m != 4096) return EINVAL;
  }
  if (mask & IBV_QP_ACCESS_FLAGS) qp->attr.qp_access_flags = a.qp_access_flags;
  if (mask & IBV_QP_PATH_MTU) qp->attr.path_mtu = a.path_mtu;
  if (mask & IBV_QP_DEST_QPN) qp->attr.dest_qp_num = a.dest_qp_num & 0xFFFFFF;
  if (mask & IBV_QP_AV) {
    qp->attr.peer = a.peer;
    qp->attr.path_seed = a.path_seed;
    qp->attr.reorder_delay_ns = a.reorder_delay_ns;
    qp->attr.ack_every = a.ack_every ? a.ack_every : 1;
    qp->attr.cnp_interval_ns = a.cnp_interval_ns;
    qp->attr.standard_peer = a.standard_peer;
  }
  if (mask & IBV_QP_TIMEOUT) qp->attr.timeout_ns = a.timeout_ns ? a.timeout_ns : 1;
  if (mask & IBV_QP_RETRY_CNT) qp->attr.retry_cnt = a.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) qp->attr.rnr_retry = a.rnr_retry;
  if (mask & IBV_QP_MIN_RNR_TIMER) qp->attr.min_rnr_timer = a.min_rnr_timer;
  // The requester's READ/atomic budget is a count, not a sized table: the application's value.
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp->init.max_rd_atomic = std::max<uint32_t>(a.max_rd_atomic, 1);
  if (mask & IBV_QP_RQ_PSN) {
    qp->attr.rq_psn = a.rq_psn & common::kPsnMask;
    qp->epsn = qp->high = qp->attr.rq_psn;
  }
  if (mask & IBV_QP_SQ_PSN) {
    qp->attr.sq_psn = a.sq_psn & common::kPsnMask;
    qp->inflight_clear();  // (RTS -> RTS: what was in flight is forgotten, not its owner's any more)
    qp->una = qp->nxt = qp->rtx_cursor = qp->read_high = qp->rack_high = qp->attr.sq_psn;
    qp->credit_limit = common::psn_add(qp->attr.sq_psn, qp->cc->unscheduled_pkts());
  }
  if (to == QpState::kRtr && from == QpState::kInit && !qp->ud) {
    qp->path->reset(PathPolicyParams{qp->qpn, qp->attr.path_seed, qp->init.policy.num_paths});
    qp->cc->reset(CcParams{qp->attr.path_mtu, qp->init.policy.cc_window_bytes,
                          qp->init.policy.line_rate_gbps, qp->init.policy.credit_unsched_bytes});
    // A standard peer understands neither IRN's placement header and SACKs nor credits in the AETH.
    qp->init.mode = qp->attr.standard_peer ? Reliability::kGoBackN : qp->created_mode;
    qp->credit_mode = qp->cc->uses_credits() && !qp->attr.standard_peer;
    qp->credit_unsched = qp->cc->unscheduled_pkts();
    if (qp->credit_mode) {
      // Both ends know the unscheduled amount: the first grant is implied.
      qp->grant_psn = common::psn_add(qp->attr.rq_psn, qp->cc->unscheduled_pkts());
      if (!grantor_ready_) grantor_.configure(cfg_.credit, qp->attr.path_mtu);
      grantor_ready_ = true;
    }
  }
  activate(qp);  // a new state may have work (RTS with WRs posted in RTR)
  if (to == QpState::kError && from != QpState::kError) {
    qp->to_error(IBV_WC_WR_FLUSH_ERR);
    return 0;
  }
  if (to == QpState::kReset) {
    qp->reset_state();
    qp->attr = QpAttr{};
  }
  qp->state = to;
  return 0;
}

int Transport::post_recv(uint32_t qpn, const RecvWr& wr) noexcept {
  Qp* qp = find_qp(qpn);
  if (qp == nullptr) return EINVAL;
  const int r = qp->post_recv(wr);
  if (r == 0) activate(qp);
  return r;
}

uint32_t Transport::recv_room(uint32_t qpn) const noexcept {
  const Qp* qp = find_qp(qpn);
  if (qp == nullptr || qp->srq != nullptr) return 0;
  return static_cast<uint32_t>(qp->rq.size()) - (qp->rq_tail - qp->rq_head);
}

RecvWr* Transport::recv_slot(uint32_t qpn) noexcept {
  Qp* qp = find_qp(qpn);
  if (qp == nullptr || qp->srq != nullptr || qp->rq_tail - qp->rq_head >= qp->rq.size()) return nullptr;
  return &qp->rwqe(qp->rq_tail).wr;
}

int Transport::post_recv_slot(uint32_t qpn) noexcept {
  Qp* qp = find_qp(qpn);
  if (qp == nullptr) return EINVAL;
  const int r = qp->post_recv_slot(nullptr);
  if (r == 0) activate(qp);
  return r;
}


DropReason Transport::on_packet(const common::RocePacket& pkt, const uint8_t* payload,
                                uint32_t payload_len, uint64_t now) noexcept {
  note_clock(now);
  ++counters_.rx_pkts;
  auto count = [&](DropReason r) {
    ++counters_.drops[static_cast<std::size_t>(r)];
    return r;
  };
  Qp* qp = find_qp(pkt.bth.dqpn);
  if (qp == nullptr) return count(DropReason::kUnknownQpn);
  activate(qp);  // an ACK opens the window, a request wants an ACK, ...
  const uint8_t op = pkt.bth.opcode;
  if (common::opcode_has(op, common::kOpCnp)) {
    if (qp->state != QpState::kRts) return count(DropReason::kBadQpState);
    ++qp->c.cnp_rx;
    qp->cc->on_cnp(now);
    return DropReason::kNone;
  }
  if (qp->state != QpState::kRtr && qp->state != QpState::kRts) {
    qp->drop(DropReason::kBadQpState);
    return count(DropReason::kBadQpState);
  }
  DropReason r;
  if (qp->ud || common::opcode_has(op, common::kOpDeth)) {
    // A datagram to an RC QP, or anything but one to a UD QP, is refused.
    r = qp->ud && common::opcode_has(op, common::kOpDeth) ? qp->ud_on_packet(pkt, payload, payload_len)
                                                          : DropReason::kInvalidRequest;
    if (r != DropReason::kNone) qp->drop(r);
  } else if (common::opcode_has(op, common::kOpSend | common::kOpWrite | common::kOpReadReq | common::kOpAtomicEth)) {
    const RxPacketRef in{&pkt, payload, payload_len};
    qp->on_requests(&in, 1, now, &r);
    if (qp->credit_mode && !qp->granting && qp->last_rx_ns != 0) {
      qp->granting = true;  // its sender is active: grant_credits looks after it
      granting_.push_back(qp);
    }
  } else if (common::opcode_has(op, common::kOpReadResp | common::kOpAck)) {
    r = qp->state == QpState::kRts ? qp->on_response(pkt, payload, payload_len, now)
                                    : DropReason::kBadQpState;
    if (r == DropReason::kBadQpState) qp->drop(r);
  } else {
    r = DropReason::kInvalidRequest;
    qp->drop(r);
  }
  if (r != DropReason::kNone) ++counters_.drops[static_cast<std::size_t>(r)];
  return r;
}

// on_packet's path for a READ response to a QP in RTS, its ICRC pending.
DropReason Transport::on_read_response(Qp& qp, const RxPacketRef& in, uint64_t now) noexcept {
  note_clock(now);
  ++counters_.rx_pkts;
  activate(&qp);
  const DropReason r = qp.on_response(*in.pkt, in.payload, in.payload_len, now, &in);
  if (r != DropReason::kNone) ++counters_.drops[static_cast<std::size_t>(r)];
  return r;
}

bool icrc_rest_ok(const RxPacketRef& r) noexcept {
  const uint32_t c = common::crc32_update(r.icrc_head, r.payload, r.payload_len);
  return common::crc32_update(c, r.payload + r.payload_len, r.pkt->bth.pad) == r.pkt->icrc;
}

uint32_t Transport::on_packets(const RxPacketRef* in, uint32_t n, uint64_t now, DropReason* why) noexcept {
  constexpr uint32_t kRequest = common::kOpSend | common::kOpWrite | common::kOpReadReq | common::kOpAtomicEth;
  note_clock(now);
  uint32_t taken = 0;
  for (uint32_t i = 0; i < n;) {
    const uint32_t qpn = in[i].pkt->bth.dqpn;
    Qp* qp = find_qp(qpn);
    // A run of requests to one QP that takes requests is on_packet on each
    // with its lookup, activation and state check done once (a request does
    // not change its QP's state); anything else goes through on_packet.
    if (qp == nullptr || !common::opcode_has(in[i].pkt->bth.opcode, kRequest) || qp->ud ||
        common::opcode_has(in[i].pkt->bth.opcode, common::kOpDeth) ||
        (qp->state != QpState::kRtr && qp->state != QpState::kRts)) {
      if (in[i].icrc_pending && qp != nullptr && qp->state == QpState::kRts && !qp->ud &&
          common::opcode_has(in[i].pkt->bth.opcode, common::kOpReadResp)) {
        // A READ response, checked while the requester places it.
        why[i] = on_read_response(*qp, in[i], now);
        taken += why[i] == DropReason::kNone;
        ++i;
        continue;
      }
      if (in[i].icrc_pending && !icrc_rest_ok(in[i])) [[unlikely]] {
        // Refused whatever its headers say: a corrupted packet is counted as
        // one, not as the unknown QP or bad state its bits may name.
        ++counters_.rx_pkts;
        ++counters_.drops[static_cast<std::size_t>(DropReason::kBadIcrc)];
        why[i++] = DropReason::kBadIcrc;
        continue;
      }
      why[i] = on_packet(*in[i].pkt, in[i].payload, in[i].payload_len, now);
      taken += why[i] == DropReason::kNone;
      ++i;
      continue;
    }
    uint32_t j = i + 1;
    while (j < n && in[j].pkt->bth.dqpn == qpn && common::opcode_has(in[j].pkt->bth.opcode, kRequest)) ++j;
    counters_.rx_pkts += j - i;
    activate(qp);
    const uint32_t ok = qp->on_requests(in + i, j - i, now, why + i);
    if (ok != j - i)
      for (uint32_t k = i; k < j; ++k)
        if (why[k] != DropReason::kNone) ++counters_.drops[static_cast<std::size_t>(why[k])];
    if (qp->credit_mode && !qp->granting && qp->last_rx_ns != 0) {
      qp->granting = true;  // its sender is active: grant_credits looks after it
      granting_.push_back(qp);
    }
    taken += ok;
    i = j;
  }
  return taken;
}

// A QP's quantum this round: its owner's what is left of the owner's (an
// owner whose last round is over starts this one with a whole quantum).
uint32_t Transport::tx_quota_for(const Qp& qp) noexcept {
  OwnerShare* o = qp.owner;
  if (o == nullptr) return kTxQuantum;
  if (o->turn != turn_) {
    o->turn = turn_;
    o->left = kTxQuantum;
  }
  return o->left;
}

void Transport::tx_charge(const Qp& qp, uint32_t given) noexcept {
  if (qp.owner != nullptr) qp.owner->left -= given - qp.tx_quota;
}

uint32_t Transport::poll(uint64_t now) noexcept {
  note_clock(now);
  const uint32_t before = tx_.size();
  tx_blocked_ = false;
  if (grantor_ready_) grant_credits(now);
  const std::size_t n = active_n_;
  if (rr_ >= n) rr_ = 0;
  quota_hit_.clear();
  ++turn_;
  for (std::size_t k = 0; k < n; ++k) {
    // Rotate the starting QP so that one busy QP cannot starve the others.
    Qp* qp = active_[rr_ + k < n ? rr_ + k : rr_ + k - n];
    const uint32_t given = qp->tx_quota = tx_quota_for(*qp);
    if (qp->ud) {
      if (qp->state == QpState::kRts && !qp->ud_tx(now)) { tx_blocked_ = true; break; }
    } else {
      if (qp->state == QpState::kRts) qp->on_timers_requester(now);
      if (qp->state == QpState::kRtr || qp->state == QpState::kRts) {
        if (!qp->tx_responses(now)) { tx_blocked_ = true; break; }
      }
      if (qp->state == QpState::kRts) {
        if (!qp->tx_requests(now)) { tx_blocked_ = true; break; }
      }
    }
    tx_charge(*qp, given);
    // (UD QPs get one quantum per poll: ud_tx completes what the previous
    // call queued, which the I/O layer has taken only by the next poll.)
    if (qp->tx_quota == 0 && !qp->ud) quota_hit_.push_back(qp);
  }
  // Room left in the TX queue: the QPs that used their whole quantum (or
  // found their owner's spent) take it in turns, a quantum per owner per
  // round, so a QP with a huge message shares the queue with the others
  // instead of filling it when its turn comes first. Each round every owner
  // listed either queues a quantum or loses a QP from the list: it ends.
  while (!tx_blocked_ && !quota_hit_.empty()) {
    std::size_t again = 0;
    ++turn_;
    for (Qp* qp : quota_hit_) {
      const uint32_t given = qp->tx_quota = tx_quota_for(*qp);
      if (qp->state != QpState::kRtr && qp->state != QpState::kRts) continue;
      if (!qp->tx_responses(now) || (qp->state == QpState::kRts && !qp->tx_requests(now))) {
        tx_blocked_ = true;
        break;
      }
      tx_charge(*qp, given);
      if (qp->tx_quota == 0) quota_hit_[again++] = qp;
    }
    quota_hit_.resize(again);
  }
  rr_ = n ? (rr_ + 1) % n : 0;
  // QPs left with nothing to send and no timer leave the list (in order, so
  // the rotation stays fair); the next input that gives one work puts it back.
  std::size_t kept = 0;
  for (std::size_t k = 0; k < n; ++k) {
    Qp* qp = active_[k];
    if (qp->has_work()) {
      active_[kept++] = qp;
    } else {
      qp->active = false;
      if (k < rr_ && rr_ > 0) --rr_;
    }
  }
  active_n_ = kept;
  return tx_.size() - before;
}

// The receiving side of cc "credit": hands out the port's capacity, one
// packet of credit at a time, round robin over the QPs whose senders are
// active, keeping the credit outstanding over all of them (granted, not yet
// arrived) within one shared budget. A QP that has used all its credit is
// always eligible (its sender may be waiting); one that is silent (nothing
// arrived for kIdleNs while credit is out) neither counts against the
// budget nor gets more, except a kick once per kIdleNs, at most kMaxKicks
// times per silence: an ACK that carries the whole grant again (the ACK
// with the last credit may have died on a failed path) plus, while little
// is out, one more batch (the sender's last packets may have died there,
// leaving it without credit). The receiver cannot tell either case from a
// sender with nothing to send; without the kick they would wait for the
// sender's retransmission timeout, or forever. Bounded, so an idle sender
// costs a few ACKs and holds at most a few batches of unused credit.
void Transport::on_loop_gap(uint64_t now) noexcept {
  // Only QPs with something in flight have silence clocks running; the
  // first loop_gap_ns of the gap is an ordinary (if slow) loop turn.
  ++loop_gaps_;
  const uint64_t from = last_call_ns_ + cfg_.loop_gap_ns;
  for (std::size_t k = 0; k < active_n_; ++k)
    if (!active_[k]->path_single) active_[k]->path->on_local_gap(from, now);
}

void Transport::grant_credits(uint64_t now) noexcept {
  constexpr uint64_t kIdleNs = 100'000;
  constexpr uint32_t kMaxKicks = 8;
  // Called well past the time it asked for: the grantor's own loop stalled,
  // and whatever senders sent meanwhile is still in its RX ring. A silence
  // counts only from here (no kick for the time the grantor missed).
  if (credit_wake_ != kNever && cfg_.loop_gap_ns != 0 && now > credit_wake_ + cfg_.loop_gap_ns)
    credit_gap_end_ = now;
  credit_wake_ = kNever;
  uint32_t tokens = grantor_.refill(now);
  if (granting_.empty()) return;
  const uint32_t budget = grantor_.window_pkts();
  const uint32_t batch = grantor_.batch_pkts();
  const int32_t kick_cap = static_cast<int32_t>(2 * batch);
  auto granting = [](const Qp* qp) {
    return qp->credit_mode && (qp->state == QpState::kRtr || qp->state == QpState::kRts);
  };
  auto give = [&](Qp* qp, int32_t out) {
    --tokens;
    grantor_.spend(1);
    grantor_.note_granted(1);
    qp->grant_psn = common::psn_add(qp->grant_psn, 1);
    ++qp->credits_granted;
    // Batch: an ACK per batch of credit, or when the QP's share is full.
    if (++qp->grant_unacked >= batch || out + 1 >= static_cast<int32_t>(budget)) {
      qp->ack_pending = true;
      activate(qp);
      qp->grant_unacked = 0;
    }
  };
  bool token_wait = false;
  uint32_t outstanding = 0;
  // Returns false for a QP that leaves the list: no longer granting, or
  // silent with credit out and its kicks spent. Until its next request it
  // would be skipped below anyway, so 10,000 idle credit QPs cost nothing.
  auto stays = [&](Qp* qp) {
    if (!granting(qp)) return false;
    const int32_t out = common::psn_diff(qp->grant_psn, qp->rx_front());
    if (out <= 0 || qp->last_rx_ns == 0) return true;
    const uint64_t heard = std::max(qp->last_rx_ns, credit_gap_end_);
    if (now < heard + kIdleNs) {
      outstanding += static_cast<uint32_t>(out);
      credit_wake_ = std::min(credit_wake_, heard + kIdleNs);  // a silence begins
      if (now >= qp->last_rx_ns + kIdleNs && qp->credit_kick_ns < credit_gap_end_) {
        qp->credit_kick_ns = credit_gap_end_;  // a kick the stall held back: counted once
        ++credit_kicks_excused_;
      }
      return true;
    }
    // Silent with credit out: kick, a bounded number of times per silence.
    if (qp->credit_kick_rx_ns != qp->last_rx_ns) {
      qp->credit_kick_rx_ns = qp->last_rx_ns;
      qp->credit_kick_round = 0;
    }
    if (qp->credit_kick_round >= kMaxKicks) return false;
    const uint64_t due = std::max(heard, qp->credit_kick_ns) + kIdleNs;
    if (now < due) {
      credit_wake_ = std::min(credit_wake_, due);
      return true;
    }
    if (out < kick_cap) {
      if (tokens < batch) {
        token_wait = true;
        credit_wake_ = std::min(credit_wake_, grantor_.next_token_time());
        return true;
      }
      for (uint32_t k = 0; k < batch; ++k) give(qp, out + static_cast<int32_t>(k));
    }
    // Either way an ACK goes out and carries the whole grant again.
    qp->ack_pending = true;
    activate(qp);
    qp->grant_unacked = 0;
    qp->credit_kick_ns = now;
    ++qp->credit_kick_round;
    ++qp->credit_kicks;
    ++credit_kicks_;
    credit_wake_ = std::min(credit_wake_, now + kIdleNs);
    return true;
  };
  std::size_t kept = 0;
  for (Qp* qp : granting_) {
    if (stays(qp)) {
      granting_[kept++] = qp;
    } else {
      qp->granting = false;
    }
  }
  granting_.resize(kept);  // never grows: no allocation
  const std::size_t n = kept;
  if (n == 0) return;
  if (credit_rr_ >= n) credit_rr_ = 0;
  bool want = true;
  const std::size_t start = credit_rr_;
  while (want && outstanding < budget) {
    want = false;
    for (std::size_t k = 0; k < n && outstanding < budget; ++k) {
      Qp* qp = granting_[(start + k) % n];
      if (!granting(qp)) continue;
      const int32_t out = common::psn_diff(qp->grant_psn, qp->rx_front());
      const bool active = now < std::max(qp->last_rx_ns, credit_gap_end_) + kIdleNs;
      if (qp->last_rx_ns == 0 || out >= static_cast<int32_t>(budget) || (out > 0 && !active)) continue;
      want = true;
      if (tokens == 0) {
        token_wait = true;
        credit_wake_ = std::min(credit_wake_, grantor_.next_token_time());
        want = false;
        break;
      }
      give(qp, out);
      ++outstanding;
      credit_rr_ = (start + k + 1) % n;
    }
  }
  // Flush partial batches so that no granted credit waits for an ACK.
  for (Qp* qp : granting_) {
    if (qp->grant_unacked > 0 && !token_wait) {
      qp->ack_pending = true;
      activate(qp);
      qp->grant_unacked = 0;
    }
  }
}

uint64_t Transport::next_deadline() const noexcept {
  uint64_t d = credit_wake_;
  for (std::size_t k = 0; k < active_n_; ++k) {  // an inactive QP has no timer
    const Qp* qp = active_[k];
    if (qp->ud) {  // sent datagrams complete on the next poll
      if (qp->state == QpState::kRts && qp->sq_head != qp->sq_send) d = 0;
      continue;
    }
    if (qp->state == QpState::kRts) d = std::min(d, qp->requester_deadline());
    if (qp->state == QpState::kRtr || qp->state == QpState::kRts)
      d = std::min(d, qp->responder_deadline());
  }
  return d;
}

}  // namespace tandem::rnic
