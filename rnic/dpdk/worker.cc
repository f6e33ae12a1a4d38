#include "rnic/dpdk/worker.h"

#include <rte_eal.h>
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
#include <thread>
#include <utility>
#include <vector>

#include "common/dpdk/eal.h"
#include "common/dpdk/process_trace.h"
#include "common/dpdk/stop_signal.h"
#include "common/dpdk/telemetry.h"
#include "common/dpdk/tsc_clock.h"
#include "common/dpdk/unmap_guard.h"
#include "rnic/core/policy_factory.h"
#include "rnic/dpdk/dma_registry.h"
#include "rnic/dpdk/dpdk_io.h"
#include "rnic/dpdk/dpu_link.h"
#include "rnic/dpdk/fair_shares.h"
#include "rnic/dpdk/host_control.h"
#include "rnic/dpdk/tx_encap.h"
#include "rnic/dpdk/tx_payload_mode.h"
#include "rnic/host/host_server.h"
#include "rnic/port/port_counters.h"
#include "rnic/port/port_worker.h"
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
    std::fprintf(stderr, "%s: warning: --insecure-table-hash-key: the level-2 hash secret is known\n", c.name.c_str());
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
  return p;
}

// The port logic's view of the DPU agent: DpuLink's punts, state and channel.
// A punt made (sent, or refused by the budget) under a trace rule is a set-up
// record (common/trace/trace_record.h) of the lcore's tracer.
class DpuAgent final : public port::AgentLink {
 public:
  explicit DpuAgent(DpuLink& link) noexcept : link_(link) {}
  void punt(const common::EntryKey& key, uint64_t now) noexcept override {
    const DpuLink::Punted p = link_.punt(key, nullptr, 0, 0, now);
    if (tracer_ && tracer_->active() && p != DpuLink::Punted::kQuiet) [[unlikely]] trace_punt(key, p, now);
  }
  bool active() const noexcept override { return link_.state() == RnicChannelState::kActive; }
  const RnicChannel* channel() const noexcept override { return link_.channel(); }
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

class Worker {
 public:
  Worker(const WorkerConfig& c, StandaloneTable st)
      : c_(c),
        st_(std::move(st)),
        table_(table_config(c, st_)),
        dma_(c.port_id),
        host_(host::ServerConfig{.socket_path = c.host_socket,
                                 .max_qps = c.max_qps,  // the core's: a QP over it is refused at create
                                 .vnic_ips = PortLogic::vnic_ips(st_.vnics),
                                 .check_owners = !c.device_owners.empty(),
                                 .vnic_owners = PortLogic::vnic_owners(c.device_owners, st_.vnics),
                                 .mapper = &dma_,
                                 .limits = host_limits(c)}),
        dpu_(make_dpu_link()),
        agent_(dpu_ ? std::make_unique<DpuAgent>(*dpu_) : nullptr),
        io_(c.port_id),
        pw_(port_config(c, st_), table_, host_, agent_.get(), io_) {
    for (const DeviceOwner& o : c.device_owners)  // standalone vNICs are all known now
      if (c.dpu_channel.empty() &&
          std::none_of(st_.vnics.begin(), st_.vnics.end(), [&](const Vnic& v) { return v.id == o.vnic_id; }))
        throw std::invalid_argument("--device-owner: no vNIC " + std::to_string(o.vnic_id) + " in " + c.table_file);
    if (c.dpu_channel.empty()) commit_standalone_table(st_, table_);
    qps_x_->buffer().rows.resize(c.max_qps);
    stats_x_->buffer().rows.resize(kMaxCounterRows);
    port::core_drop_names();  // built here, not on the lcore's first publication
    trace_ = cd::open_process_trace("tandem-rnic " + c.name, io_.clock());
    pw_.set_tracer(&trace_->tracer);
    if (agent_) agent_->set_tracer(&trace_->tracer, &pw_, st_.underlay_ip);
  }

  void setup_port(rte_mempool* hdr_pool, rte_mempool* ext_pool, uint16_t n_ports, TxPayloadMode mode) {
    tx_mode_ = std::move(mode);
    encap_ = std::make_unique<TxEncap>(hdr_pool, ext_pool, !tx_mode_.zero_copy);
    io_.attach(encap_.get(), n_ports);
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
  // The port's vNICs now (any thread): DPU mode's device registrar follows them.
  std::vector<Vnic> vnics() const { return pw_.vnics(); }
  std::size_t live_qps() const noexcept { return pw_.live_qps(); }

 private:
  // DPU mode: the agent programs the table (the YAML's entries are ignored).
  std::unique_ptr<DpuLink> make_dpu_link() {
    if (c_.dpu_channel.empty()) return nullptr;
    return std::make_unique<DpuLink>(c_.dpu_channel, table_, (rte_rdtsc() ^ (uint64_t(getpid()) << 32)) | 1,
                                     c_.dpu_agent_timeout_ns, c_.dpu_max_protocol, c_.punt_budget);
  }
  uint32_t vnic_id_locked(uint32_t ip) const {
    return pw_.with_vnics([&](const std::vector<Vnic>& v, bool, uint64_t, uint64_t) { return PortLogic::vnic_id(v, ip); });
  }

  const WorkerConfig& c_;
  StandaloneTable st_;
  Level2Table table_;
  DmaRegistry dma_;  // MR mappings for the device: used by host_'s control thread (before host_: outlives it)
  host::HostServer host_;
  std::unique_ptr<DpuLink> dpu_;  // DPU mode only
  std::unique_ptr<DpuAgent> agent_;
  std::unique_ptr<TxEncap> encap_;
  TxPayloadMode tx_mode_;
  DpdkIo io_;
  // The worker's logic (rnic/port): QPs, host glue, routes, vNICs, counters, bursts over io_.
  port::PortWorker<DpdkIo> pw_;
  // What telemetry reads: filled by this thread on request (snapshot_exchange.h);
  // shared with the callbacks so a late one never reaches a destroyed worker.
  std::shared_ptr<port::SnapshotExchange<port::CounterRows>> stats_x_ =
      std::make_shared<port::SnapshotExchange<port::CounterRows>>();
  std::shared_ptr<port::SnapshotExchange<port::QpRows>> qps_x_ = std::make_shared<port::SnapshotExchange<port::QpRows>>();
  std::shared_ptr<cd::ProcessTrace> trace_;  // trace units (common/trace): the lcore's tracer and its ring
};

// ------------------------------------------------------------------ the loop

void Worker::loop() {
  cd::IdleLoop idle(c_.idle);
  const uint64_t end_ns = c_.duration_s > 0 ? io_.now_ns() + static_cast<uint64_t>(c_.duration_s * 1e9) : 0;
  cd::unmap_guard_init();
  // Sockets, mmap and DMA registration happen on this thread from now on;
  // the loop only applies what it finished (host_.apply_control).
  HostControl control(host_, "tandem-host-ctl", io_.clock());
  while (!cd::stop_requested()) {
    const uint64_t now = io_.now_ns();
    if (end_ns && now >= end_ns) break;
    // The port's regions (memif) stay mapped until the idle sleep (unmap_guard.h).
    cd::PortSection in_ports;
    uint32_t work = pw_.run_once(now);
    if (dpu_) {
      dpu_->set(common::BarCounter::kRxPackets, pw_.counters().rx_packets);
      dpu_->set(common::BarCounter::kTxPackets, pw_.counters().tx_packets);
      work += dpu_->service(now);
      work += pw_.follow_agent(now);
    }
    in_ports.leave();
    publish_snapshots();
    idle.after_iteration(work > 0 || pw_.has_backlog());
  }
  control.stop();  // before shutdown() drains what it left
}

void Worker::shutdown() {
  pw_.shutdown(io_.now_ns());
  if (encap_) encap_->release();
}

// ----------------------------------------------------------------- counters

template <class F>
void Worker::visit_counters(F&& f) const {
  pw_.visit_counters(
      f,
      [&](auto&& f) {  // the I/O layer's: mbufs and device mappings
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
      },
      [&](auto&& f) {
        if (dpu_) f("dpu", "punts_over_budget", dpu_->budget().refused_total(), "punts refused: their vNIC over --punt-budget");
      });
}

void Worker::fill_counter_rows(port::CounterRows& out) const noexcept {
  out.clear();
  visit_counters([&](const char* g, const char* n, uint64_t v, const char* h) { out.add(g, n, v, h); });
}

void Worker::fill_qp_rows(port::QpRows& out) const noexcept { pw_.fill_qp_rows(out); }

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
  j["vnics"]["source"] = pw_.vnics_from_agent() ? "agent" : "yaml";
  j["limits"] = limits_json(host_.quotas(), [this](uint32_t ip) { return vnic_id_locked(ip); });
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

// A QP row's binding and core counters: what /tandem/rnic/qps pages and
// /tandem/rnic/qp both say of it.
void qp_fields(cd::TelemetryDict& d, const port::QpRow& q) {
  d.u64("core_qpn", q.core_qpn);
  d.u64("app", q.app_id);
  d.str("state", port::qp_state_name(static_cast<ibv_qp_state>(q.state)));
  d.u64("vnic", q.vnic);
  d.u64("vni", q.vni);
  d.str("remote", format_ipv4(q.remote_overlay));
  d.str("remote_underlay", format_ipv4(q.remote_underlay));
  d.u64("dest_qpn", q.dest_qpn);
  d.u64("mtu", q.mtu);
  d.u64("route_pending", q.route_pending);
  d.u64("route_wait_us", q.route_wait_us);
  if (!q.has_counters) return;
  d.u64("tx_pkts", q.tx_pkts);
  d.u64("rx_pkts", q.rx_pkts);
  d.u64("retx_pkts", q.retx_pkts);
  d.u64("sacks_rx", q.sacks_rx);
  d.u64("timeouts", q.timeouts);
  d.u64("reorder_depth_max", q.reorder_depth_max);
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
  cd::register_trace_telemetry("/tandem/rnic/trace", trace_);
  cd::telemetry_register(
      "/tandem/rnic/qp",
      "tandem-rnic one live QP in full: counters, cc and every path (',N': host QPN N)",
      [x = qps_x_](std::string_view params, TelemetryDict& out) {
        const std::string p(params);
        char* end = nullptr;
        const unsigned long qpn = std::strtoul(p.c_str(), &end, 0);
        if (p.empty() || *end != 0) return -EINVAL;
        port::QpRow q;
        bool found = false;
        const int rc = read_snapshot(*x, [&](const port::QpRows& rows) {
          for (std::size_t k = 0; k < rows.n && !found; ++k)
            if (rows.rows[k].host_qpn == qpn) {
              q = rows.rows[k];
              found = true;
            }
        });
        if (rc != 0) return rc;
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
  register_limits_telemetry(host_.quotas(), [this](uint32_t ip) { return vnic_id_locked(ip); });
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
                           return pw_.with_vnics([&](const std::vector<Vnic>& vnics, bool from_agent,
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
