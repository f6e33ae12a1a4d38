// One run of one transport policy over a scenario's fabric and workload: the
// event loop, the hosts (a NIC and a real rnic::Transport each), link
// failures, and the result.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "rnic/sim/conn_gate.h"
#include "rnic/sim/event_queue.h"
#include "rnic/sim/fabric.h"
#include "rnic/sim/frame_pool.h"
#include "rnic/sim/run_result.h"
#include "rnic/sim/scenario.h"
#include "rnic/sim/sim_host.h"

namespace tandem::rnic::sim {

// Hosts a workload's group shares (a workload, or a job): what a gate maps
// to a tenant.
struct ConnGroup {
  uint32_t first_host = 0;
  uint32_t host_count = 0;
  uint64_t start_ns = 0;
};

class Simulation {
 public:
  // Throws ScenarioError for options or workloads that do not fit. A
  // scenario with a `dpu:` section needs a gate (sim/ makes one).
  Simulation(const Scenario& scenario, const PolicySpec& policy, uint64_t seed, const GateFactory& gate = {});
  ~Simulation();
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  RunResult run();

  // Runs events up to `until` (for tests); false once nothing is left to do.
  bool step_until(uint64_t until);
  const Fabric& fabric() const noexcept { return fabric_; }

  // For the gate.
  const Scenario& scenario() const noexcept { return scenario_; }
  uint64_t seed() const noexcept { return seed_; }  // the run's (--seed, else the scenario's)
  const std::vector<Conn>& conns() const noexcept { return conns_; }
  const std::vector<ConnGroup>& groups() const noexcept { return groups_; }
  uint32_t conn_group(uint32_t conn) const noexcept { return conn_group_[conn]; }
  uint32_t host_count() const noexcept { return fabric_.host_count(); }
  uint64_t now() const noexcept { return now_; }
  void schedule_gate(uint64_t at, uint32_t a, uint64_t b) { events_.push(at, EventKind::kDpu, a, b); }
  // The gate lets connection `conn` start (at `now`, the current time).
  void release(uint32_t conn, uint64_t now);
  // When the first data of a connection reached its responder (0: not yet).
  uint64_t first_byte_ns(uint32_t conn) const noexcept;

 private:
  void dispatch(const Event& e);
  bool all_done() const noexcept;
  RunResult collect(const std::string& stop_reason) const;
  // The flow alone in the fabric (HPCC's ideal FCT): base RTT plus its
  // frames' wire bytes at the path's slowest link.
  double ideal_fct_ns(uint32_t src, uint32_t dst, uint64_t bytes) const;
  std::vector<SlowdownBucket> slowdown_buckets() const;

  const Scenario& scenario_;
  const PolicySpec& policy_;
  uint64_t seed_;
  HostOptions opt_;
  EventQueue events_;
  FramePool frames_;  // sized for the policy's MTU
  Fabric fabric_;
  std::vector<std::unique_ptr<SimHost>> hosts_;
  std::vector<Conn> conns_;
  std::vector<uint32_t> conn_group_;
  std::vector<ConnGroup> groups_;
  std::unique_ptr<ConnGate> gate_;
  WorkloadTotals totals_;
  uint64_t now_ = 0;
  uint64_t events_run_ = 0;
  uint64_t events_by_kind_[16] = {};
};

// The largest base BDP between any two hosts at the host link rate (one
// frame of `mtu` payload per link one way, propagation both ways): what
// `cc_window_kb: auto` gives a policy, HPCC's window and T.
uint64_t max_base_bdp_bytes(const Fabric& fabric, uint32_t mtu, double host_gbps);

// Runs every policy of the scenario with the same seed.
std::vector<RunResult> run_scenario(const Scenario& scenario, uint64_t seed, const GateFactory& gate = {});

}  // namespace tandem::rnic::sim
