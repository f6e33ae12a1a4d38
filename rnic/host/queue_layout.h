// Shared-memory layout of the host queues (the PCIe stand-in between a tenant
// application and its RNIC worker): WQE and CQE descriptors, ring control
// lines, and where each piece sits in the memfd that carries it.
//
// Every region is created by the application and mapped by the worker, except
// the WorkerPage (created by the worker, mapped read-only by applications).
// Offsets only, never pointers: the two sides map at different addresses.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tandem::rnic::host {

inline constexpr std::size_t kCacheLine = 64;
inline constexpr uint32_t kMaxSge = 6;                    // SGEs per WQE (fills 128 bytes)
inline constexpr uint32_t kMaxInline = kMaxSge * 16;     // inline bytes reuse the SGE space
inline constexpr uint32_t kMaxQueueDepth = 32768;        // entries per ring, power of two
inline constexpr uint32_t kMaxQpsPerApp = 16384;         // doorbell bits per application

// One scatter/gather element of a WQE: a byte range of the registered region
// named by lkey, as an offset from the region's start (its ibv_mr::addr).
struct WqeSge {
  uint64_t offset;  // bytes from Mr::addr; the worker checks offset+length <= MR length
  uint32_t length;  // bytes
  uint32_t lkey;    // local key returned by reg_mr
};
static_assert(sizeof(WqeSge) == 16);

// An atomic's entry (IBV_WR_ATOMIC_*): its one SGE (the 8-byte buffer the
// original value lands in) and its operands (ibv_send_wr.wr.atomic).
struct AtomicWqe {
  WqeSge sge;
  uint64_t compare_add;  // CMP_AND_SWP: compared with; FETCH_AND_ADD: added
  uint64_t swap;         // CMP_AND_SWP: swapped in
};

// Send queue entry: a flattened ibv_send_wr (the `next` chain is unrolled
// into consecutive entries). On a UD QP remote_addr = remote QPN << 32 | the
// destination's IPv4 (its AH's GID) and rkey = the remote Q_Key (wr.ud).
struct SendWqe {
  uint64_t wr_id;        // returned in the completion
  uint64_t remote_addr;  // RDMA WRITE/READ, atomics: remote virtual address
  uint32_t rkey;         // RDMA WRITE/READ, atomics: remote key
  uint32_t imm_data;     // *_WITH_IMM: immediate, network byte order as in ibv_send_wr
  uint32_t send_flags;   // IBV_SEND_SIGNALED | IBV_SEND_INLINE | IBV_SEND_FENCE | ...
  uint8_t opcode;        // ibv_wr_opcode
  uint8_t num_sge;       // entries used in sge[] (0 with IBV_SEND_INLINE)
  uint16_t inline_len;   // IBV_SEND_INLINE: payload bytes stored in inline_data[]
  union {
    WqeSge sge[kMaxSge];
    uint8_t inline_data[kMaxInline];
    AtomicWqe atomic;  // num_sge = 1; sge[0] is atomic.sge
  };
};
static_assert(sizeof(SendWqe) == 128);
static_assert(offsetof(SendWqe, atomic.sge) == offsetof(SendWqe, sge));

// Receive queue entry: a flattened ibv_recv_wr.
struct RecvWqe {
  uint64_t wr_id;    // returned in the completion
  uint32_t num_sge;  // entries used in sge[]
  uint32_t reserved;
  WqeSge sge[kMaxSge];
  uint8_t pad[16];   // keep entries at two cache lines
};
static_assert(sizeof(RecvWqe) == 128);

// Completion queue entry: the fields of ibv_wc that an RC QP produces.
struct Cqe {
  uint64_t wr_id;       // from the WQE
  uint32_t byte_len;    // bytes transferred (receive side: bytes placed)
  uint32_t imm_data;    // network byte order, valid with IBV_WC_WITH_IMM
  uint32_t qp_num;      // local QPN
  uint32_t vendor_err;  // worker-specific detail for error completions
  uint8_t status;       // ibv_wc_status
  uint8_t opcode;       // ibv_wc_opcode
  uint16_t wc_flags;    // IBV_WC_WITH_IMM, ...
  uint32_t src_qp;      // remote QPN (receive side)
};
static_assert(sizeof(Cqe) == 32);

// Producer and consumer indices of one ring, each on its own cache line so
// the two sides never write the same line. Indices run freely (mod 2^32);
// entry i lives at slot i & (depth - 1). The producer index is the doorbell.
struct RingControl {
  alignas(kCacheLine) std::atomic<uint32_t> producer;
  alignas(kCacheLine) std::atomic<uint32_t> consumer;
  // SQ/RQ rings: entries the worker has finished (their CQE written, or an
  // unsignaled send done), in ring order, written with `consumer`. If the
  // worker dies, the application flushes [completed, producer) itself.
  std::atomic<uint32_t> completed;
};
static_assert(sizeof(RingControl) == 2 * kCacheLine);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// QP queue region: [SQ control][RQ control][SQ entries][RQ entries].
struct QpQueueLayout {
  std::size_t sq_control;
  std::size_t rq_control;
  std::size_t sq_entries;
  std::size_t rq_entries;
  std::size_t bytes;
};
constexpr QpQueueLayout qp_queue_layout(uint32_t sq_depth, uint32_t rq_depth) noexcept {
  QpQueueLayout l{};
  l.sq_control = 0;
  l.rq_control = sizeof(RingControl);
  l.sq_entries = 2 * sizeof(RingControl);
  l.rq_entries = l.sq_entries + std::size_t{sq_depth} * sizeof(SendWqe);
  l.bytes = l.rq_entries + std::size_t{rq_depth} * sizeof(RecvWqe);
  return l;
}

// SRQ region: [control][entries]. Any QP created on the SRQ may consume
// its entries; the worker takes them in order as messages need them.
struct SrqLayout {
  std::size_t control;
  std::size_t entries;
  std::size_t bytes;
};
constexpr SrqLayout srq_layout(uint32_t depth) noexcept {
  return SrqLayout{0, sizeof(RingControl), sizeof(RingControl) + std::size_t{depth} * sizeof(RecvWqe)};
}
// An SRQ's doorbell bit reports this flag | the SRQ handle from
// FastPath::ready_qps (QPNs have 24 bits, so the two never collide).
inline constexpr uint32_t kSrqDoorbell = 1u << 31;

// Completion notification (ibv_req_notify_cq): the application arms the CQ;
// the worker, after writing a CQE to an armed CQ, disarms it, sets `fired`
// and kicks the completion channel's eventfd.
struct CqNotify {
  alignas(kCacheLine) std::atomic<uint32_t> armed;  // set by the app, cleared by the worker
  std::atomic<uint32_t> fired;                      // set by the worker, cleared by the app
  // Set by the worker when a completion found the CQ full: the CQ is in
  // error (verbs' CQ overrun) and gets nothing more; its QPs go to ERR.
  std::atomic<uint32_t> overrun;
};
static_assert(sizeof(CqNotify) == kCacheLine);

// CQ region: [control][notify][entries], and for a CQ created with
// timestamps (protocol v2, ibv_create_cq_ex's completion timestamp) then
// [timestamps]: one uint64_t per entry, the worker's clock (ns) when it wrote
// the CQE in the same slot, so CQs without them keep 32-byte entries.
struct CqLayout {
  std::size_t control;
  std::size_t notify;
  std::size_t entries;
  std::size_t timestamps;  // == bytes without them
  std::size_t bytes;
};
constexpr CqLayout cq_layout(uint32_t depth, bool timestamps = false) noexcept {
  const std::size_t entries = sizeof(RingControl) + sizeof(CqNotify);
  const std::size_t ts = entries + std::size_t{depth} * sizeof(Cqe);
  return CqLayout{0, sizeof(RingControl), entries, ts, ts + (timestamps ? std::size_t{depth} * sizeof(uint64_t) : 0)};
}

// Per-application doorbell page: one bit per QP (the doorbell_bit returned at
// create_qp) plus a summary bit per 64-bit word, so the worker finds rung
// doorbells among thousands of QPs by reading a few words. Set by the
// application (fetch_or, release) after it advanced a producer index; taken
// by the worker (exchange, acquire).
struct DoorbellPage {
  static constexpr uint32_t kWords = kMaxQpsPerApp / 64;
  static constexpr uint32_t kSummaryWords = kWords / 64;
  alignas(kCacheLine) std::atomic<uint64_t> summary[kSummaryWords];
  alignas(kCacheLine) std::atomic<uint64_t> words[kWords];
};

// Written by the worker, read by applications: lets an application know it
// must kick the wake eventfd because the worker is about to sleep.
struct WorkerPage {
  static constexpr uint32_t kMagic = 0x544e4b57;  // "WKNT"
  uint32_t magic;
  uint32_t version;
  alignas(kCacheLine) std::atomic<uint32_t> sleeping;      // 1 while the worker may block
  alignas(kCacheLine) std::atomic<uint64_t> heartbeat_ns;  // `now` of the worker's last poll
  // version >= 2: the port's link (ibv_query_port's state): 1 active, 0 down.
  alignas(kCacheLine) std::atomic<uint32_t> port_active;
  // version >= 2: the worker's clock (completion timestamps), where it is the
  // CPU's TSC: ns = (tsc - tsc_base) * tsc_mult >> 32 (0: not published).
  std::atomic<uint64_t> clock_tsc_base;
  std::atomic<uint64_t> clock_tsc_mult;
};

// Asynchronous events (ibv_get_async_event), worker -> application, protocol
// v2: one ring per application, in a region it made and handed over with
// MsgType::kAsyncEvents, [control][stats][entries]. The worker writes it from
// the data lcore only and never waits on it: an event that finds the ring
// full is kept on its object instead (a QP, CQ or SRQ holds at most one
// pending event of each kind, the port its latest state) and written once the
// application has read (counted in `deferred`); nothing is lost and the
// worker's memory for it is bounded by the objects. After a write the worker
// kicks the application's eventfd.
struct AsyncEvent {
  uint32_t type;     // ibv_event_type
  uint32_t element;  // QPN, CQ or SRQ handle; the port number for port events
};
static_assert(sizeof(AsyncEvent) == 8);
inline constexpr uint32_t kAsyncEventDepth = 256;
struct AsyncEventStats {
  alignas(kCacheLine) std::atomic<uint64_t> written;   // by the worker
  std::atomic<uint64_t> deferred;                      // found the ring full (written later)
};
struct AsyncEventLayout {
  std::size_t control;
  std::size_t stats;
  std::size_t entries;
  std::size_t bytes;
};
constexpr AsyncEventLayout async_event_layout() noexcept {
  return AsyncEventLayout{0, sizeof(RingControl), sizeof(RingControl) + sizeof(AsyncEventStats),
                          sizeof(RingControl) + sizeof(AsyncEventStats) + kAsyncEventDepth * sizeof(AsyncEvent)};
}

constexpr bool is_power_of_two(uint32_t v) noexcept { return v != 0 && (v & (v - 1)) == 0; }

constexpr uint32_t round_up_pow2(uint32_t v) noexcept {
  uint32_t p = 1;
  while (p < v && p < (1u << 31)) p <<= 1;
  return p;
}

}  // namespace tandem::rnic::host
