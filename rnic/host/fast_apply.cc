// FastPath, applying the control half's messages (the data lcore): each one
// a few stores into the fast half's tables and the HostEvent the port acts
// on, then the answer back on the link (rnic/host/README.md "Two halves").
#include <algorithm>
#include <cstring>
#include <utility>

#include "rnic/host/control_msg.h"
#include "rnic/host/fast_path.h"
#include "rnic/host/fast_records.h"
#include "rnic/host/handles.h"
#include "rnic/host/host_link.h"

namespace tandem::rnic::host {

FastPath::FastPath(const ServerConfig& config, HostLink& link)
    : link_(link), page_(link.page), qp_slot_base_(config.qp_slot_base), max_apps_(config.max_apps) {}

FastPath::~FastPath() = default;

uint32_t FastPath::apply_control(uint64_t now) noexcept {
  fast_now_ = now;  // completion timestamps are this iteration's time
  uint32_t n = 0;
  ControlMsg m;
  // Nothing left from earlier messages: the port acted on all of it.
  if (events_.empty()) link_.consumed_seq.store(applied_seq_, std::memory_order_release);
  while (link_.to_fast.pop(&m)) {
    ControlResult r;
    r.seq = m.seq;
    r.applied_ns = now;
    apply(m, &r);
    applied_seq_ = m.seq;
    while (!link_.to_ctl.push(r)) {
      // Cannot happen (one message in flight), but never drop an answer.
    }
    ++n;
  }
  if (deferred_apps_ != 0) [[unlikely]] flush_deferred();
  if (now - last_beat_ >= 20'000) {
    page_->heartbeat_ns.store(now, std::memory_order_relaxed);
    last_beat_ = now;
  }
  return n;
}

void FastPath::apply(const ControlMsg& m, ControlResult* r) noexcept {
  switch (m.kind) {
    case MsgKind::kAttach: {
      if (m.index >= fast_apps_.size()) fast_apps_.resize(m.index + 1);
      FastApp& a = fast_apps_[m.index];
      a.id = m.app_id;
      a.qpn_by_bit.clear();
      a.doorbells = m.doorbells;  // ready_qps reads it from now on
      ++counters_.apps_attached;
      HostEvent ev{};
      ev.kind = HostEventKind::kAppAttached;
      ev.app_id = m.app_id;
      events_.push_back(ev);
      break;
    }
    case MsgKind::kDetach: {
      for (uint32_t i = 0; i < qps_.size(); ++i) {
        if (qps_[i].used && qps_[i].info.app_id == m.app_id) fast_free_qp(i, m.died);
      }
      for (uint32_t i = 0; i < srqs_.size(); ++i) {  // after its QPs (kSrqDestroyed promises that)
        if (srqs_[i].used && srqs_[i].app_id == m.app_id) fast_free_srq(i);
      }
      for (CqSlot& cq : cqs_) {
        if (cq.used && cq.app_id == m.app_id) cq = CqSlot{.gen = cq.gen};
      }
      for (uint32_t i = 0; i < mrs_.size(); ++i) {
        if (mrs_[i].used && mrs_[i].app_id == m.app_id) fast_free_mr(i);
      }
      if (m.index < fast_apps_.size()) {
        if (fast_apps_[m.index].deferred != 0) --deferred_apps_;
        fast_apps_[m.index] = FastApp{};
      }
      ++counters_.apps_detached;
      HostEvent ev{};
      ev.kind = HostEventKind::kAppDetached;
      ev.app_id = m.app_id;
      ev.app_died = m.died;
      events_.push_back(ev);
      break;
    }
    case MsgKind::kCqCreate: {
      if (m.index >= cqs_.size()) cqs_.resize(m.index + 1);
      CqSlot& cq = cqs_[m.index];
      cq.gen = m.gen;
      cq.app_id = m.app_id;
      cq.ring = m.cq_ring;
      cq.notify = m.notify;
      cq.timestamps = m.timestamps;
      cq.event_fd = m.event_fd;
      cq.overrun = false;  // the slot may be an overrun CQ's
      cq.app_index = m.app_index;
      cq.pending_events = 0;
      cq.used = true;
      break;
    }
    case MsgKind::kCqResize:
      r->status = static_cast<uint32_t>(apply_resize(m));
      break;
    case MsgKind::kCqDestroy:
      if (m.index < cqs_.size()) {
        forget_pending(cqs_[m.index].app_index, cqs_[m.index].pending_events);
        cqs_[m.index] = CqSlot{.gen = cqs_[m.index].gen};
      }
      break;
    case MsgKind::kMrRegister: {
      if (m.index >= mrs_.size()) mrs_.resize(m.index + 1);
      MrSlot& mr = mrs_[m.index];
      mr.gen = m.gen;
      mr.app_id = m.app_id;
      mr.pd = m.pd;
      mr.access = m.access;
      mr.addr = m.addr;
      mr.length = m.length;
      mr.base = m.base;
      mr.used = true;
      HostEvent ev{};
      ev.kind = HostEventKind::kMrRegistered;
      ev.app_id = m.app_id;
      ev.lkey = make_key(m.gen, m.index);
      ev.addr = m.base;
      ev.length = m.length;
      ev.va = m.addr;
      ev.access = m.access;
      ev.pd = m.pd;
      ev.map_addr = m.map_addr;
      ev.map_length = m.map_length;
      ev.hugetlb = m.hugetlb;
      events_.push_back(ev);
      break;
    }
    case MsgKind::kMrDeregister:
      if (m.index < mrs_.size() && mrs_[m.index].used) fast_free_mr(m.index);
      break;
    case MsgKind::kMrReregister:
      if (m.index < mrs_.size() && mrs_[m.index].used) {
        MrSlot& mr = mrs_[m.index];
        if ((m.rereg_flags & kReregPd) != 0) mr.pd = m.pd;
        if ((m.rereg_flags & kReregAccess) != 0) mr.access = m.access;
        HostEvent ev{};
        ev.kind = HostEventKind::kMrReregistered;
        ev.app_id = mr.app_id;
        ev.lkey = make_key(mr.gen, m.index);
        ev.pd = mr.pd;
        ev.access = mr.access;
        events_.push_back(ev);
      }
      break;
    case MsgKind::kQpCreate: {
      if (m.index >= qps_.size()) qps_.resize(m.index + 1);
      QpSlot& qp = qps_[m.index];
      qp.gen = m.gen;
      qp.app_index = m.app_index;
      qp.doorbell_bit = m.doorbell_bit;
      qp.info = m.info;
      qp.sq = m.sq;
      qp.rq = m.rq;
      qp.pending_events = 0;
      qp.used = true;
      if (m.app_index < fast_apps_.size()) {
        std::vector<uint32_t>& by_bit = fast_apps_[m.app_index].qpn_by_bit;
        if (m.doorbell_bit >= by_bit.size()) by_bit.resize(m.doorbell_bit + 1, 0);
        by_bit[m.doorbell_bit] = m.info.qpn;
      }
      HostEvent ev{};
      ev.kind = HostEventKind::kQpCreated;
      ev.app_id = m.app_id;
      ev.qpn = m.info.qpn;
      ev.state = IBV_QPS_RESET;
      events_.push_back(ev);
      break;
    }
    case MsgKind::kQpModify:
      r->status = static_cast<uint32_t>(apply_modify(m, &r->state));
      break;
    case MsgKind::kQpDestroy:
      if (m.index < qps_.size() && qps_[m.index].used) fast_free_qp(m.index, false);
      break;
    case MsgKind::kQpQuery: {
      const QpSlot* qp = find_qp(m.info.qpn);
      r->status = static_cast<uint32_t>(qp != nullptr ? Status::kOk : Status::kNotFound);
      if (qp != nullptr) r->state = qp->info.state;
      break;
    }
    case MsgKind::kSrqCreate:
    case MsgKind::kSrqDestroy:
    case MsgKind::kSrqModify:
      apply_srq(m, r);  // below
      break;
    case MsgKind::kEvents:
      if (m.index < fast_apps_.size() && fast_apps_[m.index].id == m.app_id) {
        FastApp& a = fast_apps_[m.index];
        a.events = m.event_ring;
        a.event_stats = m.event_stats;
        a.event_fd = m.event_fd;
      }
      break;
  }
}

Status FastPath::apply_modify(const ControlMsg& msg, ibv_qp_state* state) noexcept {
  const ModifyQpRequest& m = msg.modify;
  QpSlot* qp = find_qp(m.qpn);
  if (qp == nullptr) return Status::kNotFound;
  QpInfo& q = qp->info;
  uint32_t mask = m.attr_mask;
  ibv_qp_state cur = q.state;
  // Checked before the cast: an ibv_qp_state outside its enumerators is undefined behaviour.
  if ((mask & IBV_QP_STATE) != 0 && m.qp_state > IBV_QPS_ERR) return Status::kInvalidArgument;
  ibv_qp_state target = (mask & IBV_QP_STATE) != 0 ? static_cast<ibv_qp_state>(m.qp_state) : cur;
  bool allowed = target == IBV_QPS_RESET || target == IBV_QPS_ERR ||
                 (cur == IBV_QPS_RESET && target == IBV_QPS_INIT) ||
                 (cur == IBV_QPS_INIT && (target == IBV_QPS_INIT || target == IBV_QPS_RTR)) ||
                 (cur == IBV_QPS_RTR && target == IBV_QPS_RTS) ||
                 (cur == IBV_QPS_RTS && target == IBV_QPS_RTS);
  if (!allowed) return Status::kBadState;
  // RC: RTR names the peer. UD: no peer (each WR names one); INIT sets the Q_Key.
  const bool ud = q.qp_type == IBV_QPT_UD;
  constexpr uint32_t kRtrNeeds = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (!ud && cur == IBV_QPS_INIT && target == IBV_QPS_RTR && (mask & kRtrNeeds) != kRtrNeeds) {
    return Status::kInvalidArgument;
  }
  if (ud && cur == IBV_QPS_RESET && target == IBV_QPS_INIT && (mask & IBV_QP_QKEY) == 0) {
    return Status::kInvalidArgument;
  }
  if (cur == IBV_QPS_RTR && target == IBV_QPS_RTS && (mask & IBV_QP_SQ_PSN) == 0) {
    return Status::kInvalidArgument;
  }
  if (((mask & IBV_QP_PATH_MTU) != 0 && (m.path_mtu < IBV_MTU_256 || m.path_mtu > IBV_MTU_4096)) ||
      ((mask & IBV_QP_DEST_QPN) != 0 && m.dest_qp_num > 0xFFFFFF) ||
      ((mask & IBV_QP_RQ_PSN) != 0 && m.rq_psn > 0xFFFFFF) ||
      ((mask & IBV_QP_SQ_PSN) != 0 && m.sq_psn > 0xFFFFFF)) {
    return Status::kInvalidArgument;
  }
  if ((mask & IBV_QP_QKEY) != 0) q.qkey = m.qkey;
  if ((mask & IBV_QP_ACCESS_FLAGS) != 0) q.qp_access_flags = m.qp_access_flags;
  if ((mask & IBV_QP_PORT) != 0) q.port_num = m.port_num;
  if ((mask & IBV_QP_PATH_MTU) != 0) q.path_mtu = static_cast<ibv_mtu>(m.path_mtu);
  if ((mask & IBV_QP_DEST_QPN) != 0) q.dest_qp_num = m.dest_qp_num;
  if ((mask & IBV_QP_RQ_PSN) != 0) q.rq_psn = m.rq_psn;
  if ((mask & IBV_QP_SQ_PSN) != 0) q.sq_psn = m.sq_psn;
  if ((mask & IBV_QP_AV) != 0) std::memcpy(q.dgid, m.dgid, sizeof q.dgid);
  if ((mask & IBV_QP_TIMEOUT) != 0) q.timeout = m.timeout;
  if ((mask & IBV_QP_RETRY_CNT) != 0) q.retry_cnt = m.retry_cnt;
  if ((mask & IBV_QP_RNR_RETRY) != 0) q.rnr_retry = m.rnr_retry;
  if ((mask & IBV_QP_MIN_RNR_TIMER) != 0) q.min_rnr_timer = m.min_rnr_timer;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) != 0) q.max_rd_atomic = m.max_rd_atomic;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) != 0) q.max_dest_rd_atomic = m.max_dest_rd_atomic;
  if (target == IBV_QPS_RESET) {
    qp->sq.discard();
    qp->rq.discard();
  }
  // A QP of an SRQ entering ERR takes no more of its WQEs (verbs' last-WQE-reached).
  if (target == IBV_QPS_ERR && cur != IBV_QPS_ERR && q.srq != 0)
    raise_event(qp->app_index, IBV_EVENT_QP_LAST_WQE_REACHED, q.qpn, qp->pending_events, kPendLastWqe);
  q.state = target;
  *state = target;
  HostEvent ev{};
  ev.kind = HostEventKind::kQpStateChanged;
  ev.app_id = q.app_id;
  ev.qpn = q.qpn;
  ev.state = target;
  events_.push_back(ev);
  return Status::kOk;
}

void FastPath::forget_pending(uint32_t app_index, uint8_t& pending) noexcept {
  if (pending == 0 || app_index >= fast_apps_.size()) return;
  FastApp& a = fast_apps_[app_index];
  const uint32_t n = static_cast<uint32_t>(__builtin_popcount(pending));
  pending = 0;
  if (a.deferred == 0) return;
  a.deferred -= std::min(a.deferred, n);
  if (a.deferred == 0) --deferred_apps_;
}

void FastPath::fast_free_qp(uint32_t index, bool died) noexcept {
  QpSlot& qp = qps_[index];
  forget_pending(qp.app_index, qp.pending_events);  // its events go with it
  HostEvent ev{};
  ev.kind = HostEventKind::kQpDestroyed;
  ev.app_id = qp.info.app_id;
  ev.qpn = qp.info.qpn;
  ev.state = qp.info.state;
  ev.app_died = died;
  events_.push_back(ev);
  if (qp.app_index < fast_apps_.size() && fast_apps_[qp.app_index].id == qp.info.app_id) {
    std::vector<uint32_t>& by_bit = fast_apps_[qp.app_index].qpn_by_bit;
    if (qp.doorbell_bit < by_bit.size()) by_bit[qp.doorbell_bit] = 0;
  }
  qp.sq = RingReader<SendWqe>();
  qp.rq = RingReader<RecvWqe>();
  qp.used = false;
}

void FastPath::fast_bind_doorbell(uint32_t app_index, uint32_t app_id, uint32_t bit, uint32_t value) noexcept {
  if (app_index >= fast_apps_.size() || fast_apps_[app_index].id != app_id) return;
  std::vector<uint32_t>& by_bit = fast_apps_[app_index].qpn_by_bit;
  if (bit >= by_bit.size()) {
    if (value == 0) return;
    by_bit.resize(bit + 1, 0);  // control message, not the data path
  }
  by_bit[bit] = value;
}

// The CQEs the application has not polled move to the new ring at the same
// indices, so its reader carries on from where it was; the notify state too.
// The new ring must also hold what the sends already posted to QPs completing
// here will bring (each completes, successfully or flushed): a smaller one
// would overrun for certain. Posted receives are not counted (they complete
// only if a message comes).
Status FastPath::apply_resize(const ControlMsg& m) noexcept {
  if (m.index >= cqs_.size() || !cqs_[m.index].used) return Status::kNotFound;
  CqSlot& cq = cqs_[m.index];
  const uint32_t first = cq.ring.consumed(), end = cq.ring.produced();
  if (cq.ring.corrupt() || end - first > cq.ring.depth()) return Status::kProtocolError;
  const uint32_t handle = make_handle(cq.gen, m.index);
  uint64_t coming = 0;
  for (const QpSlot& qp : qps_)
    if (qp.used && qp.info.send_cq == handle && qp.info.state != IBV_QPS_RESET) coming += qp.sq.outstanding();
  if (end - first + coming > m.cq_ring.depth()) return Status::kInvalidArgument;
  RingWriter<Cqe> ring = m.cq_ring;
  ring.restart_at(first);
  for (uint32_t i = first; i != end; ++i) {
    Cqe* slot = ring.claim();
    *slot = cq.ring.at(i);
    if (m.timestamps != nullptr && cq.timestamps != nullptr)
      m.timestamps[ring.slot_of(slot)] = cq.timestamps[i & (cq.ring.depth() - 1)];
  }
  ring.publish();
  m.notify->armed.store(cq.notify->armed.load(std::memory_order_acquire), std::memory_order_relaxed);
  m.notify->fired.store(cq.notify->fired.load(std::memory_order_acquire), std::memory_order_relaxed);
  m.notify->overrun.store(cq.notify->overrun.load(std::memory_order_acquire), std::memory_order_release);
  cq.ring = ring;
  cq.notify = m.notify;
  cq.timestamps = m.timestamps;
  return Status::kOk;
}

void FastPath::fast_free_mr(uint32_t index) noexcept {
  MrSlot& mr = mrs_[index];
  HostEvent ev{};
  ev.kind = HostEventKind::kMrDeregistered;
  ev.app_id = mr.app_id;
  ev.lkey = make_key(mr.gen, index);
  ev.addr = mr.base;
  ev.length = mr.length;
  events_.push_back(ev);
  mr.used = false;
  mr.base = nullptr;
}

const QpInfo* FastPath::qp_info(uint32_t qpn) const noexcept {
  auto* self = const_cast<FastPath*>(this);
  QpSlot* qp = self->find_qp(qpn);
  return qp != nullptr ? &qp->info : nullptr;
}

FastPath::QpSlot* FastPath::find_qp(uint32_t qpn) noexcept {
  uint32_t index = handle_index(qpn) - qp_slot_base_;
  if (index >= qps_.size() || (qpn >> 24) != 0) return nullptr;
  QpSlot& qp = qps_[index];
  return qp.used && qp.gen == handle_gen(qpn) ? &qp : nullptr;
}

FastPath::CqSlot* FastPath::find_cq(uint32_t handle) noexcept {
  uint32_t index = handle_index(handle);
  if (index >= cqs_.size()) return nullptr;
  CqSlot& cq = cqs_[index];
  return cq.used && cq.gen == handle_gen(handle) ? &cq : nullptr;
}

FastPath::MrSlot* FastPath::find_mr(uint32_t key) noexcept {
  uint32_t index = key >> 8;
  if (index >= mrs_.size()) return nullptr;
  MrSlot& mr = mrs_[index];
  return mr.used && mr.gen == static_cast<uint8_t>(key) ? &mr : nullptr;
}

bool FastPath::next_event(HostEvent* out) {
  if (events_.empty()) {
    // The port has acted on every event so far (it acts on each before
    // asking for the next): what the messages removed may be unmapped.
    link_.consumed_seq.store(applied_seq_, std::memory_order_release);
    return false;
  }
  *out = events_.front();
  events_.pop_front();
  return true;
}

// ---------------------------------------------------------------- shared receive queues

void FastPath::apply_srq(const ControlMsg& m, ControlResult* r) noexcept {
  if (m.kind == MsgKind::kSrqDestroy) {
    if (m.index < srqs_.size() && srqs_[m.index].used) fast_free_srq(m.index);
    return;
  }
  if (m.kind == MsgKind::kSrqModify) {
    SrqSlot* s = m.index < srqs_.size() && srqs_[m.index].used ? &srqs_[m.index] : nullptr;
    // The limit cannot exceed the depth (verbs: EINVAL); it is re-armed here.
    const Status st = s == nullptr ? Status::kNotFound : m.limit > s->depth ? Status::kInvalidArgument : Status::kOk;
    if (st == Status::kOk) s->limit = m.limit;
    if (r != nullptr) r->status = static_cast<uint32_t>(st);
    return;
  }
  if (m.index >= srqs_.size()) srqs_.resize(m.index + 1);
  SrqSlot& s = srqs_[m.index];
  s = m.srq;
  const uint32_t handle = make_handle(s.gen, m.index);
  fast_bind_doorbell(s.app_index, s.app_id, s.doorbell_bit, kSrqDoorbell | handle);
  HostEvent ev{};
  ev.kind = HostEventKind::kSrqCreated;
  ev.app_id = s.app_id;
  ev.srq = handle;
  ev.srq_depth = s.depth;
  ev.pd = s.pd;
  events_.push_back(ev);
}

void FastPath::fast_free_srq(uint32_t index) noexcept {
  SrqSlot& s = srqs_[index];
  forget_pending(s.app_index, s.pending_events);
  HostEvent ev{};
  ev.kind = HostEventKind::kSrqDestroyed;
  ev.app_id = s.app_id;
  ev.srq = make_handle(s.gen, index);
  events_.push_back(ev);
  fast_bind_doorbell(s.app_index, s.app_id, s.doorbell_bit, 0);
  s = SrqSlot{.gen = s.gen};
}

FastPath::SrqSlot* FastPath::find_srq(uint32_t handle) noexcept {
  const uint32_t index = handle & 0xFFFF;
  if (index >= srqs_.size() || (handle >> 24) != 0) return nullptr;
  SrqSlot& s = srqs_[index];
  return s.used && s.gen == static_cast<uint8_t>(handle >> 16) ? &s : nullptr;
}

// ---------------------------------------------------------------- the link's other fields

void FastPath::set_vnic_ips(std::vector<uint32_t> ips) {
  std::lock_guard<std::mutex> g(link_.vnic_mu);
  link_.vnic_ips = std::move(ips);
}

void FastPath::set_vnic_owners(std::vector<VnicOwner> owners) {
  std::lock_guard<std::mutex> g(link_.vnic_mu);
  link_.vnic_owners = std::move(owners);
}

std::size_t FastPath::table_bytes() const noexcept {
  std::size_t n = fast_apps_.capacity() * sizeof(FastApp) + qps_.capacity() * sizeof(QpSlot) +
                  cqs_.capacity() * sizeof(CqSlot) + mrs_.capacity() * sizeof(MrSlot) +
                  srqs_.capacity() * sizeof(SrqSlot);
  for (const FastApp& a : fast_apps_) n += a.qpn_by_bit.capacity() * sizeof(uint32_t);
  return n;
}

}  // namespace tandem::rnic::host
