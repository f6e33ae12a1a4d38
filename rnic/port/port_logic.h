// The worker's logic between the host interface, the transport core and the
// level-2 table, with no I/O of its own: the QP directory (host QPN <-> core
// QPN, the tenant binding of each QP), WQEs in and completions out, route
// waits and their deadlines (DPU mode), following the agent's vNICs, the
// backlog of QPs with WQEs left to fetch, application death, and the
// counters. PortWorker<Io> (port_worker.h) adds the bursts over an I/O layer;
// the clock is the I/O layer's too (`now` is handed in, never read here).
//
// Memory. Every MR the host interface registers is registered in the core
// too, under the same key, with the application's addresses, the worker's
// mapping and its PD; QPs and SRQs carry their PD. The core checks every
// SGE and every remote access (RETH, the IRN placement header) itself: key,
// PD, bounds and access flags; a packet's rkey and VA reach it unchanged.
// QP numbers: applications use the host server's QPNs on the wire (as they
// exchange them out of band); the worker maps them to core QPNs.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/log/log_ring.h"
#include "common/wire/byte_order.h"
#include "common/wire/drop_reason.h"
#include "common/wire/opcode.h"
#include "common/wire/roce_packet.h"
#include "rnic/cm/gsi_ring.h"
#include "rnic/core/transport.h"
#include "rnic/host/fast_path.h"
#include "rnic/port/agent_link.h"
#include "rnic/port/egress_route.h"
#include "rnic/port/rx_stage.h"
#include "rnic/port/trace_flags.h"
#include "rnic/port/vnic.h"
#include "rnic/port/worker_counters.h"
#include "rnic/port/worker_snapshot.h"
#include "rnic/table/level2_table.h"

namespace tandem::rnic::port {

inline constexpr uint16_t kBurst = 32;
inline constexpr uint32_t kQpnBase = 0x100;
// The core's MR table holds every key the host interface can hand out (index < 2^16).
inline constexpr uint32_t kCoreMrSlots = 1u << 16;
// DPU mode: how long a QP's RTR waits for the agent to install its route.
inline constexpr uint64_t kRouteWaitNs = 3'000'000'000;
inline constexpr uint64_t kRouteRescanNs = 1'000'000;  // waiting QPs re-checked (and re-punted) at least this often

// What the logic needs of tandem-rnic's flags and the port's identity.
struct PortConfig {
  std::string name = "rnic0";
  std::string table_file;  // named in messages about the YAML's vNICs
  uint32_t underlay_ip = 0;  // this port's underlay IPv4, host order
  common::MacAddr underlay_mac{};
  // Explicit path sets, indexed by EgressAction::path_set_id - 1 (the YAML's).
  std::vector<std::vector<uint16_t>> path_sets;
  // Standalone: the port's vNICs. DPU mode: the fallback while the agent is older than v3.
  std::vector<Vnic> yaml_vnics;
  std::vector<DeviceOwner> device_owners;
  uint32_t mtu = 1024;  // largest path MTU a QP may use
  Reliability mode = Reliability::kIrn;
  std::string spray = "single";     // rnic/core path policy name
  std::string cc = "fixed_window";  // rnic/core congestion-control policy name
  uint64_t cc_window_bytes = 1ull << 20;
  uint64_t reorder_delay_ns = 50'000;
  uint64_t timeout_ns = 1'000'000;
  bool bench_any_psn = false;  // BENCHMARK ONLY: every QP accepts any PSN
  uint32_t max_qps = 16384;
  // Data packets in flight per lcore, shared equally by the applications with
  // some (TransportConfig::owner_inflight_pkts; 0: no limit).
  uint32_t app_inflight_pkts = 1024;
};

// Per-QP state of the worker: the binding to its tenant (vNIC, remote) and
// the WQEs the core holds, by slot (the core's wr_id).
struct QpCtx {
  bool live = false;
  bool routed = false;  // RTR done: vNIC and remote resolved (UD: vNIC only)
  bool ud = false;      // IBV_QPT_UD: each WQE names its destination (port_ud.cc)
  uint32_t local_overlay = 0;  // UD: its vNIC's overlay IPv4 (the GRH's destination)
  TraceFlags trace;     // the trace rule in force, compiled for this QP (trace_flags.h)
  uint32_t host_qpn = 0;
  uint32_t core_qpn = 0;
  uint32_t app_id = 0;
  ibv_qp_state state = IBV_QPS_RESET;
  uint32_t vnic = 0;
  uint32_t vni = 0;
  uint16_t pkey = 0xFFFF;  // BTH P_Key: stamped on its packets, required of arriving ones
  uint32_t remote_overlay = 0;
  uint32_t remote_underlay = 0;
  uint32_t dest_qpn = 0;  // the remote QP (what this QP's packets carry in the BTH)
  bool roce_peer = false;  // its route's peer is a standard RoCE RNIC (EgressAction kEgressPeerRoce)
  uint32_t mtu = 0;
  bool backlog = false;  // WQEs left in its rings (it is queued for pump_work: `queued`)
  bool queued = false;   // on its application's ready list (PortLogic::ready)
  uint32_t app_index = 0;  // its application's host slot (per-application fairness)
  uint32_t ready_prev = UINT32_MAX, ready_next = UINT32_MAX;  // ctx indices in that list
  // DPU mode: RTR found no route; the agent is asked and the QP waits (its
  // WQEs stay in the rings) until the route is installed or the deadline.
  bool route_pending = false;
  bool rts_pending = false;    // the application already moved it to RTS
  uint64_t route_deadline = 0;
  uint64_t route_asked_ns = 0;  // when its RTR punted (DPU mode)
  uint64_t route_wait_ns = 0;   // RTR to route installed: the tenant's new-flow set-up time
  EgressRoute route;  // egress entry, resolved once per table version
};

// Per-SRQ state of the worker: the host's SRQ and the core's, which holds its
// WQEs. Which QP consumes a WQE is the core's choice; the completion says.
struct SrqCtx {
  bool live = false;
  bool backlog = false;  // WQEs left in the application's ring
  uint32_t host_srq = 0;
  uint32_t core_srq = 0;
};

// "RTS", "ERR", ... (logs and telemetry).
const char* qp_state_name(ibv_qp_state s) noexcept;

class PortLogic {
 public:
  static constexpr uint32_t kMaxSrqs = 64;  // the core's (TransportConfig::max_srqs)
  static constexpr uint32_t kMaxHostQpSlots = 65536;
  // pump_work's bounds per loop turn (port_work.cc: fair WQE service).
  static constexpr uint32_t kDoorbellsPerTurn = 256;  // rung QPs read per turn (the rest stay rung)
  static constexpr uint32_t kVisitsPerTurn = 256;     // QPs served per turn
  static constexpr uint32_t kWqesPerTurn = 512;       // WQEs fetched per turn
  static constexpr uint32_t kWqesPerApp = 64;         // ... of them for one application

  // `table` and `host` outlive this; `agent` is the DPU agent (nullptr: standalone).
  PortLogic(const PortConfig& c, Level2Table& table, host::FastPath& host, AgentLink* agent);
  PortLogic(const PortLogic&) = delete;
  PortLogic& operator=(const PortLogic&) = delete;

  // ---- one loop iteration's control parts (PortWorker::run_once calls them)
  // Host events (QP create/modify/destroy, app death, SRQs) onto the core's verbs.
  uint32_t host_events(uint64_t now);
  // The core writes each completion into the host interface's CQ as it
  // happens (complete(), its CompletionSink); this counts them since the last
  // call and lets SRQs whose receives completed fetch more.
  uint32_t completions() noexcept;
  // New WQEs of ready QPs and SRQs (and backlogged ones) to the core.
  uint32_t pump_work() noexcept;
  // DPU mode, after the lcore adopted its view (commit_fanout.h): follows its
  // vNICs and finishes (or fails) QPs waiting for a route.
  uint32_t follow_agent(uint64_t now);
  // QPs with WQEs left to fetch (the loop must not sleep).
  bool has_backlog() const noexcept { return ready_apps_n_ != 0; }
  // The I/O layer's view of the port's link (polled): applications get
  // PORT_ACTIVE / PORT_ERR on a change (fast_path.h set_port_active).
  void set_link(bool up) noexcept {
    if (!up && host_.port_active()) ++k_.link_downs;
    host_.set_port_active(up);
  }
  void note_port_restart() noexcept { ++k_.port_restarts; }
  // Trace units (common/trace): the process's tracer, with its ring (default: one that never runs).
  void set_tracer(common::trace::Tracer* t) noexcept { tracer_ = t ? t : &no_tracer_; }
  // The connection manager's rings (rnic/cm, port_gsi.cc); nullptr: QP1 MADs are dropped (unknown_qpn).
  void set_gsi(cm::GsiRings* g) noexcept { gsi_ = g; }

  // ---- reading (the lcore, or after it stopped)
  const PortConfig& config() const noexcept { return c_; }
  const WorkerCounters& counters() const noexcept { return k_; }
  // What the lcore has to say (a QP refused, a route not installed): logged
  // by the control thread (common/log/log_drain.h), never by the lcore, and
  // rate-limited per tenant (the key names the kind of line and the application).
  common::LogRing& log() noexcept { return log_; }
  enum class LogKind : uint64_t { kNoRoute = 1, kCoreRefusedQp, kNoSrq, kCoreRefusedMr, kVnics };
  static constexpr uint64_t log_key(LogKind k, uint32_t who) noexcept {
    return (static_cast<uint64_t>(k) << 32) | who;
  }
  const Transport& core() const noexcept { return core_; }
  Transport& core() noexcept { return core_; }
  const std::vector<QpCtx>& qps() const noexcept { return ctx_; }
  std::size_t live_qps() const noexcept;
  const QpCtx* qp_by_host(uint32_t host_qpn) const noexcept {
    return const_cast<PortLogic*>(this)->by_host(host_qpn);
  }
  std::size_t route_waits() const noexcept { return route_wait_.size(); }
  // The vNIC list's figures, read without its lock: the lcore (their writer) only.
  std::size_t vnic_count() const noexcept { return vnics_.size(); }
  bool vnics_from_agent() const noexcept { return vnics_from_agent_; }
  uint64_t vnics_withdrawn() const noexcept { return vnics_withdrawn_; }
  uint64_t qps_on_withdrawn_vnic() const noexcept { return qps_on_withdrawn_vnic_; }
  // The port's vNICs: a copy, under the lock the lcore takes to change them (any thread).
  std::vector<Vnic> vnics() const {
    std::lock_guard<std::mutex> g(vnics_mu_);
    return vnics_;
  }
  // The vNIC list under its lock: f(vnics, from_agent, withdrawn, qps_on_withdrawn_vnic).
  template <class F>
  auto with_vnics(F&& f) const {
    std::lock_guard<std::mutex> g(vnics_mu_);
    return f(vnics_, vnics_from_agent_, vnics_withdrawn_, qps_on_withdrawn_vnic_);
  }

  // Every counter, once (port_counters.h): f(group, name, value, help), with
  // the I/O layer's rows after the drops and the caller's before live_qps.
  template <class F, class IoRows, class MoreRows>
  void visit_counters(F&& f, IoRows&& io_rows, MoreRows&& more_rows) const;
  // One row per live QP (as many as fit): binding, state, core and path counters.
  void fill_qp_rows(QpRows& out) const noexcept;

  // --device-owner's vNIC ids as the host server's overlay IPs (ids not present yet match nothing).
  static std::vector<host::VnicOwner> vnic_owners(const std::vector<DeviceOwner>& owners,
                                                  const std::vector<Vnic>& vnics);
  static uint32_t vnic_id(const std::vector<Vnic>& vnics, uint32_t ip) noexcept;
  static std::vector<uint32_t> vnic_ips(const std::vector<Vnic>& vnics);
  // The core's attributes for an application QP of these depths (what
  // on_qp_created asks the core for, before its PD, SRQ and RD atomics).
  static QpInitAttr core_qp_init(const PortConfig& c, uint32_t sq_depth, uint32_t rq_depth, bool ud);
  static TransportConfig core_config(const PortConfig& c);
  // What such a QP and an SRQ of `depth` cost this worker (the core's records
  // and the QP's entry here): the host interface charges it as queue_bytes.
  static uint64_t qp_worker_bytes(const PortConfig& c, uint32_t sq_depth, uint32_t rq_depth, bool on_srq, bool ud);
  static uint64_t srq_worker_bytes(uint32_t depth);

 protected:
  QpCtx* by_host(uint32_t host_qpn) noexcept {
    const uint32_t i = host_index_[host_qpn & (kMaxHostQpSlots - 1)];
    if (i == UINT32_MAX) return nullptr;
    QpCtx& q = ctx_[i];
    return (q.live && q.host_qpn == host_qpn) ? &q : nullptr;
  }
  QpCtx* by_core(uint32_t core_qpn) noexcept {
    const uint32_t i = core_qpn - kQpnBase;
    if (i >= ctx_.size() || !ctx_[i].live || ctx_[i].core_qpn != core_qpn) return nullptr;
    return &ctx_[i];
  }
  // The tenant check of rx_stage.h against this port's QPs and routes; on
  // kNone the packet's dqpn is the core's and `traced` is the QP's trace flag.
  common::DropReason accept(common::RocePacket& pkt, [[maybe_unused]] uint8_t* data,
                            const Level2Table::Snapshot& snap, bool& traced) noexcept {
    if (common::opcode_has(pkt.bth.opcode, common::kOpDeth)) [[unlikely]] {
      traced = false;  // trace rules name a connected flow; datagrams are not traced
      if (pkt.bth.dqpn == cm::kGsiQpn) return accept_gsi(pkt, data, snap);
      return accept_ud(pkt, snap);
    }
    QpCtx* q = nullptr;
    const common::DropReason r = check_ingress(
        pkt, c_.underlay_ip, table_, snap, [this](uint32_t host_qpn) { return by_host(host_qpn); },
        [&](QpCtx& qp) -> const EgressRoute* { return fresh_route(qp, qp.remote_overlay, snap); }, &q);
    if (r != common::DropReason::kNone) return r;
    pkt.bth.dqpn = q->core_qpn;
    traced = q->trace.rx;
    return common::DropReason::kNone;
  }
  // The QP's route to `peer` in this table version: resolved from its egress
  // entry only when the version moved. nullptr if the entry is gone; the miss
  // is punted so the agent may resolve it again.
  EgressRoute* fresh_route(QpCtx& q, uint32_t peer, const Level2Table::Snapshot& snap) noexcept {
    EgressRoute& r = q.route;
    if (r.fresh(snap.version, peer)) [[likely]]
      return &r;
    const Level2Entry* e = table_.lookup(snap, common::egress_key(q.vnic, peer));
    if (e == nullptr) {
      if (agent_) agent_->punt(common::egress_key(q.vnic, peer), now_);
      return nullptr;
    }
    r.resolve(e->egress, c_.underlay_mac, c_.path_sets, snap.version, peer, q.pkey);
    q.remote_underlay = r.underlay;
    q.trace = compile_trace_flags(*tracer_, c_.underlay_ip, r, q.host_qpn);
    trace_tx_flags_ |= q.trace.tx;
    return &r;
  }
  // port_ud.cc: the tenant check of a UD datagram (to a UD QP of this port,
  // from its tenant's partition); the GRH it gets names overlay addresses.
  common::DropReason accept_ud(common::RocePacket& pkt, const Level2Table::Snapshot& snap) noexcept;
  int apply_ud_rtr(QpCtx& q, const host::QpInfo& info);
  // port_gsi.cc: a CM MAD to QP1 onto the connection manager's ring (kConsumed), or why not.
  common::DropReason accept_gsi(const common::RocePacket& pkt, const uint8_t* data,
                                const Level2Table::Snapshot& snap) noexcept;
  // A record from the CM: a probe answered, or a MAD's descriptor and template (true: send it).
  bool gsi_frame(const cm::GsiOut& o, const Level2Table::Snapshot& snap, TxDesc& d, const EncapTemplate** t) noexcept;

  // Every live QP to ERR and its WQEs flushed (the worker stops): the core
  // completes what it holds with IBV_WC_WR_FLUSH_ERR, the host interface moves
  // the QP to ERR (applications see a dead QP, not a hang).
  void flush_all(uint64_t now);
  // The lcore adopted a trace rule (or a stop): every QP's flags compiled
  // again (port_trace.cc); a QP whose route is not resolved yet gets them
  // when it is (fresh_route).
  void compile_trace() noexcept;

  // The table version this lcore reads at: its agent's view (DPU mode, every
  // lookup of an iteration at one adopted version), else the newest.
  Level2Table::Snapshot snapshot() const noexcept { return pinned_ ? *pinned_ : table_.begin_read(); }

  const PortConfig c_;
  Level2Table& table_;
  host::FastPath& host_;  // the lcore's half of the host server
  AgentLink* agent_;
  const Level2Table::Snapshot* pinned_;  // the agent's view's snapshot, or nullptr
  Transport core_;
  WorkerCounters k_;
  uint64_t now_ = 0;  // the current iteration's time (the I/O layer's clock)
  common::trace::Tracer no_tracer_;
  common::trace::Tracer* tracer_ = &no_tracer_;
  uint64_t trace_generation_ = 0;  // the tracer's generation the QPs' flags were compiled for
  // Some QP's TX flag was set since the rule was compiled (cleared only by
  // the next compile): without one, TX tests no flag per packet.
  bool trace_tx_flags_ = false;
  cm::GsiRings* gsi_ = nullptr;
  cm::GsiIn gsi_in_;          // the record being filled (one per MAD; no allocation)
  EgressRoute gsi_route_;     // the route of the MAD being sent
  uint32_t gsi_psn_ = 0;

 private:
  uint32_t pump_qp(QpCtx& q, uint32_t max_wqes = kBurst) noexcept;
  uint32_t pump_srq(SrqCtx& s) noexcept;
  SrqCtx* srq_by_host(uint32_t host_srq) noexcept {
    for (SrqCtx& s : srqs_)
      if (s.live && s.host_srq == host_srq) return &s;
    return nullptr;
  }
  void on_srq_created(uint32_t host_srq, uint32_t depth, uint32_t pd);
  void on_mr_registered(const host::HostEvent& ev) noexcept;
  void on_srq_destroyed(uint32_t host_srq);
  void on_qp_created(uint32_t host_qpn);
  void on_qp_state(uint32_t host_qpn, ibv_qp_state state, uint64_t now);
  void on_qp_destroyed(uint32_t host_qpn, bool died);
  void fail_qp(QpCtx& q) noexcept { host_.qp_error(q.host_qpn); }
  // The egress entry toward the QP's remote from its application's vNIC (any
  // local vNIC if unbound); sets q.vnic/q.vni. nullptr: no route (yet).
  const Level2Entry* find_route(QpCtx& q, const host::QpInfo& info, uint32_t remote, uint64_t now, bool punt);
  int apply_rtr(QpCtx& q, const host::QpInfo& info, const Level2Entry& e, uint32_t remote);
  int apply_rts(QpCtx& q, const host::QpInfo& info);
  uint32_t pending_routes(uint64_t now);
  void refresh_vnics();
  void update_vnics(const LcoreView& ch);

  // The port's vNICs: the YAML's in standalone mode; in DPU mode the vNIC
  // entries of the lcore's view (refresh_vnics() right after it adopts one,
  // so find_route's snapshot and this list are of the same table version),
  // or the YAML's with an agent older than v3.
  std::vector<Vnic> vnics_;
  mutable std::mutex vnics_mu_;  // other threads read vnics_; the lcore only locks to change it
  bool vnics_from_agent_ = false;
  uint64_t vnics_generation_ = 0;
  uint64_t vnics_version_ = 0;          // table version vnics_ was taken from (agent source)
  uint64_t vnics_withdrawn_ = 0;        // vNICs the agent removed
  uint64_t qps_on_withdrawn_vnic_ = 0;  // live QPs routed over a vNIC when it was removed
  bool yaml_vnics_warned_ = false;
  bool old_agent_warned_ = false;
  uint32_t core_cq_ = 0;
  common::LogRing log_;
  // The core CQ's sink: each completion straight to its application's CQ
  // ring (one tenant's full CQ costs only that tenant's completions).
  struct CqRelay final : CompletionSink {
    explicit CqRelay(PortLogic* p) noexcept : port(p) {}
    void on_completion(const Completion& c) noexcept override { port->complete(c); }
    PortLogic* port;
  };
  void complete(const Completion& c) noexcept;
  CqRelay relay_{this};
  uint32_t completed_ = 0;  // completions since completions() last ran
  std::vector<QpCtx> ctx_;              // index = core QPN - kQpnBase
  std::vector<uint32_t> host_index_;    // host QPN slot -> ctx index
  // ---- fair WQE service (port_work.cc). QPs with WQEs to fetch wait in a
  // list per application; applications take turns, each at most a quantum of
  // WQEs (and QP visits) per loop turn, and the turn's whole work is bounded:
  // one application's doorbell storm or deep rings cost it, not the others.
  static constexpr uint32_t kNoCtx = UINT32_MAX;
  struct AppReady {
    uint32_t head = kNoCtx, tail = kNoCtx;  // ctx indices
    uint32_t count = 0;                     // QPs listed
    bool listed = false;                    // in ready_apps_
  };
  void ready(QpCtx& q) noexcept;    // onto its application's list (no-op if there)
  void unready(QpCtx& q) noexcept;  // off it (destroyed)
  uint32_t serve_app(uint32_t app, uint32_t& visits, uint32_t& wqes) noexcept;
  std::vector<AppReady> app_ready_;   // by host application slot
  std::vector<uint32_t> ready_apps_;  // ring of applications with QPs listed, each once
  uint32_t ready_apps_head_ = 0;
  uint32_t ready_apps_n_ = 0;
  uint32_t doorbell_app_ = 0;         // whose doorbells pump_work reads first next turn
  std::vector<uint32_t> route_wait_;    // host QPNs whose RTR waits for the agent
  uint64_t routes_seen_version_ = ~uint64_t{0};  // table version pending_routes last looked at
  uint64_t next_route_scan_ns_ = 0;
  std::vector<SrqCtx> srqs_ = std::vector<SrqCtx>(kMaxSrqs);
  uint32_t live_srqs_ = 0;
};

}  // namespace tandem::rnic::port
