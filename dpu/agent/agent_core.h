// The DPU agent's work, sans-I/O (as rnic/port is the worker's): one
// AgentChannel per RNIC driven over its channel file's view, punted misses
// resolved from level 1 into transactions (per-tenant quotas, punts served
// round robin per tenant, committed resolutions revalidated), the level-2
// shadows persisted as they commit, a worker that scribbles on its channel
// reset and counted, level-1 changes (tandemctl through ControlApi, or a
// fleet batch from etcd) turned into change sets, and the set-up stages
// traced (agent_resolve, txn_commit). The caller owns the I/O: it maps the
// channel files (ChannelOpener), runs the loop and passes the time, serves
// the control socket, takes etcd's batches from its watcher threads and
// publishes telemetry (tandem-dpu: dpu/dpdk/agent.cc; tests: a fake channel).
//
// Files: agent_core.cc (links, the service step, level-1 changes),
// punt_resolution.cc (punts, quotas, revalidation), setup_trace.cc (trace
// records), agent_json.cc (rnic show, table dump, telemetry snapshots),
// fleet_step.cc (etcd batches).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/trace/tracer.h"
#include "dpu/agent/channel_source.h"
#include "dpu/api/control_api.h"
#include "dpu/channel/agent_channel.h"
#include "dpu/fleet/fleet_apply.h"
#include "dpu/model/level1_state.h"
#include "dpu/store/store.h"
#include "dpu/txn/fair_punts.h"
#include "dpu/txn/pending_punts.h"

namespace tandem::dpu {

struct AgentCoreConfig {
  AgentChannelConfig channel;  // agent instance, timeouts, versions, pipelining
  // A tenant's flows per RNIC unless tandemctl tenant quota says otherwise
  // (0: a quarter of the RNIC's table capacity), and punts served per RNIC
  // per service step, one per tenant per round.
  uint32_t tenant_flow_quota = 0;
  uint32_t punts_per_round = 64;
  // Fleet mode: this server's name in etcd's desired state and the revision
  // the store says level 1 was brought to.
  std::string fleet_server;
  int64_t fleet_revision = 0;
  // Where the agent's log lines go (unset: the process logger, common/log).
  std::function<void(const std::string&)> log;
  // The time now, for trace records stamped when they happen (a resolution
  // comes after the punt that a worker stamped during this step); the core
  // reads no clock of its own. Empty: the service step's time.
  std::function<uint64_t()> clock;
};

struct PuntStats {
  uint64_t received = 0;
  uint64_t resolved = 0;     // change set submitted
  uint64_t refused = 0;      // no mapping / denied by isolation / unknown vNIC
  uint64_t denied = 0;       // of refused: isolation
  uint64_t duplicate = 0;    // already being installed
  uint64_t slot_lost = 0;    // slot overwritten before it was read
  uint64_t revoked = 0;      // resolutions undone after commit: level 1 changed meanwhile
  uint64_t over_quota = 0;   // of refused: the tenant's flow quota on the target RNIC was used up
  uint64_t foreign = 0;      // of refused: the vNIC is another RNIC's (a confused or compromised worker)
  uint64_t install_refused = 0;  // of resolved: the RNIC refused its change set alone (TABLE_FULL, bad entry)
};

// One managed RNIC: its channel file, protocol state machine, punts.
struct AgentLink {
  std::string name;
  uint32_t port_id = 0;
  std::unique_ptr<ChannelMapping> file;   // null while a scribbled file waits to be replaced
  std::unique_ptr<AgentChannel> ch;
  std::deque<common::RawMessage> unsent;  // commands the ring had no room for yet
  PendingPunts pending;                   // resolutions submitted to this RNIC, by tag and missed key
  PuntStats punts;
  uint64_t save_errors = 0;
  uint64_t vnic_session = 0;              // channel session whose vNIC entries were reconciled
  FairPunts fair;                         // punts waiting, per tenant
  std::unordered_map<uint32_t, uint32_t> inflight;  // tenant -> resolutions submitted, not answered
  // A worker that scribbled on its channel: the file is retired, and a fresh
  // one made after a back-off that doubles while it keeps doing so.
  uint64_t violations = 0;
  std::string last_violation;
  uint64_t last_violation_ns = 0;
  uint64_t backoff_ns = 0;
  uint64_t reopen_at = 0;
  uint64_t files_replaced = 0;
};

// What telemetry shows per RNIC (copied out by the loop, read by other threads).
struct LinkSnapshot {
  std::string state, rnic_state;
  uint64_t version = 0, table_version = 0, entries = 0, committed = 0, punts = 0;
  std::map<uint32_t, TenantPuntStats> tenants;
};

class AgentCore final : public AgentHooks {
 public:
  static constexpr unsigned kBurst = 64;
  static constexpr uint64_t kFirstBackoffNs = 100'000'000;
  static constexpr uint64_t kMaxBackoffNs = 10'000'000'000ull;
  static constexpr uint64_t kForgiveNs = 60'000'000'000ull;  // a minute clean: the back-off starts over

  // `tracer`: the process's trace unit (set-up records), or null.
  AgentCore(Level1State& state, Store& store, AgentCoreConfig cfg, ChannelOpener& opener,
            common::trace::Tracer* tracer = nullptr);
  ~AgentCore() override;

  // Opens (or re-opens) RNIC `name`'s channel and loads its shadow from the store.
  void open_link(const std::string& name, uint64_t now);
  // Every RNIC the store knows, and these: at start.
  void open_links(const std::vector<std::string>& extra, uint64_t now);
  // One loop iteration's channel work for every RNIC; true if anything moved.
  bool service(uint64_t now);

  // Fleet mode: applies one batch from etcd (fleet::next_batch) through the
  // same path as tandemctl's changes. Throws StoreError (level 1 is then
  // ahead of disk: the caller stops). False if not in fleet mode.
  bool apply_fleet(const fleet::FleetBatch& b, uint64_t now);
  bool fleet_mode() const noexcept { return fleet_ != nullptr; }
  const fleet::FleetApplier* fleet() const noexcept { return fleet_.get(); }
  // What this server reports to etcd; `extra` (the loop's own figures) is merged in.
  nlohmann::json fleet_status(const nlohmann::json& extra) const;

  // AgentHooks: what ControlApi calls after a change, and its queries.
  void changed(const Change& c, const std::optional<Vnic>& removed) override;
  void mappings_replaced(const std::vector<MappingKey>& keys) override;
  nlohmann::json rnics() const override;
  nlohmann::json level2(const std::string& rnic) const override;
  nlohmann::json trace(const std::string& rule) override { return trace_hook_ ? trace_hook_(rule) : nullptr; }
  // tandemctl trace start|stop: the caller installs rules in its trace ring.
  void set_trace_hook(std::function<nlohmann::json(const std::string&)> f) { trace_hook_ = std::move(f); }

  std::map<std::string, LinkSnapshot> snapshot() const;
  const AgentLink* link(const std::string& name) const;
  const std::map<std::string, std::unique_ptr<AgentLink>>& links() const noexcept { return links_; }

 private:
  bool service_link(AgentLink& l, uint64_t now);
  void violation(AgentLink& l, const char* why, uint64_t now);
  void reopen(AgentLink& l, uint64_t now);
  void submit(AgentLink& l, ChangeSet cs);
  void withdraw_mappings(const std::vector<MappingKey>& keys);
  bool tenant_keyed(uint32_t vni) const;
  void sync_vnic_entries();
  void log(const std::string& s, bool warning = false) const;

  // punt_resolution.cc
  bool take_outcomes(AgentLink& l, uint64_t now);
  void resolve_punt(AgentLink& l, uint32_t vni, const common::PuntMsg& p);
  uint32_t tenant_of(const common::EntryKey& k) const;
  bool within_quota(AgentLink& to, uint32_t vni);
  uint64_t flows_on(const AgentLink& l, uint32_t vni) const;
  void revalidate(AgentLink& l, const PendingPunts::Entry& pp);

  // setup_trace.cc
  bool tracing() const noexcept { return tracer_ && tracer_->active(); }
  uint16_t wire_pkey_of_vnic(uint32_t vnic_id) const;
  uint32_t underlay_of(const std::string& rnic) const;
  void trace_setup(common::trace::Stage stage, uint32_t src, uint32_t dst, const common::EntryKey& key,
                   common::trace::SetupVerdict verdict, uint32_t aux, uint64_t now);
  void trace_resolve(const AgentLink& l, const common::EntryKey& missed, const common::Level2Entry* resolved,
                     common::trace::SetupVerdict verdict);
  void trace_commit(const AgentLink& l, const TxnOutcome& o, uint64_t now);
  static std::optional<common::Level2Entry> egress_put(const ChangeSet& cs, const common::EntryKey& key);

  // agent_json.cc
  nlohmann::json link_json(const AgentLink& l) const;
  nlohmann::json tenant_punts_json(const AgentLink& l) const;

  Level1State& state_;
  Store& store_;
  AgentCoreConfig cfg_;
  ChannelOpener& opener_;
  common::trace::Tracer* tracer_;
  std::function<nlohmann::json(const std::string&)> trace_hook_;
  std::map<std::string, std::unique_ptr<AgentLink>> links_;
  std::map<std::string, uint16_t> rnic_version_;  // last negotiated channel version per RNIC
  uint64_t now_ = 0;                              // the last service step's time
  uint64_t next_tag_ = 1;
  std::string target_;                                // resolve_punt's target RNIC name, reused
  std::vector<common::Level2Entry> revalidate_puts_;  // revalidate's argument, reused
  std::optional<common::Level2Entry> resolved_entry_;  // resolve_punt's traced resolution
  // Burst buffers, here rather than on the stack: RawMessage zero-initialises,
  // and 2 x 4 KiB of memset per iteration showed in perf.
  std::array<common::RawMessage, kBurst> ev_buf_, out_buf_;
  std::unique_ptr<fleet::FleetApplier> fleet_;
  uint64_t fleet_stale_withdrawn_ = 0;  // level-2 entries a full read found level 1 no longer gives
  uint64_t fleet_rejected_logged_ = 0, fleet_unsupported_logged_ = 0;
};

}  // namespace tandem::dpu
