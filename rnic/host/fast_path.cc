// FastPath's data path (the data lcore): doorbells, WQE fetches (their
// templates in wqe_fetch.h), completions, asynchronous events, the responder's
// rkey checks and the adaptive idle handshake. Reads and writes only the fast
// half's records and the applications' shared rings.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "rnic/host/fast_path.h"
#include "rnic/host/fast_records.h"
#include "rnic/host/handles.h"
#include "rnic/host/host_link.h"
#include "rnic/host/wqe_fetch.h"

namespace tandem::rnic::host {

namespace {

// Shared memory may change under us: take one copy, then look only at it.
template <typename T>
void copy_from_shared(T* dst, const T* src) noexcept {
  std::memcpy(dst, src, sizeof(T));
  asm volatile("" ::: "memory");
}

}  // namespace

std::size_t FastPath::ready_qps(std::span<uint32_t> out, uint32_t first_app) noexcept {
  std::size_t n = 0;
  const std::size_t napps = fast_apps_.size();
  for (std::size_t k = 0; k < napps; ++k) {
    FastApp& app = fast_apps_[(first_app + k) % napps];
    if (app.doorbells == nullptr) continue;
    DoorbellPage* db = app.doorbells;
    for (uint32_t s = 0; s < DoorbellPage::kSummaryWords; ++s) {
      if (db->summary[s].load(std::memory_order_relaxed) == 0) continue;
      uint64_t summary = db->summary[s].exchange(0, std::memory_order_acquire);
      while (summary != 0) {
        uint32_t w = s * 64 + static_cast<uint32_t>(__builtin_ctzll(summary));
        summary &= summary - 1;
        uint64_t bits = db->words[w].exchange(0, std::memory_order_acquire);
        while (bits != 0) {
          if (n == out.size()) {
            // Out of room: give back what we took so nothing is lost.
            db->words[w].fetch_or(bits, std::memory_order_relaxed);
            db->summary[s].fetch_or(summary | (uint64_t{1} << (w % 64)), std::memory_order_release);
            return n;
          }
          uint32_t bit = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
          bits &= bits - 1;
          if (bit < app.qpn_by_bit.size() && app.qpn_by_bit[bit] != 0) {
            out[n++] = app.qpn_by_bit[bit];
          }
        }
      }
    }
  }
  return n;
}

bool FastPath::write_cqe(uint32_t cq_handle, const Cqe& cqe) noexcept {
  CqSlot* cq = find_cq(cq_handle);
  if (cq == nullptr || cq->overrun) return false;
  Cqe* slot = cq->ring.claim();
  if (slot == nullptr) {
    if (cq->ring.corrupt()) ++counters_.ring_corrupt;
    ++counters_.cq_overruns;
    // Verbs: an overrun CQ is in error (the application learns it from
    // poll_cq once it has taken what the ring holds), and every QP that
    // completes into it goes to ERR (complete_send/recv).
    cq->overrun = true;
    cq->notify->overrun.store(1, std::memory_order_release);
    raise_event(cq->app_index, IBV_EVENT_CQ_ERR, cq_handle, cq->pending_events, kPendCqErr);
    return false;
  }
  *slot = cqe;
  if (cq->timestamps != nullptr) cq->timestamps[cq->ring.slot_of(slot)] = fast_now_;
  cq->ring.publish();
  ++counters_.cqes;
  if (cq->event_fd >= 0) {
    // Pairs with the application's fence between arming and its last poll.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (cq->notify->armed.load(std::memory_order_relaxed) != 0 &&
        cq->notify->armed.exchange(0, std::memory_order_acq_rel) != 0) {
      cq->notify->fired.store(1, std::memory_order_release);
      uint64_t one = 1;
      ssize_t w = write(cq->event_fd, &one, sizeof one);
      (void)w;  // EAGAIN: the counter is already non-zero, the app will wake anyway
      ++counters_.cq_events;
    }
  }
  return true;
}

bool FastPath::cq_in_error(uint32_t cq_handle) noexcept {
  const CqSlot* cq = find_cq(cq_handle);
  return cq == nullptr || cq->overrun;
}

uint32_t FastPath::cq_space(uint32_t qpn, bool send) noexcept {
  QpSlot* qp = find_qp(qpn);
  if (qp == nullptr) return 0;
  CqSlot* cq = find_cq(send ? qp->info.send_cq : qp->info.recv_cq);
  return cq != nullptr ? cq->ring.free_entries() : 0;
}

void FastPath::set_error(QpSlot& qp) noexcept {
  if (qp.info.state == IBV_QPS_ERR) return;
  qp.info.state = IBV_QPS_ERR;
  // The worker moved it (not the application): QP fatal; on an SRQ also last-WQE-reached.
  raise_event(qp.app_index, IBV_EVENT_QP_FATAL, qp.info.qpn, qp.pending_events, kPendQpFatal);
  if (qp.info.srq != 0)
    raise_event(qp.app_index, IBV_EVENT_QP_LAST_WQE_REACHED, qp.info.qpn, qp.pending_events, kPendLastWqe);
  HostEvent ev{};
  ev.kind = HostEventKind::kQpStateChanged;
  ev.app_id = qp.info.app_id;
  ev.qpn = qp.info.qpn;
  ev.state = IBV_QPS_ERR;
  events_.push_back(ev);  // control-path allocation only: once per QP error
}

void FastPath::qp_error(uint32_t qpn) noexcept {
  if (QpSlot* qp = find_qp(qpn)) set_error(*qp);
}

// ---------------------------------------------------------------- asynchronous events (fast half)

bool FastPath::push_event(uint32_t app_index, ibv_event_type type, uint32_t element) noexcept {
  if (app_index >= fast_apps_.size()) return true;
  FastApp& a = fast_apps_[app_index];
  if (a.events.depth() == 0) return true;  // protocol v1: no ring, no events
  AsyncEvent* e = a.events.claim();
  if (e == nullptr) return false;
  e->type = static_cast<uint32_t>(type);
  e->element = element;
  a.events.publish();
  a.event_stats->written.fetch_add(1, std::memory_order_relaxed);
  ++counters_.async_events;
  uint64_t one = 1;
  const ssize_t w = write(a.event_fd, &one, sizeof one);  // non-blocking: EAGAIN means already readable
  (void)w;
  return true;
}

void FastPath::raise_event(uint32_t app_index, ibv_event_type type, uint32_t element, uint8_t& pending,
                             uint8_t bit) noexcept {
  if (pending & bit) return;  // already waiting for room: one of a kind per object
  if (push_event(app_index, type, element)) return;
  pending |= bit;
  FastApp& a = fast_apps_[app_index];
  if (a.deferred++ == 0) ++deferred_apps_;
  a.event_stats->deferred.fetch_add(1, std::memory_order_relaxed);
  ++counters_.async_events_deferred;
}

void FastPath::publish_clock(uint64_t tsc_base, uint64_t tsc_mult) noexcept {
  page_->clock_tsc_base.store(tsc_base, std::memory_order_relaxed);
  page_->clock_tsc_mult.store(tsc_mult, std::memory_order_release);
}

void FastPath::set_port_active(bool active) noexcept {
  if (active == port_active_) return;
  port_active_ = active;
  page_->port_active.store(active ? 1 : 0, std::memory_order_release);
  const ibv_event_type type = active ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
  for (uint32_t i = 0; i < fast_apps_.size(); ++i) {
    FastApp& a = fast_apps_[i];
    if (a.id == 0 || a.events.depth() == 0) continue;
    if (a.pending_port) continue;  // the pending one reports the state when written
    if (push_event(i, type, 1)) continue;
    a.pending_port = kPendPort;
    if (a.deferred++ == 0) ++deferred_apps_;
    a.event_stats->deferred.fetch_add(1, std::memory_order_relaxed);
    ++counters_.async_events_deferred;
  }
}

// The events kept on objects while their applications' rings were full,
// written now that there is room (oldest kind first is not promised: they
// are state, not a history). Runs only while some are pending.
void FastPath::flush_deferred() noexcept {
  for (uint32_t i = 0; i < fast_apps_.size(); ++i) {
    FastApp& a = fast_apps_[i];
    if (a.deferred == 0 || a.events.free_entries() == 0) continue;
    auto take = [&](uint8_t& pending, uint8_t bit, ibv_event_type type, uint32_t element) {
      if (!(pending & bit) || !push_event(i, type, element)) return;
      pending &= static_cast<uint8_t>(~bit);
      --a.deferred;
    };
    if (a.pending_port) take(a.pending_port, kPendPort, port_active_ ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR, 1);
    for (QpSlot& qp : qps_) {
      if (a.deferred == 0) break;
      if (!qp.used || qp.app_index != i || qp.pending_events == 0) continue;
      take(qp.pending_events, kPendQpFatal, IBV_EVENT_QP_FATAL, qp.info.qpn);
      take(qp.pending_events, kPendLastWqe, IBV_EVENT_QP_LAST_WQE_REACHED, qp.info.qpn);
    }
    for (uint32_t c = 0; c < cqs_.size() && a.deferred != 0; ++c) {
      CqSlot& cq = cqs_[c];
      if (cq.used && cq.app_index == i && cq.pending_events != 0)
        take(cq.pending_events, kPendCqErr, IBV_EVENT_CQ_ERR, make_handle(cq.gen, c));
    }
    for (uint32_t k = 0; k < srqs_.size() && a.deferred != 0; ++k) {
      SrqSlot& sq = srqs_[k];
      if (sq.used && sq.app_index == i && sq.pending_events != 0)
        take(sq.pending_events, kPendSrqLimit, IBV_EVENT_SRQ_LIMIT_REACHED, make_handle(sq.gen, k));
    }
    if (a.deferred == 0) --deferred_apps_;
  }
}

bool FastPath::translate_for(uint32_t app_id, uint32_t pd, const WqeSge& s, bool local_write, Segment* out,
                               uint32_t* vendor_err) noexcept {
  MrSlot* mr = find_mr(s.lkey);
  if (mr == nullptr || mr->app_id != app_id || mr->pd != pd ||
      (local_write && (mr->access & IBV_ACCESS_LOCAL_WRITE) == 0)) {
    ++counters_.bad_lkey;
    *vendor_err = kVendorBadLkey;
    return false;
  }
  if (s.offset > mr->length || s.length > mr->length - s.offset) {
    ++counters_.sge_out_of_bounds;
    *vendor_err = kVendorOutOfBounds;
    return false;
  }
  out->addr = mr->base + s.offset;
  out->length = s.length;
  out->lkey = s.lkey;
  out->va = mr->addr + s.offset;
  return true;
}

std::size_t FastPath::fetch_send(uint32_t qpn, std::span<SendWork> out) noexcept {
  return fetch_send_to(qpn, out.size(), [&](std::size_t i) -> SendWork& { return out[i]; });
}

std::size_t FastPath::fetch_send(uint32_t qpn, SendWork* const* out, std::size_t max) noexcept {
  return fetch_send_to(qpn, max, [&](std::size_t i) -> SendWork& { return *out[i]; });
}


template <class Out>
std::size_t FastPath::fetch_send_to(uint32_t qpn, std::size_t max, Out&& out) noexcept {
  SendWorkSink<Out&> sink{out};
  return fetch_send_into(qpn, max, sink);
}

std::size_t FastPath::fetch_recv(uint32_t qpn, std::span<RecvWork> out) noexcept {
  return fetch_recv_to(qpn, out.size(), [&](std::size_t i) -> RecvWork& { return out[i]; });
}

std::size_t FastPath::fetch_recv(uint32_t qpn, RecvWork* const* out, std::size_t max) noexcept {
  return fetch_recv_to(qpn, max, [&](std::size_t i) -> RecvWork& { return *out[i]; });
}

template <class Out>
std::size_t FastPath::fetch_recv_to(uint32_t qpn, std::size_t max, Out&& out) noexcept {
  RecvWorkSink<Out&> sink{out};
  return fetch_recv_into(qpn, max, sink);
}

uint32_t FastPath::send_queued(uint32_t qpn) noexcept {
  QpSlot* qp = find_qp(qpn);
  return qp != nullptr ? qp->sq.available() : 0;
}

uint32_t FastPath::recv_queued(uint32_t qpn) noexcept {
  QpSlot* qp = find_qp(qpn);
  return qp != nullptr ? qp->rq.available() : 0;
}

void FastPath::flush_send(QpSlot& qp) noexcept {
  uint32_t avail = qp.sq.available();
  uint32_t done = 0;
  for (; done < avail; ++done) {
    SendWqe w;
    copy_from_shared(&w, qp.sq.peek(done));
    Cqe c{};
    c.wr_id = w.wr_id;
    c.qp_num = qp.info.qpn;
    c.status = IBV_WC_WR_FLUSH_ERR;
    c.opcode = static_cast<uint8_t>(wc_opcode_of(w.opcode));
    if (!write_cqe(qp.info.send_cq, c) && !cq_in_error(qp.info.send_cq)) break;  // room later
  }
  if (done > 0) {
    qp.sq.release(done);
    qp.sq.completed(done);
    counters_.flushed_wqes += done;
  }
}

void FastPath::flush_recv(QpSlot& qp) noexcept {
  uint32_t avail = qp.rq.available();
  uint32_t done = 0;
  for (; done < avail; ++done) {
    Cqe c{};
    c.wr_id = qp.rq.peek(done)->wr_id;
    c.qp_num = qp.info.qpn;
    c.status = IBV_WC_WR_FLUSH_ERR;
    c.opcode = IBV_WC_RECV;
    if (!write_cqe(qp.info.recv_cq, c) && !cq_in_error(qp.info.recv_cq)) break;  // room later
  }
  if (done > 0) {
    qp.rq.release(done);
    qp.rq.completed(done);
    counters_.flushed_wqes += done;
  }
}

bool FastPath::complete_send(uint32_t qpn, const SendWork& work, ibv_wc_status status) noexcept {
  return complete_send(qpn, work.wr_id, wc_opcode_of(static_cast<uint8_t>(work.opcode)),
                       work.opcode == IBV_WR_RDMA_READ ? work.length : 0, (work.send_flags & IBV_SEND_SIGNALED) != 0,
                       status);
}

bool FastPath::complete_send(uint32_t qpn, uint64_t wr_id, ibv_wc_opcode opcode, uint32_t byte_len, bool signaled,
                               ibv_wc_status status) noexcept {
  QpSlot* qp = find_qp(qpn);
  if (qp == nullptr) return false;
  // A QP in RESET completes nothing: its WQEs were dropped (discard) and the
  // application has cleaned its CQs of it (verbs' RESET), however late this comes.
  if (qp->info.state == IBV_QPS_RESET) return true;
  qp->sq.completed(1);  // finished, whether or not a CQE says so
  signaled = signaled || qp->info.sq_sig_all;
  if (status != IBV_WC_SUCCESS) set_error(*qp);
  if (status == IBV_WC_SUCCESS && !signaled) return true;
  Cqe c{};
  c.wr_id = wr_id;
  c.qp_num = qpn;
  c.status = static_cast<uint8_t>(status);
  c.opcode = static_cast<uint8_t>(opcode);
  c.byte_len = byte_len;
  if (!write_cqe(qp->info.send_cq, c)) {
    set_error(*qp);
    return false;
  }
  return true;
}

bool FastPath::complete_recv(uint32_t qpn, const RecvWork& work, ibv_wc_status status,
                               uint32_t byte_len, ibv_wc_opcode opcode, bool with_imm,
                               uint32_t imm_data, uint32_t src_qp, bool grh) noexcept {
  return complete_recv(qpn, work.wr_id, status, byte_len, opcode, with_imm, imm_data, src_qp, grh);
}

bool FastPath::complete_recv(uint32_t qpn, uint64_t wr_id, ibv_wc_status status, uint32_t byte_len,
                               ibv_wc_opcode opcode, bool with_imm, uint32_t imm_data, uint32_t src_qp,
                               bool grh) noexcept {
  QpSlot* qp = find_qp(qpn);
  if (qp == nullptr) return false;
  // A QP in RESET completes nothing: its WQEs were dropped (discard) and the
  // application has cleaned its CQs of it (verbs' RESET), however late this comes.
  if (qp->info.state == IBV_QPS_RESET) return true;
  if (qp->info.srq == 0) qp->rq.completed(1);  // an SRQ's WQEs are in no QP's ring
  // A UD receive too short for its datagram fails alone; the QP goes on.
  if (status != IBV_WC_SUCCESS && qp->info.qp_type != IBV_QPT_UD) set_error(*qp);
  Cqe c{};
  c.wr_id = wr_id;
  c.qp_num = qpn;
  c.status = static_cast<uint8_t>(status);
  c.opcode = static_cast<uint8_t>(opcode);
  c.byte_len = byte_len;
  c.imm_data = imm_data;
  c.wc_flags = static_cast<uint16_t>((with_imm ? IBV_WC_WITH_IMM : 0) | (grh ? IBV_WC_GRH : 0));
  c.src_qp = src_qp;
  if (!write_cqe(qp->info.recv_cq, c)) {
    set_error(*qp);
    return false;
  }
  return true;
}

uint8_t* FastPath::translate_remote(uint32_t qpn, uint32_t rkey, uint64_t remote_addr,
                                      uint32_t length, int access) noexcept {
  QpSlot* qp = find_qp(qpn);
  MrSlot* mr = find_mr(rkey);
  auto need = static_cast<uint32_t>(access);
  if (qp == nullptr || mr == nullptr || mr->app_id != qp->info.app_id || mr->pd != qp->info.pd ||
      (mr->access & need) != need || (qp->info.qp_access_flags & need) != need ||
      remote_addr < mr->addr || length > mr->length || remote_addr - mr->addr > mr->length - length) {
    ++counters_.bad_rkey;
    return nullptr;
  }
  return mr->base + (remote_addr - mr->addr);
}

// ---------------------------------------------------------------- idle mode

bool FastPath::begin_idle() noexcept {
  page_->sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (FastApp& app : fast_apps_) {
    if (app.doorbells == nullptr) continue;
    for (auto& s : app.doorbells->summary) {
      if (s.load(std::memory_order_relaxed) != 0) {
        page_->sleeping.store(0, std::memory_order_relaxed);
        return false;
      }
    }
  }
  return true;
}

void FastPath::end_idle() noexcept {
  page_->sleeping.store(0, std::memory_order_relaxed);
  uint64_t v;
  while (read(link_.wake_fd, &v, sizeof v) == sizeof v) {
  }
}

// ---------------------------------------------------------------- shared receive queues

std::size_t FastPath::fetch_srq_recv(uint32_t srq, std::span<RecvWork> out) noexcept {
  return fetch_srq_recv_to(srq, out.size(), [&](std::size_t i) -> RecvWork& { return out[i]; });
}

std::size_t FastPath::fetch_srq_recv(uint32_t srq, RecvWork* const* out, std::size_t max) noexcept {
  return fetch_srq_recv_to(srq, max, [&](std::size_t i) -> RecvWork& { return *out[i]; });
}

template <class Out>
std::size_t FastPath::fetch_srq_recv_to(uint32_t srq, std::size_t max, Out&& out) noexcept {
  RecvWorkSink<Out&> sink{out};
  return fetch_srq_recv_into(srq, max, sink);
}

uint32_t FastPath::srq_limit(uint32_t srq) noexcept {
  SrqSlot* s = find_srq(srq & ~kSrqDoorbell);
  return s != nullptr ? s->limit : 0;
}

bool FastPath::check_srq_limit(uint32_t srq, uint32_t posted) noexcept {
  SrqSlot* s = find_srq(srq & ~kSrqDoorbell);
  if (s == nullptr || s->limit == 0 || posted >= s->limit) return false;
  s->limit = 0;  // fires once; the application arms it again (ibv_modify_srq)
  raise_event(s->app_index, IBV_EVENT_SRQ_LIMIT_REACHED, srq & ~kSrqDoorbell, s->pending_events, kPendSrqLimit);
  return true;
}

uint32_t FastPath::srq_queued(uint32_t srq) noexcept {
  SrqSlot* s = find_srq(srq & ~kSrqDoorbell);
  return s != nullptr ? s->ring.available() : 0;
}

// ---------------------------------------------------------------- counters

HostCounters FastPath::counters() const noexcept {
  HostCounters c = counters_;
  c.protocol_errors = link_.protocol_errors.load(std::memory_order_relaxed);
  c.requests_refused = link_.requests_refused.load(std::memory_order_relaxed);
  c.attach_denied = link_.attach_denied.load(std::memory_order_relaxed);
  c.silent_timeouts = link_.silent_timeouts.load(std::memory_order_relaxed);
  c.silent_evicted = link_.silent_evicted.load(std::memory_order_relaxed);
  const ResourceAmounts refused = link_.quotas->refused_total();
  c.refused_qps = refused[resource_index(Resource::kQps)];
  c.refused_cqs = refused[resource_index(Resource::kCqs)];
  c.refused_mrs = refused[resource_index(Resource::kMrs)];
  c.refused_pds = refused[resource_index(Resource::kPds)];
  c.refused_bytes = refused[resource_index(Resource::kBytes)];
  c.refused_srqs = refused[resource_index(Resource::kSrqs)];
  c.refused_queue_bytes = refused[resource_index(Resource::kQueueBytes)];
  return c;
}

}  // namespace tandem::rnic::host
