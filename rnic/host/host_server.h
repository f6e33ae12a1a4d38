// Worker side of the host interface: accepts tenant applications on a Unix
// socket, maps their registered memory and queue rings, and hands the worker
// loop validated work (WQEs with SGEs translated to worker pointers) and a
// way back (completions). Two halves: the control half (sockets, mmap, DMA
// registration, unmapping) runs on a control thread via serve_control(); the
// fast half (QP/CQ/MR tables, rings) belongs to the data lcore, which applies
// the control half's finished objects from an SPSC queue in apply_control().
// poll(now) runs both on one thread (tests, simple loops).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "rnic/host/host_protocol.h"
#include "rnic/host/host_status.h"
#include "rnic/host/queue_layout.h"
#include "rnic/host/resource_quota.h"
#include "rnic/host/shm_region.h"
#include "rnic/host/spsc_queue.h"
#include "rnic/host/spsc_ring.h"

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

class HostServer;

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
  std::function<HostServer*()> place;
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
  uint32_t access;     // kMrRegistered: IBV_ACCESS_* flags
  uint32_t pd;         // kMrRegistered, kSrqCreated: the protection domain (handles are unique in the worker)
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

// What the control half hands the fast half (one message per change of the
// tables), and the fast half's answer. Heavy work (accept, recvmsg, mmap,
// device mapping) is done before the message is sent.
struct ControlMsg;
struct ControlResult {
  uint64_t seq = 0;
  uint32_t status = 0;      // Status of a modify_qp the fast half validated
  ibv_qp_state state = IBV_QPS_RESET;
  uint64_t applied_ns = 0;  // the lcore's `now` when it applied the message
};

class HostServer {
 public:
  // Binds and listens (an existing socket file is replaced). Throws
  // std::runtime_error on failure: start-up only.
  explicit HostServer(const ServerConfig& config);
  ~HostServer();
  HostServer(const HostServer&) = delete;
  HostServer& operator=(const HostServer&) = delete;

  // ServerConfig::mr_in_flight, set before the control thread starts (the
  // port's device exists only after the server).
  void set_mr_in_flight(std::function<bool(uint32_t mr_index)> f) { config_.mr_in_flight = std::move(f); }
  uint32_t max_mrs() const noexcept { return config_.max_mrs; }

  // One thread does everything: apply_control(now) then serve_control(now, 0).
  // Never blocks.
  void poll(uint64_t now);

  // ---- control half (the control thread, after set_threaded(true))
  // Each control change then waits for the fast half to apply it (so a reply
  // never precedes what it promises): call before starting the threads.
  void set_threaded(bool threaded) noexcept { threaded_ = threaded; }
  // Accepts applications, answers their requests, notices the ones that went
  // away, releases retired mappings. Blocks in epoll_wait up to timeout_ms.
  // `now` must come from the same clock as apply_control's.
  void serve_control(uint64_t now, int timeout_ms);
  // A control thread waiting for the fast half gives up (the lcore stopped).
  void stop_control() noexcept { stopping_.store(true, std::memory_order_release); }

  // ---- fast half (the data lcore)
  // Applies what the control half sent (QPs, CQs, MRs, attach/detach) and
  // beats the heartbeat. One acquire load when nothing is queued. Returns
  // how many messages were applied.
  uint32_t apply_control(uint64_t now) noexcept;

  // QPs whose doorbell rang since the last call (edge-triggered: the worker
  // keeps QPs it has not drained itself). Returns how many were written.
  // Applications are read from slot `first_app` on (wrapping): with `out`
  // smaller than what rang, a caller that moves it on each call reads every
  // application's doorbells in turn; bits not taken stay rung.
  std::size_t ready_qps(std::span<uint32_t> out, uint32_t first_app = 0) noexcept;
  uint32_t max_apps() const noexcept { return config_.max_apps; }

  // Takes up to out.size() send WQEs (QP in RTS/SQD). A WQE that fails
  // validation is completed with an error, moves the QP to ERR and stops the
  // batch. On a QP in ERR everything queued is completed with
  // IBV_WC_WR_FLUSH_ERR (flush what you hold first, then call this).
  std::size_t fetch_send(uint32_t qpn, std::span<SendWork> out) noexcept;
  std::size_t fetch_recv(uint32_t qpn, std::span<RecvWork> out) noexcept;
  // The same into up to `max` places the caller keeps (e.g. the WQE slots it
  // holds until completion): no second copy of each WQE.
  std::size_t fetch_send(uint32_t qpn, SendWork* const* out, std::size_t max) noexcept;
  // The same, each WQE's fields handed to `sink` as they are read from the
  // ring (wqe_fetch.h, which defines it): the caller writes them where it
  // keeps the WQE, the one copy of it.
  template <class Sink>
  std::size_t fetch_send_into(uint32_t qpn, std::size_t max, Sink& sink) noexcept;
  std::size_t fetch_recv(uint32_t qpn, RecvWork* const* out, std::size_t max) noexcept;
  template <class Sink>
  std::size_t fetch_recv_into(uint32_t qpn, std::size_t max, Sink& sink) noexcept;  // wqe_fetch.h
  // Entries queued and not yet fetched (0 for an unknown QP).
  uint32_t send_queued(uint32_t qpn) noexcept;
  uint32_t recv_queued(uint32_t qpn) noexcept;
  // Shared receive queues: ready_qps reports an SRQ whose doorbell rang as
  // kSrqDoorbell | its handle. Takes up to out.size() receive WQEs, checked
  // against the SRQ's PD. A bad WQE has no QP to fail yet (the application
  // library refuses unknown lkeys when posting): it is counted (bad_lkey,
  // sge_out_of_bounds or bad_wqe, and srq_wqes_dropped) and skipped.
  std::size_t fetch_srq_recv(uint32_t srq, std::span<RecvWork> out) noexcept;
  std::size_t fetch_srq_recv(uint32_t srq, RecvWork* const* out, std::size_t max) noexcept;  // into the caller's slots
  template <class Sink>
  std::size_t fetch_srq_recv_into(uint32_t srq, std::size_t max, Sink& sink) noexcept;  // wqe_fetch.h
  uint32_t srq_queued(uint32_t srq) noexcept;

  // Completions. Send side: written only if signaled (or sq_sig_all) or on
  // error. An error status moves the QP to ERR. False if the CQ was full
  // (counted; the QP goes to ERR as an overrun would on hardware) or the QP
  // is unknown.
  bool complete_send(uint32_t qpn, const SendWork& work, ibv_wc_status status) noexcept;
  // The same from what the caller kept of the WR: its id, opcode (the
  // completion's), bytes (a READ's), and whether it asked for a completion.
  bool complete_send(uint32_t qpn, uint64_t wr_id, ibv_wc_opcode opcode, uint32_t byte_len, bool signaled,
                     ibv_wc_status status) noexcept;
  bool complete_recv(uint32_t qpn, const RecvWork& work, ibv_wc_status status,
                     uint32_t byte_len, ibv_wc_opcode opcode, bool with_imm, uint32_t imm_data,
                     uint32_t src_qp, bool grh = false) noexcept;
  bool complete_recv(uint32_t qpn, uint64_t wr_id, ibv_wc_status status, uint32_t byte_len, ibv_wc_opcode opcode,
                     bool with_imm, uint32_t imm_data, uint32_t src_qp, bool grh = false) noexcept;
  // Free CQE slots on a QP's send or receive CQ.
  uint32_t cq_space(uint32_t qpn, bool send) noexcept;

  // Responder side: where remote_addr..+length of rkey is in worker memory,
  // or nullptr if the rkey is unknown, from another PD, out of bounds or lacks
  // `access` (IBV_ACCESS_REMOTE_WRITE / IBV_ACCESS_REMOTE_READ).
  uint8_t* translate_remote(uint32_t qpn, uint32_t rkey, uint64_t remote_addr, uint32_t length,
                            int access) noexcept;

  // The transport hit a fatal error (retries exhausted...): QP to ERR.
  void qp_error(uint32_t qpn) noexcept;

  // Asynchronous events (queue_layout.h AsyncEvent). QP fatal (the worker
  // moved a QP to ERR), last WQE reached (an SRQ QP entered ERR) and CQ error
  // (overrun) are raised here as they happen; these two are the port's:
  // The port's link: PORT_ACTIVE / PORT_ERR to every application on a change
  // (and WorkerPage::port_active, what ibv_query_port reads). Starts active.
  void set_port_active(bool active) noexcept;
  bool port_active() const noexcept { return port_active_; }
  // The clock `now` comes from, when it is the TSC (WorkerPage::clock_tsc_*),
  // so applications can read it (ibv_query_rt_values_ex). Start-up only.
  void publish_clock(uint64_t tsc_base, uint64_t tsc_mult) noexcept;
  // An SRQ's armed limit (0: none), and the check once `posted` WQEs are left
  // on it (the transport's and the ring's): below the limit the event is
  // raised and the limit disarmed, as verbs does (true then).
  uint32_t srq_limit(uint32_t srq) noexcept;
  bool check_srq_limit(uint32_t srq, uint32_t posted) noexcept;

  const QpInfo* qp_info(uint32_t qpn) const noexcept;
  bool next_event(HostEvent* out);

  // Adaptive idle: begin_idle() announces sleep to applications and returns
  // false if a doorbell is already pending (then do not sleep). If it
  // returns true, block on wait_fd() (epoll: sockets + wake eventfd) and call
  // end_idle() afterwards. Single-thread mode (poll()) only.
  bool begin_idle() noexcept;
  void end_idle() noexcept;
  int wait_fd() const noexcept { return epoll_fd_; }

  // Both halves' counters (the control half's read with relaxed loads): any thread.
  HostCounters counters() const noexcept;
  // Control thread: serve the application on connected socket `fd` (placed
  // here by the port's listening server). Takes the fd (closed on refusal).
  void adopt(int fd);
  // The port's vNICs changed (DPU mode: the agent added or removed one): the
  // next application that binds itself to a vNIC is checked against `ips`.
  void set_vnic_ips(std::vector<uint32_t> ips) {
    std::lock_guard<std::mutex> g(vnic_mu_);
    config_.vnic_ips = std::move(ips);
  }
  // Who owns which vNIC (--device-owner, re-resolved when the vNICs change).
  void set_vnic_owners(std::vector<VnicOwner> owners) {
    std::lock_guard<std::mutex> g(vnic_mu_);
    config_.vnic_owners = std::move(owners);
  }
  // Control-half accounting: the control thread, or poll()'s thread.
  HostMemory memory() const noexcept;
  std::size_t app_count() const noexcept;
  std::size_t list_apps(std::span<AppInfo> out) const noexcept;
  std::size_t qp_count() const noexcept;
  std::size_t cq_count() const noexcept;
  std::size_t mr_count() const noexcept;
  std::size_t srq_count() const noexcept;
  // Per-vNIC usage and refusals against ServerConfig::limits: any thread.
  const TenantQuotas& quotas() const noexcept { return *quotas_; }

  // Control half's records.
  struct App;
  struct QpCtl;
  struct CqCtl;
  struct MrCtl;
  struct PdSlot;
  struct SrqCtl;
  // Fast half's records.
  struct FastApp;
  struct QpSlot;
  struct CqSlot;
  struct MrSlot;
  struct SrqSlot;

 private:
  template <class Out>
  std::size_t fetch_send_to(uint32_t qpn, std::size_t max, Out&& out) noexcept;
  template <class Out>
  std::size_t fetch_recv_to(uint32_t qpn, std::size_t max, Out&& out) noexcept;
  template <class Out>
  std::size_t fetch_srq_recv_to(uint32_t srq, std::size_t max, Out&& out) noexcept;
  // wqe_fetch.h: the fetches' shared steps.
  template <class Sink>
  ibv_wc_status take_sges(const WqeSge* ring, uint32_t num_sge, uint32_t app_id, uint32_t pd, bool local_write,
                          Sink& sink, std::size_t n, uint64_t* total, uint32_t* vendor) noexcept;
  template <class Ring>
  bool fail_first_wqe(QpSlot& qp, Ring& ring, uint32_t cq, uint64_t wr_id, ibv_wc_status why, ibv_wc_opcode opcode,
                      uint32_t vendor) noexcept;
  // control half
  void accept_apps();
  // Closes silent connections past hello_timeout_ns (a scan only while any exist).
  void expire_silent();
  // Closes the oldest silent connection (of `uid`, or of anyone if any_uid) with no
  // message waiting; false if there is none.
  bool evict_silent(uint32_t uid, bool any_uid);
  void listen_on();  // the socket applications connect to (ServerConfig::listen)
  void serve(uint32_t app_index);
  void handle(uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
              Reply* rep, int* rfds, std::size_t* nrfds);
  void drop_app(uint32_t app_index, bool died);
  void retire(ShmRegion&& region, bool device_mapped = false, uint32_t mr_index = UINT32_MAX);
  bool release_retired(int budget);  // budget: device unmaps; true if more are due
  // Hands msg to the fast half and waits until it is applied (threaded), or
  // applies it here (poll()). False if the lcore stopped before applying it.
  bool send_to_fast(ControlMsg& msg, ControlResult* result = nullptr);
  QpCtl* find_qp_ctl(uint32_t qpn) noexcept;
  CqCtl* find_cq_ctl(uint32_t handle) noexcept;
  MrCtl* find_mr_ctl(uint32_t key) noexcept;
  void count_ctl(std::atomic<uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }

  // Control-path handlers (each fills the reply body, returns its status).
  Status on_hello(App& app, uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
                  Reply* rep, int* rfds, std::size_t* nrfds);
  Status on_alloc_pd(App& app, Reply* rep);
  Status on_dealloc_pd(App& app, const Request& req);
  Status on_reg_mr(App& app, const Request& req, int* fds, std::size_t nfds, Reply* rep);
  Status on_dereg_mr(App& app, const Request& req);
  Status on_create_cq(App& app, const Request& req, int* fds, std::size_t nfds,
                      Reply* rep);
  Status on_destroy_cq(App& app, const Request& req);
  Status on_create_qp(App& app, uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
                      Reply* rep);
  Status on_modify_qp(App& app, const Request& req, Reply* rep);
  Status on_destroy_qp(App& app, const Request& req);
  Status on_query_qp(App& app, const Request& req, Reply* rep);
  Status on_async_events(App& app, uint32_t app_index, int* fds, std::size_t nfds);
  bool may_attach(const App& app, uint32_t vnic_ip);  // takes vnic_mu_
  // host_server_srq.cc (control half)
  Status on_create_srq(App& app, uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
                       Reply* rep);
  Status on_destroy_srq(App& app, const Request& req);
  Status on_modify_srq(App& app, const Request& req);
  SrqCtl* find_srq_ctl(uint32_t handle) noexcept;
  void free_srq(uint32_t index);
  // Helpers over records host_server.cc defines. An application's doorbell
  // bits (QPs and SRQs share them): take one (UINT32_MAX: none left), give it back.
  static uint32_t app_id_of(const App& app) noexcept;
  static ResourceAmounts& app_usage(App& app) noexcept;
  static uint32_t app_account(const App& app) noexcept;
  // The usage of the application at `index` if it is still `id` (null: it is gone).
  ResourceAmounts* usage_of_app(uint32_t index, uint32_t id) noexcept;
  static uint16_t version_of(const App& app) noexcept;  // the protocol version it negotiated
  static uint32_t take_doorbell_bit(App& app) noexcept;
  void give_doorbell_bit(uint32_t app_index, uint32_t app_id, uint32_t bit);
  // A reference on the application's PD `pd` (false: not its PD), and its release.
  bool take_pd_ref(uint32_t pd, uint32_t app_id) noexcept;
  void drop_pd_ref(uint32_t pd) noexcept;
  void free_qp(uint32_t index, bool died);
  void free_cq(uint32_t index);
  void free_mr(uint32_t index);
  void free_pd(uint32_t index);  // gives its quota back

  // fast half
  void apply(const ControlMsg& m, ControlResult* r) noexcept;
  Status apply_modify(const ControlMsg& m, ibv_qp_state* state) noexcept;
  void fast_free_qp(uint32_t index, bool died) noexcept;
  void fast_free_mr(uint32_t index) noexcept;
  void apply_srq(const ControlMsg& m, ControlResult* r) noexcept;  // host_server_srq.cc
  void fast_free_srq(uint32_t index) noexcept;
  // ready_qps reports `bit` of the application as `value` (0: nothing).
  void fast_bind_doorbell(uint32_t app_index, uint32_t app_id, uint32_t bit, uint32_t value) noexcept;
  SrqSlot* find_srq(uint32_t handle) noexcept;
  bool translate_for(uint32_t app_id, uint32_t pd, const WqeSge& s, bool local_write, Segment* out,
                     uint32_t* vendor_err) noexcept;
  void set_error(QpSlot& qp) noexcept;
  bool write_cqe(uint32_t cq_handle, const Cqe& cqe) noexcept;
  // An event for the application at app_index: written to its ring (true),
  // or false when the ring is full (the caller keeps it pending on its
  // object); true too for an application without a ring (protocol v1).
  bool push_event(uint32_t app_index, ibv_event_type type, uint32_t element) noexcept;
  // The same, or kept pending (`pending` |= bit) when the ring is full.
  void raise_event(uint32_t app_index, ibv_event_type type, uint32_t element, uint8_t& pending, uint8_t bit) noexcept;
  void flush_deferred() noexcept;  // pending events of applications whose rings have room again
  void forget_pending(uint32_t app_index, uint8_t& pending) noexcept;  // an object with pending events goes
  bool cq_in_error(uint32_t cq_handle) noexcept;  // overrun (or gone): flushes to it are dropped
  void flush_send(QpSlot& qp) noexcept;
  void flush_recv(QpSlot& qp) noexcept;
  QpSlot* find_qp(uint32_t qpn) noexcept;
  CqSlot* find_cq(uint32_t handle) noexcept;
  MrSlot* find_mr(uint32_t key) noexcept;
  bool translate(const QpSlot& qp, const WqeSge& s, bool local_write, Segment* out,
                 uint32_t* vendor_err) noexcept;

  ServerConfig config_;
  std::mutex vnic_mu_;  // config_.vnic_ips/vnic_owners: set by the lcore (DPU mode), read by on_hello
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  ShmRegion worker_page_;
  WorkerPage* page_ = nullptr;

  // ---- control half
  bool threaded_ = false;
  std::atomic<bool> stopping_{false};
  uint64_t now_ = 0;
  uint32_t next_app_id_ = 1;
  uint64_t sent_seq_ = 0;
  std::vector<std::unique_ptr<App>> apps_;  // index = epoll tag - 2; nullptr when free
  std::vector<QpCtl> qps_ctl_;
  std::vector<uint32_t> free_qps_;
  std::vector<CqCtl> cqs_ctl_;
  std::vector<uint32_t> free_cqs_;
  std::vector<MrCtl> mrs_ctl_;
  std::vector<uint32_t> free_mrs_;
  std::vector<PdSlot> pds_;
  std::vector<uint32_t> free_pds_;
  std::vector<SrqCtl> srqs_ctl_;
  std::vector<uint32_t> free_srqs_;
  std::size_t srq_count_ = 0;
  std::size_t qp_count_ = 0;
  std::size_t cq_count_ = 0;
  std::size_t mr_count_ = 0;
  std::atomic<std::size_t> mapped_bytes_{0};
  std::atomic<std::size_t> retired_bytes_{0};
  // A mapping the fast half has let go of. It is unmapped once the port has
  // consumed the events of every message up to `seq` (consumed_seq_: the
  // transport dropped the object too, and checks a region's key before each
  // use) and, for an MR, once the device holds none of its payloads; no
  // fixed grace period. An MR's slot is reused only then.
  struct Retired {
    ShmRegion region;
    uint64_t seq;         // sent_seq_ when retired
    bool device_mapped;   // an MR mapping given to the DeviceMapper
    uint32_t mr_index;    // its MR slot (UINT32_MAX: not an MR)
  };
  std::deque<Retired> retired_;
  std::atomic<uint64_t> ctl_protocol_errors_{0};
  std::atomic<uint64_t> ctl_requests_refused_{0};
  std::atomic<uint64_t> ctl_attach_denied_{0};
  std::atomic<uint64_t> ctl_silent_timeouts_{0};
  std::atomic<uint64_t> ctl_silent_evicted_{0};
  std::size_t silent_count_ = 0;  // connections that have not said hello yet
  std::shared_ptr<TenantQuotas> quotas_;  // the fair shares: taken at create, given back at free

  // ---- the handoff: control -> fast messages, fast -> control answers
  std::unique_ptr<SpscQueue<ControlMsg, 64>> to_fast_;
  std::unique_ptr<SpscQueue<ControlResult, 64>> to_ctl_;

  // ---- fast half
  std::vector<FastApp> fast_apps_;  // same index as apps_
  std::vector<QpSlot> qps_;
  std::vector<CqSlot> cqs_;
  std::vector<MrSlot> mrs_;
  std::vector<SrqSlot> srqs_;
  uint64_t last_beat_ = 0;
  std::deque<HostEvent> events_;
  uint64_t applied_seq_ = 0;                 // the latest message apply_control applied
  std::atomic<uint64_t> consumed_seq_{0};    // ... whose events the port has consumed too
  bool port_active_ = true;
  uint64_t fast_now_ = 0;       // apply_control's `now`: the completion timestamps' clock
  uint32_t deferred_apps_ = 0;  // applications with events pending on their objects (flush_deferred)
  HostCounters counters_;  // the fast half's (apps_* and the control ones come from ctl_*)
};

}  // namespace tandem::rnic::host
