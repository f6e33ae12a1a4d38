// Configuration of tandem-fabric, the lab's leaf-spine on one machine:
// which underlay host address lives behind which port, the K internal
// paths and their impairments, and how the process polls.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/dpdk/idle_loop.h"
#include "common/dpdk/port.h"
#include "common/fabric/path_model.h"

namespace tandem::common::fabric {

struct FabricConfig {
  std::vector<std::pair<uint32_t, uint16_t>> routes;  // host-order IPv4 -> port id
  std::vector<PathConfig> paths{PathConfig{}};        // K >= 1
  uint32_t ecmp_seed = 0;
  uint64_t rng_seed = 1;
  uint32_t hold_per_path = 2048;  // mbufs a path may hold in flight (power of two)
  dpdk::PortSetup port;
  dpdk::IdleConfig idle;
  std::string stats_json;  // counters written here at exit, if set
  double duration_s = 0;   // stop after this long; 0 = until SIGINT/SIGTERM
  bool pdump = true;
  std::vector<std::string> eal_args;
};

// Reads routes/paths/seeds from YAML into `c` (flags given later override):
//   routes: {10.0.0.1: 0, 10.0.0.2: 1}
//   paths: ["delay_us=10", "delay_us=10,loss=0.05", "delay_us=30,down"]
//   ecmp_seed: 0
//   seed: 1
// Throws std::runtime_error / std::invalid_argument with the reason.
void load_fabric_yaml(const std::string& file, FabricConfig& c);

// "10.0.0.1=0" -> (address, port).
std::pair<uint32_t, uint16_t> parse_route(const std::string& text);

}  // namespace tandem::common::fabric
