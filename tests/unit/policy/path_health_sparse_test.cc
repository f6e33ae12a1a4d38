// Path health on sparse paths (path_health.h), the lab's pattern: 16 paths
// per QP at ~1 Gb/s, so each path carries a packet about every millisecond
// and has it out alone, longer apart than its silence time. A random loss
// there is loss evidence: two (or a late-reported one) in a row on a path
// that delivers the next packet take it out by no rule; a path that loses
// every packet is out an RTT spread after its third.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "rnic/core/path_round_robin.h"

using namespace tandem::rnic;

namespace {

constexpr uint32_t kPaths = 16;
constexpr uint64_t kGap = 62'500;   // between two packets of the QP: 1 ms per path
constexpr uint64_t kRtt = 100'000;  // every path's

// Round robin over 16 paths for `ms` milliseconds of one packet per kGap.
// lost(k, t): packet k, sent at t, is lost; its loss is reported `report`
// after it was sent (RACK: a later packet's ACK plus the reorder window),
// every other packet is answered after kRtt. Feedback and sends are applied
// in time order.
struct SparseQp {
  PathRoundRobin p;
  std::vector<uint16_t> ports;
  std::multimap<uint64_t, std::function<void()>> events;

  SparseQp() {
    p.reset(PathPolicyParams{0x321, 7, kPaths});
    for (uint32_t i = 0; i < kPaths; ++i) ports.push_back(p.choose(i, false, 1'000));
    for (uint16_t port : ports) p.on_ack(port, kRtt, 1'000 + kRtt);
  }
  uint32_t index(uint16_t port) const {
    for (uint32_t i = 0; i < ports.size(); ++i)
      if (ports[i] == port) return i;
    return kPaths;
  }
  void run(uint64_t until, uint64_t report, const std::function<bool(uint32_t, uint32_t, uint64_t)>& lost) {
    uint32_t k = 0;
    for (uint64_t t = 1'000'000; t < until; t += kGap, ++k) {
      for (auto e = events.begin(); e != events.end() && e->first <= t; e = events.erase(e)) e->second();
      const uint16_t port = p.choose(k, false, t);
      const uint32_t path = index(port);
      if (lost(k, path, t))
        events.emplace(t + report, [this, port, t, report] { p.on_loss(port, t, t + report); });
      else
        events.emplace(t + kRtt, [this, port, t] { p.on_ack(port, kRtt, t + kRtt); });
    }
  }
  uint64_t removals() const {
    uint64_t n = 0;
    for (uint32_t i = 0; i < kPaths; ++i) n += p.path_stats(i).removals;
    return n;
  }
};

}  // namespace

TEST_CASE("a sparse path that loses two packets in a row and delivers the next stays in") {
  for (uint64_t report : {2 * kRtt, 3 * kRtt}) {
    INFO("losses reported " << report << " ns after sending");
    SparseQp q;
    REQUIRE(q.p.health().silence_ns(5) < kPaths * kGap);  // each packet out alone past the deadline
    // Path 5 loses two consecutive packets, at ~100 ms and 1 ms later (the
  // rules before took it out by silence between the second and third).
    uint32_t first = 0;
    q.run(200'000'000, report, [&](uint32_t k, uint32_t path, uint64_t t) {
      if (path != 5 || t < 100'000'000) return false;
      if (first == 0) first = k;
      return k < first + 2 * kPaths;
    });
    CHECK(q.p.path_stats(5).losses == 2);
    CHECK(q.removals() == 0);
    CHECK(q.p.health().up_count() == kPaths);
  }
}

TEST_CASE("a sparse path whose loss is reported after its silence time stays in") {
  SparseQp q;
  // Reported once most other paths have answered later packets (8 of 15,
  // 600 us) and before path 3's next packet (1 ms).
  const uint64_t late = q.p.health().silence_ns(3) + 500'000;
  REQUIRE(late < kPaths * kGap);
  bool done = false;
  q.run(200'000'000, late, [&](uint32_t, uint32_t path, uint64_t t) {
    if (path != 3 || t < 100'000'000 || done) return false;
    return done = true;
  });
  CHECK(q.p.path_stats(3).losses == 1);
  CHECK(q.removals() == 0);
}

TEST_CASE("a sparse path that loses every packet is out soon after its third") {
  SparseQp q;
  const uint64_t died = 100'000'000, deadline = q.p.health().silence_ns(9);
  q.run(200'000'000, 2 * kRtt, [&](uint32_t, uint32_t path, uint64_t t) { return path == 9 && t >= died; });
  CHECK_FALSE(q.p.health().up(9));
  CHECK(q.p.path_stats(9).silent_removals == 1);
  CHECK(q.removals() == 1);
  // Its third packet after the failure leaves within 3 ms; out its RTT
  // spread (at most its silence time) and a packet time (the next tick)
  // after that.
  CHECK(q.p.path_stats(9).first_removed_ns <= died + 3 * kPaths * kGap + deadline + kGap);
  CHECK(q.p.path_stats(9).first_removed_ns > died + 2 * kPaths * kGap);
}
