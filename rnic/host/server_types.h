// The host server's vocabulary, shared by its two halves and the port that
// drives it: configuration, the validated work it hands out (SendWork,
// RecvWork, Segment), QP attributes, events, counters. Plain types, no
// owner thread (rnic/host/README.md "Two halves").
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rnic/host/queue_layout.h"
#include "rnic/host/resource_quota.h"

namespace tandem::rnic::host {

struct VnicOwner {
  uint32_t vnic_ip;   // overlay IPv4, host order
  uint32_t uid;
  int64_t gid = -1;   // -1: any group; else the peer's primary gid also admits it
};

// Makes MR mappings reachable by the port's device (rte_extmem_register +
// rte_dev_dma_map in the DPDK layer). Called on the control thread only: map()
// before an MR becomes visible to the lcore, unmap() after its grace period.
class DeviceMapper {
 public:
  virtual ~DeviceMapper() = default;
  virtual void map(uint8_t* addr, uint64_t length, bool hugetlb) noexcept = 0;
  virtual void unmap(uint8_t* addr) noexcept = 0;
};

class ControlServer;

struct ServerConfig {
  std::string socket_path;            // Unix socket applications connect to
  uint32_t max_apps = 1024;           // connected applications (attached or not yet)
  // A connection that has not said hello (a "silent" one) is closed after
  // hello_timeout_ns; one uid keeps at most max_silent_per_uid of them (a new
  // one closes that uid's oldest), and when the table is full a new connection
  // closes the oldest silent one of anyone: silent connections never keep a
  // real application from attaching. Per server (lcore).
  uint64_t hello_timeout_ns = 2'000'000'000;
  uint32_t max_silent_per_uid = 16;
  uint32_t max_qps = 65535;           // QPs per worker (QPN = generation << 16 | slot)
  uint32_t max_cqs = 65535;           // CQs per worker
  uint32_t max_mrs = 65535;           // MRs per worker
  uint32_t max_queue_depth = kMaxQueueDepth;
  uint64_t max_mr_bytes = uint64_t{64} << 30;  // largest memfd accepted for an MR
  // Whether the port's device still holds payloads of the MR in slot
  // `mr_index` (zero-copy TX mbufs the NIC has not released). Called on the
  // control thread; a deregistered MR's pages (and its slot) stay until it
  // says no. Null: nothing is ever held.
  std::function<bool(uint32_t mr_index)> mr_in_flight;
  // SRQs per server: the transport core's room (TransportConfig::max_srqs);
  // past it create_srq is refused (kNoResources) instead of failing its QPs later.
  uint32_t max_srqs = 64;
  // What the worker spends on a queue beyond the ring it maps and its own
  // records here: the transport's slots and PSN records for those depths.
  // Charged, with the ring's mapping, as queue_bytes before anything is made.
  // Called on the control thread; null: nothing beyond the rings and records.
  std::function<uint64_t(uint32_t sq_depth, uint32_t rq_depth, bool on_srq, bool ud)> qp_worker_bytes;
  std::function<uint64_t(uint32_t depth)> srq_worker_bytes;
  // The port's vNICs (overlay IPv4, host order): an application that binds
  // itself to a vNIC (HelloRequest::vnic_ip) must name one of these.
  std::vector<uint32_t> vnic_ips;
  // Who may attach to a vNIC, checked on the peer's SO_PEERCRED at hello (the
  // application's choice of device does not decide it). Off: the socket's file
  // permissions alone decide, as before. On: the socket is opened to all users
  // (0666) and a vNIC admits root, the worker's own uid and its owners' uids (or
  // primary gids); an application bound to no vNIC must be admitted to all.
  bool check_owners = false;
  std::vector<VnicOwner> vnic_owners;
  DeviceMapper* mapper = nullptr;  // MR mappings for the device; nullptr: none needed
  // Fair shares (resource_quota.h): per application and per vNIC. A create
  // over one is answered kOverLimit (kOverByteLimit for registered bytes) and
  // counted for the vNIC. Default: none (the worker sets its own).
  ResourceLimits limits;
  // Several lcores per port (rnic/port/qp_steering.h), one server each:
  // this server's QPNs take slots [qp_slot_base, qp_slot_base + max_qps).
  uint32_t qp_slot_base = 0;
  // false: no socket of its own; the port's first server accepts and hands
  // it connections (adopt). One control thread serves them all.
  bool listen = true;
  // The port's fair shares when several servers share them (null: its own, from `limits`).
  std::shared_ptr<TenantQuotas> quotas;
  // Where an accepted application is served: this server (nullptr or this)
  // or another of the port's (adopt). Called on the control thread.
  std::function<ControlServer*()> place;
};

// A piece of application memory, translated and bounds-checked.
// `lkey` and `va` name the same bytes as the MR's key and the application's
// address, for a transport core that checks them itself.
struct Segment {
  uint8_t* addr;
  uint32_t length;
  uint32_t lkey;
  uint64_t va;
};

// A send WQE as the transport sees it: copied out of shared memory, validated.
struct SendWork {
  uint64_t wr_id;
  uint64_t remote_addr;
  uint32_t rkey;
  uint32_t imm_data;  // network byte order
  ibv_wr_opcode opcode;
  uint32_t send_flags;
  uint32_t length;  // total bytes (sum of segments, or inline_len)
  uint32_t num_sge;
  Segment sge[kMaxSge];
  uint32_t inline_len;  // IBV_SEND_INLINE: payload is inline_data, sge[] unused
  uint64_t compare_add;  // atomics (ibv_send_wr.wr.atomic)
  uint64_t swap;
  uint8_t inline_data[kMaxInline];
};

struct RecvWork {
  uint64_t wr_id;
  uint32_t length;  // total capacity
  uint32_t num_sge;
  bool invalid;     // an RC QP's receive whose buffer failed the checks: it fails when used (wqe_fetch.h)
  Segment sge[kMaxSge];
};

// QP attributes the transport needs (connect parameters from modify_qp).
struct QpInfo {
  uint32_t qpn;
  uint32_t app_id;
  uint32_t app_index;  // its application's slot (< ServerConfig::max_apps), for per-application fairness
  uint32_t pd;
  uint32_t send_cq;
  uint32_t recv_cq;
  ibv_qp_state state;
  ibv_mtu path_mtu;
  uint32_t dest_qp_num;
  uint32_t rq_psn;
  uint32_t sq_psn;
  uint32_t qp_access_flags;
  uint8_t dgid[16];
  uint8_t port_num;
  uint8_t timeout;
  uint8_t retry_cnt;
  uint8_t rnr_retry;
  uint8_t min_rnr_timer;
  uint8_t max_rd_atomic;
  uint8_t max_dest_rd_atomic;
  bool sq_sig_all;
  uint32_t sq_depth;
  uint32_t rq_depth;
  uint32_t vnic_ip;  // its application's vNIC (HelloRequest::vnic_ip); 0: not bound
  uint32_t srq;      // the SRQ its receives come from (fetch_srq_recv); 0: its own RQ
  ibv_qp_type qp_type;  // IBV_QPT_RC or IBV_QPT_UD
  uint32_t qkey;        // UD: IBV_QP_QKEY
};

enum class HostEventKind : uint8_t {
  kAppAttached,
  kAppDetached,    // socket closed (exit, crash or close_device); its objects are gone
  kQpCreated,
  kQpStateChanged, // by modify_qp, or to IBV_QPS_ERR after a bad WQE / qp_error()
  kQpDestroyed,    // by destroy_qp or because its application went away: flush it
  kMrRegistered,   // visible to the fast path now (already given to the DeviceMapper)
  kMrDeregistered, // gone from the fast path; unmapped once consumed and not in flight
  kMrReregistered, // lkey: its new pd and access (ibv_rereg_mr); memory and keys unchanged
  kSrqCreated,     // srq, srq_depth: create the transport's SRQ
  kSrqDestroyed,   // srq: its QPs are gone already (destroyed or their application died)
};

struct HostEvent {
  HostEventKind kind;
  uint32_t app_id;
  uint32_t qpn;        // QP events
  ibv_qp_state state;  // kQpStateChanged: the new state
  bool app_died;       // kQpDestroyed: the application went away (no destroy_qp)
  uint32_t lkey;       // MR events
  uint8_t* addr;       // MR events: worker-side address of the MR
  uint64_t length;
  uint64_t va;         // kMrRegistered: the application's address of the MR (what R_Keys' VAs name)
  uint32_t access;     // kMrRegistered, kMrReregistered: IBV_ACCESS_* flags
  uint32_t pd;         // kMrRegistered, kMrReregistered, kSrqCreated: the protection domain (handles are unique in the worker)
  uint8_t* map_addr;   // MR events: the whole mapping holding it (page aligned),
  uint64_t map_length; //   what rte_extmem_register / rte_dev_dma_map want
  bool hugetlb;        // MR events: the mapping is on hugetlbfs (checked by the worker)
  uint32_t srq;        // SRQ events: the SRQ handle
  uint32_t srq_depth;  // kSrqCreated: its ring entries
};

#define TANDEM_FOREACH_HOST_COUNTER(X)                                             \
  X(apps_attached, "applications attached")                                        \
  X(apps_detached, "applications detached (closed or died)")                       \
  X(protocol_errors, "malformed control messages (connection dropped)")            \
  X(requests_refused, "control requests answered with an error")                   \
  X(attach_denied, "attaches refused: the peer's uid/gid does not own the vNIC")   \
  X(silent_timeouts, "connections closed for saying no hello in time")              \
  X(silent_evicted, "silent connections closed for a newer one (per-uid cap, full table)") \
  X(send_wqes, "send WQEs handed to the transport")                                \
  X(recv_wqes, "receive WQEs handed to the transport")                             \
  X(recv_wqes_invalid, "RC receive WQEs handed over marked bad (they fail when used)") \
  X(bad_lkey, "WQEs with an unknown lkey or one from another PD")                  \
  X(sge_out_of_bounds, "WQEs with an SGE outside its MR")                          \
  X(bad_wqe, "WQEs with a bad opcode, SGE count or inline length")                 \
  X(ring_corrupt, "rings whose shared indices went out of range")                  \
  X(flushed_wqes, "WQEs completed with IBV_WC_WR_FLUSH_ERR")                        \
  X(cqes, "completions written")                                                   \
  X(cq_overruns, "completions lost to a full CQ")                                  \
  X(bad_rkey, "remote accesses refused (rkey, bounds or access flags)")        \
  X(cq_events, "completion channel wake-ups (armed CQs)")                          \
  X(srq_wqes, "SRQ receive WQEs handed to the transport")                          \
  X(srq_wqes_dropped, "SRQ receive WQEs skipped as bad (no QP to fail)")          \
  X(refused_qps, "create_qp refused: the application or its vNIC at its QP limit")  \
  X(refused_cqs, "create_cq refused: the application or its vNIC at its CQ limit")  \
  X(refused_mrs, "reg_mr refused: the application or its vNIC at its MR limit")     \
  X(refused_pds, "alloc_pd refused: the application or its vNIC at its PD limit")   \
  X(refused_bytes, "reg_mr refused: the application or its vNIC at its byte limit")   \
  X(refused_srqs, "create_srq refused: the application or its vNIC at its SRQ limit") \
  X(refused_queue_bytes, "create_qp/cq/srq refused: the application or its vNIC at its queue memory limit") \
  X(async_events, "asynchronous events written to applications' event rings")       \
  X(async_events_deferred, "asynchronous events that found the ring full (kept, written later)")

struct HostCounters {
#define TANDEM_HOST_COUNTER_FIELD(name, doc) uint64_t name = 0;
  TANDEM_FOREACH_HOST_COUNTER(TANDEM_HOST_COUNTER_FIELD)
#undef TANDEM_HOST_COUNTER_FIELD
};

// An attached application, for logs and tandemctl.
struct AppInfo {
  uint32_t app_id;
  uint32_t pid;      // from SO_PEERCRED, not from the application's word
  char name[32];     // from its hello
  uint16_t version;  // protocol version negotiated
  uint32_t qps;      // QPs it owns now
  uint32_t vnic_ip;  // the vNIC it bound itself to (0: none)
};

struct HostMemory {
  std::size_t qps;
  std::size_t table_bytes;     // worker heap used by the QP/CQ/MR/app tables
  std::size_t mapped_bytes;    // shared memory mapped now (rings + MRs + pages)
  std::size_t retired_bytes;   // mappings waiting for the lcore and the device to let go
  std::size_t bytes_per_qp_slot;
};

}  // namespace tandem::rnic::host
