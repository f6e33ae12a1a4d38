// The DPU in the loop: tandem-sim with each server's agent (dpu/) and each
// RNIC's level-2 table and channel (rnic/table) between a connection and its
// first byte.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "rnic/sim/report.h"
#include "rnic/sim/run.h"
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

namespace {

const nlohmann::json& find_group(const nlohmann::json& dpu, uint32_t g) { return dpu["groups"][g]; }

}  // namespace

TEST_CASE("a collision storm with the RNIC's secret blocks the victim's flows; without it, it scatters") {
  // The built-in dpu-collision-storm: three attackers of 256-entry quotas
  // against RNICs 0 (aimed with the RNIC's own secret), 1 (the unkeyed hash)
  // and 2 (consecutive addresses); victims' incasts into them at 2 ms, and a
  // baseline incast into RNIC 3. Each seed draws other secrets.
  const Scenario s = rnic::sim::resolve_scenario("dpu-collision-storm");
  for (uint64_t seed : {1, 2, 3}) {
    INFO("seed " << seed);
    const auto results = rnic::sim::run_scenario(s, seed, sim::dpu_gate_factory());
    const nlohmann::json j = nlohmann::json::parse(rnic::sim::results_json(s, seed, results).dump());
    const nlohmann::json& d = j["results"][0]["dpu"];
    const nlohmann::json& st = d["storms"];
    REQUIRE(st.size() == 3);
    // Known secret: every address's two buckets are the victim's; its flows
    // fill them within its quota, and the victim's next 15 flows are refused
    // (TABLE_FULL) every time they ask: none starts.
    const nlohmann::json& k = st[0];
    CHECK(k["aim"] == "secret");
    CHECK(k["attacker_installed"].get<uint64_t>() <= 256);
    CHECK(k["attacker_installed"].get<uint64_t>() >= 15 * 8);
    CHECK(k["victim_targets"] == 15);
    CHECK(k["victim_targets_installed"] == 0);
    CHECK(k["victim_conns_started"] == 0);
    CHECK(k["victim_aborted"].get<uint64_t>() >= 15);
    CHECK(k["table_full_buckets"].get<uint64_t>() >= 15);
    CHECK(k["table_full_capacity"] == 0);
    // Nothing the RNIC held when the storm began was evicted.
    CHECK(k["entries_before"].get<uint64_t>() > 0);
    CHECK(k["entries_before_lost"] == 0);
    // The RNIC's own secret scatters addresses aimed with another hash, as it
    // does consecutive ones: the victims start as the baseline's do.
    for (int i : {1, 2}) {
      CHECK(st[i]["attacker_installed"].get<uint64_t>() >= 200);
      CHECK(st[i]["victim_conns_started"] == 15);
      CHECK(st[i]["victim_aborted"] == 0);
      CHECK(st[i]["table_full_buckets"] == 0);
      CHECK(st[i]["victim_ttfb_us_max"].get<double>() < 2 * find_group(d, 4)["ttfb_us_max"].get<double>());
    }
    CHECK(find_group(d, 4)["first_bytes"] == 15);
    CHECK(find_group(d, 0)["first_bytes"] == 16);
    // The bystander starting into RNIC 0 with the victim: its resolutions
    // share transactions with the victim's refused ones, which are split
    // (dpu/channel), so none of its own is refused and all 15 start.
    CHECK(find_group(d, 5)["first_bytes"] == 15);
    CHECK(find_group(d, 5)["aborted"] == 0);
    CHECK(d["refusals_split"].get<uint64_t>() > 0);
  }
}

namespace {

// 2 servers x 8 RNICs: job A (a permutation of 64 KB WRITEs, ~0.7 ms) from
// 50 us, job B from 250 us, while both agents are down from 200 to 500 us.
std::string restart_yaml(const std::string& restarts) {
  return "name: rs\nstop_us: 100000\n" + topology(2, 8) +
         "workloads:\n"
         "  - {kind: permutation, size: {dist: fixed, bytes: 65536}, messages: 100, outstanding: 2, start_us: 50}\n"
         "  - {kind: permutation, size: {dist: fixed, bytes: 16384}, messages: 2, outstanding: 1, start_us: 250}\n"
         "transport: {mtu: 4096}\n"
         "policies: [{name: base}]\n"
         "dpu: {rnics_per_server: 8, table_capacity: 1024, resolve_us: 2, channel: {latency_us: 1, gbps: 64}" +
         restarts + "}\n";
}

}  // namespace

TEST_CASE("a DPU restart: from its store nothing is replayed; with the store lost its RNICs' routes vanish and come back") {
  const nlohmann::json base = run(restart_yaml(""));
  const nlohmann::json j = run(restart_yaml(", restarts: [{server: 0, at_us: 200, down_us: 300, store: kept}, "
                                            "{server: 1, at_us: 200, down_us: 300, store: lost}]"));
  const nlohmann::json& r = j["results"][0];
  const nlohmann::json& d = r["dpu"];
  const nlohmann::json& b = base["results"][0];
  CHECK(b["data_ok"] == true);
  CHECK(r["data_ok"] == true);
  CHECK(b["dpu"]["routes_lost"] == 0);
  REQUIRE(d["restarts"].size() == 2);
  const nlohmann::json& kept = d["restarts"][0];
  const nlohmann::json& lost = d["restarts"][1];
  // Kept: the HELLO digests match, its channels are ACTIVE within two of the
  // loops' 50 us ticks, and the running job never misses its routes.
  CHECK(kept["store"] == "kept");
  CHECK(kept["resync_us"].get<double>() >= 0);
  CHECK(kept["resync_us"].get<double>() <= 110);
  CHECK(kept["routes_lost"] == 0);
  CHECK(kept["route_miss_drops"] == 0);
  CHECK(d["replays"] == 8);  // server 1's eight channels, none of server 0's
  // Lost: the replays wipe its RNICs' tables under job A: each of its eight
  // RNICs sends data and ACKs, so both ends of its connections miss, drop
  // packets, punt, and get their routes back from the agent.
  CHECK(lost["store"] == "lost");
  CHECK(lost["routes_lost"].get<uint64_t>() >= 8);
  CHECK(lost["route_miss_drops"].get<uint64_t>() >= lost["routes_lost"].get<uint64_t>());
  CHECK(lost["route_gone_us_max"].get<double>() > 0);
  CHECK(lost["route_gone_us_max"].get<double>() < 200);
  CHECK(lost["ends_still_waiting"] == 0);
  CHECK(d["conns_still_waiting"] == 0);
  // What the traffic saw: its dropped packets wait for the transport's
  // timeout (1 ms), which no message of the undisturbed run comes near.
  CHECK(r["timeouts"].get<uint64_t>() > 0);
  CHECK(b["timeouts"] == 0);
  CHECK(r["fct_us_max"].get<double>() > 1000);
  CHECK(b["fct_us_max"].get<double>() < 100);
  // Job B's connections through the two servers punted into the outage:
  // the punts are lost with the agents, and they wait for the worker's
  // re-punt (2 ms), not just for the agents' return.
  const nlohmann::json& jb = find_group(d, 1);
  CHECK(jb["first_bytes"] == jb["conns"]);
  CHECK(jb["ttfb_us_max"].get<double>() >= 2000);
  CHECK(find_group(b["dpu"], 1)["ttfb_us_max"].get<double>() < 100);
  CHECK(kept["routes_done_us"].get<double>() >= 2000 - 250);
}

TEST_CASE("churn: 20 jobs, one every 100 us, each waits only for its own punts and leaves its entries behind") {
  // 4 servers x 8 RNICs; job k is a ring of 16 RNICs on servers k % 3 and
  // k % 3 + 1. Each of its servers' agents gets 16 punts (two per RNIC) at
  // its start and resolves one per S = 2 us: the last waits 15 S. Jobs come
  // every 100 us, so no backlog carries over from one to the next.
  std::string w = "workloads:\n";
  for (int k = 0; k < 20; ++k)
    w += "  - {kind: ring, size: {dist: fixed, bytes: 16384}, messages: 2, outstanding: 1, first_host: " +
         std::to_string(8 * (k % 3)) + ", host_count: 16, start_us: " + std::to_string(100 + 100 * k) + "}\n";
  const std::string yaml = "name: churn\nstop_us: 100000\n" + topology(4, 8) + w +
                           "transport: {mtu: 4096}\n"
                           "policies: [{name: base}]\n"
                           "dpu: {rnics_per_server: 8, table_capacity: 1024, resolve_us: 2, event_us: 0, "
                           "command_us: 0, channel: {latency_us: 1, gbps: 0}}\n";
  const nlohmann::json j = run(yaml);
  const nlohmann::json& r = j["results"][0];
  const nlohmann::json& d = r["dpu"];
  CHECK(r["data_ok"] == true);
  REQUIRE(d["groups"].size() == 20);
  for (const auto& g : d["groups"]) {
    INFO("job " << g["group"]);
    CHECK(g["first_bytes"] == 16);
    CHECK(g["punts"] == 32);
    CHECK(g["aborted"] == 0);
    // The 16th punt at an agent waits 15 S = 30 us; channel, commit and the
    // first frame add a few microseconds.
    CHECK(g["ttfb_us_max"].get<double>() >= 30);
    CHECK(g["ttfb_us_max"].get<double>() <= 50);
  }
  CHECK(d["agent_queue_max"] == 16);
  CHECK(d["agent_wait_us_max"].get<double>() == Approx(30).epsilon(0.05));
  // Nothing ages out (issue 32): each job leaves on each of its 16 RNICs a
  // vNIC entry and, per ring neighbour, an egress route and its ingress entry.
  CHECK(d["table_entries"] == 20 * 16 * 5);
}
