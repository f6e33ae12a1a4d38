// The DPU in the loop: tandem-sim with each server's agent (dpu/) and each
// RNIC's level-2 table and channel (rnic/table) between a connection and its
// first byte.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "rnic/sim/report.h"
#include "rnic/sim/simulation.h"
#include "sim/dpu_gate.h"

using namespace tandem;
using rnic::sim::RunResult;
using rnic::sim::Scenario;

namespace {

// `servers` x `rnics` RNICs on a leaf-spine (a leaf per server), 100 Gb/s.
std::string topology(uint32_t servers, uint32_t rnics) {
  std::ostringstream y;
  y << "topology: {kind: leaf_spine, hosts_per_leaf: " << rnics << ", leaves: " << servers
    << ", spines: 2, host_link: {rate_gbps: 100, delay_us: 1}, fabric_link: {rate_gbps: 100, delay_us: 1}}\n";
  return y.str();
}

nlohmann::json run(const std::string& yaml, uint64_t seed = 1) {
  const Scenario s = rnic::sim::parse_scenario(yaml, "test");
  const auto results = rnic::sim::run_scenario(s, seed, sim::dpu_gate_factory());
  return nlohmann::json::parse(rnic::sim::results_json(s, seed, results).dump());
}

}  // namespace

TEST_CASE("N misses at once behind one agent of service time S wait (N - 1) S / 2 on average") {
  // One server of 64 RNICs: host 0 opens a connection to each of the other
  // 63 at t = 200 us. Host 0 misses 63 routes, each peer one back: 126
  // punts reach the agent at the same instant (no channel serialisation, no
  // other agent costs), which resolves them one at a time in S = 10 us. The
  // k-th waits (k - 1) S: the mean is (126 - 1) * 10 / 2 = 625 us.
  const std::string yaml = "name: dd1\nstop_us: 100000\n" + topology(1, 64) +
                           "workload: {kind: incast, senders: 63, receiver: 0, size: {dist: fixed, bytes: 4096}, "
                           "messages: 1, outstanding: 1, start_us: 200}\n"
                           "transport: {mtu: 4096}\n"
                           "policies: [{name: base}]\n"
                           "dpu: {rnics_per_server: 64, table_capacity: 1024, resolve_us: 10, event_us: 0, "
                           "command_us: 0, channel: {latency_us: 1, gbps: 0}}\n";
  const nlohmann::json j = run(yaml);
  const nlohmann::json& r = j["results"][0];
  const nlohmann::json& d = r["dpu"];
  CHECK(r["data_ok"] == true);
  CHECK(d["punts"] == 126);
  CHECK(d["resolved"] == 126);
  CHECK(d["agent_queue_max"] == 126);
  const double expected = (126 - 1) * 10.0 / 2;
  CHECK(d["agent_wait_us_mean"].get<double>() == Approx(expected).epsilon(0.05));
  CHECK(d["agent_wait_us_max"].get<double>() == Approx(125 * 10.0).epsilon(0.05));
  // A connection needs both of its routes: the last one resolved ends the wait.
  CHECK(d["route_wait_us_max"].get<double>() >= 1250);
  CHECK(d["conns_released"] == 63);
}

TEST_CASE("the DPU in the loop is deterministic: the same seed gives the same bytes of JSON") {
  // A leaf per server, 4 servers x 8 RNICs: an all-to-all within groups of
  // 8 hosts (one tenant), so punts cross the channel both ways on every server.
  const std::string yaml = "name: dd2\nstop_us: 100000\n" + topology(4, 8) +
                           "workload: {kind: all_to_all, group: 8, size: {dist: fixed, bytes: 8192}, "
                           "messages: 2, outstanding: 1, start_us: 50}\n"
                           "transport: {mtu: 4096}\n"
                           "policies: [{name: base}]\n"
                           "dpu: {rnics_per_server: 8, table_capacity: 1024, resolve_us: 2, "
                           "channel: {latency_us: 1, gbps: 16}}\n";
  const nlohmann::json a = run(yaml, 7);
  const nlohmann::json b = run(yaml, 7);
  CHECK(a["results"][0]["data_ok"] == true);
  CHECK(a["results"][0]["dpu"]["punts"].get<uint64_t>() > 0);
  CHECK(a.dump() == b.dump());
}

TEST_CASE("a scenario without a dpu: section runs with the DPU model as without it") {
  // tandem-sim always passes the DPU model's factory; every built-in scenario
  // but the DPU ones has no dpu: section, and once failed "dpu.dpu must be a mapping".
  const std::string yaml = "name: nodpu\nstop_us: 100000\n" + topology(2, 2) +
                           "workload: {kind: incast, senders: 3, receiver: 0, size: {dist: fixed, bytes: 65536}, "
                           "messages: 2, outstanding: 1}\n"
                           "policies: [{name: base}]\n";
  const Scenario s = rnic::sim::parse_scenario(yaml, "test");
  const auto with = rnic::sim::run_scenario(s, 1, sim::dpu_gate_factory());
  const auto without = rnic::sim::run_scenario(s, 1);
  CHECK(rnic::sim::results_json(s, 1, with).dump() == rnic::sim::results_json(s, 1, without).dump());
  CHECK(nlohmann::json::parse(rnic::sim::results_json(s, 1, with).dump())["results"][0]["data_ok"] == true);
}
