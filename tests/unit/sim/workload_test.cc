#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "rnic/sim/scenario.h"
#include "rnic/sim/workload.h"

using namespace tandem::rnic::sim;

TEST_CASE("the message pattern depends on source, message and offset, and any window matches") {
  std::vector<uint8_t> whole(10000);
  fill_pattern(whole.data(), 3, 17, 0, whole.size());
  CHECK(check_pattern(whole.data(), 3, 17, 0, whole.size()) == -1);
  // A window filled on its own equals the same bytes of the whole message.
  std::vector<uint8_t> part(777);
  fill_pattern(part.data(), 3, 17, 1234, part.size());
  CHECK(std::equal(part.begin(), part.end(), whole.begin() + 1234));
  CHECK(check_pattern(whole.data(), 4, 17, 0, whole.size()) == 0);
  CHECK(check_pattern(whole.data(), 3, 18, 0, whole.size()) == 0);
  whole[5000] ^= 1;
  CHECK(check_pattern(whole.data(), 3, 17, 0, whole.size()) == 5000);
}

TEST_CASE("message sizes follow the configured distribution") {
  Rng rng(9);
  SizeDist u;
  u.kind = SizeDist::Kind::kUniform;
  u.min_bytes = 100;
  u.max_bytes = 200;
  for (int i = 0; i < 1000; ++i) {
    uint64_t s = sample_size(u, rng);
    CHECK(s >= 100);
    CHECK(s <= 200);
  }
  SizeDist w;
  w.kind = SizeDist::Kind::kWebSearch;
  w.max_bytes = 30'000'000;
  int small = 0, large = 0;
  for (int i = 0; i < 10000; ++i) {
    uint64_t s = sample_size(w, rng);
    small += s <= 80000;
    large += s > 10'000'000;
  }
  // The web-search CDF: 53% of flows up to 80 KB, 3% above 10 MB.
  CHECK(std::abs(small - 5300) < 250);
  CHECK(std::abs(large - 300) < 80);
}

TEST_CASE("a permutation sends every host to exactly one other host") {
  WorkloadSpec w;
  w.kind = WorkloadSpec::Kind::kPermutation;
  Rng rng(5);
  auto flows = make_flows(w, 16, rng);
  REQUIRE(flows.size() == 16);
  std::set<uint32_t> dsts;
  for (auto& f : flows) {
    CHECK(f.src != f.dst);
    dsts.insert(f.dst);
    CHECK(f.sizes.size() == w.messages);
  }
  CHECK(dsts.size() == 16);
}

TEST_CASE("incast and all-to-all produce the expected flows") {
  WorkloadSpec w;
  Rng rng(5);
  w.kind = WorkloadSpec::Kind::kIncast;
  w.senders = 5;
  w.receiver = 2;
  auto inc = make_flows(w, 8, rng);
  REQUIRE(inc.size() == 5);
  for (auto& f : inc) CHECK(f.dst == 2);
  w.kind = WorkloadSpec::Kind::kAllToAll;
  CHECK(make_flows(w, 4, rng).size() == 12);
  w.kind = WorkloadSpec::Kind::kIncast;
  w.senders = 8;
  CHECK_THROWS_AS(make_flows(w, 8, rng), ScenarioError);
}

TEST_CASE("a bad scenario is rejected with a message naming the problem") {
  auto msg = [](const std::string& yaml) {
    try {
      parse_scenario(yaml, "x.yaml");
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string ok =
      "name: t\ntopology: {kind: parallel, paths: [{delay_us: 2}]}\n"
      "workload: {kind: bulk}\npolicies: [{name: a}]\n";
  CHECK(msg(ok) == "accepted");
  CHECK(msg("name: t\ntopology: {kind: ring}\n").find("topology.kind") != std::string::npos);
  CHECK(msg(ok + "bogus: 1\n").find("unknown key 'bogus'") != std::string::npos);
  CHECK(msg("name: [unclosed\n").find("x.yaml: ") == 0);
  CHECK(msg("name: t\ntopology: {kind: parallel, paths: [{delay_us: -1}]}\nworkload: {kind: bulk}\n")
            .find("negative") != std::string::npos);
  Scenario s = parse_scenario(ok, "x.yaml");
  CHECK(s.topology.paths.at(0).delay_ns == 2000);
}
