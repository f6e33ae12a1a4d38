// Host jitter (rnic/sim/host_jitter.h): stalls of the hosts' transport
// loops, late applications and late ACKs, and path health under them on
// the built-in scenarios jitter-no-failure and path-failure-jitter
// (shortened): no live path out, the dead one out within 2 ms and back
// after the heal, every byte verified; and lossy-sparse-paths, the lab's
// lossy path on 16 sparse paths per QP: losses take no path out.
#include <catch2/catch.hpp>

#include <string>

#include "rnic/sim/run.h"
#include "rnic/sim/scenario.h"
#include "rnic/sim/simulation.h"
#include "tests/unit/sim/run_policy.h"

using namespace tandem::rnic::sim;

using tandem::rnic::sim::test::run_policy;

TEST_CASE("hosts: entries parse, and bad ones are refused by name") {
  const std::string base =
      "name: t\ntopology: {kind: parallel, paths: [{delay_us: 1}]}\nworkload: {kind: bulk}\n"
      "policies: [{name: p}]\n";
  Scenario s = parse_scenario(base + "hosts: [{host: all, stall: {rate_per_ms: 2, dist: pareto, min_us: 30}},"
                                     " {host: 1, app_late_us: 5, ack_delay_us: 7, rx_ring: 64}]\n", "t");
  REQUIRE(s.hosts.size() == 2);
  CHECK(s.hosts[0].host == -1);
  CHECK(s.hosts[0].stall.dist == StallSpec::Dist::kPareto);
  CHECK(s.hosts[0].stall.min_ns == 30'000);
  CHECK(s.hosts[1].host == 1);
  CHECK(s.hosts[1].app_late_ns == 5'000);
  CHECK(s.hosts[1].ack_delay_ns == 7'000);
  CHECK(s.hosts[1].rx_ring == 64);
  CHECK_THROWS_WITH(parse_scenario(base + "hosts: [{host: 0, stall: {dist: gamma}}]\n", "t"),
                    Catch::Contains("stall.dist"));
  CHECK_THROWS_WITH(parse_scenario(base + "hosts: [{host: 0, stal: {}}]\n", "t"), Catch::Contains("stal"));
  CHECK_THROWS_WITH(parse_scenario(base + "hosts: [{stall: {}}]\n", "t"), Catch::Contains("hosts[].host"));
  Scenario far = parse_scenario(base + "hosts: [{host: 5, app_late_us: 1}]\n", "t");
  CHECK_THROWS_WITH(Simulation(far, far.policies[0], 1), Catch::Contains("no host 5"));
}

TEST_CASE("jitter-no-failure: the hosts stall, and no live path is taken out") {
  Scenario s = resolve_scenario("jitter-no-failure");
  s.workload.messages = 384;
  for (const char* name : {"rr-health", "rr-health-credit", "rr-credit-mitig"}) {
    INFO(name);
    RunResult r = run_policy(s, name);
    CHECK(r.data_ok);
    CHECK(r.host_stalls > 10);
    CHECK(r.loop_gaps > 0);
    CHECK(r.path_removals == 0);
  }
}

TEST_CASE("path-failure-jitter: the dead path is out within 2 ms and back after the heal, no live path out") {
  Scenario s = resolve_scenario("path-failure-jitter");
  for (const char* name : {"rr-health-credit", "rr-credit-mitig"}) {
    INFO(name);
    RunResult r = run_policy(s, name);
    CHECK(r.data_ok);
    CHECK(r.host_stalls > 10);
    REQUIRE(r.path_removals_per_path.size() == 4);
    CHECK(r.path_removals_per_path[1] >= 1);
    CHECK(r.path_removals_per_path[0] + r.path_removals_per_path[2] + r.path_removals_per_path[3] == 0);
    CHECK(r.first_path_removal_us > 2000);
    CHECK(r.first_path_removal_us < 2000 + 2000);
    CHECK(r.last_path_return_us > 12000);
  }
}

TEST_CASE("lossy-sparse-paths: random losses on sparse paths take no path out") {
  // Seed 2 of the half-length run: the rules before (silence from a
  // path's first unanswered packet) took path 2 out 4 times here.
  Scenario s = resolve_scenario("lossy-sparse-paths");
  s.workload.messages = 4096;
  s.seed = 2;
  RunResult r = run_policy(s, "rr-credit");
  CHECK(r.data_ok);
  CHECK(r.host_stalls > 10);
  REQUIRE(r.path_lost_fwd.size() == 4);
  CHECK(r.path_lost_fwd[2] > 200);  // the lossy path lost packets...
  CHECK(r.path_removals == 0);      // ...and stayed in
}
