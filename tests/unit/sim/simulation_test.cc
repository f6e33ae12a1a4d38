#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "rnic/sim/builtin_scenarios.h"
#include "rnic/sim/report.h"
#include "rnic/sim/run.h"
#include "rnic/sim/simulation.h"

using namespace tandem::rnic::sim;

namespace {

// Two hosts over paths of 2..50 us with the given loss, a small bulk WRITE
// workload, and both recovery modes with per-packet spraying.
std::string two_host_yaml(double loss, const std::string& op = "write", uint32_t messages = 16) {
  std::ostringstream y;
  y << "name: t\nstop_us: 5000000\n"
    << "topology:\n  kind: parallel\n  host_link: {rate_gbps: 100, delay_us: 1}\n"
    << "  paths:\n";
  for (int d : {2, 10, 25, 50}) y << "    - {delay_us: " << d << ", loss: " << loss << "}\n";
  y << "workload: {kind: bulk, op: " << op << ", size: {dist: uniform, min_bytes: 1, max_bytes: 65536}, messages: "
    << messages << ", outstanding: 3}\n"
    << "transport: {mtu: 1024, timeout_us: 300, nic_spray: round_robin}\n"
    << "policies:\n  - {name: gbn, mode: go_back_n}\n  - {name: irn, mode: irn, reorder_delay_us: 60}\n";
  return y.str();
}

std::string dump(const Scenario& s, uint64_t seed) { return results_json(s, seed, run_scenario(s, seed)).dump(); }

}  // namespace

TEST_CASE("the same seed gives bit-identical results and another seed does not") {
  Scenario s = parse_scenario(two_host_yaml(0.01), "t");
  const std::string a = dump(s, 11);
  const std::string b = dump(s, 11);
  const std::string c = dump(s, 12);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("a leaf-spine run is deterministic too, with spraying over every spine") {
  Scenario s = resolve_scenario("permutation-websearch");
  s.workload.messages = 6;
  const std::string a = dump(s, 5);
  CHECK(a == dump(s, 5));
  CHECK(a != dump(s, 6));
  Simulation sim(s, s.policies[1], 5);  // irn-sprayed
  RunResult r = sim.run();
  CHECK(r.data_ok);
  // Every leaf-to-spine uplink carried traffic.
  for (const NamedLink& l : sim.fabric().links()) {
    if (l.name.rfind("leaf", 0) == 0) CHECK(sim.fabric().ports()[l.ports[0]].stats.tx_frames > 0);
  }
}

TEST_CASE("every message completes with identical bytes under loss and a 2-50 us delay spread") {
  for (double loss : {0.001, 0.01, 0.05}) {
    for (const char* op : {"write", "send", "read"}) {
      Scenario s = parse_scenario(two_host_yaml(loss, op), "t");
      for (const RunResult& r : run_scenario(s, 3)) {
        INFO("loss " << loss << " op " << op << " policy " << r.policy << " stop " << r.stop_reason);
        CHECK(r.completed == r.messages);
        CHECK(r.data_mismatches == 0);
        CHECK(r.error_completions == 0);
        CHECK(r.data_ok);
        if (loss >= 0.01 && std::string(op) != "read") CHECK(r.retx_bytes > 0);  // READ resends requests, which carry no payload
      }
    }
  }
}

TEST_CASE("spraying over 4 paths of different delay makes the receiver see reordering") {
  Scenario s = parse_scenario(two_host_yaml(0), "t");
  for (const RunResult& r : run_scenario(s, 1)) {
    REQUIRE(r.path_frames.size() == 4);
    for (uint64_t n : r.path_frames) CHECK(n > 0);
    if (r.policy == "irn") {
      CHECK(r.reorder_depth_max > 0);
      CHECK(r.retx_bytes == 0);  // no loss: reordering alone must not cause retransmission
      CHECK(r.timeouts == 0);
    }
    CHECK(r.data_ok);
    CHECK(r.goodput_gbps < 100.0);  // the NIC never beats its 100 Gb/s line rate
  }
}

TEST_CASE("in IRN a message whose last packet overtakes the first completes without a timeout") {
  // Two packets per message, the first on a 50 us path, the second on a 2 us one.
  Scenario s = parse_scenario(
      "name: t\ntopology: {kind: parallel, paths: [{delay_us: 2}, {delay_us: 50}]}\n"
      "workload: {kind: bulk, size: {dist: fixed, bytes: 8192}, messages: 10, outstanding: 1}\n"
      "transport: {nic_spray: round_robin, timeout_us: 1000, mtu: 4096}\n"
      "policies: [{name: irn, mode: irn, reorder_delay_us: 100}]\n",
      "t");
  RunResult r = run_scenario(s, 1).at(0);
  CHECK(r.reorder_depth_max >= 1);
  CHECK(r.timeouts == 0);
  CHECK(r.retx_bytes == 0);
  CHECK(r.fct_us_max < 1000);  // well under the RTO
  CHECK(r.data_ok);
}

TEST_CASE("incast overflows a shallow switch queue, marks ECN, and still delivers every byte") {
  Scenario s = resolve_scenario("incast-leafspine");
  s.workload.messages = 4;
  for (const RunResult& r : run_scenario(s, s.seed)) {
    INFO(r.policy);
    CHECK(r.drops_queue > 0);
    CHECK(r.ecn_marks > 0);
    CHECK(r.max_queue_bytes <= 512 * 1024);
    CHECK(r.data_ok);
  }
}

TEST_CASE("a failed path drops frames and the transport still delivers everything") {
  Scenario s = resolve_scenario("failover-4paths");
  for (const RunResult& r : run_scenario(s, s.seed)) {
    INFO(r.policy);
    CHECK(r.drops_link_down > 0);
    CHECK(r.data_ok);
  }
}

TEST_CASE("every built-in scenario parses and names a unique scenario") {
  std::ostringstream out;
  CHECK(list_scenarios(out) == 0);
  for (const BuiltinScenario& b : builtin_scenarios()) {
    Scenario s = parse_scenario(b.yaml, b.name);
    CHECK(s.name == b.name);
    CHECK(out.str().find(s.name) != std::string::npos);
  }
  CHECK(builtin_scenarios().size() >= 5);
}

TEST_CASE("a bad scenario file gives one error line and exit code 2") {
  const std::string path = "/tmp/tandem-sim-test-bad.yaml";
  {
    std::ofstream f(path);
    f << "name: bad\ntopology: {kind: parallel, paths: []}\n";
  }
  std::ostringstream out, err;
  CHECK(run(RunOptions{path, {}, true}, out, err) == 2);
  CHECK(out.str().empty());
  const std::string e = err.str();
  CHECK(e.find("topology.paths") != std::string::npos);
  CHECK(std::count(e.begin(), e.end(), '\n') == 1);
  std::ostringstream out2, err2;
  CHECK(run(RunOptions{"no-such-scenario", {}, false}, out2, err2) == 2);
  // An unknown policy option is caught before anything runs.
  {
    std::ofstream f(path);
    f << two_host_yaml(0) << "";
  }
  Scenario s = parse_scenario(two_host_yaml(0), "t");
  s.policies[0].options["colour"] = "blue";
  CHECK_THROWS_AS(Simulation(s, s.policies[0], 1), ScenarioError);
}
