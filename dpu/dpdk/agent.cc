// tandem-dpu's I/O around the sans-I/O agent (dpu/agent/agent_core.h): EAL,
// the TSC clock, the channel files (ChannelFiles), the control socket, the
// trace ring and telemetry, etcd's watcher threads, and the polling loop.
#include "dpu/dpdk/agent.h"

#include <grp.h>
#include <rte_cycles.h>
#include <time.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <nlohmann/json.hpp>

#include "common/dpdk/eal.h"
#include "common/dpdk/idle_loop.h"
#include "common/dpdk/process_trace.h"
#include "common/dpdk/stop_signal.h"
#include "common/dpdk/telemetry.h"
#include "common/dpdk/tsc_clock.h"
#include "common/log/log.h"
#include "dpu/agent/agent_core.h"
#include "dpu/api/control_api.h"
#include "dpu/control/control_socket.h"
#include "dpu/dpdk/channel_file.h"
#include "dpu/store/store.h"
#ifdef TANDEM_FLEET
#include "dpu/fleet/fleet_watcher.h"
#endif

namespace tandem::dpu::dpdk {

namespace cd = common::dpdk;
using nlohmann::json;

std::string channel_path(const std::string& dir, const std::string& rnic) { return ChannelFiles(dir).path_of(rnic); }

#ifdef TANDEM_FLEET
bool fleet_built() noexcept { return true; }
#else
bool fleet_built() noexcept { return false; }
#endif

namespace {

uint64_t thread_cpu_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

AgentCoreConfig core_config(const AgentConfig& c, int64_t fleet_revision, const cd::TscClock& clock) {
  AgentCoreConfig k;
  k.clock = [&clock] { return clock.now_ns(); };
  k.channel.agent_instance = static_cast<uint32_t>(rte_rdtsc() ^ (uint64_t{static_cast<uint32_t>(getpid())} << 16)) | 1u;
  k.channel.heartbeat_timeout_ns = c.heartbeat_timeout_ms * 1'000'000ull;
  k.channel.pipeline = true;  // next txn sent while the previous one commits
  if (c.max_protocol != 0) k.channel.versions.current = c.max_protocol;  // checked by run()
  k.tenant_flow_quota = c.tenant_flow_quota;
  k.punts_per_round = c.punts_per_round;
  if (!c.fleet.endpoints.empty()) {
    k.fleet_server = c.fleet.server;
    k.fleet_revision = fleet_revision;
  }
  return k;
}

class Agent {
 public:
  // Trace units (common/trace): the set-up stages this process handles
  // (agent_resolve, txn_commit), rules from tandemctl over the control
  // socket (trace()) or telemetry, as the workers take theirs.
  explicit Agent(const AgentConfig& c)
      : c_(c),
        store_(c.db),
        resume_(fleet_resume()),
        files_(c.channel_dir),
        trace_(cd::open_process_trace("tandem-dpu", clock_)),
        core_(std::make_unique<AgentCore>(state_, store_, core_config(c, resume_, clock_), files_, &trace_->tracer)),
        api_(state_, store_, core_.get()) {
    store_.load(state_);
    cd::register_trace_telemetry("/tandem/dpu/trace", trace_);
    core_->set_trace_hook([this](const std::string& rule) -> json {
      std::lock_guard<std::mutex> g(trace_->mu);
      if (!trace_->ring) return nullptr;
      if (!rule.empty()) cd::trace_request(*trace_, rule);
      return {{"requested", trace_->last_rule}, {"ring", trace_->path}, {"ring_bytes", trace_->ring->bytes()},
              {"capacity", trace_->ring->header()->capacity}, {"running", trace_->tracer.running()},
              {"written", trace_->tracer.written()}, {"pid", getpid()}};
    });
    core_->open_links(c.rnics, clock_.now_ns());
    gid_t gid = static_cast<gid_t>(-1);
    if (!c.control_group.empty()) {
      const struct group* g = ::getgrnam(c.control_group.c_str());
      if (!g) throw std::runtime_error("--control-group: no group named " + c.control_group);
      gid = g->gr_gid;
    }
    socket_ = std::make_unique<ControlSocket>(c.control_socket, api_, [this] { return clock_.now_ns(); }, gid);
    start_fleet(resume_);
    cd::telemetry_register("/tandem/dpu/rnics", "tandem-dpu managed RNICs: channel state, versions, BAR counters",
                           [this](std::string_view, cd::TelemetryDict& d) {
                             std::lock_guard<std::mutex> g(snap_mu_);
                             for (const auto& [name, s] : snap_)
                               d.dict(name.c_str(), [&](cd::TelemetryDict& x) {
                                 x.str("state", s.state);
                                 x.str("rnic_state", s.rnic_state);
                                 x.u64("protocol_version", s.version);
                                 x.u64("table_version", s.table_version);
                                 x.u64("entries", s.entries);
                                 x.u64("txns_committed", s.committed);
                                 x.u64("punts", s.punts);
                                 // Flat keys: a telemetry dict nests one level only.
                                 for (const auto& [vni, t] : s.tenants) {
                                   const std::string p = "tenant_" + std::to_string(vni) + "_punts_";
                                   x.u64((p + "queued").c_str(), t.queued);
                                   x.u64((p + "served").c_str(), t.served);
                                   x.u64((p + "dropped").c_str(), t.dropped);
                                   x.u64((p + "over_quota").c_str(), t.over_quota);
                                   x.u64((p + "install_refused").c_str(), t.install_refused);
                                 }
                               });
                             return 0;
                           });
  }

  int loop() {
    cd::IdleLoop idle(c_.idle);
    const uint64_t end = c_.duration_s > 0 ? static_cast<uint64_t>(c_.duration_s * 1e9) : 0;
    uint64_t last_snap = 0, last_sock = 0;
    while (!cd::stop_requested()) {
      const uint64_t now = clock_.now_ns();
      if (end && now >= end) break;
      trace_->tracer.poll(now);
      bool did = core_->service(now);
      if (did || now - last_sock >= 200'000) {  // control socket and etcd's batches: every 200 us while idle
        did |= socket_->poll();
        did |= fleet_poll(now);
        last_sock = now;
      }
      if (now - last_snap >= 100'000'000) {
        publish_snapshot();
        last_snap = now;
      }
      idle.after_iteration(did);
    }
    return 0;
  }

 private:
  // Fleet mode: the stored revision says where to resume the watch.
  int64_t fleet_resume() {
    if (c_.fleet.endpoints.empty()) return 0;
#ifdef TANDEM_FLEET
    if (c_.fleet.server.empty()) throw std::runtime_error("--etcd needs --server NAME");
    FleetRevision stored = store_.fleet_revision();
    if (stored.revision != 0 && stored.server != c_.fleet.server) {
      common::log::warn("fleet: the store was synced as server {}, not {}: reading etcd whole", stored.server,
                        c_.fleet.server);
      return 0;
    }
    return stored.revision;
#else
    throw std::runtime_error("--etcd: this tandem-dpu was built without fleet mode (run scripts/setup.sh, rebuild)");
#endif
  }

  void start_fleet(int64_t resume) {
#ifdef TANDEM_FLEET
    if (c_.fleet.endpoints.empty()) return;
    fleet::FleetConfig fc;
    fc.etcd = fleet::EtcdOptions{c_.fleet.endpoints, c_.fleet.cacert, c_.fleet.cert, c_.fleet.key,
                                 c_.fleet.user, c_.fleet.password, 3000};
    fc.server = c_.fleet.server;
    fc.lease_ttl_s = c_.fleet.lease_ttl_s;
    fleet_watcher_ = std::make_unique<fleet::FleetWatcher>(fc, resume);
    common::log::info("fleet: server {}, etcd {}, resuming after revision {}", c_.fleet.server, c_.fleet.endpoints,
                      resume);
#else
    (void)resume;
#endif
  }

  // What etcd sent, in revision order, like tandemctl changes (held back
  // while a mapping import runs): one bounded step per call.
  bool fleet_poll(uint64_t now) {
#ifdef TANDEM_FLEET
    if (!fleet_watcher_) return false;
    fleet_watcher_->take(fleet_queue_);
    if (fleet_queue_.empty() || api_.busy()) return false;
    fleet::FleetBatch b = fleet::next_batch(fleet_queue_, kFleetEventsPerStep);
    const uint64_t cpu0 = thread_cpu_ns();
    try {
      core_->apply_fleet(b, now);
    } catch (const StoreError& e) {
      // Level 1 is ahead of disk now: stop; a restart reloads and resumes from disk.
      throw std::runtime_error(std::string("fleet: cannot persist revision ") + std::to_string(b.revision) + ": " + e.what());
    }
    fleet_step_max_ns_ = std::max(fleet_step_max_ns_, clock_.now_ns() - now);
    fleet_step_cpu_max_ns_ = std::max(fleet_step_cpu_max_ns_, thread_cpu_ns() - cpu0);
    return true;
#else
    (void)now;
    return false;
#endif
  }

  void publish_snapshot() {
#ifdef TANDEM_FLEET
    if (fleet_watcher_)
      fleet_watcher_->publish_status(core_->fleet_status({{"pid", getpid()},
                                                          {"pending_batches", fleet_queue_.size()},
                                                          {"longest_step_ms", fleet_step_max_ns_ / 1000 / 1e3},
                                                          {"longest_step_cpu_ms", fleet_step_cpu_max_ns_ / 1000 / 1e3}}));
#endif
    std::map<std::string, LinkSnapshot> s = core_->snapshot();
    std::lock_guard<std::mutex> g(snap_mu_);
    snap_ = std::move(s);
  }

  AgentConfig c_;
  cd::TscClock clock_;
  Level1State state_;
  Store store_;
  int64_t resume_;  // fleet mode: the etcd revision level 1 was brought to
  ChannelFiles files_;
  std::shared_ptr<cd::ProcessTrace> trace_;  // trace units: the loop's tracer and its ring
  std::unique_ptr<AgentCore> core_;
  ControlApi api_;
  std::unique_ptr<ControlSocket> socket_;
  std::mutex snap_mu_;
  std::map<std::string, LinkSnapshot> snap_;
#ifdef TANDEM_FLEET
  // Events joined into one apply step: ~5 ms of plan, level 1 and SQLite on a
  // quiet core (benchmarks/RESULTS.md "fleet": the loop gap under a burst).
  static constexpr std::size_t kFleetEventsPerStep = 1024;
  std::deque<fleet::FleetBatch> fleet_queue_;
  // Longest apply step (plan, level 1, SQLite, change sets): wall time, and
  // this thread's CPU time in it (the rest is waiting for a core or the disk).
  uint64_t fleet_step_max_ns_ = 0, fleet_step_cpu_max_ns_ = 0;
  // Last: stopped (threads joined, lease revoked) before the rest goes.
  std::unique_ptr<fleet::FleetWatcher> fleet_watcher_;
#endif
};

}  // namespace

int run(const AgentConfig& c) {
  if (c.max_protocol != 0 &&
      (c.max_protocol < common::kProtocolVersionOldest || c.max_protocol > common::kProtocolVersionCurrent))
    throw std::runtime_error("--max-protocol must be " + std::to_string(common::kProtocolVersionOldest) + ".." +
                             std::to_string(common::kProtocolVersionCurrent));
  cd::eal_init("tandem-dpu", c.eal_args);
  cd::install_stop_handlers();
  int rc = 0;
  {
    Agent a(c);
    common::log::info("serving {} (db {})", c.control_socket, c.db);
    rc = a.loop();
  }
  cd::eal_cleanup();
  return rc;
}

}  // namespace tandem::dpu::dpdk
