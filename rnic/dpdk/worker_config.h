// Everything tandem-rnic's flags decide, handed to run().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/dpdk/idle_loop.h"
#include "common/dpdk/port.h"
#include "rnic/core/verbs_types.h"
#include "rnic/host/resource_quota.h"
#include "rnic/port/punt_budget.h"
#include "rnic/port/vnic.h"
#include "rnic/table/key_hash.h"

namespace tandem::rnic::dpdk {

using port::DeviceOwner;

struct WorkerConfig {
  std::string name = "rnic0";
  std::string host_socket;   // where tenant applications attach (rnic/host)
  // Run directory where each vNIC is registered as a verbs device (rnic/host/device_registry.h);
  // "" = do not register.
  std::string device_dir;
  // Empty: the host socket's file permissions decide who attaches. Otherwise the
  // socket is opened to all and each attach is checked on the peer's credentials.
  std::vector<DeviceOwner> device_owners;
  std::string table_file;    // standalone level-2 table (YAML)
  uint32_t mtu = 1024;       // largest path MTU a QP may use (its modify_qp value is capped to it)
  // The connection manager (rnic/cm, rdma_cm over QP1): on unless --no-cm.
  bool cm = true;
  uint8_t cm_response_timeout = 16;  // the response time it announces: 4.096 us * 2^x (16: 268 ms)
  uint8_t cm_max_retries = 8;        // MADs resent before a connection attempt fails
  Reliability mode = Reliability::kIrn;
  std::string spray = "single";        // rnic/core path policy name
  std::string cc = "fixed_window";     // rnic/core congestion-control policy name
  uint64_t cc_window_bytes = 1ull << 20;
  uint64_t reorder_delay_ns = 50'000;  // IRN: gap age before a SACK
  uint64_t timeout_ns = 1'000'000;     // initial retransmission timeout
  // BENCHMARK ONLY (--bench-any-psn): every QP accepts any PSN (rnic/core
  // QpInitAttr::bench_any_psn), so looped pcap replays are placed. Standalone only.
  bool bench_any_psn = false;
  bool tx_copy = false;      // copy payloads into mbufs instead of attaching registered memory
  bool pdump = true;
  common::dpdk::IdleConfig idle;
  common::dpdk::PortSetup port;
  double duration_s = 0;     // 0: until SIGINT/SIGTERM
  std::string stats_json;
  uint16_t port_id = 0;      // the data port (first EAL port)
  uint32_t max_qps = 16384;
  uint32_t app_inflight_pkts = 1024;  // --app-inflight-pkts (TransportConfig::owner_inflight_pkts)
  // Worker lcores of the port (--lcores): each application and its QPs live
  // on one (rnic/port/qp_steering.h). Standalone mode only when > 1.
  uint32_t lcores = 1;
  // --limit-per-app / --limit-per-vnic: fair shares of the host interface
  // (fair_shares.h); a resource not named keeps its default.
  std::vector<host::LimitSetting> app_limits;
  std::vector<host::LimitSetting> vnic_limits;
  // --punt-budget RATE[:BURST]: DPU mode, punts each vNIC may make (rnic/port/punt_budget.h).
  port::PuntBudgetConfig punt_budget;
  // DPU mode: the level-2 table comes from tandem-dpu over this channel file
  // (--table then only names the port's underlay identity and vNICs).
  std::string dpu_channel;
  uint64_t dpu_agent_timeout_ns = 1'000'000'000;  // agent silence before HEADLESS
  // Level-2 entries the table holds; 0: 65536 in DPU mode, twice the YAML's
  // entries (at least 64) standalone. The agent sizes its shadow to it.
  uint32_t table_capacity = 0;
  // The level-2 hash secret; unset (the default): drawn from the OS at start.
  // Set only by tests that show what a known secret lets a tenant do.
  std::optional<TableHashKey> insecure_table_hash_key;
  // Newest channel protocol version offered (0: current). A rollout drill: 2
  // behaves as the previous release (takes no vNIC entries; YAML vNICs).
  uint16_t dpu_max_protocol = 0;
  std::vector<std::string> eal_args;
};

// Runs the worker until a signal or the duration ends; returns the exit code.
// Throws std::runtime_error / std::invalid_argument for start-up errors.
int run(const WorkerConfig& c);

}  // namespace tandem::rnic::dpdk
