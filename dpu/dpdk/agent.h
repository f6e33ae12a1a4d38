// tandem-dpu: the DPU control agent process. Loads the level-1 state and the
// per-RNIC level-2 shadows from SQLite, creates one shared-memory channel
// file per RNIC, drives dpu/channel's AgentChannel for each from one polling
// loop (TSC time), serves the JSON control socket (dpu/api) from the same
// loop, and resolves punted table misses into level-2 transactions.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/dpdk/idle_loop.h"

namespace tandem::dpu::dpdk {

// Fleet mode (dpu/fleet, docs/fleet.md): desired state from etcd.
struct FleetOptions {
  std::string endpoints;  // empty: no fleet mode
  std::string server;     // this server's name in the desired state
  std::string cacert, cert, key, user, password;  // TLS and authentication, passed to etcd's client
  int64_t lease_ttl_s = 5;
};

struct AgentConfig {
  std::string db = "tandem-dpu.sqlite";
  std::string control_socket = "/run/tandem/dpu.sock";  // 0600, its directory made if missing
  std::string control_group;  // members may use the control socket too (0660); empty: root and our user
  std::string channel_dir = "/dev/shm";
  std::vector<std::string> rnics;   // channels to open besides the RNICs registered in the db
  common::dpdk::IdleConfig idle;
  double duration_s = 0;            // 0: until SIGINT/SIGTERM
  uint64_t heartbeat_timeout_ms = 1000;
  // Newest channel protocol version offered (0: current). A rollout drill: 2
  // makes this agent behave as the previous release (no vNIC entries).
  uint16_t max_protocol = 0;
  // Fair shares of the slow path and the tables: a tenant's flows per RNIC
  // unless tandemctl tenant quota says otherwise (0: a quarter of the RNIC's
  // table capacity, so one tenant's flows and their ingress entries take at
  // most half of it), and punts served per RNIC per loop iteration, one per
  // tenant per round.
  uint32_t tenant_flow_quota = 0;
  uint32_t punts_per_round = 64;
  FleetOptions fleet;
  std::vector<std::string> eal_args;
};

// Whether this build has fleet mode (gRPC and etcd's .proto files were found).
bool fleet_built() noexcept;

// Channel file path of an RNIC in a channel directory.
std::string channel_path(const std::string& dir, const std::string& rnic);

// Runs until a signal (or the duration); returns the exit code. Throws
// std::runtime_error for start-up errors.
int run(const AgentConfig& c);

}  // namespace tandem::dpu::dpdk
