// The host server's fast half: the data lcore's only (rnic/host/README.md
// "Two halves"). It applies the control half's finished objects from the
// control-message queue (apply_control), finds QPs whose doorbells rang
// (ready_qps), takes their WQEs validated and translated (fetch_*), writes
// completions into the applications' CQ rings (complete_*) and kicks their
// eventfds (completion channels, asynchronous events). No system call but
// those eventfd writes (and end_idle's read, single-thread mode only); no lock
// (the vNIC setters take the link's).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "rnic/host/host_protocol.h"
#include "rnic/host/host_status.h"
#include "rnic/host/queue_layout.h"
#include "rnic/host/server_types.h"

namespace tandem::rnic::host {

struct HostLink;
struct ControlMsg;
struct ControlResult;

class FastPath {
 public:
  // `config` as the control half normalized it; `link` is the control half's.
  FastPath(const ServerConfig& config, HostLink& link);
  ~FastPath();
  FastPath(const FastPath&) = delete;
  FastPath& operator=(const FastPath&) = delete;

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
  uint32_t max_apps() const noexcept { return max_apps_; }

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
  // end_idle() afterwards. Single-thread mode (HostServer::poll) only.
  bool begin_idle() noexcept;
  void end_idle() noexcept;

  // Both halves' counters (the control half's read with relaxed loads): any thread.
  HostCounters counters() const noexcept;
  // The port's vNICs changed (DPU mode: the agent added or removed one): the
  // next application that binds itself to a vNIC is checked against `ips`.
  // Under the link's lock, which the control half takes at hello.
  void set_vnic_ips(std::vector<uint32_t> ips);
  // Who owns which vNIC (--device-owner, re-resolved when the vNICs change).
  void set_vnic_owners(std::vector<VnicOwner> owners);

  // Heap held by the fast half's tables (HostServer::memory adds the control half's).
  std::size_t table_bytes() const noexcept;

  // The records (fast_records.h).
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

  // fast_apply.cc: the control half's messages.
  void apply(const ControlMsg& m, ControlResult* r) noexcept;
  Status apply_modify(const ControlMsg& m, ibv_qp_state* state) noexcept;
  void apply_srq(const ControlMsg& m, ControlResult* r) noexcept;
  Status apply_resize(const ControlMsg& m) noexcept;
  void fast_free_qp(uint32_t index, bool died) noexcept;
  void fast_free_mr(uint32_t index) noexcept;
  void fast_free_srq(uint32_t index) noexcept;
  // ready_qps reports `bit` of the application as `value` (0: nothing).
  void fast_bind_doorbell(uint32_t app_index, uint32_t app_id, uint32_t bit, uint32_t value) noexcept;

  // fast_path.cc
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
  SrqSlot* find_srq(uint32_t handle) noexcept;

  HostLink& link_;
  WorkerPage* page_;
  uint32_t qp_slot_base_;
  uint32_t max_apps_;
  std::vector<FastApp> fast_apps_;  // same index as the control half's applications
  std::vector<QpSlot> qps_;
  std::vector<CqSlot> cqs_;
  std::vector<MrSlot> mrs_;
  std::vector<SrqSlot> srqs_;
  uint64_t last_beat_ = 0;
  std::deque<HostEvent> events_;
  uint64_t applied_seq_ = 0;    // the latest message apply_control applied
  bool port_active_ = true;
  uint64_t fast_now_ = 0;       // apply_control's `now`: the completion timestamps' clock
  uint32_t deferred_apps_ = 0;  // applications with events pending on their objects (flush_deferred)
  HostCounters counters_;       // the fast half's (apps_* and the control ones come from the link)
};

}  // namespace tandem::rnic::host
