// The core's spraying and congestion-control policies inside the simulator:
// their counters reach the results and the mechanisms do what they claim on
// the built-in Pegasus scenarios (shortened).
#include <catch2/catch.hpp>

#include <string>

#include "rnic/sim/run.h"
#include "rnic/sim/simulation.h"
#include "tests/unit/sim/run_policy.h"

using namespace tandem::rnic::sim;

using tandem::rnic::sim::test::run_policy;

TEST_CASE("round_robin spraying puts packets of one QP on every path of its set") {
  Scenario s = resolve_scenario("ecmp-collisions");
  s.workload.messages = 2;
  RunResult r = run_policy(s, "spray-rr");
  CHECK(r.data_ok);
  REQUIRE_FALSE(r.qp_path_pkts.empty());
  for (const auto& qp : r.qp_path_pkts) {
    CHECK(qp.size() == 4);
    for (uint64_t n : qp) CHECK(n > 0);
  }
  RunResult one = run_policy(s, "per-qp-ecmp");
  CHECK(one.data_ok);
  for (const auto& qp : one.qp_path_pkts) CHECK(qp.size() == 1);
}

TEST_CASE("receiver-driven credits keep an incast free of drops and count grants") {
  Scenario s = resolve_scenario("incast");
  s.workload.messages = 1;
  RunResult r = run_policy(s, "credit-unsched16k");
  CHECK(r.data_ok);
  CHECK(r.drops == 0);
  CHECK(r.max_queue_bytes < 32 * 16 * 1024 + 64 * 1024);  // the unscheduled burst and a little
  CHECK(r.credits_granted > 0);
  CHECK(r.credits_received > 0);
  CHECK(r.credits_used > 0);
  CHECK(r.credits_used <= r.credits_received);
}

TEST_CASE("dcqcn cuts rates on CNPs in an incast and still delivers every byte") {
  Scenario s = resolve_scenario("incast");
  s.workload.messages = 1;
  RunResult r = run_policy(s, "dcqcn");
  CHECK(r.data_ok);
  CHECK(r.cnps > 0);
  CHECK(r.rate_cuts > 0);
  CHECK(r.min_rate_gbps < 100);
}

TEST_CASE("path health takes a silently failed path out and the transfer completes") {
  Scenario s = resolve_scenario("path-failure");
  s.workload.messages = 48;
  RunResult r = run_policy(s, "rr-health");
  CHECK(r.data_ok);
  CHECK(r.path_removals >= 1);
  CHECK(r.first_path_removal_us > 500);
  CHECK(r.first_path_removal_us < 500 + 1000);  // within a millisecond of the failure
  // Only the failed path: the live ones' packets, overtaken or queued, are
  // late, not lost (path_health.h judges a path by evidence from it).
  REQUIRE(r.path_removals_per_path.size() == 4);
  CHECK(r.path_removals_per_path[1] >= 1);
  CHECK(r.path_removals_per_path[0] + r.path_removals_per_path[2] + r.path_removals_per_path[3] == 0);
}

TEST_CASE("small messages over a failing path: only the failed path is taken out, and responders stop ACKing on it") {
  Scenario s = resolve_scenario("path-failure-rpc");
  RunResult r = run_policy(s, "rr-health");
  CHECK(r.data_ok);
  REQUIRE(r.path_removals_per_path.size() == 4);
  CHECK(r.path_removals_per_path[1] >= 1);
  CHECK(r.path_removals_per_path[0] + r.path_removals_per_path[2] + r.path_removals_per_path[3] == 0);
  // The responder took its ACK path on path 1 out too, and only it (the
  // requester's echoes of each ACK's path, irn_wire.h): ACKs lost there 29
  // with only the requester's duplicates to tell, 37 with neither.
  REQUIRE(r.ack_path_removals_per_path.size() == 4);
  CHECK(r.ack_path_removals_per_path[1] >= 1);
  CHECK(r.ack_path_removals_per_path[0] + r.ack_path_removals_per_path[2] + r.ack_path_removals_per_path[3] == 0);
  CHECK(r.path_lost_rev[1] < 20);
}

TEST_CASE("credit jitter: every variant delivers every byte") {
  Scenario s = resolve_scenario("credit-jitter");
  s.workload.messages = 2;
  for (const PolicySpec& p : s.policies) {
    INFO(p.name);
    Simulation sim(s, p, s.seed);
    RunResult r = sim.run();
    CHECK(r.data_ok);
    CHECK(r.drops == 0);
  }
}
