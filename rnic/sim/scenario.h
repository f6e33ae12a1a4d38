// A simulation scenario as read from YAML: the topology, the workload, link
// failures, and the transport policies to run side by side on the same
// fabric and seed.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "rnic/sim/fabric.h"
#include "rnic/sim/host_jitter.h"

namespace tandem::rnic::sim {

struct ScenarioError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct PathSpec {
  uint64_t delay_ns = 1000;
  uint64_t jitter_ns = 0;
  double loss = 0;
  uint64_t rate_bps = 0;  // 0: the topology's path rate
};

struct TopologySpec {
  enum class Kind { kParallel, kLeafSpine, kFatTree } kind = Kind::kParallel;
  LinkParams host_link{100'000'000'000ull, 1000, 0, 0};
  LinkParams fabric_link{100'000'000'000ull, 1000, 0, 0};  // leaf-spine links; default path params
  QueueParams queue{1 << 20, 0};
  std::vector<PathSpec> paths;  // parallel
  uint32_t hosts_per_leaf = 4;  // leaf-spine
  uint32_t leaves = 2;
  uint32_t spines = 2;
  // fat_tree (HPCC's: pods of ToRs and aggregation switches, each agg wired
  // to cores / aggs_per_pod cores; ToR-agg and agg-core links are fabric_link)
  uint32_t pods = 2;
  uint32_t tors_per_pod = 2;
  uint32_t aggs_per_pod = 2;
  uint32_t cores = 2;
  uint32_t hosts_per_tor = 4;
  uint32_t host_count() const noexcept {
    return kind == Kind::kParallel ? 2
           : kind == Kind::kLeafSpine ? hosts_per_leaf * leaves
                                      : pods * tors_per_pod * hosts_per_tor;
  }
};

struct SizeDist {
  // websearch: DCTCP's web-search CDF; hadoop: Facebook's Hadoop CDF (both as
  // HPCC's traffic generator has them, sizes interpolated linearly).
  enum class Kind { kFixed, kUniform, kWebSearch, kHadoop } kind = Kind::kFixed;
  uint64_t bytes = 65536;      // fixed
  uint64_t min_bytes = 1;      // uniform, and the floor of websearch
  uint64_t max_bytes = 65536;  // uniform, and the cap of websearch
  double scale = 1.0;          // websearch, hadoop: multiply the CDF's sizes
};

struct WorkloadSpec {
  // poisson: open loop as HPCC's traffic generator: every host starts flows
  // (one message on its own QP pair) at Poisson times to a uniformly chosen
  // other host, at `load` of its link's rate on average, for `duration`.
  // ring: each host sends to the next (a collective's ring step).
  enum class Kind { kBulk, kPermutation, kIncast, kAllToAll, kPoisson, kRing } kind = Kind::kBulk;
  enum class Op { kWrite, kSend, kRead } op = Op::kWrite;
  SizeDist size;
  uint32_t messages = 16;     // per flow
  uint32_t outstanding = 4;   // per flow, closed loop
  uint32_t src = 0;           // bulk
  uint32_t dst = 1;           // bulk
  uint32_t senders = 4;       // incast
  uint32_t receiver = 0;      // incast
  uint64_t start_jitter_ns = 0;  // each flow starts at a random time in [0, this]
  double load = 0.3;             // poisson
  uint64_t duration_ns = 1'000'000;  // poisson: flows start in [0, this)
  // Measured flows: those starting in [measure_from, measure_until) (0, 0:
  // all). The run ends once they are all done, while the others keep the
  // load up around them (no warm-up or drain at the ends of the window).
  uint64_t measure_from_ns = 0;
  uint64_t measure_until_ns = 0;
  bool windowed() const noexcept { return measure_until_ns != 0; }
  // The hosts it runs on: [first_host, first_host + host_count) (0: to the
  // last host); host indices in src/dst/receiver are within this range.
  uint32_t first_host = 0;
  uint32_t host_count = 0;
  uint64_t start_ns = 0;  // added to every flow's start
  uint32_t group = 0;     // all_to_all: pairs only within consecutive groups of this many hosts (0: all)
  // Each connection's destination sends the same messages back over the
  // same QP pair (a QP both requester and responder: its data and its ACKs
  // share one path set, as in a ping-pong).
  bool bidirectional = false;
};

struct FailureSpec {
  uint64_t at_ns = 0;
  std::string link;
  bool up = false;
  int direction = -1;  // -1 both; 0 forward (the link's first port, s0 -> s1); 1 reverse
};

struct PolicySpec {
  std::string name;
  std::map<std::string, std::string> options;  // given to the transport adapter as is
};

struct Scenario {
  std::string name;
  std::string description;
  uint64_t seed = 1;
  uint64_t stop_ns = 1'000'000'000;  // give up after this much simulated time
  uint64_t failover_ns = 0;          // 0: switches never route around a failed link
  TopologySpec topology;
  WorkloadSpec workload;                     // the first (or only) workload; its window is the run's
  std::vector<WorkloadSpec> more_workloads;  // `workloads:` beyond the first (same op), each its own group
  // The `dpu:` section as YAML text, for the DPU model (sim/, tandem-sim);
  // rnic/sim runs such a scenario only with a connection gate.
  std::string dpu_yaml;
  std::vector<FailureSpec> failures;
  std::vector<HostJitterSpec> hosts;  // host jitter (`hosts:`), per host or for all
  std::map<std::string, std::string> transport;  // options shared by every policy
  std::vector<PolicySpec> policies;
  // FCT slowdown by flow size (as HPCC's fct_analysis.py): flows sorted by
  // size, cut into buckets of this percent of the flows. 0: not reported.
  uint32_t slowdown_step_pct = 0;
};

// Throws ScenarioError with a message naming the offending key.
Scenario parse_scenario(const std::string& yaml_text, const std::string& origin);
Scenario load_scenario_file(const std::string& path);

}  // namespace tandem::rnic::sim
