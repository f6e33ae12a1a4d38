// The round_robin spraying policy and its path health on their own:
// deterministic feedback in, expected path choices out.
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "rnic/core/path_round_robin.h"
#include "rnic/core/path_single.h"
#include "rnic/core/policy_factory.h"

using namespace tandem::rnic;

namespace {

PathRoundRobin make_rr(uint32_t n) {
  PathRoundRobin p;
  p.reset(PathPolicyParams{0x123, 7, n});
  return p;
}

uint32_t index_of(const std::vector<uint16_t>& ports, uint16_t port) {
  for (uint32_t i = 0; i < ports.size(); ++i)
    if (ports[i] == port) return i;
  return 999;
}

}  // namespace

TEST_CASE("round_robin cycles through num_paths distinct source ports in order") {
  auto p = make_rr(4);
  std::vector<uint16_t> first;
  for (uint32_t i = 0; i < 4; ++i) first.push_back(p.choose(i, false, 1000));
  CHECK(std::set<uint16_t>(first.begin(), first.end()).size() == 4);
  for (uint32_t i = 0; i < 12; ++i) CHECK(p.choose(i, false, 1000) == first[i % 4]);
  for (uint16_t port : first) CHECK(port >= 0xC000);
  for (uint32_t i = 0; i < 4; ++i) CHECK(p.path_stats(i).pkts == 4);
}

TEST_CASE("round_robin with the same QPN and seed gives the same path set") {
  auto a = make_rr(8), b = make_rr(8);
  for (uint32_t i = 0; i < 16; ++i) CHECK(a.choose(i, false, 0) == b.choose(i, false, 0));
  PathRoundRobin c;
  c.reset(PathPolicyParams{0x123, 8, 8});
  bool differs = false;
  for (uint32_t i = 0; i < 8; ++i) differs |= a.choose(i, false, 0) != c.choose(i, false, 0);
  CHECK(differs);
}

TEST_CASE("path health removes a path after consecutive losses and skips it") {
  auto p = make_rr(4);
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < 4; ++i) ports.push_back(p.choose(i, false, 1000));
  for (uint16_t port : ports) p.on_ack(port, 10'000, 20'000);
  // Two losses on path 2 do not remove it, the third does.
  p.on_loss(ports[2], 30'000);
  p.on_loss(ports[2], 30'000);
  CHECK(p.health().up(2));
  p.on_loss(ports[2], 30'000);
  CHECK_FALSE(p.health().up(2));
  CHECK(p.path_stats(2).removals == 1);
  CHECK(p.path_stats(2).first_removed_ns == 30'000);
  // Until a probe is due, path 2 is never chosen.
  for (uint32_t i = 0; i < 30; ++i) CHECK(p.choose(i, false, 31'000) != ports[2]);
}

TEST_CASE("an acknowledgement between losses resets the loss count") {
  auto p = make_rr(2);
  const uint16_t a = p.choose(0, false, 0);
  p.on_loss(a, 10);
  p.on_loss(a, 10);
  p.on_ack(a, 5'000, 20);
  p.on_loss(a, 30);
  p.on_loss(a, 30);
  CHECK(p.health().up(0));
}

TEST_CASE("a removed path is probed after the probe interval and returns on its ack") {
  auto p = make_rr(4);
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < 4; ++i) ports.push_back(p.choose(i, false, 1000));
  for (uint16_t port : ports) p.on_ack(port, 10'000, 20'000);
  for (int k = 0; k < 3; ++k) p.on_loss(ports[1], 50'000);
  REQUIRE_FALSE(p.health().up(1));
  const uint64_t probe_at = 50'000 + p.health().probe_interval_ns();
  // Just before the interval: no probe; at it: exactly one packet on path 1.
  for (uint32_t i = 0; i < 8; ++i) CHECK(p.choose(i, false, probe_at - 1) != ports[1]);
  CHECK(p.choose(0, false, probe_at) == ports[1]);
  for (uint32_t i = 0; i < 8; ++i) CHECK(p.choose(i, false, probe_at + 10) != ports[1]);
  // The probe is acknowledged: back in the rotation.
  p.on_ack(ports[1], 12'000, probe_at + 12'000);
  CHECK(p.health().up(1));
  CHECK(p.path_stats(1).returns == 1);
  std::set<uint32_t> seen;
  for (uint32_t i = 0; i < 4; ++i) seen.insert(index_of(ports, p.choose(i, false, probe_at + 13'000)));
  CHECK(seen.size() == 4);
}

TEST_CASE("a retransmission is never the probe of a removed path: new data probes") {
  auto p = make_rr(4);
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < 4; ++i) ports.push_back(p.choose(i, false, 1000));
  for (uint16_t port : ports) p.on_ack(port, 10'000, 20'000);
  for (int k = 0; k < 3; ++k) p.on_loss(ports[2], 50'000);
  REQUIRE_FALSE(p.health().up(2));
  const uint64_t probe_at = 50'000 + p.health().probe_interval_ns();
  // Due for a probe, but the packets are retransmissions (an RTO's, say):
  // sent on live paths, or the dead path loses them again.
  for (uint32_t i = 0; i < 8; ++i) CHECK(p.choose(i, true, probe_at) != ports[2]);
  // The next new packet is the probe.
  CHECK(p.choose(9, false, probe_at) == ports[2]);
}

TEST_CASE("a path that stops answering is removed after its silence time") {
  auto p = make_rr(2);
  const uint16_t a = p.choose(0, false, 1'000);
  const uint16_t b = p.choose(1, false, 1'000);
  p.on_ack(a, 10'000, 11'000);
  p.on_ack(b, 10'000, 11'000);
  // Path b carries packets from t=20us on and never answers; a keeps answering.
  uint64_t t = 20'000;
  for (; t < 20'000 + 2 * p.health().silence_ns(); t += 1'000) {
    const uint16_t port = p.choose(0, false, t);
    if (port == a) p.on_ack(a, 10'000, t + 1);
  }
  CHECK(p.health().up(0));
  CHECK_FALSE(p.health().up(1));
  const uint64_t removed = p.path_stats(1).first_removed_ns;
  CHECK(removed > 20'000);
  CHECK(removed <= 20'000 + p.health().silence_ns() + 2'000);
}

TEST_CASE("a QP that never gets feedback (a responder's ACK path) keeps all paths") {
  auto p = make_rr(4);
  for (uint64_t t = 0; t < 10'000'000; t += 10'000) p.choose(0, false, t);
  CHECK(p.health().up_count() == 4);
}

TEST_CASE("losses on most paths at once (congestion, reordering) take no path out") {
  auto p = make_rr(4);
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < 4; ++i) ports.push_back(p.choose(i, false, 0));
  for (int k = 0; k < 5; ++k)
    for (uint32_t i = 0; i < 3; ++i) p.on_loss(ports[i], 100);
  CHECK(p.health().up_count() == 4);
  // Path 3 alone losing while the others are fine again: out.
  for (uint32_t i = 0; i < 3; ++i) p.on_ack(ports[i], 5'000, 200);
  for (int k = 0; k < 3; ++k) p.on_loss(ports[3], 300);
  CHECK_FALSE(p.health().up(3));
}

TEST_CASE("if every path is out, round robin goes on over all of them") {
  auto p = make_rr(2);
  const uint16_t a = p.choose(0, false, 0), b = p.choose(1, false, 0);
  p.on_ack(a, 5'000, 10);
  p.on_ack(b, 5'000, 10);
  for (int k = 0; k < 3; ++k) p.on_loss(a, 100);  // a alone: out
  REQUIRE_FALSE(p.health().up(0));
  for (int k = 0; k < 3; ++k) p.on_loss(b, 200);  // b is the only live path left
  REQUIRE(p.health().up_count() == 0);
  std::set<uint16_t> used;
  for (uint32_t i = 0; i < 4; ++i) used.insert(p.choose(i, false, 300));
  CHECK(used.size() == 2);
}

TEST_CASE("single keeps one port and counts its packets") {
  PathSingle s;
  s.reset(PathPolicyParams{0x200, 3, 4});
  const uint16_t port = s.choose(0, false, 0);
  for (uint32_t i = 1; i < 10; ++i) CHECK(s.choose(i, false, 0) == port);
  CHECK(s.path_stats(0).pkts == 10);
}

TEST_CASE("the factory knows every policy name and refuses others") {
  for (const char* n : {"single", "round_robin", "adaptive"}) CHECK(make_path_policy(n) != nullptr);
  for (const char* n : {"fixed_window", "credit", "dcqcn"}) CHECK(make_cc_policy(n) != nullptr);
  CHECK(make_path_policy("nope") == nullptr);
  CHECK(make_cc_policy("nope") == nullptr);
}
