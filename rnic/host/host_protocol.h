// Control messages between a tenant application and its RNIC worker, over a
// SOCK_SEQPACKET Unix socket (one message per request or reply; shared memory
// travels as file descriptors in SCM_RIGHTS). The fast path (WQEs, CQEs,
// doorbells) never uses the socket: see queue_layout.h.
//
// Every request is answered by exactly one Reply with the same seq; the
// application has at most one request outstanding. Both messages have a fixed
// size (sizeof(Request), sizeof(Reply)); anything else, or a wrong magic,
// closes the connection. Closing the socket detaches the application: the
// worker frees everything it owned. All integers are host byte order (both
// ends are on the same machine).
#pragma once

#include <cstdint>

namespace tandem::rnic::host {

inline constexpr uint32_t kProtocolMagic = 0x54484f53;  // "THOS"
inline constexpr uint16_t kProtocolVersionMin = 1;      // oldest version this build speaks
inline constexpr uint16_t kProtocolVersionMax = 2;      // newest version this build speaks
// v2: asynchronous events (kAsyncEvents, the event ring of queue_layout.h),
// SRQ limits (kModifySrq, CreateSrqRequest::limit), WorkerPage::port_state.

// Keys: lkey == rkey == index << 8 | generation (8 bits), index < kMaxMrs, so
// a stale key of a freed MR does not match the MR that reuses its slot.
inline constexpr uint32_t kMaxMrs = 1u << 16;
constexpr uint32_t mr_key_index(uint32_t key) noexcept { return key >> 8; }

enum class MsgType : uint16_t {
  kHello = 1,   // fds: [doorbell page]           -> reply fds: [worker page, wake eventfd]
  kAllocPd,     // no fds
  kDeallocPd,   // no fds
  kRegMr,       // fds: [buffer memfd]
  kDeregMr,     // no fds
  kCreateCq,    // fds: [CQ ring memfd, laid out by cq_layout(depth)] (+ [channel eventfd])
  kDestroyCq,   // no fds
  kCreateQp,    // fds: [queue memfd, laid out by qp_queue_layout(sq_depth, rq_depth)]
  kModifyQp,    // no fds
  kDestroyQp,   // no fds
  kCreateSrq,   // fds: [SRQ ring memfd, laid out by srq_layout(depth)]
  kDestroySrq,  // no fds
  kQueryQp,     // no fds; the reply's modify_qp.qp_state is the QP's state now (ERR after a failure)
  kAsyncEvents, // v2. fds: [event ring memfd, laid out by async_event_layout()] [eventfd the worker kicks]
  kModifySrq,   // v2. no fds: arms (or, with 0, disarms) the SRQ's limit event
  kReregMr,     // v2. no fds: a new PD and/or access for an MR, keys and memory kept
  kResizeCq,    // v2. fds: [new CQ ring memfd, laid out by cq_layout(depth)]: unpolled CQEs move to it
};

struct MsgHeader {
  uint32_t magic;     // kProtocolMagic
  uint16_t type;      // MsgType
  uint16_t reserved;  // zero
  uint32_t seq;       // chosen by the application, echoed in the reply
  uint32_t status;    // replies: Status (host_status.h); requests: zero
};

struct HelloRequest {
  uint16_t version_min;  // oldest protocol version the application speaks
  uint16_t version_max;  // newest protocol version the application speaks
  uint32_t pid;          // application pid, for logs and tandemctl
  char name[32];         // application name, NUL-padded, for logs
  uint32_t vnic_ip;      // overlay IPv4 (host order) of the vNIC the application
                         // uses; 0: not bound, any of the worker's vNICs
};
struct HelloReply {
  uint16_t version;          // version chosen: highest both speak
  uint16_t reserved;
  uint32_t app_id;           // the worker's id for this application
  uint32_t max_qps;          // QPs this application may create (doorbell bits)
  uint32_t max_sge;          // SGEs per WQE (kMaxSge)
  uint32_t max_inline;       // inline bytes per send WQE (kMaxInline)
  uint32_t max_queue_depth;  // entries per SQ/RQ/CQ ring
  uint32_t worker_pid;       // worker pid
};

struct PdRequest {
  uint32_t pd;  // kDeallocPd: the PD handle
};
struct PdReply {
  uint32_t pd;  // kAllocPd: the new PD handle
};

struct RegMrRequest {
  uint32_t pd;         // PD handle
  uint32_t access;     // IBV_ACCESS_* flags
  uint64_t addr;       // application virtual address of the MR start (remote peers use it)
  uint64_t length;     // bytes
  uint64_t fd_offset;  // where the MR starts inside the attached memfd
};
struct RegMrReply {
  uint32_t lkey;     // local key, used in WQE SGEs
  uint32_t rkey;     // remote key, given to peers
  uint32_t hugetlb;  // 1 if the worker found the memfd on hugetlbfs (DMA-able for zero copy)
};

struct DeregMrRequest {
  uint32_t lkey;  // MR to drop
};

// ibv_rereg_mr's IBV_REREG_MR_CHANGE_PD / _ACCESS in place (a new translation is a
// new registration: the library registers the new range and drops the old one).
struct ReregMrRequest {
  uint32_t lkey;    // MR to change
  uint32_t flags;   // kReregPd | kReregAccess
  uint32_t pd;      // kReregPd: the new PD handle
  uint32_t access;  // kReregAccess: the new IBV_ACCESS_* flags
};
inline constexpr uint32_t kReregPd = 1;
inline constexpr uint32_t kReregAccess = 2;

struct CreateCqRequest {
  uint32_t depth;        // ring entries, power of two
  uint32_t has_channel;  // 1: a second fd, the completion channel's eventfd, follows the ring
  uint32_t flags;        // v2: kCqWithTimestamps (the ring is cq_layout(depth, true))
};
inline constexpr uint32_t kCqWithTimestamps = 1;
struct CqReply {
  uint32_t cq;  // kCreateCq: the new CQ handle
};
struct DestroyCqRequest {
  uint32_t cq;  // CQ handle
};
struct ResizeCqRequest {
  uint32_t cq;     // CQ handle
  uint32_t depth;  // the new ring's entries, power of two; EINVAL if fewer than the CQEs not yet polled
};

struct CreateQpRequest {
  uint32_t pd;          // PD handle
  uint32_t send_cq;     // CQ handle for send completions
  uint32_t recv_cq;     // CQ handle for receive completions (may equal send_cq)
  uint32_t sq_depth;    // SQ entries, power of two
  uint32_t rq_depth;    // RQ entries, power of two
  uint32_t qp_type;     // ibv_qp_type: IBV_QPT_RC or IBV_QPT_UD
  uint32_t sq_sig_all;  // 1: every send WQE completes as if signaled
  uint32_t srq;         // SRQ handle its receives come from; 0: its own RQ (rq_depth unused otherwise)
};
struct CreateQpReply {
  uint32_t qpn;           // QP number (24 bits)
  uint32_t doorbell_bit;  // bit in the application's DoorbellPage
};

// The RC and UD subset of ibv_qp_attr; fields are used when their IBV_QP_* bit is in attr_mask.
struct ModifyQpRequest {
  uint32_t qpn;                 // QP to modify
  uint32_t attr_mask;           // IBV_QP_* bits
  uint32_t qp_state;            // IBV_QP_STATE: target ibv_qp_state
  uint32_t path_mtu;            // IBV_QP_PATH_MTU: ibv_mtu
  uint32_t dest_qp_num;         // IBV_QP_DEST_QPN: remote QPN
  uint32_t rq_psn;              // IBV_QP_RQ_PSN: first expected PSN
  uint32_t sq_psn;              // IBV_QP_SQ_PSN: first PSN sent
  uint32_t qp_access_flags;     // IBV_QP_ACCESS_FLAGS: remote access allowed on this QP
  uint8_t dgid[16];             // IBV_QP_AV: remote GID (IPv4-mapped IPv6 for RoCEv2)
  uint8_t sgid_index;           // IBV_QP_AV: local GID index
  uint8_t port_num;             // IBV_QP_PORT
  uint8_t timeout;              // IBV_QP_TIMEOUT: 4.096us * 2^timeout
  uint8_t retry_cnt;            // IBV_QP_RETRY_CNT
  uint8_t rnr_retry;            // IBV_QP_RNR_RETRY
  uint8_t min_rnr_timer;        // IBV_QP_MIN_RNR_TIMER
  uint8_t max_rd_atomic;        // IBV_QP_MAX_QP_RD_ATOMIC
  uint8_t max_dest_rd_atomic;   // IBV_QP_MAX_DEST_RD_ATOMIC
  uint32_t qkey;                // IBV_QP_QKEY (UD): the Q_Key arriving datagrams must carry
};
struct ModifyQpReply {
  uint32_t qp_state;  // state after the modify
};

struct DestroyQpRequest {
  uint32_t qpn;  // QP to destroy
};

struct CreateSrqRequest {
  uint32_t pd;     // PD handle; the SRQ's WQEs use MRs of this PD
  uint32_t depth;  // ring entries, power of two
  uint32_t limit;  // v2: srq_limit armed at creation (0: none); at most depth
};
struct ModifySrqRequest {
  uint32_t srq;    // SRQ handle
  uint32_t limit;  // IBV_EVENT_SRQ_LIMIT_REACHED once fewer WQEs than this are posted (0: disarm)
};
struct CreateSrqReply {
  uint32_t srq;           // SRQ handle (never 0)
  uint32_t doorbell_bit;  // bit in the application's DoorbellPage (shared with QPs)
};
struct DestroySrqRequest {
  uint32_t srq;  // SRQ handle
};
struct QueryQpRequest {
  uint32_t qpn;  // QP to ask about
};

struct Request {
  MsgHeader hdr;
  union {
    HelloRequest hello;
    PdRequest pd;
    RegMrRequest reg_mr;
    DeregMrRequest dereg_mr;
    ReregMrRequest rereg_mr;
    CreateCqRequest create_cq;
    DestroyCqRequest destroy_cq;
    ResizeCqRequest resize_cq;
    CreateQpRequest create_qp;
    ModifyQpRequest modify_qp;
    DestroyQpRequest destroy_qp;
    CreateSrqRequest create_srq;
    DestroySrqRequest destroy_srq;
    QueryQpRequest query_qp;
    ModifySrqRequest modify_srq;
  } body;
};

struct Reply {
  MsgHeader hdr;
  union {
    HelloReply hello;
    PdReply pd;
    RegMrReply reg_mr;
    CqReply cq;
    CreateQpReply create_qp;
    ModifyQpReply modify_qp;
    CreateSrqReply create_srq;
  } body;
};

}  // namespace tandem::rnic::host
