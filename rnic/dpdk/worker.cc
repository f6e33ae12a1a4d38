#include "rnic/dpdk/worker.h"

#include <arpa/inet.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <utility>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/dpdk/eal.h"
#include "common/dpdk/stop_signal.h"
#include "common/dpdk/telemetry.h"
#include "common/dpdk/unmap_guard.h"
#include "common/dpdk/tsc_clock.h"
#include "common/wire/byte_order.h"
#include "common/wire/entropy.h"
#include "common/wire/opcode.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/policy_factory.h"
#include "rnic/core/transport.h"
#include "rnic/dpdk/standalone_table.h"
#include <unistd.h>

#include "rnic/dpdk/dma_registry.h"
#include "rnic/dpdk/dpu_link.h"
#include "rnic/port/egress_route.h"
#include "rnic/dpdk/host_control.h"
#include "rnic/dpdk/fair_shares.h"
#include "rnic/dpdk/rx_stage.h"
#include "rnic/dpdk/tx_encap.h"
#include "rnic/dpdk/tx_payload_mode.h"
#include "rnic/port/worker_counters.h"
#include "rnic/host/device_registry.h"
#include "rnic/host/host_server.h"
#include "rnic/port/snapshot_exchange.h"
#include "rnic/port/worker_snapshot.h"

namespace tandem::rnic::dpdk {

namespace cd = common::dpdk;
using common::DropReason;

namespace {

constexpr uint16_t kBurst = 32;
constexpr uint32_t kQpnBase = 0x100;
constexpr uint64_t kIdentityBase = 0x1000;  // the identity MR: worker address == MR address
constexpr uint64_t kIdentityLen = (uint64_t{1} << 47) - kIdentityBase;
constexpr uint64_t kRecvTag = uint64_t{1} << 32;  // core wr_id = slot (| kRecvTag for RECVs)
// SRQ receives: wr_id = kRecvTag | kSrqTag | SrqCtx index << 16 | slot.
constexpr uint64_t kSrqTag = uint64_t{1} << 33;
constexpr uint32_t kMaxSrqs = 64;  // the core's (TransportConfig::max_srqs)
// DPU mode: how long a QP's RTR waits for the agent to install its route.
constexpr uint64_t kRouteWaitNs = 3'000'000'000;
constexpr uint64_t kRouteRescanNs = 1'000'000;  // waiting QPs re-checked (and re-punted) at least this often
constexpr uint32_t kMaxHostQpSlots = 65536;
// A /tandem/rnic/qps reply: DPDK's 16 KiB telemetry buffer cuts off what
// does not fit, silently; a row is ~0.6 KiB with 4 paths, ~1 KiB with 16.
constexpr std::size_t kQpsPerReply = 16;
// Rows of the counter snapshot: every named counter plus every drop reason of 4 stages and the core.
constexpr std::size_t kMaxCounterRows = 128 + 5 * common::kDropReasonCount;

const char* const* drop_names();

// --table-capacity, or the default for the mode; throws if the YAML's entries do not fit.
uint32_t table_capacity(const WorkerConfig& c, const StandaloneTable& st) {
  if (c.table_capacity != 0) {
    if (c.table_capacity < st.entries.size())
      throw std::invalid_argument("--table-capacity " + std::to_string(c.table_capacity) + " is smaller than the " +
                                  std::to_string(st.entries.size()) + " entries of " + c.table_file);
    return c.table_capacity;
  }
  return static_cast<uint32_t>(std::max<std::size_t>(c.dpu_channel.empty() ? 64 : 65536, st.entries.size() * 2));
}

// The level-2 table's hash secret (rnic/table/key_hash.h): drawn from the OS
// at every start and kept in this process, so no tenant can aim keys at
// another's buckets.
Level2TableConfig table_config(const WorkerConfig& c, const StandaloneTable& st) {
  std::random_device rd;
  auto word = [&rd] { return uint64_t{rd()} << 32 | rd(); };
  Level2TableConfig tc{table_capacity(c, st)};
  tc.hash_key = TableHashKey{word(), word()};
  if (c.insecure_table_hash_key) {
    tc.hash_key = *c.insecure_table_hash_key;
    std::fprintf(stderr, "%s: warning: --insecure-table-hash-key: the level-2 hash secret is known\n", c.name.c_str());
  }
  return tc;
}

std::string hex16(uint16_t v) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%04x", v);
  return b;
}

uint32_t mtu_bytes(ibv_mtu m) noexcept {
  return (m >= IBV_MTU_256 && m <= IBV_MTU_4096) ? (128u << m) : 1024u;
}

const char* state_name(ibv_qp_state s) noexcept {
  switch (s) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    default: return "?";
  }
}

// Per-QP state of the worker: the binding to its tenant (vNIC, remote) and
// the WQEs the core holds, by slot (the core's wr_id).
struct QpCtx {
  bool live = false;
  bool routed = false;  // RTR done: vNIC and remote resolved
  uint32_t host_qpn = 0;
  uint32_t core_qpn = 0;
  uint32_t app_id = 0;
  ibv_qp_state state = IBV_QPS_RESET;
  uint32_t vnic = 0;
  uint32_t vni = 0;
  uint16_t pkey = 0xFFFF;  // BTH P_Key: stamped on its packets, required of arriving ones
  uint32_t remote_overlay = 0;
  uint32_t remote_underlay = 0;
  uint32_t mtu = 0;
  std::vector<host::SendWork> send_slots;
  std::vector<uint32_t> send_free;
  std::vector<host::RecvWork> recv_slots;
  std::vector<uint32_t> recv_free;
  bool backlog = false;
  // DPU mode: RTR found no route; the agent is asked and the QP waits (its
  // WQEs stay in the rings) until the route is installed or the deadline.
  bool route_pending = false;
  bool rts_pending = false;    // the application already moved it to RTS
  uint64_t route_deadline = 0;
  uint64_t route_asked_ns = 0;  // when its RTR punted (DPU mode)
  uint64_t route_wait_ns = 0;   // RTR to route installed: the tenant's new-flow set-up time
  EgressRoute route;  // egress entry, resolved once per table version
};

// Per-SRQ state of the worker: the core's SRQ and the WQEs it holds, by slot.
// Which QP consumes a WQE is the core's choice; the completion says.
struct SrqCtx {
  bool live = false;
  bool backlog = false;  // WQEs left in the application's ring
  uint32_t host_srq = 0;
  uint32_t core_srq = 0;
  std::vector<host::RecvWork> slots;
  std::vector<uint32_t> free;
};

class Worker {
 public:
  Worker(const WorkerConfig& c, StandaloneTable st)
      : c_(c),
        st_(std::move(st)),
        table_(table_config(c, st_)),
        core_(TransportConfig{c.max_qps, kQpnBase, 8, 4, 1024}),
        dma_(c.port_id),
        host_(host::ServerConfig{.socket_path = c.host_socket,
                                 .max_qps = c.max_qps,  // the core's: a QP over it is refused at create
                                 .vnic_ips = vnic_ips(st_.vnics),
                                 .check_owners = !c.device_owners.empty(),
                                 .vnic_owners = vnic_owners(c.device_owners, st_.vnics),
                                 .mapper = &dma_,
                                 .limits = host_limits(c)}),
        vnics_(st_.vnics) {
    for (const DeviceOwner& o : c.device_owners)  // standalone vNICs are all known now
      if (c.dpu_channel.empty() &&
          std::none_of(st_.vnics.begin(), st_.vnics.end(), [&](const Vnic& v) { return v.id == o.vnic_id; }))
        throw std::invalid_argument("--device-owner: no vNIC " + std::to_string(o.vnic_id) + " in " + c.table_file);
    if (c.dpu_channel.empty())
      commit_standalone_table(st_, table_);
    else  // DPU mode: the agent programs the table (its YAML entries are ignored)
      dpu_ = std::make_unique<DpuLink>(c.dpu_channel, table_, (rte_rdtsc() ^ (uint64_t(getpid()) << 32)) | 1,
                                       c.dpu_agent_timeout_ns, c.dpu_max_protocol, c.punt_budget);
    core_cq_ = core_.create_cq(1u << 16);
    const MemoryRegion mr = core_.reg_mr(kIdentityBase, reinterpret_cast<uint8_t*>(kIdentityBase), kIdentityLen,
                                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (mr.lkey == 0 || core_cq_ == UINT32_MAX) throw std::runtime_error("transport core: cannot create CQ/MR");
    ident_key_ = mr.lkey;
    ctx_.resize(c.max_qps);
    host_index_.assign(kMaxHostQpSlots, UINT32_MAX);
    qps_x_->buffer().rows.resize(c.max_qps);
    stats_x_->buffer().rows.resize(kMaxCounterRows);
    drop_names();  // built here, not on the lcore's first publication
  }

  void setup_port(rte_mempool* hdr_pool, rte_mempool* ext_pool, uint16_t n_ports, TxPayloadMode mode) {
    n_ports_ = n_ports;
    tx_mode_ = std::move(mode);
    encap_ = std::make_unique<TxEncap>(hdr_pool, ext_pool, !tx_mode_.zero_copy);
  }

  void loop();
  void shutdown();
  void print_counters() const;
  nlohmann::json counters_json() const;
  // Every counter of the worker, once: f(group, name, value, help). Feeds the
  // telemetry snapshot, --stats-json and the exit print alike.
  template <class F>
  void visit_counters(F&& f) const;
  void fill_counter_rows(port::CounterRows& out) const noexcept;
  void fill_qp_rows(port::QpRows& out) const noexcept;
  void publish_snapshots() noexcept {
    if (stats_x_->wanted()) [[unlikely]] {
      fill_counter_rows(stats_x_->buffer());
      stats_x_->publish();
    }
    if (qps_x_->wanted()) [[unlikely]] {
      fill_qp_rows(qps_x_->buffer());
      qps_x_->publish();
    }
  }
  void register_telemetry();
  std::string tx_mode_line() const {
    return std::string(tx_mode_.zero_copy ? "zero-copy" : "copy") + " (" + tx_mode_.why + ")";
  }
  // One verbs device per vNIC (rnic/host/device_registry.h), written on the control
  // side: at start for the YAML's; in DPU mode by sync_devices() whenever the
  // agent's vNICs change. Removed at exit. Returns the names registered.
  std::vector<std::string> register_devices(const std::vector<Vnic>& vnics) const;
  // DPU mode, from a thread of its own (file I/O stays off the lcore): registers
  // the vNICs the worker has now if they changed since `seen`, and removes the
  // rest of `names`.
  void sync_devices(std::vector<std::string>& names, std::string& seen);
  void unregister_devices(const std::vector<std::string>& names) const {
    for (const std::string& n : names) host::remove_device(c_.device_dir, n);
  }
  std::size_t live_qps() const noexcept {
    return static_cast<std::size_t>(std::count_if(ctx_.begin(), ctx_.end(), [](const QpCtx& q) { return q.live; }));
  }

 private:
  uint32_t rx_burst(uint64_t now) noexcept;
  uint32_t rx_port(uint16_t port, uint64_t now) noexcept;
  DropReason ingress(common::RocePacket& pkt, uint8_t* data, const Level2Table::Snapshot& snap,
                     QpCtx** out) noexcept;
  void translate_remote(const QpCtx& q, common::RocePacket& pkt, uint8_t* payload) noexcept;
  EgressRoute* fresh_route(QpCtx& q, uint32_t peer, const Level2Table::Snapshot& snap) noexcept;
  uint32_t tx_drain() noexcept;
  bool tx_flush() noexcept;
  void tx_discard() noexcept;
  uint32_t host_events();
  uint32_t pump_work() noexcept;
  uint32_t pump_qp(QpCtx& q) noexcept;
  RecvWr core_recv(const host::RecvWork& w, uint64_t wr_id) const noexcept;
  uint32_t pump_srq(SrqCtx& s) noexcept;
  SrqCtx* srq_by_host(uint32_t host_srq) noexcept {
    for (SrqCtx& s : srqs_)
      if (s.live && s.host_srq == host_srq) return &s;
    return nullptr;
  }
  void on_srq_created(uint32_t host_srq, uint32_t depth);
  void on_srq_destroyed(uint32_t host_srq);
  uint32_t completions() noexcept;
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
  void on_qp_created(uint32_t host_qpn);
  void on_qp_state(uint32_t host_qpn, ibv_qp_state state);
  void on_qp_destroyed(uint32_t host_qpn, bool died);
  void fail_qp(QpCtx& q) noexcept;
  // The egress entry toward the QP's remote from its application's vNIC (any
  // local vNIC if unbound); sets q.vnic/q.vni. nullptr: no route (yet).
  const Level2Entry* find_route(QpCtx& q, const host::QpInfo& info, uint32_t remote, uint64_t now, bool punt);
  int apply_rtr(QpCtx& q, const host::QpInfo& info, const Level2Entry& e, uint32_t remote);
  int apply_rts(QpCtx& q, const host::QpInfo& info);
  uint32_t pending_routes(uint64_t now);
  // --device-owner's vNIC ids as the host server's overlay IPs (ids not present yet match nothing).
  static std::vector<host::VnicOwner> vnic_owners(const std::vector<DeviceOwner>& owners,
                                                  const std::vector<Vnic>& vnics) {
    std::vector<host::VnicOwner> out;
    for (const DeviceOwner& o : owners)
      for (const Vnic& v : vnics)
        if (v.id == o.vnic_id) out.push_back({v.overlay_ip, o.uid, o.gid});
    return out;
  }
  static uint32_t vnic_id(const std::vector<Vnic>& vnics, uint32_t ip) {
    for (const Vnic& v : vnics)
      if (v.overlay_ip == ip) return v.id;
    return 0;
  }
  static std::vector<uint32_t> vnic_ips(const std::vector<Vnic>& vnics) {
    std::vector<uint32_t> ips;
    for (const Vnic& v : vnics) ips.push_back(v.overlay_ip);
    return ips;
  }
  // DPU mode, after each channel service: follows the channel's committed vNIC
  // entries (a v3 agent) or falls back to the YAML's (an older agent). Two
  // compares when nothing changed.
  void refresh_vnics() {
    const RnicChannel* ch = dpu_->channel();
    if (ch == nullptr) return;
    const bool agent = ch->vnics_from_agent();
    if (agent == vnics_from_agent_ && ch->vnics().generation() == vnics_generation_) [[likely]] {
      if (!agent && !old_agent_warned_ && ch->negotiated_version() != 0 && st_.vnics.empty()) {
        std::fprintf(stderr, "%s: warning: the agent speaks protocol v%u (< v%u) and sends no vNICs, and %s lists "
                     "none: QPs of this port cannot be routed until a newer agent connects\n",
                     c_.name.c_str(), unsigned{ch->negotiated_version()}, unsigned{common::kProtocolVersionVnic},
                     c_.table_file.c_str());
        old_agent_warned_ = true;
      }
      return;
    }
    update_vnics(*ch);
  }
  void update_vnics(const RnicChannel& ch);

  const WorkerConfig& c_;
  StandaloneTable st_;
  Level2Table table_;
  Transport core_;
  DmaRegistry dma_;  // MR mappings for the device: used by host_'s control thread (before host_: outlives it)
  host::HostServer host_;
  // The port's vNICs: the YAML's in standalone mode; in DPU mode the vNIC
  // entries of the committed table (refresh_vnics() right after the channel
  // commits, on this thread, so find_route's snapshot and this list are of
  // the same table version), or the YAML's with an agent older than v3.
  std::vector<Vnic> vnics_;
  std::mutex vnics_mu_;  // the telemetry thread reads vnics_; the worker thread only locks to change it
  bool vnics_from_agent_ = false;
  uint64_t vnics_generation_ = 0;
  uint64_t vnics_version_ = 0;        // table version vnics_ was taken from (agent source)
  uint64_t vnics_withdrawn_ = 0;      // vNICs the agent removed
  uint64_t qps_on_withdrawn_vnic_ = 0;  // live QPs routed over a vNIC when it was removed
  bool yaml_vnics_warned_ = false;
  bool old_agent_warned_ = false;
  std::unique_ptr<TxEncap> encap_;
  TxPayloadMode tx_mode_;
  uint32_t core_cq_ = 0;
  uint32_t ident_key_ = 0;
  std::vector<QpCtx> ctx_;              // index = core QPN - kQpnBase
  std::vector<uint32_t> host_index_;    // host QPN slot -> ctx index
  std::vector<uint32_t> backlog_;       // host QPNs with WQEs left to fetch
  std::vector<uint32_t> route_wait_;    // host QPNs whose RTR waits for the agent
  uint64_t routes_seen_version_ = ~uint64_t{0};  // table version pending_routes last looked at
  uint64_t next_route_scan_ns_ = 0;
  std::vector<SrqCtx> srqs_ = std::vector<SrqCtx>(kMaxSrqs);
  uint32_t live_srqs_ = 0;
  rte_mbuf* tx_buf_[kBurst];
  uint16_t tx_n_ = 0;
  std::array<SendWr, kBurst> post_list_{};  // pump_qp's WRs for the core (a member: not re-initialised per call)
  RxStage rx_;  // the receive passes over a burst (rx_stage.h)
  WorkerCounters k_;
  // What telemetry reads: filled by this thread on request (snapshot_exchange.h);
  // shared with the callbacks so a late one never reaches a destroyed worker.
  std::shared_ptr<port::SnapshotExchange<port::CounterRows>> stats_x_ =
      std::make_shared<port::SnapshotExchange<port::CounterRows>>();
  std::shared_ptr<port::SnapshotExchange<port::QpRows>> qps_x_ = std::make_shared<port::SnapshotExchange<port::QpRows>>();
  cd::TscClock clock_;
  uint16_t n_ports_ = 1;
  std::unique_ptr<DpuLink> dpu_;  // DPU mode only
};

// ------------------------------------------------------------------ receive

uint32_t Worker::rx_burst(uint64_t now) noexcept {
  uint32_t total = 0;
  for (uint16_t port = 0; port < n_ports_; ++port) total += rx_port(port, now);
  return total;
}

uint32_t Worker::rx_port(uint16_t port, uint64_t now) noexcept {
  rte_mbuf* pkts[kBurst];
  const uint16_t n = rte_eth_rx_burst(port, 0, pkts, kBurst);
  if (n == 0) return 0;
  const Level2Table::Snapshot snap = table_.begin_read();
  rx_.run(pkts, n, core_, k_, now, [&](common::RocePacket& pkt, uint8_t* data) noexcept {
    QpCtx* q = nullptr;
    const DropReason r = ingress(pkt, data, snap, &q);
    if (r != DropReason::kNone) return r;
    translate_remote(*q, pkt, data + pkt.payload_offset);
    pkt.bth.dqpn = q->core_qpn;
    return DropReason::kNone;
  });
  rte_pktmbuf_free_bulk(pkts, n);  // placement copied what it kept
  return n;
}

// The tenant check of rx_stage.h, against this worker's QPs and routes.
DropReason Worker::ingress(common::RocePacket& pkt, uint8_t*, const Level2Table::Snapshot& snap,
                           QpCtx** out) noexcept {
  return check_ingress(
      pkt, st_.underlay_ip, table_, snap, [this](uint32_t host_qpn) { return by_host(host_qpn); },
      [&](QpCtx& q) -> const EgressRoute* { return fresh_route(q, q.remote_overlay, snap); }, out);
}

// The QP's route to `peer` in this table version: resolved from its egress
// entry only when the version moved. nullptr if the entry is gone; the miss
// is punted so the agent may resolve it again.
EgressRoute* Worker::fresh_route(QpCtx& q, uint32_t peer, const Level2Table::Snapshot& snap) noexcept {
  EgressRoute& r = q.route;
  if (r.fresh(snap.version, peer)) [[likely]]
    return &r;
  const Level2Entry* e = table_.lookup(snap, common::egress_key(q.vnic, peer));
  if (e == nullptr) {
    if (dpu_) dpu_->punt(common::egress_key(q.vnic, peer), nullptr, 0, 0, clock_.now_ns());
    return nullptr;
  }
  r.resolve(e->egress, st_.underlay_mac, st_.path_sets, snap.version, peer, q.pkey);
  q.remote_underlay = r.underlay;
  return &r;
}

// Remote addresses in the packet are the remote application's (rkey, VA):
// the host interface checks them against this QP's application, PD and
// access rights and gives the worker pointer, which the core then uses
// through the identity region. A refused access becomes rkey 0 (the core
// NAKs it with a remote access error). A zero-length access names no memory
// and its R_Key is not checked (IBTA C9-88): verbs libraries flush and fence
// with zero-length writes on rkey 0 (UCX's rc_verbs does).
void Worker::translate_remote(const QpCtx& q, common::RocePacket& pkt, uint8_t* payload) noexcept {
  const uint8_t op = pkt.bth.opcode;
  if (!common::opcode_has(op, common::kOpRequest)) return;
  const bool is_write = common::opcode_has(op, common::kOpWrite);
  if (common::opcode_has(op, common::kOpReth)) {
    const int access = is_write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
    uint8_t* p = pkt.reth.len == 0 ? reinterpret_cast<uint8_t*>(kIdentityBase)
                                   : host_.translate_remote(q.host_qpn, pkt.reth.rkey, pkt.reth.va, pkt.reth.len, access);
    if (p == nullptr) {
      ++k_.remote_refused;
      pkt.reth.rkey = 0;
    } else {
      pkt.reth.rkey = ident_key_;
      pkt.reth.va = reinterpret_cast<uint64_t>(p);
    }
  }
  if (c_.mode == Reliability::kIrn && is_write && pkt.payload_len >= kXethLen && payload[0] == kXethMagic) {
    // XETH: bytes 8-11 msg_len, 12-15 rkey, 16-23 va (big-endian).
    const uint32_t msg_len = common::load_be32(payload + 8);
    const uint32_t rkey = common::load_be32(payload + 12);
    const uint64_t va = common::load_be64(payload + 16);
    uint8_t* p = msg_len == 0 ? reinterpret_cast<uint8_t*>(kIdentityBase)
                              : host_.translate_remote(q.host_qpn, rkey, va, msg_len, IBV_ACCESS_REMOTE_WRITE);
    if (p == nullptr) {
      ++k_.remote_refused;
      common::store_be32(payload + 12, 0);
    } else {
      common::store_be32(payload + 12, ident_key_);
      common::store_be64(payload + 16, reinterpret_cast<uint64_t>(p));
    }
  }
}

// ------------------------------------------------------------------ transmit

// Frames the port did not take stay at the front of the burst and are
// retried first: back-pressure reaches the core (its TX queue fills and it
// stops), instead of dropping frames the peer would have to recover by timeout.
bool Worker::tx_flush() noexcept {
  if (tx_n_ == 0) return true;
  encap_->finish();  // the burst's deferred ICRCs, back to back
  // Lengths first: a PMD may free (and the pool reuse) what it took.
  uint32_t len[kBurst];
  for (uint16_t i = 0; i < tx_n_; ++i) len[i] = tx_buf_[i]->pkt_len;
  const uint16_t sent = rte_eth_tx_burst(c_.port_id, 0, tx_buf_, tx_n_);
  for (uint16_t i = 0; i < sent; ++i) k_.tx_bytes += len[i];
  k_.tx_packets += sent;
  if (sent < tx_n_) {
    ++k_.tx_backpressure;
    std::memmove(tx_buf_, tx_buf_ + sent, (tx_n_ - sent) * sizeof(rte_mbuf*));
  }
  tx_n_ = static_cast<uint16_t>(tx_n_ - sent);
  return tx_n_ == 0;
}

void Worker::tx_discard() noexcept {
  k_.tx_not_sent += tx_n_;
  if (tx_n_) rte_pktmbuf_free_bulk(tx_buf_, tx_n_);
  tx_n_ = 0;
}

uint32_t Worker::tx_drain() noexcept {
  TxQueue& tx = core_.tx();
  if (!tx_flush() && tx_n_ == kBurst) return 0;  // the port is full: leave the core's queue alone
  if (tx.empty()) return 0;
  const Level2Table::Snapshot snap = table_.begin_read();
  uint32_t n = 0;
  while (!tx.empty() && tx_n_ < kBurst) {
    const TxDesc& d = tx.front();
    ++n;
    QpCtx* q = by_core(d.local_qpn);
    if (q == nullptr || !q->routed) {
      k_.drop(Stage::kEgress, DropReason::kUnknownQpn);
      tx.pop();
      continue;
    }
    EgressRoute* r = fresh_route(*q, d.peer, snap);
    if (r == nullptr) {
      k_.drop(Stage::kEgress, DropReason::kTableMiss);
      tx.pop();
      continue;
    }
    rte_mbuf* m = encap_->build(d, r->tmpl_for(d.bth.dqpn), r->sport(d.udp_sport), true);
    if (d.retransmit) ++k_.tx_retransmits;
    tx.pop();
    if (m == nullptr) {
      k_.drop(Stage::kEgress, DropReason::kNoBuffer);
      continue;
    }
    tx_buf_[tx_n_++] = m;
    if (tx_n_ == kBurst && !tx_flush() && tx_n_ == kBurst) break;
  }
  tx_flush();
  return n;
}

// ------------------------------------------------------------ host interface

void Worker::fail_qp(QpCtx& q) noexcept { host_.qp_error(q.host_qpn); }

void Worker::on_qp_created(uint32_t host_qpn) {
  const host::QpInfo* info = host_.qp_info(host_qpn);
  if (info == nullptr) return;
  QpInitAttr init;
  init.send_cq = core_cq_;
  init.recv_cq = core_cq_;
  init.sq_depth = std::bit_ceil(std::max<uint32_t>(info->sq_depth, 1));
  init.rq_depth = std::bit_ceil(std::max<uint32_t>(info->rq_depth, 1));
  init.mode = c_.mode;
  init.max_rd_atomic = std::max<uint8_t>(info->max_rd_atomic, 1);
  init.max_dest_rd_atomic = 16;
  init.policy.path = c_.spray.c_str();
  init.policy.cc = c_.cc.c_str();
  init.policy.cc_window_bytes = c_.cc_window_bytes;
  init.policy.num_paths = 16;
  init.bench_any_psn = c_.bench_any_psn;  // standalone only (run() refuses it in DPU mode)
  if (info->srq != 0) {
    const SrqCtx* s = srq_by_host(info->srq);
    init.srq = s != nullptr ? s->core_srq : UINT32_MAX;  // none: the core refuses the QP
  }
  const uint32_t core_qpn = core_.create_qp(init);
  if (core_qpn == 0) {
    ++k_.qps_core_refused;
    host_.qp_error(host_qpn);
    return;
  }
  QpCtx& q = ctx_[core_qpn - kQpnBase];
  q = QpCtx{};
  q.live = true;
  q.host_qpn = host_qpn;
  q.core_qpn = core_qpn;
  q.app_id = info->app_id;
  q.send_slots.resize(init.sq_depth);
  q.recv_slots.resize(init.rq_depth);
  for (uint32_t i = init.sq_depth; i-- > 0;) q.send_free.push_back(i);
  for (uint32_t i = init.rq_depth; i-- > 0;) q.recv_free.push_back(i);
  host_index_[host_qpn & (kMaxHostQpSlots - 1)] = core_qpn - kQpnBase;
  ++k_.qps_created;
}

void Worker::on_qp_state(uint32_t host_qpn, ibv_qp_state state) {
  QpCtx* q = by_host(host_qpn);
  const host::QpInfo* info = host_.qp_info(host_qpn);
  if (q == nullptr || info == nullptr) return;
  q->state = state;
  QpAttr a;
  int rc = 0;
  switch (state) {
    case IBV_QPS_INIT:
      a.state = QpState::kInit;
      a.qp_access_flags = info->qp_access_flags;
      rc = core_.modify_qp(q->core_qpn, a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
      break;
    case IBV_QPS_RTR: {
      // The remote GID is the remote vNIC's overlay IPv4 (::ffff:a.b.c.d).
      const uint32_t remote = common::load_be32(info->dgid + 12);
      const uint64_t now = clock_.now_ns();
      if (const Level2Entry* e = find_route(*q, *info, remote, now, dpu_ != nullptr)) {
        rc = apply_rtr(*q, *info, *e, remote);
      } else if (dpu_) {
        // Asked the agent (punted); the loop goes on serving everyone else.
        q->route_pending = true;
        q->rts_pending = false;
        q->route_deadline = now + kRouteWaitNs;
        q->route_asked_ns = now;
        route_wait_.push_back(host_qpn);
        return;
      } else {
        std::fprintf(stderr, "%s: QP 0x%x: no egress entry for remote %s: QP to ERR\n", c_.name.c_str(), host_qpn,
                     format_ipv4(remote).c_str());
        ++k_.qps_no_route;
        fail_qp(*q);
        return;
      }
      break;
    }
    case IBV_QPS_RTS:
      if (q->route_pending) {
        q->rts_pending = true;  // applied once the route is in
        return;
      }
      rc = apply_rts(*q, *info);
      break;
    case IBV_QPS_ERR:
      a.state = QpState::kError;
      core_.modify_qp(q->core_qpn, a, IBV_QP_STATE);  // flushes what the core holds
      break;
    default:
      break;
  }
  if (rc != 0) {
    std::fprintf(stderr, "%s: QP 0x%x: core refused %s (errno %d): QP to ERR\n", c_.name.c_str(), host_qpn,
                 state_name(state), rc);
    ++k_.qps_core_refused;
    fail_qp(*q);
  }
}

const Level2Entry* Worker::find_route(QpCtx& q, const host::QpInfo& info, uint32_t remote, uint64_t now,
                                      bool punt) {
  const Level2Table::Snapshot snap = table_.begin_read();
  for (const Vnic& v : vnics_) {
    if (info.vnic_ip != 0 && v.overlay_ip != info.vnic_ip) continue;
    if (const Level2Entry* e = table_.lookup(snap, common::egress_key(v.id, remote))) {
      q.vnic = v.id;
      q.vni = v.vni;
      q.pkey = common::wire_pkey(v.pkey);
      return e;
    }
  }
  if (punt && dpu_ && dpu_->state() == RnicChannelState::kActive)
    for (const Vnic& v : vnics_)
      if (info.vnic_ip == 0 || v.overlay_ip == info.vnic_ip)
        dpu_->punt(common::egress_key(v.id, remote), nullptr, 0, 0, now);
  return nullptr;
}

int Worker::apply_rtr(QpCtx& q, const host::QpInfo& info, const Level2Entry& e, uint32_t remote) {
  q.remote_overlay = remote;
  q.remote_underlay = e.egress.underlay_dst_ip;
  q.route.invalidate();  // the vNIC may have changed
  q.mtu = std::min(mtu_bytes(info.path_mtu), c_.mtu);
  QpAttr a;
  a.state = QpState::kRtr;
  a.qp_access_flags = info.qp_access_flags;
  a.path_mtu = q.mtu;
  a.dest_qp_num = info.dest_qp_num;
  a.rq_psn = info.rq_psn;
  a.peer = remote;
  a.path_seed = static_cast<uint16_t>(q.host_qpn ^ (q.host_qpn >> 16));
  a.min_rnr_timer = info.min_rnr_timer;
  a.reorder_delay_ns = c_.reorder_delay_ns;
  const int rc = core_.modify_qp(q.core_qpn, a,
                                 IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                     IBV_QP_RQ_PSN | IBV_QP_AV | IBV_QP_MIN_RNR_TIMER);
  if (rc == 0) q.routed = true;
  return rc;
}

int Worker::apply_rts(QpCtx& q, const host::QpInfo& info) {
  QpAttr a;
  a.state = QpState::kRts;
  a.sq_psn = info.sq_psn;
  // The application's local ACK timeout (4.096 us << timeout, as verbs)
  // when it set one; the worker's --timeout-us otherwise. Never below the
  // worker's: a too-short RTO retransmits whatever is still queued.
  a.timeout_ns = info.timeout ? std::max<uint64_t>(c_.timeout_ns, uint64_t{4096} << std::min<uint8_t>(info.timeout, 31))
                              : c_.timeout_ns;
  a.retry_cnt = info.retry_cnt ? info.retry_cnt : 7;
  a.rnr_retry = info.rnr_retry;
  return core_.modify_qp(q.core_qpn, a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                            IBV_QP_RNR_RETRY);
}

void Worker::update_vnics(const RnicChannel& ch) {
  const bool agent = ch.vnics_from_agent();
  std::vector<Vnic> next;
  if (agent) {
    for (const common::VnicAction& a : ch.vnics().committed())
      next.push_back(Vnic{a.vnic_id, a.overlay_ip, a.overlay_mac, a.vni, a.pkey});
    if (!st_.vnics.empty() && !yaml_vnics_warned_) {
      std::fprintf(stderr, "%s: warning: the agent programs this port's vNICs (protocol v%u); the %zu vNICs in %s are ignored\n",
                   c_.name.c_str(), unsigned{ch.negotiated_version()}, st_.vnics.size(), c_.table_file.c_str());
      yaml_vnics_warned_ = true;
    }
  } else {
    next = st_.vnics;  // an agent older than v3 sends none: the YAML's, as before
  }
  // A vNIC the agent removed: its egress entries went in the same commit, so
  // QPs on it no longer resolve a route (their packets count as table_miss
  // drops, their punts are refused); count them here.
  for (const Vnic& v : vnics_) {
    bool kept = false;
    for (const Vnic& n : next) kept = kept || n.id == v.id;
    if (kept) continue;
    ++vnics_withdrawn_;
    for (const QpCtx& q : ctx_)
      if (q.live && q.routed && q.vnic == v.id) ++qps_on_withdrawn_vnic_;
  }
  {
    std::lock_guard<std::mutex> g(vnics_mu_);
    vnics_.swap(next);
  }
  // A vNIC's partition can arrive later (an agent that moved to v4): its
  // QPs stamp and require the new key from their next packet on.
  for (QpCtx& q : ctx_)
    for (const Vnic& v : vnics_)
      if (q.live && q.routed && q.vnic == v.id && q.pkey != common::wire_pkey(v.pkey)) {
        q.pkey = common::wire_pkey(v.pkey);
        q.route.invalidate();
      }
  vnics_from_agent_ = agent;
  vnics_generation_ = ch.vnics().generation();
  vnics_version_ = ch.vnics().version();
  host_.set_vnic_ips(vnic_ips(vnics_));
  host_.set_vnic_owners(vnic_owners(c_.device_owners, vnics_));
  std::string list;
  for (const Vnic& v : vnics_) {
    list += (list.empty() ? "" : ", ") + std::to_string(v.id) + "=" + format_ipv4(v.overlay_ip);
    if (v.pkey) list += " pkey " + hex16(v.pkey);
  }
  if (agent)
    std::printf("%s: vNICs from the agent (table v%llu): %s\n", c_.name.c_str(),
                static_cast<unsigned long long>(vnics_version_), list.empty() ? "none" : list.c_str());
  else
    std::printf("%s: vNICs from %s (agent protocol v%u sends none): %s\n", c_.name.c_str(), c_.table_file.c_str(),
                unsigned{ch.negotiated_version()}, list.empty() ? "none" : list.c_str());
  std::fflush(stdout);
}

// DPU mode: QPs whose RTR waits for the agent. Each iteration looks their
// routes up again (a handful of QPs, control path); a route that arrived
// completes RTR (and RTS if the application got there) and lets the QP's
// WQEs flow; past the deadline (the agent denied it, or is gone) the QP
// goes to ERR and its application sees the failure.
uint32_t Worker::pending_routes(uint64_t now) {
  // A route can only appear with a commit: look again when the table version
  // moved, and otherwise once per kRouteRescanNs (deadlines, re-punting what
  // the budget or the agent dropped). A tenant holding thousands of QPs in RTR
  // then costs the loop nothing between commits.
  const uint64_t version = table_.version();
  const bool timer = now >= next_route_scan_ns_;
  if (version == routes_seen_version_ && !timer) return 0;
  routes_seen_version_ = version;
  if (timer) next_route_scan_ns_ = now + kRouteRescanNs;
  uint32_t done = 0;
  for (std::size_t i = 0; i < route_wait_.size();) {
    QpCtx* q = by_host(route_wait_[i]);
    const host::QpInfo* info = host_.qp_info(route_wait_[i]);
    bool finished = q == nullptr || info == nullptr || !q->route_pending;
    if (!finished) {
      const uint32_t remote = common::load_be32(info->dgid + 12);
      if (const Level2Entry* e = find_route(*q, *info, remote, now, timer)) {
        q->route_pending = false;
        q->route_wait_ns = now - q->route_asked_ns;
        int rc = apply_rtr(*q, *info, *e, remote);
        if (rc == 0 && q->rts_pending) rc = apply_rts(*q, *info);
        if (rc != 0) {
          ++k_.qps_core_refused;
          fail_qp(*q);
        } else if (!q->backlog) {
          q->backlog = true;  // WQEs posted meanwhile wait in the rings
          backlog_.push_back(q->host_qpn);
        }
        finished = true;
      } else if (now >= q->route_deadline) {
        std::fprintf(stderr, "%s: QP 0x%x: the agent installed no route to %s: QP to ERR\n", c_.name.c_str(),
                     q->host_qpn, format_ipv4(remote).c_str());
        ++k_.qps_no_route;
        q->route_pending = false;
        fail_qp(*q);
        if (!q->backlog) {
          q->backlog = true;  // flushes the WQEs posted meanwhile: the application sees errors
          backlog_.push_back(q->host_qpn);
        }
        finished = true;
      }
    }
    if (finished) {
      route_wait_[i] = route_wait_.back();
      route_wait_.pop_back();
      ++done;
    } else {
      ++i;
    }
  }
  return done;
}

void Worker::on_qp_destroyed(uint32_t host_qpn, bool died) {
  QpCtx* q = by_host(host_qpn);
  if (q == nullptr) return;
  QpAttr a;
  a.state = QpState::kError;
  core_.modify_qp(q->core_qpn, a, IBV_QP_STATE);
  core_.destroy_qp(q->core_qpn);
  host_index_[host_qpn & (kMaxHostQpSlots - 1)] = UINT32_MAX;
  *q = QpCtx{};  // its flush completions are dropped: the application's CQ is gone
  ++(died ? k_.qps_app_died : k_.qps_destroyed);
}

void Worker::on_srq_created(uint32_t host_srq, uint32_t depth) {
  const uint32_t core_srq = core_.create_srq(depth);
  SrqCtx* s = nullptr;
  for (SrqCtx& c : srqs_)
    if (!c.live) {
      s = &c;
      break;
    }
  if (core_srq == 0 || s == nullptr) {
    if (core_srq != 0) core_.destroy_srq(core_srq);
    std::fprintf(stderr, "%s: SRQ 0x%x: the core has no room for it (%u SRQs): its QPs go to ERR\n", c_.name.c_str(),
                 host_srq, kMaxSrqs);
    ++k_.srqs_core_refused;
    return;
  }
  *s = SrqCtx{};
  s->live = true;
  s->host_srq = host_srq;
  s->core_srq = core_srq;
  s->slots.resize(depth);
  s->free.reserve(depth);
  for (uint32_t i = depth; i-- > 0;) s->free.push_back(i);
  ++live_srqs_;
  ++k_.srqs_created;
}

void Worker::on_srq_destroyed(uint32_t host_srq) {
  SrqCtx* s = srq_by_host(host_srq);
  if (s == nullptr) return;
  // Its QPs were destroyed first (their flushes may still be in the core's
  // CQ, naming this SRQ's slots): take those before the slots go.
  completions();
  core_.destroy_srq(s->core_srq);
  *s = SrqCtx{};
  --live_srqs_;
}

// A validated receive WQE as the core's RecvWr (QP and SRQ receives alike).
RecvWr Worker::core_recv(const host::RecvWork& w, uint64_t wr_id) const noexcept {
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.num_sge = w.num_sge;
  for (uint32_t g = 0; g < w.num_sge; ++g)
    wr.sg_list[g] = Sge{reinterpret_cast<uint64_t>(w.sge[g].addr), w.sge[g].length, ident_key_};
  return wr;
}

uint32_t Worker::pump_srq(SrqCtx& s) noexcept {
  host::RecvWork rw[kBurst];
  const std::size_t rn = host_.fetch_srq_recv(s.host_srq, std::span(rw, std::min<std::size_t>(kBurst, s.free.size())));
  const uint64_t tag = kRecvTag | kSrqTag | (uint64_t{static_cast<uint32_t>(&s - srqs_.data())} << 16);
  for (std::size_t i = 0; i < rn; ++i) {
    const uint32_t slot = s.free.back();
    s.free.pop_back();
    s.slots[slot] = rw[i];
    if (core_.post_srq_recv(s.core_srq, core_recv(rw[i], tag | slot)) != 0) {
      ++k_.wqe_refused;  // cannot happen with the identity MR; no QP owns it to fail
      s.free.push_back(slot);
    } else {
      ++k_.srq_wqe_recv;
    }
  }
  s.backlog = !s.free.empty() && host_.srq_queued(s.host_srq) > 0;
  return static_cast<uint32_t>(rn);
}

uint32_t Worker::host_events() {
  host::HostEvent ev;
  uint32_t n = 0;
  while (host_.next_event(&ev)) {
    ++n;
    switch (ev.kind) {
      case host::HostEventKind::kAppAttached: ++k_.apps_attached; break;
      case host::HostEventKind::kAppDetached: ++k_.apps_detached; break;
      case host::HostEventKind::kQpCreated: on_qp_created(ev.qpn); break;
      case host::HostEventKind::kQpStateChanged: on_qp_state(ev.qpn, ev.state); break;
      case host::HostEventKind::kQpDestroyed: on_qp_destroyed(ev.qpn, ev.app_died); break;
      // Mapped for the device by the control thread before it got here (DmaRegistry).
      case host::HostEventKind::kMrRegistered: break;
      case host::HostEventKind::kMrDeregistered: break;
      case host::HostEventKind::kSrqCreated: on_srq_created(ev.srq, ev.srq_depth); break;
      case host::HostEventKind::kSrqDestroyed: on_srq_destroyed(ev.srq); break;
    }
  }
  return n;
}

uint32_t Worker::pump_qp(QpCtx& q) noexcept {
  if (q.route_pending) {
    q.backlog = false;  // pending_routes() puts it back once routed
    return 0;
  }
  uint32_t n = 0;
  host::RecvWork rw[kBurst];
  const std::size_t rn = host_.fetch_recv(q.host_qpn, std::span(rw, std::min<std::size_t>(kBurst, q.recv_free.size())));
  for (std::size_t i = 0; i < rn; ++i) {
    const uint32_t slot = q.recv_free.back();
    q.recv_free.pop_back();
    q.recv_slots[slot] = rw[i];
    if (core_.post_recv(q.core_qpn, core_recv(rw[i], slot | kRecvTag)) != 0) {
      ++k_.wqe_refused;
      host_.complete_recv(q.host_qpn, rw[i], IBV_WC_LOC_QP_OP_ERR, 0, IBV_WC_RECV, false, 0, 0);
      q.recv_free.push_back(slot);
    } else {
      ++k_.wqe_recv;
    }
  }
  host::SendWork sw[kBurst];
  SendWr* const wrs = post_list_.data();
  const std::size_t sn = host_.fetch_send(q.host_qpn, std::span(sw, std::min<std::size_t>(kBurst, q.send_free.size())));
  for (std::size_t i = 0; i < sn; ++i) {
    const uint32_t slot = q.send_free.back();
    q.send_free.pop_back();
    host::SendWork& w = q.send_slots[slot];
    w = sw[i];
    SendWr& wr = wrs[i];
    wr.wr_id = slot;
    wr.opcode = w.opcode;
    wr.send_flags = IBV_SEND_SIGNALED | (w.send_flags & IBV_SEND_SOLICITED);
    wr.imm_data = ntohl(w.imm_data);
    wr.remote_addr = w.remote_addr;
    wr.rkey = w.rkey;
    if (w.inline_len > 0 || (w.send_flags & IBV_SEND_INLINE)) {
      wr.num_sge = w.inline_len ? 1 : 0;
      wr.sg_list[0] = Sge{reinterpret_cast<uint64_t>(w.inline_data), w.inline_len, ident_key_};
    } else {
      wr.num_sge = w.num_sge;
      for (uint32_t s = 0; s < w.num_sge; ++s)
        wr.sg_list[s] = Sge{reinterpret_cast<uint64_t>(w.sge[s].addr), w.sge[s].length, ident_key_};
    }
  }
  // The fetched WQEs as one list (one QP lookup for the burst, as
  // ibv_post_send takes a list); a WR the core refuses fails alone, with
  // LOC_QP_OP_ERR, and the rest of the list is posted after it.
  for (uint32_t from = 0; from < sn;) {
    uint32_t posted = 0;
    const int rc = core_.post_send(q.core_qpn, wrs + from, static_cast<uint32_t>(sn) - from, &posted);
    k_.wqe_send += posted;
    if (rc == 0) break;
    const uint32_t slot = static_cast<uint32_t>(wrs[from + posted].wr_id);
    ++k_.wqe_refused;
    host_.complete_send(q.host_qpn, q.send_slots[slot], IBV_WC_LOC_QP_OP_ERR);
    q.send_free.push_back(slot);
    from += posted + 1;
  }
  n = static_cast<uint32_t>(rn + sn);
  // Edge-triggered doorbells: keep the QP while WQEs are left to fetch.
  q.backlog = host_.send_queued(q.host_qpn) > 0 || host_.recv_queued(q.host_qpn) > 0;
  return n;
}

uint32_t Worker::pump_work() noexcept {
  uint32_t ready[64];
  uint32_t n = 0;
  std::size_t r;
  while ((r = host_.ready_qps(std::span(ready, 64))) > 0) {
    for (std::size_t i = 0; i < r; ++i) {
      if (ready[i] & host::kSrqDoorbell) {
        if (SrqCtx* s = srq_by_host(ready[i] & ~host::kSrqDoorbell)) n += pump_srq(*s);
        continue;
      }
      QpCtx* q = by_host(ready[i]);
      if (q == nullptr) {
        // Unknown to the core (creation refused): let the host flush it.
        host::SendWork sw[8];
        host::RecvWork rw[8];
        host_.fetch_send(ready[i], std::span(sw, 8));
        host_.fetch_recv(ready[i], std::span(rw, 8));
        continue;
      }
      const bool was = q->backlog;
      n += pump_qp(*q);
      if (q->backlog && !was) backlog_.push_back(q->host_qpn);
    }
    if (r < 64) break;
  }
  // SRQs whose rings hold more than the core had room for.
  if (live_srqs_ != 0)
    for (SrqCtx& s : srqs_)
      if (s.live && s.backlog) n += pump_srq(s);
  // QPs left over from earlier iterations.
  for (std::size_t i = 0; i < backlog_.size();) {
    QpCtx* q = by_host(backlog_[i]);
    if (q != nullptr && q->backlog) n += pump_qp(*q);
    if (q == nullptr || !q->backlog) {
      backlog_[i] = backlog_.back();
      backlog_.pop_back();
    } else {
      ++i;
    }
  }
  return n;
}

uint32_t Worker::completions() noexcept {
  Completion wc[64];
  uint32_t total = 0;
  uint32_t n;
  while ((n = core_.poll_cq(core_cq_, wc, 64)) > 0) {
    total += n;
    for (uint32_t i = 0; i < n; ++i) {
      QpCtx* q = by_core(wc[i].qp_num);
      if (wc[i].wr_id & kSrqTag) {
        // The slot is the SRQ's: freed even if the QP that took it is gone.
        const uint32_t si = static_cast<uint32_t>(wc[i].wr_id >> 16) & 0xFFFF;
        const uint32_t slot = static_cast<uint32_t>(wc[i].wr_id & 0xFFFF);
        if (si >= srqs_.size() || !srqs_[si].live || slot >= srqs_[si].slots.size()) continue;
        SrqCtx& s = srqs_[si];
        if (q != nullptr &&
            !host_.complete_recv(q->host_qpn, s.slots[slot], wc[i].status, wc[i].byte_len, wc[i].opcode,
                                 (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0, htonl(wc[i].imm_data), wc[i].src_qp))
          ++k_.cqe_lost;
        s.free.push_back(slot);
        ++k_.cqe_recv;
        if (!s.backlog && host_.srq_queued(s.host_srq) > 0) s.backlog = true;
        continue;
      }
      if (q == nullptr) continue;
      bool ok;
      if (wc[i].wr_id & kRecvTag) {
        const uint32_t slot = static_cast<uint32_t>(wc[i].wr_id & 0xFFFFFFFF);
        if (slot >= q->recv_slots.size()) continue;
        ok = host_.complete_recv(q->host_qpn, q->recv_slots[slot], wc[i].status, wc[i].byte_len,
                                 wc[i].opcode, (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0, htonl(wc[i].imm_data),
                                 wc[i].src_qp);
        q->recv_free.push_back(slot);
        ++k_.cqe_recv;
      } else {
        const uint32_t slot = static_cast<uint32_t>(wc[i].wr_id);
        if (slot >= q->send_slots.size()) continue;
        ok = host_.complete_send(q->host_qpn, q->send_slots[slot], wc[i].status);
        q->send_free.push_back(slot);
        ++k_.cqe_send;
      }
      if (!ok) ++k_.cqe_lost;
      // Freed slots may let a QP fetch more.
      if (!q->backlog && (host_.send_queued(q->host_qpn) > 0 || host_.recv_queued(q->host_qpn) > 0)) {
        q->backlog = true;
        backlog_.push_back(q->host_qpn);
      }
    }
    if (n < 64) break;
  }
  return total;
}


// ------------------------------------------------------------------ the loop

void Worker::loop() {
  cd::IdleLoop idle(c_.idle);
  const uint64_t end_ns = c_.duration_s > 0 ? clock_.now_ns() + static_cast<uint64_t>(c_.duration_s * 1e9) : 0;
  cd::unmap_guard_init();
  // Sockets, mmap and DMA registration happen on this thread from now on;
  // the loop only applies what it finished (host_.apply_control).
  HostControl control(host_, "tandem-host-ctl", clock_);
  while (!cd::stop_requested()) {
    uint64_t now = clock_.now_ns();
    if (end_ns && now >= end_ns) break;
    ++k_.loop_iterations;
    // The port's regions (memif) stay mapped until the idle sleep (unmap_guard.h).
    cd::PortSection in_ports;
    uint32_t work = rx_burst(now);
    // Objects the control thread finished (QPs, CQs, MRs mapped for the
    // device, departures): one load when there are none, never a syscall.
    work += host_.apply_control(now);
    work += host_events();
    work += completions();
    work += pump_work();
    for (int i = 0; i < 8; ++i) {
      core_.poll(now);
      work += tx_drain();
      if (!core_.pending()) break;
    }
    work += completions();
    if (dpu_) {
      dpu_->set(common::BarCounter::kRxPackets, k_.rx_packets);
      dpu_->set(common::BarCounter::kTxPackets, k_.tx_packets);
      work += dpu_->service(now);
      refresh_vnics();
      if (!route_wait_.empty()) work += pending_routes(now);
    }
    in_ports.leave();
    publish_snapshots();
    idle.after_iteration(work > 0 || !backlog_.empty());
  }
  control.stop();  // before shutdown() drains what it left
}

void Worker::shutdown() {
  // Flush every live QP: the core completes what it holds with
  // IBV_WC_WR_FLUSH_ERR, the host interface takes the completions and moves
  // the QP to ERR (applications see a dead QP, not a hang).
  for (QpCtx& q : ctx_) {
    if (!q.live) continue;
    q.route_pending = false;  // so pump_qp below flushes its WQEs too
    QpAttr a;
    a.state = QpState::kError;
    core_.modify_qp(q.core_qpn, a, IBV_QP_STATE);
  }
  completions();
  for (QpCtx& q : ctx_)
    if (q.live) host_.qp_error(q.host_qpn);
  host_.apply_control(clock_.now_ns());  // the control thread has stopped: nothing new comes
  host_events();
  for (QpCtx& q : ctx_)
    if (q.live) pump_qp(q);  // flushes the WQEs still queued in shared memory
  tx_flush();
  tx_discard();
  if (encap_) encap_->release();
}

// ----------------------------------------------------------------- counters

// "drop_<reason>", the names of the core's drop rows (static: rows keep pointers).
const char* const* drop_names() {
  static const auto names = [] {
    static std::array<std::string, common::kDropReasonCount> core;
    static std::array<const char*, common::kDropReasonCount> out{};
    for (std::size_t r = 1; r < common::kDropReasonCount; ++r) {
      core[r] = "drop_" + std::string(common::drop_reason_name(static_cast<DropReason>(r)));
      out[r] = core[r].c_str();
    }
    return out.data();
  }();
  return names;
}
constexpr const char* kDropGroups[] = {"drops.parse", "drops.ingress", "drops.core", "drops.egress"};
static_assert(std::size(kDropGroups) == static_cast<std::size_t>(Stage::kCount));

template <class F>
void Worker::visit_counters(F&& f) const {
#define TANDEM_RNIC_COUNTER_VISIT(name, doc) f("worker", #name, k_.name, doc);
  TANDEM_FOREACH_RNIC_COUNTER(TANDEM_RNIC_COUNTER_VISIT)
#undef TANDEM_RNIC_COUNTER_VISIT
  for (std::size_t st = 0; st < static_cast<std::size_t>(Stage::kCount); ++st)
    for (std::size_t r = 1; r < common::kDropReasonCount; ++r)
      if (k_.drops[st][r])
        f(kDropGroups[st], common::drop_reason_name(static_cast<DropReason>(r)).data(), k_.drops[st][r],
          "packets dropped at this stage for this reason");
  const EncapCounters& e = encap_->counters();
  f("tx_encap", "zero_copy", encap_->zero_copy() ? 1 : 0, "1: payloads leave from registered memory");
  f("tx_encap", "zero_copy_segs", e.zero_copy_segs, "payload segments attached, not copied");
  f("tx_encap", "copied_bytes", e.copied_bytes, "payload bytes copied into mbufs");
  f("tx_encap", "alloc_fail", e.alloc_fail, "frames not built for want of an mbuf");
  f("tx_encap", "too_big", e.too_big, "copy mode: frames larger than an mbuf");
  f("tx_encap", "ext_in_flight", encap_->ext_in_flight(), "attached payloads the port still holds");
  const DmaCounters& dm = dma_.counters();
  f("mr_dma", "mapped", dm.mapped, "MR mappings DMA-mapped for the device");
  f("mr_dma", "not_needed", dm.not_needed, "MR mappings the device needs no DMA map for");
  f("mr_dma", "no_iova", dm.no_iova, "MR mappings without an IOVA (IOVA-as-PA mode)");
  f("mr_dma", "failed", dm.failed, "MR mappings the EAL or device refused");
  f("mr_dma", "unmapped", dm.unmapped, "MR mappings released");
  f("mr_dma", "live", dm.live, "MR mappings held now");
  const TransportCounters& tc = core_.counters();
  f("core", "rx_pkts", tc.rx_pkts, "frames the transport core was given");
  for (std::size_t r = 1; r < common::kDropReasonCount; ++r)
    if (tc.drops[r]) f("core", drop_names()[r], tc.drops[r], "frames the core dropped for this reason");
  if (c_.bench_any_psn) {  // docs/pktgen.md "Looped replays"
    f("core", "bench_accepted", tc.bench_accepted, "--bench-any-psn: requests placed (or READs taken)");
    f("core", "bench_duplicate", tc.bench_duplicate, "--bench-any-psn: of them, restarts behind the expected PSN");
    f("core", "bench_gap", tc.bench_gap, "--bench-any-psn: of them, restarts ahead of the expected PSN");
  }
  const host::HostCounters& hc = host_.counters();
#define TANDEM_HOST_COUNTER_VISIT(name, doc) f("host", #name, hc.name, doc);
  TANDEM_FOREACH_HOST_COUNTER(TANDEM_HOST_COUNTER_VISIT)
#undef TANDEM_HOST_COUNTER_VISIT
  f("table", "version", table_.version(), "committed level-2 table version");
  f("table", "entries", table_.size(), "committed level-2 table entries");
  f("table", "full_buckets", table_.stats().full_buckets, "PUTs refused: both buckets of the key full (collisions)");
  f("table", "full_capacity", table_.stats().full_capacity, "PUTs refused: the table at --table-capacity");
  f("vnics", "count", vnics_.size(), "vNICs of the port");
  f("vnics", "withdrawn", vnics_withdrawn_, "vNICs the agent removed");
  f("vnics", "qps_on_withdrawn_vnic", qps_on_withdrawn_vnic_, "live QPs routed over a vNIC when it was removed");
  if (dpu_) f("dpu", "punts_over_budget", dpu_->budget().refused_total(), "punts refused: their vNIC over --punt-budget");
  f("", "live_qps", live_qps(), "QPs live now");
}

void Worker::fill_counter_rows(port::CounterRows& out) const noexcept {
  out.clear();
  visit_counters([&](const char* g, const char* n, uint64_t v, const char* h) { out.add(g, n, v, h); });
}

void Worker::fill_qp_rows(port::QpRows& out) const noexcept {
  out.n = 0;
  for (const QpCtx& q : ctx_) {
    if (!q.live || out.n == out.rows.size()) continue;
    port::QpRow& r = out.rows[out.n++];
    r = port::QpRow{};
    r.host_qpn = q.host_qpn;
    r.core_qpn = q.core_qpn;
    r.app_id = q.app_id;
    r.state = q.state;
    r.vnic = q.vnic;
    r.vni = q.vni;
    r.remote_overlay = q.remote_overlay;
    r.remote_underlay = q.remote_underlay;
    r.mtu = q.mtu;
    r.route_pending = q.route_pending;
    r.route_wait_us = q.route_wait_ns / 1000;
    if (const QpCounters* qc = core_.qp_counters(q.core_qpn)) {
      r.has_counters = true;
      r.tx_pkts = qc->tx_pkts;
      r.rx_pkts = qc->rx_pkts;
      r.retx_pkts = qc->retx_pkts;
      r.sacks_rx = qc->sacks_rx;
      r.timeouts = qc->timeouts;
      r.reorder_depth_max = qc->reorder_depth_max;
    }
    if (const PathPolicy* pp = core_.path_policy(q.core_qpn)) {
      r.paths = pp->path_count();
      for (uint32_t i = 0; i < r.paths; ++i) {
        const auto& ps = pp->path_stats(i);
        r.path_removals += ps.removals;
        r.path_returns += ps.returns;
        if (i >= port::kRowPaths) continue;
        r.pkts[i] = ps.pkts;
        r.removals[i] = ps.removals;
        r.silent_removals[i] = ps.silent_removals;
        r.loss_removals[i] = ps.loss_removals;
        r.stall_excused[i] = ps.stall_excused;
        r.ports[i] = pp->path_port(i);
      }
    }
  }
}

nlohmann::json Worker::counters_json() const {
  nlohmann::json j;
  j["name"] = c_.name;
  j["drops"] = nlohmann::json::object();
  for (const char* s : kStageNames) j["drops"][s] = nlohmann::json::object();
  visit_counters([&](const char* g, const char* n, uint64_t v, const char*) {
    if (*g == 0) {
      j[n] = v;
    } else if (std::strncmp(g, "drops.", 6) == 0) {
      j["drops"][g + 6][n] = v;
    } else {
      j[g][n] = v;
    }
  });
  j["tx_encap"]["zero_copy"] = encap_->zero_copy();
  j["tx_encap"]["mode_reason"] = tx_mode_.why;
  j["vnics"]["source"] = vnics_from_agent_ ? "agent" : "yaml";
  j["limits"] = limits_json(host_.quotas(), [this](uint32_t ip) { return vnic_id(vnics_, ip); });  // lcore stopped
  if (dpu_) j["punt_budget"] = punt_budget_json(dpu_->budget());
  return j;
}

void Worker::print_counters() const {
  std::printf("%s counters:\n", c_.name.c_str());
  visit_counters([](const char* g, const char* n, uint64_t v, const char* h) {
    if (v) std::printf("  %-13s %-24s %14lu  %s\n", *g ? g : "-", n, static_cast<unsigned long>(v), h);
  });
  std::fflush(stdout);
}

// Waits (on the telemetry thread) for the lcore to answer a snapshot request:
// it looks once per loop iteration, so only a stalled or stopped lcore misses this.
template <class T, class F>
int read_snapshot(port::SnapshotExchange<T>& x, F&& use) {
  typename port::SnapshotExchange<T>::Reader r(x);
  for (int i = 0; i < 2000 && !r.ready(); ++i) usleep(100);
  if (!r.ready()) return -EBUSY;
  use(r.data());
  return 0;
}

// The flat telemetry name of a row: "worker" rows as they are, drops as
// drop_<stage>_<reason>, others <group>_<name> (tx_encap as tx_).
std::string flat_name(const port::CounterRow& row) {
  const std::string_view g = row.group;
  if (g.empty() || g == "worker") return row.name;
  if (g.starts_with("drops.")) return "drop_" + std::string(g.substr(6)) + "_" + row.name;
  if (g == "tx_encap") return std::string("tx_") + row.name;
  return std::string(g) + "_" + row.name;
}

void Worker::sync_devices(std::vector<std::string>& names, std::string& seen) {
  std::vector<Vnic> now;
  {
    std::lock_guard<std::mutex> g(vnics_mu_);
    now = vnics_;
  }
  std::string key;
  for (const Vnic& v : now)
    key += std::to_string(v.id) + "=" + std::to_string(v.overlay_ip) + "/" +
           std::string(reinterpret_cast<const char*>(v.overlay_mac.data()), 6) + ";";
  if (key == seen) return;
  seen = key;
  std::vector<std::string> next = register_devices(now);
  for (const std::string& n : names)
    if (std::find(next.begin(), next.end(), n) == next.end()) host::remove_device(c_.device_dir, n);
  names = std::move(next);
}

std::vector<std::string> Worker::register_devices(const std::vector<Vnic>& vnics) const {
  std::vector<std::string> names;
  if (c_.device_dir.empty()) return names;
  char abs[PATH_MAX];
  const std::string sock = realpath(c_.host_socket.c_str(), abs) ? abs : c_.host_socket;
  for (const Vnic& v : vnics) {
    host::DeviceRecord d;
    d.name = "tandem_" + c_.name + "_v" + std::to_string(v.id);
    d.socket = sock;
    d.vnic_ip = v.overlay_ip;
    d.vnic_id = v.id;
    std::memcpy(d.mac, v.overlay_mac.data(), 6);
    d.mtu = c_.mtu;
    d.max_qps = c_.max_qps;
    d.pid = getpid();
    if (d.name.size() > 63) {
      std::fprintf(stderr, "%s: verbs device name %s is too long (63 bytes at most): not registered\n",
                   c_.name.c_str(), d.name.c_str());
      continue;
    }
    const std::string err = host::write_device(c_.device_dir, d);
    if (!err.empty()) {
      std::fprintf(stderr, "%s: verbs device %s not registered: %s\n", c_.name.c_str(), d.name.c_str(), err.c_str());
      continue;
    }
    names.push_back(d.name);
  }
  if (!names.empty())
    std::printf("tandem-rnic %s: verbs devices in %s: %zu (first %s)\n", c_.name.c_str(), c_.device_dir.c_str(),
                names.size(), names[0].c_str());
  else if (vnics.empty())
    std::printf("tandem-rnic %s: no vNICs, no verbs devices\n", c_.name.c_str());
  std::fflush(stdout);
  return names;
}

void Worker::register_telemetry() {
  using cd::TelemetryDict;
  cd::telemetry_register("/tandem/rnic/stats", "tandem-rnic worker counters (per stage drops by reason)",
                         [x = stats_x_, name = c_.name](std::string_view, TelemetryDict& out) {
                           return read_snapshot(*x, [&](const port::CounterRows& rows) {
                             out.str("name", name);
                             for (std::size_t i = 0; i < rows.n; ++i)
                               out.u64(flat_name(rows.rows[i]).c_str(), rows.rows[i].value);
                           });
                         });
  cd::telemetry_register("/tandem/rnic/qps",
                         "tandem-rnic live QPs: binding and core counters; ',N': from host QPN N on "
                         "(a reply holds at most 16 QPs, in host-QPN order)",
                         [x = qps_x_](std::string_view params, TelemetryDict& out) {
                           uint32_t first = 0;
                           if (!params.empty()) {
                             const std::string p(params);
                             char* end = nullptr;
                             first = static_cast<uint32_t>(std::strtoul(p.c_str(), &end, 0));
                             if (end == p.c_str() || *end != 0) return -EINVAL;
                           }
                           std::vector<port::QpRow> page;  // the telemetry thread's copy, sorted
                           const int rc = read_snapshot(*x, [&](const port::QpRows& rows) {
                             for (std::size_t k = 0; k < rows.n; ++k)
                               if (rows.rows[k].host_qpn >= first) page.push_back(rows.rows[k]);
                           });
                           if (rc != 0) return rc;
                           std::sort(page.begin(), page.end(),
                                     [](const port::QpRow& a, const port::QpRow& b) { return a.host_qpn < b.host_qpn; });
                           // A telemetry reply is 16 KiB: kQpsPerReply rows fit, more would be cut off silently.
                           if (page.size() > kQpsPerReply) page.resize(kQpsPerReply);
                           {
                             for (const port::QpRow& q : page) {
                               char key[16];
                               std::snprintf(key, sizeof key, "0x%x", q.host_qpn);
                               out.dict(key, [&](TelemetryDict& d) {
                                 d.u64("core_qpn", q.core_qpn);
                                 d.u64("app", q.app_id);
                                 d.str("state", state_name(static_cast<ibv_qp_state>(q.state)));
                                 d.u64("vnic", q.vnic);
                                 d.u64("vni", q.vni);
                                 d.str("remote", format_ipv4(q.remote_overlay));
                                 d.str("remote_underlay", format_ipv4(q.remote_underlay));
                                 d.u64("mtu", q.mtu);
                                 d.u64("route_pending", q.route_pending);
                                 d.u64("route_wait_us", q.route_wait_us);
                                 if (q.has_counters) {
                                   d.u64("tx_pkts", q.tx_pkts);
                                   d.u64("rx_pkts", q.rx_pkts);
                                   d.u64("retx_pkts", q.retx_pkts);
                                   d.u64("sacks_rx", q.sacks_rx);
                                   d.u64("timeouts", q.timeouts);
                                   d.u64("reorder_depth_max", q.reorder_depth_max);
                                 }
                                 if (q.paths == 0) return;
                                 std::string per_path, silent, loss, excused, pkts, ports;  // "a/b/c/d", path by path
                                 for (uint32_t i = 0; i < std::min(q.paths, port::kRowPaths); ++i) {
                                   const char* sep = i ? "/" : "";
                                   per_path += sep + std::to_string(q.removals[i]);
                                   silent += sep + std::to_string(q.silent_removals[i]);
                                   loss += sep + std::to_string(q.loss_removals[i]);
                                   excused += sep + std::to_string(q.stall_excused[i]);
                                   pkts += sep + std::to_string(q.pkts[i]);
                                   ports += sep + std::to_string(q.ports[i]);
                                 }
                                 d.str("path_ports", ports);  // the core's; the egress route maps them
                                 d.str("path_pkts_per_path", pkts);
                                 d.str("path_removals_per_path", per_path);
                                 d.str("path_silent_removals_per_path", silent);
                                 d.str("path_loss_removals_per_path", loss);
                                 d.str("path_stall_excused_per_path", excused);
                                 d.u64("paths", q.paths);
                                 d.u64("path_removals", q.path_removals);
                                 d.u64("path_returns", q.path_returns);
                               });
                             }
                           }
                           return 0;
                         });
  register_limits_telemetry(host_.quotas(), [this](uint32_t ip) {
    std::lock_guard<std::mutex> g(vnics_mu_);
    return vnic_id(vnics_, ip);
  });
  if (dpu_) register_punt_telemetry(dpu_->budget());
  cd::telemetry_register("/tandem/rnic/table", "tandem-rnic level-2 table and the port's vNICs",
                         [this, x = stats_x_](std::string_view, TelemetryDict& out) {
                           out.str("underlay_ip", format_ipv4(st_.underlay_ip));
                           out.u64("capacity", table_.capacity());
                           out.u64("buckets", table_.buckets());  // fixed at start
                           const int rc = read_snapshot(*x, [&](const port::CounterRows& rows) {
                             for (std::size_t i = 0; i < rows.n; ++i)
                               if (std::strcmp(rows.rows[i].group, "table") == 0) out.u64(rows.rows[i].name, rows.rows[i].value);
                           });
                           if (rc != 0) return rc;
                           // The vNIC list under the lock the worker takes to change it.
                           std::lock_guard<std::mutex> g(vnics_mu_);
                           out.u64("vnics", vnics_.size());
                           out.str("vnic_source", vnics_from_agent_ ? "agent" : "yaml");
                           out.u64("vnics_withdrawn", vnics_withdrawn_);
                           out.u64("qps_on_withdrawn_vnic", qps_on_withdrawn_vnic_);
                           out.dict("vnic_list", [&](TelemetryDict& d) {
                             for (const Vnic& v : vnics_) d.str(std::to_string(v.id).c_str(), format_ipv4(v.overlay_ip));
                           });
                           return 0;
                         });
}

}  // namespace

int run(const WorkerConfig& c) {
  if (c.host_socket.empty()) throw std::invalid_argument("--host-socket is required");
  if (c.table_file.empty()) throw std::invalid_argument("--table is required (standalone mode)");
  if (c.bench_any_psn && !c.dpu_channel.empty())
    throw std::invalid_argument("--bench-any-psn is refused in DPU mode: tenant QPs keep RC's PSN checks");
  if (!make_path_policy(c.spray.c_str())) throw std::invalid_argument("--spray: unknown path policy '" + c.spray + "'");
  if (!make_cc_policy(c.cc.c_str())) throw std::invalid_argument("--cc: unknown congestion-control policy '" + c.cc + "'");
  if (c.dpu_max_protocol != 0 &&
      (c.dpu_max_protocol < common::kProtocolVersionOldest || c.dpu_max_protocol > common::kProtocolVersionCurrent))
    throw std::invalid_argument("--dpu-max-protocol must be " + std::to_string(common::kProtocolVersionOldest) + ".." +
                                std::to_string(common::kProtocolVersionCurrent));
  if (c.mtu != 256 && c.mtu != 512 && c.mtu != 1024 && c.mtu != 2048 && c.mtu != 4096)
    throw std::invalid_argument("--mtu must be 256, 512, 1024, 2048 or 4096");
  // Parse the table before touching the EAL: a bad file is a clear error, not a half-started port.
  StandaloneTable table = load_standalone_table(c.table_file, !c.dpu_channel.empty());
  const std::vector<Vnic> yaml_vnics = table.vnics;
  table_capacity(c, table);
  cd::eal_init("tandem-rnic", c.eal_args);
  auto worker = std::make_unique<Worker>(c, std::move(table));
  cd::install_stop_handlers();
  if (rte_eth_dev_count_avail() == 0)
    throw std::runtime_error("no ports: give the data port after '--' (e.g. --vdev=net_memif0,role=client,socket=...)");
  if (!rte_eth_dev_is_valid_port(c.port_id)) throw std::runtime_error("no port " + std::to_string(c.port_id));
  // Frames up to the MTU plus headers fit one mbuf (no chained RX to linearise).
  const uint16_t room = static_cast<uint16_t>(RTE_PKTMBUF_HEADROOM + std::max<uint32_t>(2048, c.mtu + 256));
  const uint32_t n_mbufs = cd::mempool_size(1, c.port, kBurst, 1024);
  rte_mempool* pool = rte_pktmbuf_pool_create("rnic_pool", n_mbufs, 256, 0, room, rte_socket_id());
  rte_mempool* ext = rte_pktmbuf_pool_create("rnic_ext", n_mbufs, 256, 0, 0, rte_socket_id());
  if (pool == nullptr || ext == nullptr) throw std::runtime_error("cannot create mbuf pools (hugepages?)");
  // Port 0 carries the traffic; further ports only receive (e.g. a net_pcap
  // rx_pcap replay of crafted frames in tests).
  const uint16_t n_ports = rte_eth_dev_count_avail();
  rte_eth_dev_info info{};
  const std::string driver = rte_eth_dev_info_get(c.port_id, &info) == 0 && info.driver_name ? info.driver_name : "?";
  worker->setup_port(pool, ext, n_ports, choose_tx_payload_mode(driver, c.tx_copy, rte_eal_iova_mode() == RTE_IOVA_VA));
  const bool up = cd::port_setup(c.port_id, pool, c.port);
  for (uint16_t p = 1; p < n_ports; ++p) {
    cd::PortSetup ps = c.port;
    ps.link_wait_ms = 0;
    cd::port_setup(p, pool, ps);
    std::printf("tandem-rnic %s: receive-only port %u %s\n", c.name.c_str(), p, cd::port_name(p).c_str());
  }
  if (c.pdump) cd::pdump_init();
  worker->register_telemetry();
  if (!cd::unmap_guard_active())
    std::fprintf(stderr, "tandem-rnic: warning: munmap is not interposed (built without "
                         "--export-dynamic-symbol=munmap?): a memif peer leaving may crash the worker\n");
  std::printf("tandem-rnic %s: port %u %s link %s, mode %s, spray %s, cc %s, mtu %u, tx %s, host socket %s\n",
              c.name.c_str(), c.port_id, cd::port_name(c.port_id).c_str(), up ? "up" : "down",
              c.mode == Reliability::kIrn ? "irn" : "gbn", c.spray.c_str(), c.cc.c_str(), c.mtu,
              worker->tx_mode_line().c_str(), c.host_socket.c_str());
  if (c.bench_any_psn)
    std::printf("tandem-rnic %s: BENCHMARK MODE --bench-any-psn: every QP accepts any PSN (not RC)\n", c.name.c_str());
  std::fflush(stdout);

  std::vector<std::string> devices;
  std::atomic<bool> registrar_stop{false};
  std::thread registrar;
  if (c.dpu_channel.empty()) {
    devices = worker->register_devices(yaml_vnics);
  } else if (!c.device_dir.empty()) {  // the agent's vNICs come and go at run time
    registrar = std::thread([&] {
      std::string seen = "-";
      while (!registrar_stop.load(std::memory_order_relaxed)) {
        worker->sync_devices(devices, seen);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  worker->loop();
  if (registrar.joinable()) {
    registrar_stop = true;
    registrar.join();
  }
  worker->unregister_devices(devices);
  worker->shutdown();
  std::printf("%s: stopping (%zu live QPs flushed)\n", c.name.c_str(), worker->live_qps());
  for (uint16_t p = 0; p < n_ports; ++p) cd::port_close(p);
  worker->print_counters();
  if (!c.stats_json.empty()) {
    std::ofstream f(c.stats_json);
    f << worker->counters_json().dump(2) << "\n";
    if (!f) std::fprintf(stderr, "cannot write %s\n", c.stats_json.c_str());
  }
  worker.reset();
  rte_mempool_free(ext);
  rte_mempool_free(pool);
  cd::eal_cleanup();
  return 0;
}

}  // namespace tandem::rnic::dpdk
