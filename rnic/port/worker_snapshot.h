// What the data lcore publishes for other threads (telemetry, tandemctl): the
// worker's counters as rows and one row per live QP, in buffers sized once at
// start so publishing allocates nothing. Filled through SnapshotExchange.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::rnic::port {

// One counter: group and name are static strings ("worker"/"rx_packets",
// "drops.parse"/"bad_icrc", "tx_encap"/"copied_bytes", ...), so the same row
// feeds JSON (nested by group), telemetry (flat) and the exit print.
struct CounterRow {
  const char* group = "";
  const char* name = "";
  const char* help = "";
  uint64_t value = 0;
};

struct CounterRows {
  std::vector<CounterRow> rows;  // capacity fixed at start
  std::size_t n = 0;
  void clear() noexcept { n = 0; }
  void add(const char* group, const char* name, uint64_t v, const char* help = "") noexcept {
    if (n < rows.size()) rows[n++] = CounterRow{group, name, help, v};
  }
};

inline constexpr uint32_t kRowPaths = 16;  // per-path columns a QP row carries (more are summed only)

struct QpRow {
  uint32_t host_qpn = 0, core_qpn = 0, app_id = 0;
  uint32_t lcore = 0;  // the worker lcore that owns it (--lcores)
  uint32_t state = 0;  // ibv_qp_state
  uint32_t vnic = 0, vni = 0, remote_overlay = 0, remote_underlay = 0, dest_qpn = 0, mtu = 0;
  bool route_pending = false;  // DPU mode: RTR waits for the agent's route
  bool roce_peer = false;      // its peer is a standard RoCE RNIC: go-back-N, no Tandem-only headers
  uint64_t route_wait_us = 0;  // RTR to route installed (0: there already)
  bool has_counters = false;
  uint64_t tx_pkts = 0, rx_pkts = 0, retx_pkts = 0, sacks_rx = 0, timeouts = 0, reorder_depth_max = 0;
  uint64_t credit_probes = 0;  // cc credit: packets sent without credit after an RTO out of it
  uint32_t paths = 0;  // 0: no path policy
  uint64_t path_removals = 0, path_returns = 0;
  uint64_t pkts[kRowPaths] = {}, removals[kRowPaths] = {}, silent_removals[kRowPaths] = {};
  uint64_t loss_removals[kRowPaths] = {}, stall_excused[kRowPaths] = {};  // removals by cause (path_health.h)
  uint64_t acks[kRowPaths] = {}, losses[kRowPaths] = {}, srtt_ns[kRowPaths] = {};
  uint16_t ports[kRowPaths] = {};
  uint16_t wire_ports[kRowPaths] = {};  // the UDP source port each path leaves with (0: no route yet)
  uint32_t up_mask = 0;                 // bit i: path i is in the set now
  // Congestion control (cc_policy.h CcStats): credits, or DCQCN's rate.
  const char* cc = "";
  uint64_t credits_received = 0, credits_used = 0, credit_stalls = 0, rate_cuts = 0, rate_mbps = 0;
};

struct QpRows {
  std::vector<QpRow> rows;  // capacity: the worker's max QPs
  std::size_t n = 0;
};

}  // namespace tandem::rnic::port
