// Work requests, completions, memory regions and QP attributes of the
// transport core, in rdma-core's vocabulary: the enums (ibv_wr_opcode,
// ibv_wc_opcode, ibv_wc_status, IBV_ACCESS_*, IBV_SEND_*, IBV_QP_* masks) come
// from <infiniband/verbs.h> (header only; libibverbs is never linked).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace tandem::rnic {

// Scatter-gather entries per work request (send and receive side).
inline constexpr std::size_t kMaxSge = 8;
inline constexpr uint32_t kMaxInlineHeld = 1024;  // QpInitAttr::max_inline at most

// Memory the host registered. `addr` is the address the host (and its peers,
// through R_Keys) use for it; `host_ptr` is where this process can read and
// write the same bytes (the "DMA" is a memcpy through it). They are equal when
// the core runs in the application's process; they differ when the I/O layer
// maps the application's memory from shared memory.
struct MemoryRegion {
  uint64_t addr = 0;
  uint64_t len = 0;
  uint8_t* host_ptr = nullptr;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint32_t access = 0;  // IBV_ACCESS_LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ
  uint32_t pd = 0;      // protection domain: only QPs (and SRQs) of the same pd reach it
};

// Like ibv_sge: `addr` is in a registered region's address space. In a send
// WR with IBV_SEND_INLINE, `addr` is a pointer to the caller's own bytes and
// `lkey` is not looked at (as verbs: inline data is copied at post time; the
// core reads it until the WR completes, so the caller keeps it that long).
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// A UD send's destination (ibv_send_wr.wr.ud: the AH, remote QPN and Q_Key).
struct UdDest {
  uint32_t peer = 0;         // as QpAttr::peer: opaque id of the remote host, handed back in the TxDesc
  uint16_t path_seed = 0;    // as QpAttr::path_seed
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;  // high bit set: the QP's own Q_Key (IBA 10.2.5)
};

// Like ibv_send_wr, flattened. Supported opcodes: IBV_WR_RDMA_WRITE,
// IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
// IBV_WR_RDMA_READ, and on RC QPs IBV_WR_ATOMIC_CMP_AND_SWP and
// IBV_WR_ATOMIC_FETCH_AND_ADD (one 8-byte gather entry with local write, where
// the remote's original value lands; remote_addr 8-byte aligned, else the
// responder NAKs). `imm_data` is in host order (verbs keeps it big-endian).
struct SendWr {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  uint32_t send_flags = IBV_SEND_SIGNALED;  // IBV_SEND_SIGNALED, IBV_SEND_SOLICITED
  uint32_t imm_data = 0;
  uint64_t remote_addr = 0;  // WRITE / READ / atomics
  uint32_t rkey = 0;         // WRITE / READ / atomics
  uint64_t compare_add = 0;  // atomics: CMP_AND_SWP's compare value, FETCH_AND_ADD's addend
  uint64_t swap = 0;         // CMP_AND_SWP: the value swapped in
  UdDest ud;                 // UD QPs only
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sg_list{};
};

// Like ibv_recv_wr.
struct RecvWr {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  // The host found its buffer bad (lkey, PD, bounds): it is queued all the
  // same and fails when a message needs it (LOC_PROT_ERR here, the sender
  // NAKed with a remote operational error), as an RNIC that reads receive
  // WQEs when they are used reports it.
  bool invalid = false;
  std::array<Sge, kMaxSge> sg_list{};
};

// Like ibv_wc. `imm_data` in host order, valid when wc_flags & IBV_WC_WITH_IMM.
struct Completion {
  uint64_t wr_id = 0;
  ibv_wc_status status = IBV_WC_SUCCESS;
  ibv_wc_opcode opcode = IBV_WC_SEND;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint32_t wc_flags = 0;
};

enum class QpState : uint8_t { kReset, kInit, kRtr, kRts, kError };

// ibv_qp_type: RC (connected, reliable) or UD (datagrams of one packet, ud.cc).
enum class QpType : uint8_t { kRc, kUd };

// How a QP recovers from loss. Both ends of a connection must use the same.
enum class Reliability : uint8_t {
  kGoBackN,  // standard RoCE: in-order receive, NAK on a gap, resend from there
  kIrn,      // placement extension on every data packet, out-of-order
             // placement, SACK after a reorder delay, selective retransmission
};

// Names of the spraying and congestion-control policies (see policy_factory.h)
// and their parameters. Unknown names make create_qp fail.
struct PolicyConfig {
  const char* path = "single";       // "single": one UDP source port per QP
  const char* cc = "fixed_window";   // "fixed_window": at most cc_window_bytes in flight
  uint64_t cc_window_bytes = 1ull << 20;
  uint32_t num_paths = 1;            // size of the path set (entropy values) a policy may use
  double line_rate_gbps = 100;       // "dcqcn": the rate it starts at and never exceeds
  uint64_t credit_unsched_bytes = 64 << 10;  // "credit": sent before any credit (~1 BDP)
};

// Fixed at creation (like ibv_qp_init_attr). Everything is sized here so that
// nothing is allocated per packet afterwards.
struct QpInitAttr {
  QpType type = QpType::kRc;
  uint32_t wire_qpn = 0;       // UD: the QPN its DETH names (the I/O layer's numbering); 0: its own
  uint32_t send_cq = 0;
  uint32_t recv_cq = 0;
  uint32_t sq_depth = 256;     // outstanding send WRs
  uint32_t rq_depth = 256;     // posted receive WRs (unused with an SRQ)
  uint32_t srq = 0;            // 0: its own receive queue; else Transport::create_srq's id
  uint32_t pd = 0;             // protection domain: the MRs its SGEs and remote accesses may use
  // The application (tenant) it belongs to: Transport::poll shares TX turns
  // per owner, so one with 32 busy QPs gets no more than one with one.
  // 0: none (the QP takes its turns alone).
  uint32_t owner = 0;
  Reliability mode = Reliability::kIrn;
  uint32_t window_pkts = 1024;      // PSNs in flight / reorder bitmap (power of two, <= 2^16)
  uint32_t max_rd_atomic = 16;      // READ requests in flight (requester)
  uint32_t max_dest_rd_atomic = 16; // READ requests being answered (responder)
  PolicyConfig policy;
  // BENCHMARK ONLY, not RC: a request whose PSN is not the expected one
  // restarts the responder's sequence at its PSN instead of being a duplicate
  // or out of sequence, so a looped pcap replay is placed (responder.cc).
  bool bench_any_psn = false;
  // Every send WR completes, signalled or not; an unsignalled one's
  // completion carries kWcUnsignaled (the worker frees a host ring slot per WR).
  bool complete_unsignaled = false;
  // Inline bytes per send WR that SendSlots keeps in the SQ until completion
  // (0: none; the SendWr path points at the caller's bytes instead).
  uint32_t max_inline = 0;
};

// Completion::wc_flags of a WR posted without IBV_SEND_SIGNALED on a QP with
// QpInitAttr::complete_unsignaled (not an ibv_wc_flags bit).
inline constexpr uint32_t kWcUnsignaled = 1u << 31;

// modify_qp attributes; which are read is chosen by an IBV_QP_* mask, as in
// ibv_modify_qp. Times are in ns rather than verbs' exponent codes.
struct QpAttr {
  QpState state = QpState::kReset;       // IBV_QP_STATE
  uint32_t qp_access_flags = 0;          // IBV_QP_ACCESS_FLAGS: IBV_ACCESS_REMOTE_*
  uint32_t path_mtu = 1024;              // IBV_QP_PATH_MTU: 256, 512, 1024, 2048, 4096 bytes
  uint32_t dest_qp_num = 0;              // IBV_QP_DEST_QPN
  uint32_t rq_psn = 0;                   // IBV_QP_RQ_PSN
  uint32_t sq_psn = 0;                   // IBV_QP_SQ_PSN
  uint32_t peer = 0;                     // IBV_QP_AV: opaque id of the remote host (e.g. its IPv4
  uint16_t path_seed = 0;                //   address) and the seed of its path set, handed back in
                                         //   every TxDesc so the I/O layer can address the frame
  uint64_t timeout_ns = 1'000'000;       // IBV_QP_TIMEOUT: initial retransmission timeout
  uint8_t retry_cnt = 7;                 // IBV_QP_RETRY_CNT: timeouts before RETRY_EXC_ERR
  uint8_t rnr_retry = 7;                 // IBV_QP_RNR_RETRY: 7 = retry forever
  uint8_t min_rnr_timer = 1;             // IBV_QP_MIN_RNR_TIMER: IB code 0-31 sent in RNR NAKs
  uint32_t qkey = 0;                     // IBV_QP_QKEY (UD): what arriving datagrams must carry
  uint8_t max_rd_atomic = 1;             // IBV_QP_MAX_QP_RD_ATOMIC: READs and atomics out at once (>= 1)
  // Also set with IBV_QP_AV (Tandem's additions; set them all together):
  uint64_t reorder_delay_ns = 50'000;    // IRN: how long a gap may last before it is SACKed
  uint32_t ack_every = 16;               // responder ACKs at least every N request packets
  uint64_t cnp_interval_ns = 0;          // responder: CNP on CE-marked requests, at most one per
                                         //   interval (DCQCN uses 50 us); 0: ECN only echoed in ACKs
  bool standard_peer = false;            // the peer is a standard RoCEv2 RNIC: from RTR on the QP is
                                         //   go-back-N without credits, whatever QpInitAttr said
};

// IB RNR timer codes (IBA table 45) in ns.
uint64_t rnr_timer_ns(uint8_t code) noexcept;

}  // namespace tandem::rnic
