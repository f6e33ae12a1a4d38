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

// Four paths, every one answered at 20 us, then three losses on path `out`
// at 50 us (each sent at 1 us, before the answered packets): path `out` is
// taken out. Returns the paths' ports.
std::vector<uint16_t> remove_one(PathRoundRobin& p, uint32_t out) {
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < 4; ++i) ports.push_back(p.choose(i, false, 1000));
  for (uint16_t port : ports) p.on_ack(port, 10'000, 20'000);
  for (int k = 0; k < 3; ++k) p.on_loss(ports[out], 1'000, 50'000);
  REQUIRE_FALSE(p.health().up(out));
  return ports;
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
  // Packets sent at 10 us on every path are acknowledged, so a path's
  // packets sent before that and reported lost were lost, not late.
  for (uint16_t port : ports) p.on_ack(port, 10'000, 20'000);
  // Two losses on path 2 do not remove it, the third does.
  p.on_loss(ports[2], 1'000, 30'000);
  p.on_loss(ports[2], 1'000, 30'000);
  CHECK(p.health().up(2));
  p.on_loss(ports[2], 1'000, 30'000);
  CHECK_FALSE(p.health().up(2));
  CHECK(p.path_stats(2).removals == 1);
  CHECK(p.path_stats(2).confirmed_losses == 3);
  CHECK(p.path_stats(2).first_removed_ns == 30'000);
  // Until a probe is due, path 2 is never chosen.
  for (uint32_t i = 0; i < 30; ++i) CHECK(p.choose(i, false, 31'000) != ports[2]);
  // What telemetry shows (flow show): each path's RTT sample and whether it is in the set.
  CHECK(p.path_stats(2).up == false);
  CHECK(p.path_stats(1).up == true);
  CHECK(p.path_stats(1).srtt_ns == 10'000);
}

TEST_CASE("a loss counts against a path only once a packet sent later on it was acknowledged") {
  auto p = make_rr(4);
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < 4; ++i) ports.push_back(p.choose(i, false, 1'000));
  for (uint16_t port : ports) p.on_ack(port, 9'000, 10'000);  // sent at 1 us
  // Path 3 is slow: its packets sent at 20-30 us are overtaken on the other
  // paths and reported lost, but nothing sent later on path 3 has arrived
  // yet: they may be late. Ten such reports take nothing out.
  for (uint64_t sent = 20'000; sent < 30'000; sent += 1'000) p.on_loss(ports[3], sent, 60'000);
  CHECK(p.health().up(3));
  CHECK(p.path_stats(3).losses == 10);
  CHECK(p.path_stats(3).confirmed_losses == 0);
  // A packet sent on path 3 at 40 us arrives: the ones before it were lost.
  p.on_ack(ports[3], 30'000, 70'000);
  for (uint64_t sent = 31'000; sent < 34'000; sent += 1'000) p.on_loss(ports[3], sent, 70'000);
  CHECK_FALSE(p.health().up(3));
  CHECK(p.path_stats(3).confirmed_losses == 3);
}

TEST_CASE("an acknowledgement of a packet sent after the losses resets the loss count") {
  auto p = make_rr(2);
  const uint16_t a = p.choose(0, false, 0);
  p.on_ack(a, 5'000, 10'000);  // sent at 5 us
  p.on_loss(a, 1'000, 10'000);
  p.on_loss(a, 2'000, 10'000);
  p.on_ack(a, 4'000, 11'000);  // sent at 7 us, after both losses
  p.on_ack(a, 1'000, 20'000);  // sent at 19 us
  p.on_loss(a, 12'000, 20'000);
  p.on_loss(a, 13'000, 20'000);
  CHECK(p.health().up(0));
  // An acknowledgement of a packet sent before the losses does not break the run.
  p.on_ack(a, 10'000, 21'000);  // sent at 11 us
  p.on_loss(a, 14'000, 21'000);
  CHECK_FALSE(p.health().up(0));
}

TEST_CASE("a removed path is probed after the probe interval and returns on its ack") {
  auto p = make_rr(4);
  const std::vector<uint16_t> ports = remove_one(p, 1);
  const uint64_t probe_at = 50'000 + p.health().probe_interval_ns(1);
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

TEST_CASE("a late acknowledgement of a packet sent before the removal does not bring a path back") {
  auto p = make_rr(4);
  const std::vector<uint16_t> ports = remove_one(p, 1);
  // Held back behind a gap, the cumulative ACK of a packet path 1 carried
  // at 15 us arrives now: it says nothing about path 1 since 50 us.
  p.on_ack(ports[1], 45'000, 60'000);
  CHECK_FALSE(p.health().up(1));
  CHECK(p.path_stats(1).returns == 0);
}

TEST_CASE("a retransmission is never the probe of a removed path: new data probes") {
  auto p = make_rr(4);
  const std::vector<uint16_t> ports = remove_one(p, 2);
  const uint64_t probe_at = 50'000 + p.health().probe_interval_ns(2);
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
  for (; t < 20'000 + 2 * p.health().silence_ns(1); t += 1'000) {
    const uint16_t port = p.choose(0, false, t);
    if (port == a) p.on_ack(a, 10'000, t + 1);
  }
  CHECK(p.health().up(0));
  CHECK_FALSE(p.health().up(1));
  CHECK(p.path_stats(1).silent_removals == 1);
  const uint64_t removed = p.path_stats(1).first_removed_ns;
  CHECK(removed > 20'000);
  // Its deadline counts from its third unanswered packet (a packet on it
  // every 2 us), plus a packet time.
  CHECK(removed <= 20'000 + 2 * 2'000 + p.health().silence_ns(1) + 2'000);
}

TEST_CASE("silence is judged against the path's own RTT, not the fastest path's") {
  auto p = make_rr(2);
  const uint16_t fast = p.choose(0, false, 0);
  const uint16_t slow = p.choose(1, false, 0);
  // The slow path answers in 300 us, the fast one in 10 us (most samples).
  uint64_t t = 1'000'000;
  for (int k = 0; k < 8; ++k, t += 1'000) p.on_ack(slow, 300'000, t);
  for (int k = 0; k < 40; ++k, t += 1'000) p.on_ack(fast, 10'000, t);
  CHECK(p.health().silence_ns(1) >= 4 * 290'000);
  // The slow path's packet is out for 600 us while the fast path answers:
  // slow, not silent (a single RTT for all paths would say 4 x ~50 us).
  const uint64_t start = t;
  for (; t < start + 600'000; t += 1'000) {
    if (p.choose(0, false, t) == fast) p.on_ack(fast, 10'000, t + 10'000);
  }
  CHECK(p.health().up(1));
  CHECK(p.path_stats(1).removals == 0);
}

TEST_CASE("a stalled receiver silences every path at once and takes none out") {
  auto p = make_rr(4);
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < 4; ++i) ports.push_back(p.choose(i, false, 1'000));
  for (uint16_t port : ports) p.on_ack(port, 20'000, 21'000);
  // Packets go out on every path from 30 us; nothing is acknowledged for
  // 10 ms (the peer's process is descheduled, its NIC sleeps).
  for (uint64_t t = 30'000; t < 10'000'000; t += 5'000) p.choose(0, false, t);
  CHECK(p.health().up_count() == 4);
  for (uint32_t i = 0; i < 4; ++i) CHECK(p.path_stats(i).removals == 0);
}

TEST_CASE("one path answering while the others' packets are overtaken takes no path out") {
  auto p = make_rr(4);
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < 4; ++i) ports.push_back(p.choose(i, false, 1'000));
  for (uint16_t port : ports) p.on_ack(port, 20'000, 21'000);
  // A healed, empty path 0 overtakes three queued ones: only path 0's
  // packets are acknowledged (the others' are reported lost and resent,
  // which tells nothing about their paths) for 2 ms.
  for (uint64_t t = 30'000; t < 2'000'000; t += 1'000) {
    const uint16_t port = p.choose(0, false, t);
    if (port == ports[0]) p.on_ack(port, 5'000, t + 5'000);
    else p.on_loss(port, t, t + 30'000);
  }
  CHECK(p.health().up_count() == 4);
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
  for (uint16_t port : ports) p.on_ack(port, 1'000, 10'000);  // sent at 9 us
  for (int k = 0; k < 5; ++k)
    for (uint32_t i = 0; i < 3; ++i) p.on_loss(ports[i], 100, 10'100);
  CHECK(p.health().up_count() == 4);
  // Path 3 alone losing while the others are fine again: out.
  for (uint32_t i = 0; i < 3; ++i) p.on_ack(ports[i], 500, 10'200);
  for (int k = 0; k < 3; ++k) p.on_loss(ports[3], 100, 10'300);
  CHECK_FALSE(p.health().up(3));
}

TEST_CASE("if every path is out, round robin goes on over all of them") {
  auto p = make_rr(2);
  const uint16_t a = p.choose(0, false, 0), b = p.choose(1, false, 0);
  p.on_ack(a, 5'000, 10'000);
  p.on_ack(b, 5'000, 10'000);
  for (int k = 0; k < 3; ++k) p.on_loss(a, 100, 10'100);  // a alone: out
  REQUIRE_FALSE(p.health().up(0));
  for (int k = 0; k < 3; ++k) p.on_loss(b, 100, 10'200);  // b is the only live path left
  REQUIRE(p.health().up_count() == 0);
  std::set<uint16_t> used;
  for (uint32_t i = 0; i < 4; ++i) used.insert(p.choose(i, false, 10'300));
  CHECK(used.size() == 2);
}

// A responder's ACK paths: its policy sees the ACKs it sends (choose with
// the PSN an ACK acknowledges) and the requester's duplicates.
TEST_CASE("a responder takes an ACK path out when only its ACKs told of resent requests, then uses it again") {
  auto p = make_rr(4);
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < 4; ++i) ports.push_back(p.choose(10 + i, false, 1'000));
  // The newest ACK goes on path 3 (the ACKs' PSN only grows); the requester
  // resends that PSN well after: only path 3 had said it arrived. Three in a
  // row on path 3 take it out (one could be a retransmission that crossed
  // a live ACK).
  auto lose_on_3 = [&](uint32_t& psn, uint64_t t) {
    while (p.choose(psn, false, t) != ports[3]) ++psn;
    p.on_duplicate(psn, t + 200'000);
    ++psn;
  };
  uint32_t psn = 20;
  uint64_t t = 10'000;
  for (int k = 0; k < 2; ++k, t += 300'000) lose_on_3(psn, t);
  CHECK(p.health().up(3));
  CHECK(p.path_stats(3).ack_losses == 2);
  lose_on_3(psn, t);
  const uint64_t out_at = t + 200'000;
  REQUIRE_FALSE(p.health().up(3));
  CHECK(p.path_stats(3).ack_losses == 3);
  for (uint32_t i = 0; i < 30; ++i) CHECK(p.choose(psn + i, false, out_at + 1'000) != ports[3]);
  // No acknowledgement ever comes back for an ACK: after its hold the path
  // is used again.
  const uint64_t back = out_at + PathHealth::kAckHoldNs;
  std::set<uint16_t> used;
  for (uint32_t i = 0; i < 4; ++i) used.insert(p.choose(psn + 40 + i, false, back));
  CHECK(used.count(ports[3]) == 1);
  CHECK(p.health().up(3));
  // Losing again soon after its return: held twice as long.
  psn += 50;
  t = back + 1'000;
  for (int k = 0; k < 3; ++k, t += 1'000) lose_on_3(psn, t);
  const uint64_t out2 = t - 1'000 + 200'000;
  REQUIRE_FALSE(p.health().up(3));
  for (uint32_t i = 0; i < 8; ++i)
    CHECK(p.choose(psn + 100 + i, false, out2 + PathHealth::kAckHoldNs + 1'000) != ports[3]);
  p.choose(psn + 200, false, out2 + 2 * PathHealth::kAckHoldNs);
  CHECK(p.health().up(3));
  CHECK(p.path_stats(3).removals == 2);
}

TEST_CASE("lost ACKs blamed on different paths take no ACK path out") {
  auto p = make_rr(4);
  uint32_t psn = 10;
  uint64_t t = 1'000;
  // Each duplicate lands on whichever path carried the newest ACK, in turn.
  for (int k = 0; k < 12; ++k, t += 300'000) {
    p.choose(psn, false, t);
    p.on_duplicate(psn, t + 200'000);
    ++psn;
  }
  CHECK(p.health().up_count() == 4);
}

TEST_CASE("a duplicate blames no ACK path when several told of it or the ACK may still be on its way") {
  auto p = make_rr(4);
  for (uint32_t i = 0; i < 4; ++i) p.choose(10 + i, false, 1'000);  // ACKs of PSNs 10..13
  p.on_duplicate(11, 200'000);  // paths 1, 2 and 3 all acknowledged 11
  CHECK(p.health().up_count() == 4);
  p.choose(20, false, 300'000);  // path 0 acknowledges up to 20
  p.on_duplicate(20, 310'000);   // 10 us later: crossed on the wire, not lost
  CHECK(p.health().up_count() == 4);
  for (uint32_t i = 0; i < 4; ++i) CHECK(p.path_stats(i).ack_losses == 0);
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
  for (const char* n : {"fixed_window", "credit", "dcqcn", "hpcc"}) CHECK(make_cc_policy(n) != nullptr);
  CHECK(make_path_policy("nope") == nullptr);
  CHECK(make_cc_policy("nope") == nullptr);
}
