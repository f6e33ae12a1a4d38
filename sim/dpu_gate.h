// The DPU in the loop: tandem-sim's connection gate (rnic/sim/conn_gate.h)
// built from the agent's and the RNIC's own sans-I/O code. Each server has
// one DPU agent (level 1, dpu/model; the per-RNIC state machine,
// dpu/channel; transactions, punt resolution, fair punt queues and tenant
// quotas, dpu/txn) and `rnics_per_server` RNICs, each with its level-2
// table and its end of the channel (rnic/table). The PCIe stand-in between
// them is a latency and a bandwidth per direction; the agent is one core
// whose work takes modelled time (DpuSpec), so punts queue behind it.
//
// A connection starts only when both of its RNICs hold an egress route to
// the other end (as the worker's QP waits in RTR for its route): a miss is
// punted over the channel, resolved by the agent from level 1 and installed
// by a transaction; the commit releases the waiting connections. Once
// started, each packet a connection end sends needs the route still there
// (the worker's TX looks it up again when the table version moved): if it is
// gone the packet is dropped and the miss punted, as port_worker.h does.
// Each workload group of the scenario is one tenant (its hosts get one vNIC
// each and every server that hosts it holds its mappings); each of `storms:`
// adds a hostile tenant whose flows are aimed at one RNIC's table.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/channel/layout.h"
#include "common/channel/messages.h"
#include "dpu/channel/agent_channel.h"
#include "dpu/model/level1_state.h"
#include "dpu/txn/fair_punts.h"
#include "dpu/txn/pending_punts.h"
#include "rnic/sim/conn_gate.h"
#include "rnic/sim/ring.h"
#include "rnic/sim/simulation.h"
#include "rnic/table/level2_table.h"
#include "rnic/table/rnic_channel.h"
#include "sim/dpu_spec.h"

namespace tandem::sim {

// One direction of one RNIC's channel: messages delivered in order, each
// after the link's serialisation and latency.
struct MsgLink {
  struct InFlight {
    uint64_t at;
    common::RawMessage m;
  };
  rnic::sim::Ring<InFlight> q;
  uint64_t free_at = 0;
  uint64_t sent = 0;
  // When a message handed over at `now` arrives.
  uint64_t send(uint64_t now, const common::RawMessage& m, uint64_t latency_ns, double gbps) {
    const uint64_t ser = gbps > 0 ? static_cast<uint64_t>(common::kMessageSize * 8 / gbps + 0.5) : 0;
    free_at = (now > free_at ? now : free_at) + ser;
    q.push_back(InFlight{free_at + latency_ns, m});
    ++sent;
    return free_at + latency_ns;
  }
};

struct DpuStats {
  uint64_t punts = 0;            // punts the agents took in
  uint64_t resolved = 0;         // ... resolved into a change set
  uint64_t refused = 0;          // ... refused (no mapping, isolation, quota, no target)
  uint64_t over_quota = 0;
  uint64_t duplicates = 0;       // a resolution for the key was in flight already
  uint64_t punts_dropped = 0;    // a tenant's punt queue was full
  uint64_t repunts = 0;          // RNICs asked again for a key still missing
  uint64_t commits = 0;          // transactions committed on RNICs
  uint64_t aborts = 0;
  uint64_t table_full = 0;
  uint64_t replays = 0;          // full table replays (a channel's SYNC)
  uint64_t reconcile_skips = 0;  // re-HELLOs whose digests matched: no replay
  uint64_t messages_up = 0;      // channel messages RNIC -> agent
  uint64_t messages_down = 0;    // agent -> RNIC
  uint64_t queue_max = 0;        // most punts waiting at one agent
  uint64_t wait_sum_ns = 0;      // punts' time from reaching the agent to their resolution starting
  uint64_t wait_max_ns = 0;
  uint64_t waited = 0;           // punts those two cover
  uint64_t busy_ns = 0;          // agent CPU time, all agents
  uint64_t headless = 0;         // RNICs that went HEADLESS (agent silent)
  uint64_t released = 0;         // connections the gate let start after a wait
  uint64_t admitted_at_once = 0; // connections whose routes were there already
  uint64_t route_miss_drops = 0; // packets of started connections dropped: their route was gone
  uint64_t routes_lost = 0;      // times a started connection end found its route gone
  uint64_t route_gone_ns_max = 0;  // longest such outage (gone until installed again)
};

// Per tenant (workload groups; the storms' attackers after them).
struct TenantTally {
  uint64_t punts = 0;
  uint64_t resolved = 0;
  uint64_t over_quota = 0;
  uint64_t aborted = 0;  // resolutions the RNIC refused, alone (TABLE_FULL: a collision; a refused merge is split)
};

class DpuGate final : public rnic::sim::ConnGate {
 public:
  DpuGate(rnic::sim::Simulation& sim, DpuSpec spec);
  ~DpuGate() override;

  bool admit(const rnic::sim::Conn& c, uint64_t now) override;
  void on_event(const rnic::sim::Event& e) override;
  bool idle() const noexcept override { return waiting_conns_ == 0; }
  bool checks_egress() const noexcept override { return true; }
  bool egress_ok(uint32_t host, uint32_t qpn, uint64_t now) override;
  std::string report_json() const override;

  const DpuStats& stats() const noexcept { return stats_; }
  uint32_t servers() const noexcept { return static_cast<uint32_t>(agents_.size()); }
  // What the channels agree on: every channel of every live agent ACTIVE.
  bool all_active() const noexcept;
  uint64_t table_entries(uint32_t host) const noexcept;

  // Identifiers the model gives a workload group's tenant (exposed for tests).
  static uint32_t vni_of(uint32_t group) noexcept { return 100 + group; }
  static uint32_t vnic_id(uint32_t group, uint32_t host) noexcept { return (group << 17) | (host + 1); }
  static uint32_t overlay_ip(uint32_t host) noexcept { return 0x0B000000u | (host + 1); }
  // Storm i's overlay addresses (its attacker's VPC, 10.0.0.0/8), in the order it sends.
  const std::vector<uint32_t>& storm_addresses(std::size_t i) const noexcept { return storms_[i].ips; }

 private:
  enum Kind : uint64_t { kDeliverUp, kDeliverDown, kAgentRun, kTick, kRestartDown, kRestartUp, kStorm };
  struct Rnic;
  struct Agent;
  struct Link;
  // What one restart did: when its RNICs agreed with the agent again and
  // when the last route its RNICs waited for came back.
  struct RestartLog {
    DpuSpec::Restart spec;
    uint64_t active_at = 0;     // every channel of the agent ACTIVE again
    uint64_t last_route_at = 0; // the last route a connection end on its RNICs waited for arrived
    uint64_t routes_lost = 0;   // started connection ends on its RNICs that found their route gone
    uint64_t drops = 0;         // their packets dropped meanwhile
    uint64_t gone_ns_max = 0;   // the longest a route of theirs was gone
  };
  static constexpr uint32_t kGone = 0x80000000u;  // a waiting end of a started connection (its route vanished)

  void build_agent(uint32_t server, uint64_t now);
  void deliver_up(uint32_t host, uint64_t now);
  void deliver_down(uint32_t host, uint64_t now);
  void agent_run(uint32_t server, uint64_t now);
  void tick(uint32_t server, uint64_t now);
  void wake_agent(Agent& a, uint64_t now);
  void send_up(Rnic& r, uint64_t now);         // what the RNIC's channel has for the agent
  void send_down(Link& l, uint64_t now);       // what the agent's channel has for the RNIC
  bool lookup(Rnic& r, const common::EntryKey& k) const noexcept;
  void punt(Rnic& r, const common::EntryKey& k, uint64_t now);
  void recheck(Rnic& r, uint64_t now);         // after a commit: waiting keys that now hit
  void resolve(Agent& a, Link& l, uint32_t vni, const common::PuntMsg& p, uint64_t now);
  bool within_quota(Agent& a, Link& to, uint32_t vni) const;
  void end_ready(uint32_t conn, uint32_t side, uint64_t now);
  uint32_t tenant_of(const Agent& a, const common::EntryKey& k) const;
  dpu::AgentChannelConfig channel_config(uint32_t instance) const;
  void wait_for(Rnic& r, const common::EntryKey& key, uint32_t end, uint64_t now);
  void route_restored(uint32_t end, uint64_t now);
  RestartLog* restart_of(uint32_t server, uint64_t now);
  TenantTally* tally(uint32_t vni);
  common::EntryKey end_key(uint32_t conn, uint32_t side) const;
  // A storm: its addresses, aimed with the table model its `aim` names.
  struct Storm {
    DpuSpec::Storm spec;
    uint32_t group = 0;                     // its attacker's tenant (after the workload groups)
    std::vector<uint32_t> ips;
    std::vector<common::EntryKey> targets;  // the victim's entries on the RNIC, as aimed at
    uint64_t tries = 0;                     // addresses the attacker tried to find its set
    std::vector<common::EntryKey> before;   // other tenants' entries on the RNIC as it began
  };
  void craft_storm(Storm& s);
  void storm_send(Storm& s, uint32_t i, uint64_t now);

  rnic::sim::Simulation& sim_;
  DpuSpec spec_;
  std::vector<std::unique_ptr<Rnic>> rnics_;    // by fabric host
  std::vector<std::unique_ptr<Agent>> agents_;  // by server
  std::vector<uint8_t> conn_wait_;              // per connection: ends still without a route (bit 0 src, 1 dst)
  std::vector<uint64_t> conn_asked_;            // when it asked
  uint64_t waiting_conns_ = 0;
  uint32_t instances_ = 0;                      // agent starts (each a new instance number)
  std::vector<uint64_t> gate_wait_ns_;          // released connections' wait for their routes
  // Started connection ends (conn * 2 + side): the table version their route
  // was last found at, and since when it has been gone (0: it is not).
  std::vector<uint64_t> end_version_;
  std::vector<uint64_t> end_gone_at_;
  std::vector<std::unordered_map<uint32_t, uint32_t>> qpn_end_;  // per host: QPN -> connection end
  std::vector<RestartLog> restart_logs_;
  std::vector<TenantTally> tallies_;            // by group; the attacker last
  std::vector<Storm> storms_;
  DpuStats stats_;
};

// The gate factory tandem-sim passes to rnic/sim for scenarios with a dpu: section.
rnic::sim::GateFactory dpu_gate_factory();

}  // namespace tandem::sim
