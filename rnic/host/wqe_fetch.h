// FastPath::fetch_send_into / fetch_recv_into / fetch_srq_recv_into: WQEs
// taken from a shared ring, checked, and handed field by field to a sink that
// writes them where they are kept until completion (the worker: the core's
// queue slot). Each field is read from shared memory once, so the checks hold
// against an application rewriting the ring meanwhile, and a WQE is copied
// once. The data lcore's (FastPath). Included by fast_path.cc and by the port
// layer (its sinks); needs the fast half's records, so it lives here.
#pragma once

#include <cstring>

#include "rnic/host/fast_path.h"
#include "rnic/host/fast_records.h"
#include "rnic/host/queue_layout.h"
#include "rnic/host/spsc_ring.h"

namespace tandem::rnic::host {

// Takes the WQE's raw byte: an application's opcode past ibv_wr_opcode's range may not be cast to it.
inline ibv_wc_opcode wc_opcode_of(uint8_t op) noexcept {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_WC_FETCH_ADD;
    default:
      return IBV_WC_SEND;
  }
}

inline bool is_atomic_opcode(uint8_t op) noexcept {
  return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

inline bool valid_send_opcode(uint8_t op) noexcept {
  return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND ||
         op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_READ || is_atomic_opcode(op);
}

// One read of a field the application can rewrite at any time.
template <class T>
inline T read_once(const T& shared) noexcept {
  return *static_cast<const volatile T*>(&shared);
}

// A WQE's gather list, each entry read once from the ring, checked against the
// MRs of (app_id, pd) and handed to sink.segment(n, j, ...); adds its bytes to
// *total. The first failure's status (vendor_err in *vendor), else SUCCESS.
template <class Sink>
ibv_wc_status FastPath::take_sges(const WqeSge* ring, uint32_t num_sge, uint32_t app_id, uint32_t pd,
                                    bool local_write, Sink& sink, std::size_t n, uint64_t* total,
                                    uint32_t* vendor) noexcept {
  if (num_sge > kMaxSge) {
    ++counters_.bad_wqe;
    *vendor = kVendorBadWqe;
    return IBV_WC_LOC_QP_OP_ERR;
  }
  for (uint32_t j = 0; j < num_sge; ++j) {
    const WqeSge s{read_once(ring[j].offset), read_once(ring[j].length), read_once(ring[j].lkey)};
    Segment seg;
    if (!translate_for(app_id, pd, s, local_write, &seg, vendor)) return IBV_WC_LOC_PROT_ERR;
    sink.segment(n, j, seg);
    *total += s.length;
  }
  if (*total > (uint64_t{1} << 31)) {
    ++counters_.bad_wqe;
    *vendor = kVendorBadWqe;
    return IBV_WC_LOC_LEN_ERR;
  }
  return IBV_WC_SUCCESS;
}

// The first WQE of `ring` failed its checks: it completes with `why` on `cq`
// and the QP goes to ERR. False if the CQ had no room (taken again next time).
template <class Ring>
bool FastPath::fail_first_wqe(QpSlot& qp, Ring& ring, uint32_t cq, uint64_t wr_id, ibv_wc_status why,
                                ibv_wc_opcode opcode, uint32_t vendor) noexcept {
  Cqe c{};
  c.wr_id = wr_id;
  c.qp_num = qp.info.qpn;
  c.status = static_cast<uint8_t>(why);
  c.opcode = static_cast<uint8_t>(opcode);
  c.vendor_err = vendor;
  if (!write_cqe(cq, c)) return false;
  ring.release(1);
  ring.completed(1);
  set_error(qp);
  return true;
}

// Sink (all inline in the caller's type; i = the WQE's index in this call):
//   void header(std::size_t i, uint64_t wr_id, ibv_wr_opcode op, uint32_t send_flags,
//               uint32_t imm_data /* network order */, uint64_t remote_addr, uint32_t rkey);
//   void atomic(std::size_t i, uint64_t compare_add, uint64_t swap);  // atomics, after header
//   void segment(std::size_t i, uint32_t j, const Segment& s);   // checked and translated
//   void inline_bytes(std::size_t i, const uint8_t* ring, uint32_t len);  // copy them out
//   bool taken(std::size_t i, uint32_t length);  // the WQE is whole; false: take no more
// A WQE that fails the checks gets no taken(): what the sink wrote of it is
// its to discard. Otherwise as fetch_send (fast_path.h).
template <class Sink>
std::size_t FastPath::fetch_send_into(uint32_t qpn, std::size_t max, Sink& sink) noexcept {
  QpSlot* qp = find_qp(qpn);
  if (qp == nullptr) return 0;
  if (qp->info.state == IBV_QPS_ERR) {
    flush_send(*qp);
    return 0;
  }
  if (qp->info.state != IBV_QPS_RTS && qp->info.state != IBV_QPS_SQD) return 0;
  const uint32_t avail = qp->sq.available();
  if (qp->sq.corrupt()) {
    ++counters_.ring_corrupt;
    set_error(*qp);
    return 0;
  }
  std::size_t n = 0;
  while (n < max && n < avail) {
    const SendWqe& e = *qp->sq.peek(static_cast<uint32_t>(n));
    const uint64_t wr_id = read_once(e.wr_id);
    const uint32_t send_flags = read_once(e.send_flags);
    const uint8_t opcode = read_once(e.opcode);
    const uint8_t num_sge = read_once(e.num_sge);
    const uint16_t inline_len = read_once(e.inline_len);
    ibv_wc_status why = IBV_WC_SUCCESS;
    uint32_t vendor = 0;
    const bool inl = (send_flags & IBV_SEND_INLINE) != 0;
    // READ and atomics land in their gather list: nothing inline; an atomic has one 8-byte entry.
    const bool lands = opcode == IBV_WR_RDMA_READ || is_atomic_opcode(opcode);
    if (!valid_send_opcode(opcode) || num_sge > kMaxSge || inline_len > kMaxInline || (inl && lands) ||
        (is_atomic_opcode(opcode) && num_sge != 1)) {
      ++counters_.bad_wqe;
      why = IBV_WC_LOC_QP_OP_ERR;
      vendor = kVendorBadWqe;
    }
    uint64_t total = 0;
    if (why == IBV_WC_SUCCESS) {
      sink.header(n, wr_id, static_cast<ibv_wr_opcode>(opcode), send_flags, read_once(e.imm_data),
                  read_once(e.remote_addr), read_once(e.rkey));
      if (is_atomic_opcode(opcode)) sink.atomic(n, read_once(e.atomic.compare_add), read_once(e.atomic.swap));
      if (inl) {
        sink.inline_bytes(n, e.inline_data, inline_len);
        total = inline_len;
      } else {
        // RDMA READ and atomics write into the local SGEs: they need local write access.
        why = take_sges(e.sge, num_sge, qp->info.app_id, qp->info.pd, lands, sink, n, &total, &vendor);
      }
    }
    if (why != IBV_WC_SUCCESS) {
      // Hand over the good ones first; this one is next time's first.
      if (n == 0) fail_first_wqe(*qp, qp->sq, qp->info.send_cq, wr_id, why, wc_opcode_of(opcode), vendor);
      break;
    }
    ++n;
    if (!sink.taken(n - 1, static_cast<uint32_t>(total))) break;
  }
  if (n > 0) {
    qp->sq.release(static_cast<uint32_t>(n));
    counters_.send_wqes += n;
  }
  return n;
}

// Receive sinks (i as above):
//   void segment(std::size_t i, uint32_t j, const Segment& s);   // checked and translated
//   bool taken(std::size_t i, uint64_t wr_id, uint32_t num_sge, uint32_t length);  // false: take no more
//   bool taken_invalid(std::size_t i, uint64_t wr_id);  // an RC QP's WQE whose buffer failed the checks
// A bad WQE of an RC QP is handed over marked (taken_invalid): it fails when
// a message needs it, and the sender is told (a remote operational error),
// as an RNIC that reads receive WQEs when they are used does. One of a UD
// QP completes with an error at once and moves the QP to ERR; one of an SRQ
// has no QP to fail: counted and skipped.
template <class Sink>
std::size_t FastPath::fetch_recv_into(uint32_t qpn, std::size_t max, Sink& sink) noexcept {
  QpSlot* qp = find_qp(qpn);
  if (qp == nullptr) return 0;
  if (qp->info.state == IBV_QPS_ERR) {
    flush_recv(*qp);
    return 0;
  }
  if (qp->info.state == IBV_QPS_RESET) return 0;
  const uint32_t avail = qp->rq.available();
  if (qp->rq.corrupt()) {
    ++counters_.ring_corrupt;
    set_error(*qp);
    return 0;
  }
  std::size_t n = 0;
  while (n < max && n < avail) {
    const RecvWqe& e = *qp->rq.peek(static_cast<uint32_t>(n));
    const uint64_t wr_id = read_once(e.wr_id);
    const uint32_t num_sge = read_once(e.num_sge);
    uint32_t vendor = 0;
    uint64_t total = 0;
    const ibv_wc_status why =
        take_sges(e.sge, num_sge, qp->info.app_id, qp->info.pd, true, sink, n, &total, &vendor);
    if (why == IBV_WC_LOC_PROT_ERR && qp->info.qp_type == IBV_QPT_RC) {
      ++counters_.recv_wqes_invalid;
      ++n;
      if (!sink.taken_invalid(n - 1, wr_id)) break;
      continue;
    }
    if (why != IBV_WC_SUCCESS) {
      if (n == 0) fail_first_wqe(*qp, qp->rq, qp->info.recv_cq, wr_id, why, IBV_WC_RECV, vendor);
      break;
    }
    ++n;
    if (!sink.taken(n - 1, wr_id, num_sge, static_cast<uint32_t>(total))) break;
  }
  if (n > 0) {
    qp->rq.release(static_cast<uint32_t>(n));
    counters_.recv_wqes += n;
  }
  return n;
}

template <class Sink>
std::size_t FastPath::fetch_srq_recv_into(uint32_t srq, std::size_t max, Sink& sink) noexcept {
  SrqSlot* s = find_srq(srq & ~kSrqDoorbell);
  if (s == nullptr) return 0;
  const uint32_t avail = s->ring.available();
  if (s->ring.corrupt()) {
    ++counters_.ring_corrupt;
    return 0;
  }
  std::size_t n = 0;
  uint32_t used = 0;
  for (; used < avail && n < max; ++used) {
    const RecvWqe& e = *s->ring.peek(used);
    const uint64_t wr_id = read_once(e.wr_id);
    const uint32_t num_sge = read_once(e.num_sge);
    uint64_t total = 0;
    uint32_t vendor = 0;
    const bool good = take_sges(e.sge, num_sge, s->app_id, s->pd, true, sink, n, &total, &vendor) == IBV_WC_SUCCESS;
    if (!good) {
      ++counters_.srq_wqes_dropped;
      continue;
    }
    ++n;
    if (!sink.taken(n - 1, wr_id, num_sge, static_cast<uint32_t>(total))) {
      ++used;
      break;
    }
  }
  if (used > 0) s->ring.release(used);
  counters_.srq_wqes += n;
  return n;
}

// fetch_send_into's sink for the SendWork copies fetch_send hands out.
template <class Out>
struct SendWorkSink {
  Out out;
  void header(std::size_t i, uint64_t wr_id, ibv_wr_opcode op, uint32_t send_flags, uint32_t imm_data,
              uint64_t remote_addr, uint32_t rkey) noexcept {
    SendWork& o = out(i);
    o.wr_id = wr_id;
    o.remote_addr = remote_addr;
    o.rkey = rkey;
    o.imm_data = imm_data;
    o.opcode = op;
    o.send_flags = send_flags;
    o.num_sge = 0;
    o.inline_len = 0;
    o.compare_add = o.swap = 0;
  }
  void atomic(std::size_t i, uint64_t compare_add, uint64_t swap) noexcept {
    SendWork& o = out(i);
    o.compare_add = compare_add;
    o.swap = swap;
  }
  void segment(std::size_t i, uint32_t j, const Segment& s) noexcept {
    SendWork& o = out(i);
    o.sge[j] = s;
    o.num_sge = j + 1;
  }
  void inline_bytes(std::size_t i, const uint8_t* ring, uint32_t len) noexcept {
    SendWork& o = out(i);
    o.inline_len = len;
    std::memcpy(o.inline_data, ring, len);
  }
  bool taken(std::size_t i, uint32_t length) noexcept {
    out(i).length = length;
    return true;
  }
};

// fetch_recv_into's sink for the RecvWork copies fetch_recv hands out.
template <class Out>
struct RecvWorkSink {
  Out out;
  void segment(std::size_t i, uint32_t j, const Segment& s) noexcept { out(i).sge[j] = s; }
  bool taken(std::size_t i, uint64_t wr_id, uint32_t num_sge, uint32_t length) noexcept {
    RecvWork& o = out(i);
    o.wr_id = wr_id;
    o.num_sge = num_sge;
    o.length = length;
    o.invalid = false;
    return true;
  }
  bool taken_invalid(std::size_t i, uint64_t wr_id) noexcept {
    RecvWork& o = out(i);
    o.wr_id = wr_id;
    o.num_sge = 0;
    o.length = 0;
    o.invalid = true;
    return true;
  }
};

}  // namespace tandem::rnic::host
