// Path health for latency-bound traffic and for ACK paths (path_health.h):
// a resend never repeats the path that lost it, a timeout is evidence
// against its path, probes of a dead path back off, and a responder takes
// out an ACK path the requester's echoes (irn_wire.h) never name.
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "rnic/core/path_adaptive.h"
#include "rnic/core/path_round_robin.h"

using namespace tandem::rnic;

namespace {

constexpr uint64_t kRtt = 10'000;

// 16 paths, each with one packet sent at 1 us and answered after kRtt.
template <class P>
std::vector<uint16_t> warm(P& p, uint32_t n = 16) {
  p.reset(PathPolicyParams{0x321, 5, n});
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < n; ++i) ports.push_back(p.choose(i, false, 1'000));
  for (uint16_t port : ports) p.on_ack(port, kRtt, 1'000 + kRtt);
  return ports;
}

uint32_t index_of(const std::vector<uint16_t>& ports, uint16_t port) {
  for (uint32_t i = 0; i < ports.size(); ++i)
    if (ports[i] == port) return i;
  return 999;
}

}  // namespace

TEST_CASE("a resend never takes the path that lost it, and prefers paths that answer") {
  PathRoundRobin p;
  const auto ports = warm(p);
  // Path 0's next packet times out; path 1 has one out past its RTT spread.
  const uint16_t lost = p.choose(100, false, 20'000);
  REQUIRE(lost == ports[0]);
  REQUIRE(p.choose(101, false, 20'000) == ports[1]);
  p.on_timeout(lost, 20'000, 300'000);
  CHECK_FALSE(p.health().answering(0, 300'000));
  CHECK_FALSE(p.health().answering(1, 300'000));
  CHECK(p.health().answering(2, 300'000));
  const uint16_t resend = p.choose_retransmit(100, lost, 1, 300'000);
  CHECK(resend != lost);
  CHECK(resend != ports[1]);
  CHECK(p.health().answering(index_of(ports, resend), 300'000 - 1));
  // A single path: the resend has nowhere else to go.
  PathRoundRobin one;
  const auto only = warm(one, 1);
  CHECK(one.choose_retransmit(7, only[0], 1, 50'000) == only[0]);
}

TEST_CASE("a PSN resent again and again tries every live path in turn") {
  for (bool adaptive : {false, true}) {
    INFO((adaptive ? "adaptive" : "round_robin"));
    PathRoundRobin rr;
    PathAdaptive ad;
    PathPolicy& p = adaptive ? static_cast<PathPolicy&>(ad) : rr;
    const auto ports = adaptive ? warm(ad) : warm(rr);
    // Every path has gone dead: each resend times out in turn.
    const uint16_t first = p.choose(200, false, 20'000);
    uint16_t last = first;
    std::vector<uint16_t> tried;
    uint64_t now = 20'000;
    for (uint32_t attempt = 1; attempt <= 16; ++attempt) {
      now += 100'000 << std::min(attempt, 6u);
      p.on_timeout(last, now - 100'000, now);
      const uint16_t next = p.choose_retransmit(200, last, attempt, now);
      CHECK(next != last);
      tried.push_back(next);
      last = next;
    }
    // The first 15 resends: the 15 other paths, each once.
    std::set<uint16_t> distinct(tried.begin(), tried.begin() + 15);
    CHECK(distinct.size() == 15);
    CHECK(distinct.count(first) == 0);
  }
}

TEST_CASE("a timeout counts against its path: three in a row take it out, an answer between them does not") {
  PathRoundRobin p;
  const auto ports = warm(p);
  // Path 4's packets are each the only one out (a latency-bound QP): no later
  // packet on it is ever acknowledged, only the timer says it died.
  uint64_t t = 100'000;
  for (int k = 0; k < 2; ++k) {
    p.on_timeout(ports[4], t, t + 200'000);
    t += 1'000'000;
  }
  CHECK(p.health().up(4));
  // The responder said the last resend was a duplicate: the packet had
  // arrived (its ACK died), so the run is broken.
  p.on_ack(ports[4], 0, t);
  p.on_timeout(ports[4], t, t + 200'000);
  CHECK(p.health().up(4));
  t += 1'000'000;
  p.on_timeout(ports[4], t, t + 200'000);
  t += 1'000'000;
  p.on_timeout(ports[4], t, t + 200'000);
  CHECK_FALSE(p.health().up(4));
  CHECK(p.path_stats(4).loss_removals == 1);
  for (uint32_t i = 0; i < 16; ++i)
    if (i != 4) CHECK(p.health().up(i));
}

TEST_CASE("probes of a path that stays dead come at doubling intervals, up to a cap") {
  PathRoundRobin p;
  const auto ports = warm(p, 4);
  for (int k = 0; k < 3; ++k) p.on_timeout(ports[2], 20'000, 300'000);
  REQUIRE_FALSE(p.health().up(2));
  const uint64_t base = p.health().silence_ns(2);
  // New data every microsecond for 2 s; no probe is ever answered.
  std::vector<uint64_t> probes;
  for (uint64_t t = 300'000; t < 2'000'000'000; t += 1'000) {
    if (p.choose(0, false, t) == ports[2]) probes.push_back(t);
  }
  REQUIRE(probes.size() >= 10);
  CHECK(probes[0] - 300'000 <= base + 1'000);
  for (std::size_t k = 1; k < probes.size(); ++k) {
    const uint64_t gap = probes[k] - probes[k - 1];
    const uint64_t want = base << std::min<std::size_t>(k, PathHealth::kMaxProbeShift);
    CHECK(gap >= want);
    CHECK(gap <= want + 1'000);
  }
  // An answered probe brings it back; the next removal probes from the start again.
  const uint64_t t = probes.back() + 10;
  p.on_ack(ports[2], 10, t);
  CHECK(p.health().up(2));
}

TEST_CASE("a responder takes out the ACK path the requester's echoes never name, and only it") {
  PathRoundRobin p;
  p.reset(PathPolicyParams{0x99, 3, 16});
  constexpr uint32_t kDead = 6;
  // Bulk traffic: a response every 2 us, round robin; each arrives after
  // 5 us, except on the dead path, and a request 1 us later echoes it.
  struct Echo {
    uint64_t at;
    uint32_t path;
    bool color;
  };
  std::vector<Echo> pending;
  uint64_t removed_at = 0;
  for (uint64_t t = 10'000; t < 5'000'000; t += 2'000) {
    for (auto e = pending.begin(); e != pending.end();) {
      if (e->at > t) { ++e; continue; }
      p.on_echo(e->path, e->color, e->at);
      e = pending.erase(e);
    }
    p.choose_response(0, false, t);
    const uint32_t i = p.last_pick();
    if (i == kDead && t > 1'000'000) continue;  // dies at 1 ms
    pending.push_back(Echo{t + 6'000, i, p.path_color(i)});
    if (removed_at == 0 && !p.health().up(kDead)) removed_at = t;
  }
  CHECK_FALSE(p.health().up(kDead));
  CHECK(removed_at > 1'000'000);
  CHECK(removed_at < 1'500'000);  // its third unanswered response goes at ~1.1 ms
  for (uint32_t i = 0; i < 16; ++i) {
    INFO("path " << i);
    if (i != kDead) CHECK(p.path_stats(i).removals == 0);
  }
}

TEST_CASE("an echo of a path's old color answers nothing; one of its current color brings a removed ACK path back") {
  PathRoundRobin p;
  p.reset(PathPolicyParams{0x99, 3, 2});
  p.choose_response(0, false, 1'000);
  const uint32_t i = p.last_pick();
  const bool c = p.path_color(i);
  p.on_echo(i, !c, 5'000);
  CHECK(p.path_stats(i).acks == 0);
  CHECK(p.path_color(i) == c);
  p.on_echo(i, c, 6'000);
  CHECK(p.path_stats(i).acks == 1);
  CHECK(p.path_color(i) != c);  // the next responses carry the other color
}

// A latency-bound responder (one request out at a time) whose ACK paths die
// several at once, as when one fabric path of the lab's 4 carries a quarter
// of a set's 16 ports, or here half of them: each ACK lost costs the
// requester a timeout and a resend, which the responder sees as a duplicate
// of the newest PSN; the answer to it goes on a path that answers. Each dead
// ACK path keeps its own run of such losses (ended by an echo of a later
// response) and goes out after its third; a live one never. (Here the
// silence rule would also find them; in the simulator's
// latency-half-paths-failure, where the requests die too and every lost ACK
// is a quiet longer than kAllQuietNs, it did not, and the old run shared by
// all paths, broken by every blame of another path, took none out.)
TEST_CASE("a latency-bound responder takes out every dead ACK path when half of them die, and no live one") {
  PathRoundRobin p;
  p.reset(PathPolicyParams{0x77, 9, 16});
  auto dead = [](uint32_t i) { return i % 2 == 0; };
  constexpr uint64_t kOneWay = 5'000, kRto = 100'000;
  uint64_t t = 10'000, lost_late = 0;
  struct Echo {
    uint32_t path;
    bool color;
  };
  std::vector<Echo> echo;  // what the next request echoes
  for (uint32_t psn = 1; psn <= 3000; ++psn) {
    // The request arrives, echoing the path of the last ACK that reached the requester.
    for (const Echo& e : echo) p.on_echo(e.path, e.color, t);
    echo.clear();
    bool retry = false;
    for (;;) {
      p.choose_response(psn, retry, t);
      const uint32_t i = p.last_pick();
      const bool color = p.path_color(i);
      if (!dead(i) || t < 1'000'000) {
        echo.push_back(Echo{i, color});
        t += 2 * kOneWay;  // the ACK arrives; the next request comes
        break;
      }
      if (psn > 500) ++lost_late;
      t += kRto;  // the requester times out and resends: a duplicate
      p.on_duplicate(psn, t);
      retry = true;
    }
  }
  for (uint32_t i = 0; i < 16; ++i) {
    INFO("path " << i);
    CHECK(p.health().up(i) == !dead(i));
    if (!dead(i)) CHECK(p.path_stats(i).removals == 0);
  }
  CHECK(lost_late < 50);  // only probes of the dead paths, backing off
}
