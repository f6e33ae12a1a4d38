// The `dpu:` section of a tandem-sim scenario: the DPU in the loop. Every
// `rnics_per_server` consecutive fabric hosts are the RNICs of one server,
// which has one DPU running the agent's logic (dpu/); each RNIC has its
// level-2 table and channel end (rnic/table). The agent's work takes
// modelled CPU time (its service times), the PCIe stand-in is a latency and
// a bandwidth per direction, and the channels' timeouts are scaled to a
// simulation's milliseconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::sim {

struct DpuSpec {
  uint32_t rnics_per_server = 8;
  uint32_t table_capacity = 1024;        // each RNIC's level-2 table
  uint64_t channel_latency_ns = 1000;    // one way, each message
  double channel_gbps = 64;              // each direction; 0: no serialisation
  // Agent CPU: per punt resolved (level-1 lookup, change set; ~0.74 us in
  // benchmarks/new-flow), per event message handled, per command sent.
  uint64_t resolve_ns = 750;
  uint64_t event_ns = 50;
  uint64_t command_ns = 20;
  uint32_t punts_per_round = 64;         // served per loop pass, one per tenant per round
  uint32_t tenant_flow_quota = 0;        // flows per RNIC per tenant (0: a quarter of the table)
  uint32_t punt_queue_limit = 4096;      // per tenant, per RNIC (FairPunts)
  uint64_t tick_ns = 50'000;             // the loops' timers: heartbeats, BAR reads
  uint64_t heartbeat_interval_ns = 1'000'000;
  uint64_t heartbeat_timeout_ns = 5'000'000;
  uint64_t agent_timeout_ns = 5'000'000;  // RNIC: agent silent this long -> HEADLESS
  uint64_t txn_timeout_ns = 10'000'000;
  uint64_t repunt_ns = 2'000'000;         // a miss still waiting is punted again (the worker's kRepuntNs)
  struct Restart {
    uint32_t server = 0;
    uint64_t at_ns = 0;
    uint64_t down_ns = 0;  // the agent is gone this long, then starts again from its store
    // The store's level-2 tables are lost with it (a replaced DPU, a wiped
    // disk; level 1 comes back from the fleet's desired state): the agent
    // starts from empty shadows, so the HELLO replays wipe its RNICs' tables.
    bool store_lost = false;
  };
  std::vector<Restart> restarts;
  // A hash-collision storm: a hostile tenant with a vNIC on RNIC `rnic`
  // (and one on `from`, behind which all its addresses live) sends one
  // first packet to each of `flows` overlay addresses of its own VPC,
  // chosen so their egress entries land in the buckets of the victim
  // group's entries on that RNIC. Each storm is its own attacker tenant.
  struct Storm {
    enum class Aim : uint8_t {
      kSecret,   // with the RNIC's own secret (leaked; as the table before it was keyed)
      kUnkeyed,  // with the unkeyed hash the table had before (key_hash.h): the secret scatters them
      kNone,     // consecutive addresses: a plain flood of the same size
    };
    uint32_t rnic = 0;
    uint32_t from = 1;
    uint32_t victim_group = 1;  // the workload group whose entries on `rnic` are aimed at
    uint64_t at_ns = 0;
    uint64_t interval_ns = 1000;  // between the attacker's first packets
    uint32_t flows = 0;           // 0: its flow quota on the RNIC
    Aim aim = Aim::kSecret;
  };
  std::vector<Storm> storms;
};

const char* aim_name(DpuSpec::Storm::Aim a) noexcept;

// Throws rnic::sim::ScenarioError naming the offending key.
DpuSpec parse_dpu_spec(const std::string& yaml, const std::string& origin);

}  // namespace tandem::sim
