#include "rnic/dpdk/worker.h"

#include <rte_eal.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/dpdk/eal.h"
#include "common/dpdk/process_trace.h"
#include "common/dpdk/stop_signal.h"
#include "common/dpdk/telemetry.h"
#include "common/log/log.h"
#include "common/dpdk/tsc_clock.h"
#include "common/dpdk/unmap_guard.h"
#include "rnic/core/policy_factory.h"
#include "rnic/dpdk/cm_thread.h"
#include "rnic/dpdk/dma_registry.h"
#include "rnic/dpdk/dpdk_io.h"
#include "rnic/dpdk/dpu_link.h"
#include "rnic/dpdk/fair_shares.h"
#include "rnic/dpdk/host_control.h"
#include "rnic/host/memory_guard.h"
#include "rnic/dpdk/steer_rings.h"
#include "rnic/dpdk/tx_encap.h"
#include "rnic/dpdk/tx_payload_mode.h"
#include "rnic/host/host_server.h"
#include "rnic/port/port_counters.h"
#include "rnic/port/port_worker.h"
#include "rnic/port/qp_steering.h"
#include "rnic/port/snapshot_exchange.h"
#include "rnic/port/standalone_table.h"
#include "rnic/port/vnic_devices.h"
#include "rnic/port/worker_snapshot.h"

namespace tandem::rnic::dpdk {

namespace cd = common::dpdk;
using common::DropReason;
using port::commit_standalone_table;
using port::format_ipv4;
using port::load_standalone_table;
using port::StandaloneTable;
using port::Vnic;

namespace {

constexpr uint16_t kBurst = port::kBurst;
// A /tandem/rnic/qps reply: DPDK's 16 KiB telemetry buffer cuts off what
// does not fit, silently; a row is ~0.6 KiB with 4 paths, ~1 KiB with 16.
constexpr std::size_t kQpsPerReply = 16;
// Rows of the counter snapshot: every named counter plus every drop reason of 4 stages and the core.
constexpr std::size_t kMaxCounterRows = 128 + 5 * common::kDropReasonCount;

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
    common::log::warn("{}: --insecure-table-hash-key: the level-2 hash secret is known", c.name);
  }
  return tc;
}

// What the port logic needs of tandem-rnic's flags and the YAML's identity.
port::PortConfig port_config(const WorkerConfig& c, const StandaloneTable& st) {
  port::PortConfig p;
  p.name = c.name;
  p.table_file = c.table_file;
  p.underlay_ip = st.underlay_ip;
  p.underlay_mac = st.underlay_mac;
  p.path_sets = st.path_sets;
  p.yaml_vnics = st.vnics;
  p.device_owners = c.device_owners;
  p.mtu = c.mtu;
  p.mode = c.mode;
  p.spray = c.spray;
  p.cc = c.cc;
  p.cc_window_bytes = c.cc_window_bytes;
  p.reorder_delay_ns = c.reorder_delay_ns;
  p.timeout_ns = c.timeout_ns;
  p.bench_any_psn = c.bench_any_psn;
  p.max_qps = c.max_qps;
  p.app_inflight_pkts = c.app_inflight_pkts;
  return p;
}

// Where lcore 0 sends a table miss (its own, and those the other lcores hand
// it): DpuLink's punts. A punt made (sent, or refused by the budget) under a
// trace rule is a set-up record (common/trace/trace_record.h) of lcore 0's tracer.
class DpuAgent final : public port::PuntSink {
 public:
  explicit DpuAgent(DpuLink& link) noexcept : link_(link) {}
  void punt(const common::EntryKey& key, uint64_t now) noexcept override {
    const DpuLink::Punted p = link_.punt(key, nullptr, 0, 0, now);
    if (tracer_ && tracer_->active() && p != DpuLink::Punted::kQuiet) [[unlikely]] trace_punt(key, p, now);
  }
  void set_tracer(common::trace::Tracer* t, const port::PortLogic* pl, uint32_t underlay) noexcept {
    tracer_ = t;
    pl_ = pl;
    underlay_ = underlay;
  }

 private:
  void trace_punt(const common::EntryKey& key, DpuLink::Punted p, uint64_t now) noexcept {
    if (key.kind != common::EntryKind::kEgress) return;  // the only kind punted
    // The vNIC's partition, as the rule names the tenant (a punt is rare: the list's lock is fine).
    const uint16_t pkey = pl_->with_vnics([&](const std::vector<Vnic>& vs, auto&&...) {
      for (const Vnic& v : vs)
        if (v.id == key.word0) return common::wire_pkey(v.pkey);
      return uint16_t{0xFFFF};
    });
    if (!tracer_->rule().matches_end(underlay_, pkey)) return;
    common::trace::Record r;
    r.ts_ns = now;
    r.stage = common::trace::Stage::kPunt;
    r.src_ip = underlay_;
    r.dqpn = key.word0;  // the local vNIC
    r.psn = key.word1;   // the remote overlay address
    r.verdict = static_cast<uint8_t>(p == DpuLink::Punted::kSent ? common::trace::SetupVerdict::kOk
                                                                  : common::trace::SetupVerdict::kOverBudget);
    tracer_->record(r);
  }
  DpuLink& link_;
  common::trace::Tracer* tracer_ = nullptr;
  const port::PortLogic* pl_ = nullptr;
  uint32_t underlay_ = 0;
};

using port::PortLogic;

// One lcore's share of the port (--lcores N): its host server (the
// applications placed on it and their QPs), its queues, its encapsulation
// (mbuf caches, deferred ICRCs), the port logic and core over them, its
// counters and the snapshots telemetry reads. Nothing in it is written by
// another lcore.
struct Lcore {
  Lcore(uint32_t k, const port::PortConfig& pc, host::ServerConfig sc, Level2Table& table, port::LcoreAgent* agent,
        uint16_t port_id, uint32_t max_qps)
      : index(k), host(std::move(sc)), io(port_id), agent(agent), pw(pc, table, host, agent, io) {
    qps_x->buffer().rows.resize(max_qps);
    stats_x->buffer().rows.resize(kMaxCounterRows);
  }
  uint32_t index;
  host::HostServer host;
  DpdkIo io;
  port::LcoreAgent* agent;  // DPU mode: its view of the agent (commit_fanout.h); nullptr standalone
  std::unique_ptr<TxEncap> encap;
  port::PortWorker<DpdkIo> pw;
  // What telemetry reads: filled by this lcore on request (snapshot_exchange.h);
  // shared with the callbacks so a late one never reaches a destroyed worker.
  std::shared_ptr<port::SnapshotExchange<port::CounterRows>> stats_x =
      std::make_shared<port::SnapshotExchange<port::CounterRows>>();
  std::shared_ptr<port::SnapshotExchange<port::QpRows>> qps_x = std::make_shared<port::SnapshotExchange<port::QpRows>>();
};

using StatsViews = std::vector<std::shared_ptr<port::SnapshotExchange<port::CounterRows>>>;
using QpViews = std::vector<std::shared_ptr<port::SnapshotExchange<port::QpRows>>>;

class Worker {
 public:
  Worker(const WorkerConfig& c, StandaloneTable st)
      : c_(c),
        st_(std::move(st)),
        table_(table_config(c, st_)),
        dma_(c.port_id),
        quotas_(std::make_shared<host::TenantQuotas>(host_limits(c))),
        fanout_(c.dpu_channel.empty() ? nullptr : std::make_unique<port::CommitFanout>(table_, c.lcores)),
        dpu_(make_dpu_link()),
        agent_(dpu_ ? std::make_unique<DpuAgent>(*dpu_) : nullptr) {
    for (const DeviceOwner& o : c.device_owners)  // standalone vNICs are all known now
      if (c.dpu_channel.empty() &&
          std::none_of(st_.vnics.begin(), st_.vnics.end(), [&](const Vnic& v) { return v.id == o.vnic_id; }))
        throw std::invalid_argument("--device-owner: no vNIC " + std::to_string(o.vnic_id) + " in " + c.table_file);
    if (c.dpu_channel.empty()) commit_standalone_table(st_, table_);
    const port::QpShards shards(c.lcores);
    // The worker's QPs split over its lcores; each lcore's QPNs in its own slot range.
    const uint32_t per_lcore = std::min<uint32_t>((c.max_qps + c.lcores - 1) / c.lcores,
                                                  shards.slots_per_lcore() - (c.lcores == 1 ? 1 : 0));
    port::PortConfig pc = port_config(c, st_);
    pc.max_qps = per_lcore;
    // DPU mode: each lcore's view of the agent; lcore 0's misses go to the channel, the others' to lcore 0.
    if (fanout_)
      for (uint32_t k = 0; k < c.lcores; ++k)
        lagents_.push_back(std::make_unique<port::LcoreAgent>(*fanout_, k, k == 0 ? agent_.get() : nullptr));
    for (uint32_t k = 0; k < c.lcores; ++k) {
      host::ServerConfig sc{.socket_path = c.host_socket,
                            .max_qps = per_lcore,  // the core's: a QP over it is refused at create
                            .vnic_ips = PortLogic::vnic_ips(st_.vnics),
                            .check_owners = !c.device_owners.empty(),
                            .vnic_owners = PortLogic::vnic_owners(c.device_owners, st_.vnics),
                            .mapper = &dma_,
                            .limits = host_limits(c)};
      sc.qp_slot_base = shards.slot_base(k);
      // Queue depths are charged in what they cost this worker (queue_bytes), SRQs up to the core's room.
      sc.max_srqs = PortLogic::kMaxSrqs;
      sc.qp_worker_bytes = [pc](uint32_t sq, uint32_t rq, bool on_srq, bool ud) {
        return PortLogic::qp_worker_bytes(pc, sq, rq, on_srq, ud);
      };
      sc.srq_worker_bytes = [](uint32_t depth) { return PortLogic::srq_worker_bytes(depth); };
      sc.listen = k == 0;  // lcore 0's server accepts and places every application
      sc.quotas = quotas_;
      if (k == 0 && c.lcores > 1) sc.place = [this] { return least_loaded(); };
      lcores_.push_back(std::make_unique<Lcore>(k, pc, std::move(sc), table_, fanout_ ? lagents_[k].get() : nullptr,
                                                c.port_id, per_lcore));
    }
    port::core_drop_names();  // built here, not on the lcore's first publication
    // Trace units: a ring per lcore (a ring has one writer), each lcore's QPs
    // in its own; tandemctl reads them as one process (common/trace/trace_file.h).
    for (auto& l : lcores_) {
      traces_.push_back(cd::open_process_trace("tandem-rnic " + c.name, l->io.clock(), common::trace::kDefaultCapacity,
                                               common::trace::lcore_ring_name(l->index)));
      l->pw.set_tracer(&traces_.back()->tracer);
    }
    // Completion timestamps count each lcore's clock: applications read the same (WorkerPage).
    for (auto& l : lcores_) l->host.publish_clock(l->io.clock().base(), l->io.clock().mult());
    if (agent_) agent_->set_tracer(&traces_[0]->tracer, &lcores_[0]->pw, st_.underlay_ip);
    if (dpu_) dpu_->set_log(&lcores_[0]->pw.log());  // DPU mode has one lcore: lcore 0 services the link
  }

  void setup_port(rte_mempool* hdr_pool, rte_mempool* ext_pool, uint16_t n_ports, TxPayloadMode mode,
                  uint16_t rx_queues) {
    tx_mode_ = std::move(mode);
    if (c_.lcores > 1) steer_ = std::make_unique<SteerRings>(c_.name, c_.lcores, rx_queues);
    for (auto& l : lcores_) {
      l->encap = std::make_unique<TxEncap>(hdr_pool, ext_pool, !tx_mode_.zero_copy, l->host.max_mrs());
      // A deregistered region's pages stay until the NIC has let go of its payloads.
      l->host.set_mr_in_flight([e = l->encap.get()](uint32_t i) { return e->in_flight(i); });
      l->io.attach(l->encap.get(), n_ports);
      if (steer_) l->io.steer(steer_.get(), l->index);
    }
  }

  // Runs every lcore's loop (lcore 0's on this thread) until a signal or the duration ends.
  void loop();
  void shutdown();
  void print_counters() const;
  nlohmann::json counters_json() const;
  void register_telemetry();
  std::string tx_mode_line() const {
    return std::string(tx_mode_.zero_copy ? "zero-copy" : "copy") + " (" + tx_mode_.why + ")";
  }
  // The port's vNICs now (any thread): DPU mode's device registrar follows them.
  std::vector<Vnic> vnics() const { return lcores_[0]->pw.vnics(); }
  std::size_t live_qps() const noexcept {
    std::size_t n = 0;
    for (const auto& l : lcores_) n += l->pw.live_qps();
    return n;
  }

 private:
  static int lcore_main(void* arg);
  void lcore_loop(Lcore& l);
  // DPU mode: the lcore adopts the newest published view, follows it, acknowledges it.
  uint32_t follow_view(Lcore& l, uint64_t now);
  // Every counter of one lcore, once: f(group, name, value, help). Feeds the
  // telemetry snapshot, --stats-json and the exit print alike.
  template <class F>
  void visit_counters(const Lcore& l, F&& f) const;
  // Every lcore's counter rows, read off the lcores (after the loop).
  std::vector<std::vector<port::CounterRow>> lcore_rows() const;
  void publish_snapshots(Lcore& l) noexcept {
    if (l.stats_x->wanted()) [[unlikely]] {
      port::CounterRows& out = l.stats_x->buffer();
      out.clear();
      visit_counters(l, [&](const char* g, const char* n, uint64_t v, const char* h) { out.add(g, n, v, h); });
      l.stats_x->publish();
    }
    if (l.qps_x->wanted()) [[unlikely]] {
      port::QpRows& out = l.qps_x->buffer();
      l.pw.fill_qp_rows(out);
      for (std::size_t i = 0; i < out.n; ++i) out.rows[i].lcore = l.index;
      l.qps_x->publish();
    }
  }
  // Control thread: where a new application goes (the fewest applications, then QPs).
  host::ControlServer* least_loaded() {
    Lcore* best = lcores_[0].get();
    for (auto& l : lcores_) {
      const auto load = [](Lcore& x) { return std::pair(x.host.app_count(), x.host.qp_count()); };
      if (load(*l) < load(*best)) best = l.get();
    }
    return &best->host;
  }
  StatsViews stats_views() const {
    StatsViews v;
    for (const auto& l : lcores_) v.push_back(l->stats_x);
    return v;
  }
  QpViews qp_views() const {
    QpViews v;
    for (const auto& l : lcores_) v.push_back(l->qps_x);
    return v;
  }
  // DPU mode: the agent programs the table (the YAML's entries are ignored).
  std::unique_ptr<DpuLink> make_dpu_link() {
    if (c_.dpu_channel.empty()) return nullptr;
    return std::make_unique<DpuLink>(c_.dpu_channel, table_, (rte_rdtsc() ^ (uint64_t(getpid()) << 32)) | 1,
                                     c_.dpu_agent_timeout_ns, c_.dpu_max_protocol, c_.punt_budget, fanout_.get());
  }
  uint32_t vnic_id_locked(uint32_t ip) const {
    return lcores_[0]->pw.with_vnics(
        [&](const std::vector<Vnic>& v, bool, uint64_t, uint64_t) { return PortLogic::vnic_id(v, ip); });
  }

  const WorkerConfig& c_;
  StandaloneTable st_;
  Level2Table table_;
  DmaRegistry dma_;  // MR mappings for the device: used by the control thread (before the servers: outlives them)
  std::shared_ptr<host::TenantQuotas> quotas_;  // the port's fair shares, over all its lcores
  // DPU mode: the committed version each lcore reads at, the commit rule across lcores, punts to lcore 0.
  std::unique_ptr<port::CommitFanout> fanout_;
  std::unique_ptr<DpuLink> dpu_;  // DPU mode only: the channel, served by lcore 0
  std::unique_ptr<DpuAgent> agent_;  // lcore 0's punts into the channel
  std::vector<std::unique_ptr<port::LcoreAgent>> lagents_;  // DPU mode: lcore k's view of the agent
  TxPayloadMode tx_mode_;
  std::unique_ptr<SteerRings> steer_;  // several lcores only
  // Lcore k runs lcores_[k]: QPs, host glue, routes, vNICs, counters, bursts (rnic/port).
  std::vector<std::unique_ptr<Lcore>> lcores_;
  std::atomic<bool> stopping_{false};  // --duration ended on lcore 0: the others stop too
  std::vector<std::shared_ptr<cd::ProcessTrace>> traces_;  // trace units (common/trace): lcore k's tracer and ring
  std::unique_ptr<cm::GsiRings> gsi_ = std::make_unique<cm::GsiRings>();  // lcore 0 <-> the CM thread
  std::unique_ptr<CmThread> cm_owner_;
  std::atomic<CmThread*> cm_{nullptr};  // set once the loop starts (telemetry reads its counters)
};

// ------------------------------------------------------------------ the loop

void Worker::lcore_loop(Lcore& l) {
  cd::IdleLoop idle(c_.idle);
  const uint64_t end_ns = c_.duration_s > 0 ? l.io.now_ns() + static_cast<uint64_t>(c_.duration_s * 1e9) : 0;
  cd::unmap_guard_init();
  uint64_t next_link_check = 0;
  uint64_t link_down_since = 0;  // 0: up
  // Only a memif client must restart its port to reconnect (MEMIF.md); a NIC's link comes
  // back by itself, and only the one lcore owns every queue it would touch.
  bool restart_on_link_loss = false;
  if (rte_eth_dev_info info{}; c_.lcores == 1 && rte_eth_dev_info_get(c_.port_id, &info) == 0)
    restart_on_link_loss = info.driver_name != nullptr && std::string_view(info.driver_name) == "net_memif";
  if (l.agent) follow_view(l, l.io.now_ns());  // DPU mode: never a burst before a view
  while (!cd::stop_requested() && !stopping_.load(std::memory_order_relaxed)) {
    const uint64_t now = l.io.now_ns();
    if (end_ns && now >= end_ns) {
      stopping_.store(true, std::memory_order_relaxed);
      break;
    }
    if (now >= next_link_check) [[unlikely]] {
      // The port's link, every 100 ms: applications get PORT_ACTIVE / PORT_ERR on a change.
      next_link_check = now + 100'000'000;
      rte_eth_link link{};
      if (rte_eth_link_get_nowait(c_.port_id, &link) == 0) {
        const bool up = link.link_status == RTE_ETH_LINK_UP;
        l.pw.set_link(up);
        link_down_since = up ? 0 : link_down_since ? link_down_since : now;
        // A memif link down for a second is restarted (its client reconnects only at
        // dev_start): by the only lcore, which owns the queues, outside its bursts.
        if (!up && restart_on_link_loss && now - link_down_since >= 1'000'000'000) {
          link_down_since = now;
          rte_eth_dev_stop(c_.port_id);
          if (rte_eth_dev_start(c_.port_id) == 0) l.pw.note_port_restart();
        }
      }
    }
    // The port's regions (memif) stay mapped until the idle sleep (unmap_guard.h).
    cd::PortSection in_ports;
    uint32_t work = 0;
    if (l.agent && l.index != 0) work += follow_view(l, now);  // what lcore 0 published, before the bursts
    work += l.pw.run_once(now);
    if (fanout_) fanout_->note_packets(l.index, l.pw.counters().rx_packets, l.pw.counters().tx_packets);
    if (dpu_ && l.index == 0) {
      // The agent's commands in, the committed version published to every lcore
      // (and adopted here at once), the others' misses punted, and the events out:
      // a COMMITTED only once every lcore acknowledged its version (commit_fanout.h).
      dpu_->set(common::BarCounter::kRxPackets, fanout_->rx_packets());
      dpu_->set(common::BarCounter::kTxPackets, fanout_->tx_packets());
      work += dpu_->service_in(now);
      fanout_->publish(dpu_->channel());
      work += follow_view(l, now);
      work += fanout_->drain_punts([&](const common::EntryKey& key) { agent_->punt(key, now); });
      work += dpu_->service_out();
    }
    in_ports.leave();
    publish_snapshots(l);
    idle.after_iteration(work > 0 || l.pw.has_backlog());
  }
}

uint32_t Worker::follow_view(Lcore& l, uint64_t now) {
  const uint32_t moved = l.agent->adopt() ? 1 : 0;
  const uint32_t work = l.pw.follow_agent(now);  // the view's vNICs; route waits it resolves
  l.agent->acknowledge();
  return moved + work;
}

int Worker::lcore_main(void* arg) {
  auto* p = static_cast<std::pair<Worker*, Lcore*>*>(arg);
  p->first->lcore_loop(*p->second);
  return 0;
}

void Worker::loop() {
  // Sockets, mmap and DMA registration happen on this thread from now on;
  // the lcores only apply what it finished (host.apply_control).
  std::vector<host::ControlServer*> servers;
  std::vector<common::LogRing*> logs;
  for (auto& l : lcores_) {
    servers.push_back(&l->host);
    logs.push_back(&l->pw.log());
  }
  HostControl control(servers, "tandem-host-ctl", lcores_[0]->io.clock(), logs);
  // Lcores 1..N-1 on the EAL's worker lcores, in order; lcore 0 here (the main lcore).
  std::vector<std::pair<Worker*, Lcore*>> args;
  args.reserve(lcores_.size());
  std::vector<unsigned> launched;
  unsigned id = rte_get_next_lcore(-1, 1, 0);
  for (std::size_t k = 1; k < lcores_.size(); ++k, id = rte_get_next_lcore(id, 1, 0)) {
    args.emplace_back(this, lcores_[k].get());
    if (id >= RTE_MAX_LCORE || rte_eal_remote_launch(&Worker::lcore_main, &args.back(), id) != 0) {
      stopping_ = true;
      common::log::error("{}: cannot launch lcore {}", c_.name, k);
      break;
    }
    launched.push_back(id);
  }
  // The connection manager: lcore 0 holds QP1 (QPN 1 is in its slot range).
  if (c_.cm) {
    cm_owner_ = std::make_unique<CmThread>(c_, lcores_[0]->pw, *gsi_, lcores_[0]->io.clock());
    cm_.store(cm_owner_.get());
    lcores_[0]->pw.set_gsi(gsi_.get());
  }
  lcore_loop(*lcores_[0]);
  stopping_ = true;
  if (cm_owner_) cm_owner_->stop();  // its counters stay for the exit print
  for (unsigned w : launched) rte_eal_wait_lcore(w);
  control.stop();  // before shutdown() drains what it left
}

void Worker::shutdown() {
  for (auto& l : lcores_) {
    l->pw.shutdown(l->io.now_ns());
    if (l->encap) l->encap->release();
  }
}

// ----------------------------------------------------------------- counters

template <class F>
void Worker::visit_counters(const Lcore& l, F&& f) const {
  const bool first = l.index == 0;  // rows of what the lcores share: lcore 0 reports them
  l.pw.visit_counters(
      f,
      [&](auto&& f) {  // the I/O layer's: mbufs, the hand-over between lcores, device mappings
        const EncapCounters& e = l.encap->counters();
        f("tx_encap", "zero_copy", l.encap->zero_copy() ? 1 : 0, "1: payloads leave from registered memory");
        f("tx_encap", "zero_copy_segs", e.zero_copy_segs, "payload segments attached, not copied");
        f("tx_encap", "copied_bytes", e.copied_bytes, "payload bytes copied into mbufs");
        f("tx_encap", "alloc_fail", e.alloc_fail, "frames not built for want of an mbuf");
        f("tx_encap", "too_big", e.too_big, "copy mode: frames larger than an mbuf");
        f("tx_encap", "ext_in_flight", l.encap->ext_in_flight(), "attached payloads the port still holds");
        if (steer_) {
          const DpdkIo::SteerCounters& sc = l.io.steer_counters();
          f("steer", "handed_out", sc.handed_out, "frames this lcore's RX queue took for another lcore's QP");
          f("steer", "handed_in", sc.handed_in, "frames other lcores handed this one");
          f("steer", "ring_full", sc.ring_full, "handed-out frames dropped: the owner's ring was full");
        }
        if (!first) return;
        if (const CmThread* cmt = cm_.load()) {
          cmt->visit(f);
          f("cm", "lcore_rx_mads", gsi_->rx_mads.load(std::memory_order_relaxed), "QP1 MADs lcore 0 handed the CM");
          f("cm", "lcore_tx_mads", gsi_->tx_mads.load(std::memory_order_relaxed), "CM MADs lcore 0 sent");
          f("cm", "lcore_tx_no_route", gsi_->tx_no_route.load(std::memory_order_relaxed),
            "CM MADs not sent: no egress entry from the vNIC to the address");
        }
        const DmaCounters& dm = dma_.counters();
        f("mr_dma", "mapped", dm.mapped, "MR mappings DMA-mapped for the device");
        f("mr_dma", "not_needed", dm.not_needed, "MR mappings the device needs no DMA map for");
        f("mr_dma", "no_iova", dm.no_iova, "MR mappings without an IOVA (IOVA-as-PA mode)");
        f("mr_dma", "failed", dm.failed, "MR mappings the EAL or device refused");
        f("mr_dma", "unmapped", dm.unmapped, "MR mappings released");
        f("mr_dma", "live", dm.live, "MR mappings held now");
        f("host", "memory_faults_recovered", host::MemoryGuard::recovered(),
          "SIGBUS in tenant memory (pages an application took away) mended with zero pages");
      },
      [&](auto&& f) {
        if (dpu_ && first) {
          f("dpu", "punts_over_budget", dpu_->budget().refused_total(), "punts refused: their vNIC over --punt-budget");
          f("dpu", "commits_held", dpu_->commits_held(),
            "loop turns a COMMITTED waited for every lcore to see its version");
        }
        if (l.agent == nullptr) return;
        const port::LcoreAgent::Counters& a = l.agent->counters();
        f("dpu", "view_version", l.agent->view()->snap.version, "table version this lcore reads at");
        f("dpu", "views_adopted", a.views_adopted, "committed versions (or reclaim epochs) this lcore adopted");
        if (first) return;
        f("dpu", "punts_handed", a.punts_handed, "table misses handed to lcore 0 to punt");
        f("dpu", "punts_ring_full", a.punts_ring_full, "table misses not handed: lcore 0's ring full");
        f("dpu", "punts_repeated", a.punts_repeated, "table misses not handed: the key was, this version, < 1 ms ago");
      });
}

// Rows of the port's shared state (the table, its vNICs, whether TX is
// zero-copy): each lcore reports the same value, the port's sum takes one.
bool port_wide(const char* group, const char* name) noexcept {
  return std::strcmp(group, "table") == 0 || std::strcmp(group, "vnics") == 0 ||
         (std::strcmp(group, "dpu") == 0 && std::strcmp(name, "view_version") == 0) ||
         (std::strcmp(group, "tx_encap") == 0 && std::strcmp(name, "zero_copy") == 0);
}

// The port's counters: every lcore's rows summed (port-wide ones taken once),
// in the first lcore's order; rows only later lcores have are appended.
std::vector<port::CounterRow> sum_rows(const std::vector<std::vector<port::CounterRow>>& per_lcore) {
  std::vector<port::CounterRow> out;
  for (std::size_t k = 0; k < per_lcore.size(); ++k)
    for (const port::CounterRow& r : per_lcore[k]) {
      auto it = std::find_if(out.begin(), out.end(), [&](const port::CounterRow& o) {
        return std::strcmp(o.group, r.group) == 0 && std::strcmp(o.name, r.name) == 0;
      });
      if (it == out.end()) out.push_back(r);
      else if (!port_wide(r.group, r.name)) it->value += r.value;
    }
  return out;
}

// Rows as JSON: "" rows at the top, drops under "drops", others by group.
nlohmann::json rows_json(const std::vector<port::CounterRow>& rows) {
  nlohmann::json j;
  j["drops"] = nlohmann::json::object();
  for (const char* s : kStageNames) j["drops"][s] = nlohmann::json::object();
  for (const port::CounterRow& r : rows) {
    if (*r.group == 0) j[r.name] = r.value;
    else if (std::strncmp(r.group, "drops.", 6) == 0) j["drops"][r.group + 6][r.name] = r.value;
    else j[r.group][r.name] = r.value;
  }
  return j;
}

std::vector<std::vector<port::CounterRow>> Worker::lcore_rows() const {
  std::vector<std::vector<port::CounterRow>> per;
  for (const auto& l : lcores_) {
    per.emplace_back();
    visit_counters(*l, [&](const char* g, const char* n, uint64_t v, const char* h) {
      per.back().push_back(port::CounterRow{g, n, h, v});
    });
  }
  return per;
}

nlohmann::json Worker::counters_json() const {
  const std::vector<std::vector<port::CounterRow>> per = lcore_rows();
  nlohmann::json j = rows_json(sum_rows(per));
  j["name"] = c_.name;
  j["tx_encap"]["zero_copy"] = tx_mode_.zero_copy;
  j["tx_encap"]["mode_reason"] = tx_mode_.why;
  j["vnics"]["source"] = lcores_[0]->pw.vnics_from_agent() ? "agent" : "yaml";
  j["limits"] = limits_json(*quotas_, [this](uint32_t ip) { return vnic_id_locked(ip); });
  if (dpu_) j["punt_budget"] = punt_budget_json(dpu_->budget());
  // Each lcore's own counters (the port's are their sum); one entry with one lcore.
  j["lcores"] = nlohmann::json::array();
  for (const auto& rows : per) j["lcores"].push_back(rows_json(rows));
  return j;
}

void Worker::print_counters() const {
  const std::vector<std::vector<port::CounterRow>> per = lcore_rows();
  std::printf("%s counters%s:\n", c_.name.c_str(), per.size() > 1 ? " (the port: every lcore's summed)" : "");
  for (const port::CounterRow& r : sum_rows(per))
    if (r.value)
      std::printf("  %-13s %-24s %14lu  %s\n", *r.group ? r.group : "-", r.name, static_cast<unsigned long>(r.value),
                  r.help);
  if (per.size() > 1)
    for (std::size_t k = 0; k < per.size(); ++k) {
      std::printf("  lcore %zu:", k);
      for (const port::CounterRow& r : per[k])
        if (r.value && (std::strcmp(r.group, "steer") == 0 || std::strcmp(r.name, "rx_packets") == 0 ||
                        std::strcmp(r.name, "tx_packets") == 0 || std::strcmp(r.name, "live_qps") == 0))
          std::printf(" %s=%lu", r.name, static_cast<unsigned long>(r.value));
      std::printf("\n");
    }
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

// A QP row's binding and core counters: what /tandem/rnic/qps pages and
// /tandem/rnic/qp both say of it.
void qp_fields(cd::TelemetryDict& d, const port::QpRow& q) {
  d.u64("core_qpn", q.core_qpn);
  d.u64("app", q.app_id);
  d.u64("lcore", q.lcore);
  d.str("state", port::qp_state_name(static_cast<ibv_qp_state>(q.state)));
  d.u64("vnic", q.vnic);
  d.u64("vni", q.vni);
  d.str("remote", format_ipv4(q.remote_overlay));
  d.str("remote_underlay", format_ipv4(q.remote_underlay));
  d.u64("dest_qpn", q.dest_qpn);
  d.u64("mtu", q.mtu);
  d.u64("route_pending", q.route_pending);
  d.u64("route_wait_us", q.route_wait_us);
  d.u64("roce_peer", q.roce_peer ? 1 : 0);
  if (!q.has_counters) return;
  d.u64("tx_pkts", q.tx_pkts);
  d.u64("rx_pkts", q.rx_pkts);
  d.u64("retx_pkts", q.retx_pkts);
  d.u64("sacks_rx", q.sacks_rx);
  d.u64("timeouts", q.timeouts);
  d.u64("reorder_depth_max", q.reorder_depth_max);
}

// Reads lcore `which`'s counter snapshot, or every lcore's summed (which < 0).
int read_counters(const StatsViews& views, int which, std::vector<port::CounterRow>& out) {
  std::vector<std::vector<port::CounterRow>> per;
  for (std::size_t k = 0; k < views.size(); ++k) {
    if (which >= 0 && static_cast<std::size_t>(which) != k) continue;
    per.emplace_back();
    const int rc = read_snapshot(*views[k], [&](const port::CounterRows& rows) {
      per.back().assign(rows.rows.begin(), rows.rows.begin() + static_cast<std::ptrdiff_t>(rows.n));
    });
    if (rc != 0) return rc;
  }
  out = sum_rows(per);
  return 0;
}

// Every lcore's QP rows, in host-QPN order from `first` on, at most `max`.
int read_qps(const QpViews& views, uint32_t first, std::size_t max, std::vector<port::QpRow>& page) {
  for (const auto& x : views) {
    const int rc = read_snapshot(*x, [&](const port::QpRows& rows) {
      for (std::size_t k = 0; k < rows.n; ++k)
        if (rows.rows[k].host_qpn >= first) page.push_back(rows.rows[k]);
    });
    if (rc != 0) return rc;
  }
  std::sort(page.begin(), page.end(),
            [](const port::QpRow& a, const port::QpRow& b) { return a.host_qpn < b.host_qpn; });
  if (page.size() > max) page.resize(max);
  return 0;
}

void Worker::register_telemetry() {
  using cd::TelemetryDict;
  cd::telemetry_register("/tandem/rnic/stats",
                         "tandem-rnic worker counters (drops by stage and reason), all lcores summed; ',K': lcore K",
                         [x = stats_views(), name = c_.name](std::string_view params, TelemetryDict& out) {
                           int which = -1;
                           if (!params.empty()) {
                             const std::string p(params);
                             char* end = nullptr;
                             which = static_cast<int>(std::strtol(p.c_str(), &end, 10));
                             if (end == p.c_str() || *end != 0 || which < 0 ||
                                 static_cast<std::size_t>(which) >= x.size())
                               return -EINVAL;
                           }
                           std::vector<port::CounterRow> rows;
                           const int rc = read_counters(x, which, rows);
                           if (rc != 0) return rc;
                           out.str("name", name);
                           out.u64("lcores", x.size());
                           if (which >= 0) out.u64("lcore", static_cast<uint64_t>(which));
                           for (const port::CounterRow& r : rows) out.u64(flat_name(r).c_str(), r.value);
                           return 0;
                         });
  cd::telemetry_register("/tandem/rnic/qps",
                         "tandem-rnic live QPs: binding, lcore, core counters; ',N': from host QPN N on "
                         "(16 per reply, in host-QPN order)",
                         [x = qp_views()](std::string_view params, TelemetryDict& out) {
                           uint32_t first = 0;
                           if (!params.empty()) {
                             const std::string p(params);
                             char* end = nullptr;
                             first = static_cast<uint32_t>(std::strtoul(p.c_str(), &end, 0));
                             if (end == p.c_str() || *end != 0) return -EINVAL;
                           }
                           // A telemetry reply is 16 KiB: kQpsPerReply rows fit, more would be cut off silently.
                           std::vector<port::QpRow> page;  // the telemetry thread's copy, sorted
                           const int rc = read_qps(x, first, kQpsPerReply, page);
                           if (rc != 0) return rc;
                           {
                             for (const port::QpRow& q : page) {
                               char key[16];
                               std::snprintf(key, sizeof key, "0x%x", q.host_qpn);
                               out.dict(key, [&](TelemetryDict& d) {
                                 qp_fields(d, q);
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
  cd::register_trace_telemetry("/tandem/rnic/trace", traces_);

  cd::telemetry_register(
      "/tandem/rnic/qp",
      "tandem-rnic one live QP in full: counters, cc and every path (',N': host QPN N)",
      [x = qp_views()](std::string_view params, TelemetryDict& out) {
        const std::string p(params);
        char* end = nullptr;
        const unsigned long qpn = std::strtoul(p.c_str(), &end, 0);
        if (p.empty() || *end != 0 || qpn > 0xFFFFFF) return -EINVAL;
        std::vector<port::QpRow> page;
        const int rc = read_qps(x, static_cast<uint32_t>(qpn), 1, page);
        if (rc != 0) return rc;
        const bool found = !page.empty() && page[0].host_qpn == qpn;
        const port::QpRow& q = found ? page[0] : port::QpRow{};
        if (!found) {
          out.str("error", "no live QP " + p);
          return 0;
        }
        out.u64("host_qpn", q.host_qpn);
        qp_fields(out, q);
        out.str("cc", q.cc);
        out.u64("cc_credits_received", q.credits_received);
        out.u64("cc_credits_used", q.credits_used);
        out.u64("cc_credit_stalls", q.credit_stalls);
        out.u64("cc_credit_probes", q.credit_probes);
        out.u64("cc_rate_cuts", q.rate_cuts);
        out.u64("cc_rate_mbps", q.rate_mbps);
        out.u64("paths", q.paths);
        out.u64("path_removals", q.path_removals);
        out.u64("path_returns", q.path_returns);
        for (uint32_t i = 0; i < std::min(q.paths, port::kRowPaths); ++i)
          out.dict(("path" + std::to_string(i)).c_str(), [&](TelemetryDict& d) {
            d.u64("core_port", q.ports[i]);
            d.u64("wire_port", q.wire_ports[i]);
            d.u64("up", (q.up_mask >> i) & 1);
            d.u64("srtt_ns", q.srtt_ns[i]);
            d.u64("pkts", q.pkts[i]);
            d.u64("acks", q.acks[i]);
            d.u64("losses", q.losses[i]);
            d.u64("removals", q.removals[i]);
            d.u64("silent_removals", q.silent_removals[i]);
            d.u64("loss_removals", q.loss_removals[i]);
            d.u64("stall_excused", q.stall_excused[i]);
          });
        return 0;
      });
  register_limits_telemetry(*quotas_, [this](uint32_t ip) { return vnic_id_locked(ip); });
  if (dpu_) register_punt_telemetry(dpu_->budget());
  cd::telemetry_register("/tandem/rnic/table", "tandem-rnic level-2 table and the port's vNICs",
                         [this, x = lcores_[0]->stats_x](std::string_view, TelemetryDict& out) {
                           out.str("underlay_ip", format_ipv4(st_.underlay_ip));
                           out.u64("capacity", table_.capacity());
                           out.u64("buckets", table_.buckets());  // fixed at start
                           const int rc = read_snapshot(*x, [&](const port::CounterRows& rows) {
                             for (std::size_t i = 0; i < rows.n; ++i)
                               if (std::strcmp(rows.rows[i].group, "table") == 0) out.u64(rows.rows[i].name, rows.rows[i].value);
                           });
                           if (rc != 0) return rc;
                           // The vNIC list under the lock the worker takes to change it.
                           return lcores_[0]->pw.with_vnics([&](const std::vector<Vnic>& vnics, bool from_agent,
                                                     uint64_t withdrawn, uint64_t on_withdrawn) {
                             out.u64("vnics", vnics.size());
                             out.str("vnic_source", from_agent ? "agent" : "yaml");
                             out.u64("vnics_withdrawn", withdrawn);
                             out.u64("qps_on_withdrawn_vnic", on_withdrawn);
                             out.dict("vnic_list", [&](TelemetryDict& d) {
                               for (const Vnic& v : vnics) d.str(std::to_string(v.id).c_str(), format_ipv4(v.overlay_ip));
                             });
                             return 0;
                           });
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
  if (c.lcores == 0 || c.lcores > port::kMaxLcores)
    throw std::invalid_argument("--lcores must be 1.." + std::to_string(port::kMaxLcores));
  if (c.mtu != 256 && c.mtu != 512 && c.mtu != 1024 && c.mtu != 2048 && c.mtu != 4096)
    throw std::invalid_argument("--mtu must be 256, 512, 1024, 2048 or 4096");
  // Parse the table before touching the EAL: a bad file is a clear error, not a half-started port.
  StandaloneTable table = load_standalone_table(c.table_file, !c.dpu_channel.empty());
  const std::vector<Vnic> yaml_vnics = table.vnics;
  table_capacity(c, table);
  cd::eal_init("tandem-rnic", c.eal_args);
  host::MemoryGuard::install();  // before any tenant memory is mapped
  if (rte_lcore_count() < c.lcores)
    throw std::invalid_argument("--lcores " + std::to_string(c.lcores) + " needs as many EAL lcores (-l), have " +
                                std::to_string(rte_lcore_count()));
  auto worker = std::make_unique<Worker>(c, std::move(table));
  cd::install_stop_handlers();
  if (rte_eth_dev_count_avail() == 0)
    throw std::runtime_error("no ports: give the data port after '--' (e.g. --vdev=net_memif0,role=client,socket=...)");
  if (!rte_eth_dev_is_valid_port(c.port_id)) throw std::runtime_error("no port " + std::to_string(c.port_id));
  // Frames up to the MTU plus headers fit one mbuf (no chained RX to linearise).
  const uint16_t room = static_cast<uint16_t>(RTE_PKTMBUF_HEADROOM + std::max<uint32_t>(2048, c.mtu + 256));
  // Per lcore: its RX and TX queue, bursts, cache; frames on their way to another lcore.
  const uint32_t n_mbufs = cd::mempool_size(c.lcores, c.port, kBurst, 1024, c.lcores) +
                           (c.lcores - 1) * c.lcores * SteerRings::kRingSize;
  rte_mempool* pool = rte_pktmbuf_pool_create("rnic_pool", n_mbufs, 256, 0, room, rte_socket_id());
  rte_mempool* ext = rte_pktmbuf_pool_create("rnic_ext", n_mbufs, 256, 0, 0, rte_socket_id());
  if (pool == nullptr || ext == nullptr) throw std::runtime_error("cannot create mbuf pools (hugepages?)");
  // Port 0 carries the traffic; further ports only receive (e.g. a net_pcap
  // rx_pcap replay of crafted frames in tests).
  const uint16_t n_ports = rte_eth_dev_count_avail();
  rte_eth_dev_info info{};
  const std::string driver = rte_eth_dev_info_get(c.port_id, &info) == 0 && info.driver_name ? info.driver_name : "?";
  // Several lcores: a TX queue each; RX queues as the device has them (up to
  // one each), what lands on one for another lcore's QP is handed over (dpdk_io.h).
  cd::PortSetup data_port = c.port;
  if (c.lcores > info.max_tx_queues)
    throw std::runtime_error("--lcores " + std::to_string(c.lcores) + ": port " + std::to_string(c.port_id) + " (" +
                             driver + ") has " + std::to_string(info.max_tx_queues) + " TX queues, one per lcore needed");
  data_port.tx_queues = static_cast<uint16_t>(c.lcores);
  data_port.rx_queues = static_cast<uint16_t>(std::min<uint32_t>(c.lcores, std::max<uint16_t>(info.max_rx_queues, 1)));
  worker->setup_port(pool, ext, n_ports, choose_tx_payload_mode(driver, c.tx_copy, rte_eal_iova_mode() == RTE_IOVA_VA),
                     data_port.rx_queues);
  const bool up = cd::port_setup(c.port_id, pool, data_port);
  for (uint16_t p = 1; p < n_ports; ++p) {
    cd::PortSetup ps = c.port;
    ps.link_wait_ms = 0;
    cd::port_setup(p, pool, ps);
    common::log::info("{}: receive-only port {} {}", c.name, p, cd::port_name(p));
  }
  if (c.pdump) cd::pdump_init();
  worker->register_telemetry();
  if (!cd::unmap_guard_active())
    common::log::warn("munmap is not interposed (built without --export-dynamic-symbol=munmap?): a memif peer "
                      "leaving may crash the worker");
  common::log::info("{}: port {} {} link {}, {} lcore{} ({} RX queue{}), mode {}, spray {}, cc {}, mtu {}, tx {}, "
                    "host socket {}",
                    c.name, c.port_id, cd::port_name(c.port_id), up ? "up" : "down", c.lcores,
                    c.lcores == 1 ? "" : "s", data_port.rx_queues, data_port.rx_queues == 1 ? "" : "s",
                    c.mode == Reliability::kIrn ? "irn" : "gbn", c.spray, c.cc, c.mtu, worker->tx_mode_line(),
                    c.host_socket);
  if (c.bench_any_psn)
    common::log::warn("{}: BENCHMARK MODE --bench-any-psn: every QP accepts any PSN (not RC)", c.name);

  // One verbs device per vNIC (rnic/port/vnic_devices.h), written off the lcore:
  // at start for the YAML's; in DPU mode by a thread that follows the agent's vNICs.
  port::VnicDevices devices({c.device_dir, c.name, c.host_socket, c.mtu, c.max_qps});
  std::atomic<bool> registrar_stop{false};
  std::thread registrar;
  if (c.dpu_channel.empty()) {
    devices.sync(yaml_vnics);
  } else if (!c.device_dir.empty()) {  // the agent's vNICs come and go at run time
    registrar = std::thread([&] {
      while (!registrar_stop.load(std::memory_order_relaxed)) {
        devices.sync(worker->vnics());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  worker->loop();
  if (registrar.joinable()) {
    registrar_stop = true;
    registrar.join();
  }
  devices.remove_all();
  worker->shutdown();
  common::log::info("{}: stopping ({} live QPs flushed)", c.name, worker->live_qps());
  for (uint16_t p = 0; p < n_ports; ++p) cd::port_close(p);
  worker->print_counters();
  if (!c.stats_json.empty()) {
    std::ofstream f(c.stats_json);
    f << worker->counters_json().dump(2) << "\n";
    if (!f) common::log::error("cannot write {}", c.stats_json);
  }
  worker.reset();
  rte_mempool_free(ext);
  rte_mempool_free(pool);
  cd::eal_cleanup();
  return 0;
}

}  // namespace tandem::rnic::dpdk
