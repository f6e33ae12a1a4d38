// Path health under host jitter (path_health.h): the stall patterns
// tandem-sim's host jitter produces (a sender's loop gap, a peer's stall,
// every path silent, a burst of ACKs after a silence) take no live path
// out; a path that stays silent while the others answer later packets is
// still taken out within its deadline.
#include <catch2/catch.hpp>

#include <vector>

#include "rnic/core/path_round_robin.h"

using namespace tandem::rnic;

namespace {

constexpr uint64_t kRtt = 20'000;

struct Qp4 {
  PathRoundRobin p;
  std::vector<uint16_t> ports;
  uint64_t t = 0;
  // Four paths answering in kRtt for 1 ms, a packet every 1 us (each
  // answered at once, so every silence clock starts with the next send).
  Qp4() {
    p.reset(PathPolicyParams{0x123, 7, 4});
    for (uint32_t i = 0; i < 4; ++i) ports.push_back(p.choose(i, false, 1'000));
    for (t = 2'000; t < 1'000'000; t += 1'000) {
      p.choose(0, false, t);
      for (uint16_t port : ports) p.on_ack(port, kRtt, t);
    }
  }
  // One packet on each path, 1 us apart.
  void send_round() {
    for (int k = 0; k < 4; ++k, t += 1'000) p.choose(0, false, t);
  }
  uint64_t removals() const {
    uint64_t n = 0;
    for (uint32_t i = 0; i < 4; ++i) n += p.path_stats(i).removals;
    return n;
  }
};

// The burst after a stall: paths 0..2 answer packets sent after path 3's
// oldest, the sender sends (and judges) before path 3's answer is read.
void burst_without_path3(Qp4& q, uint64_t at) {
  for (uint32_t i = 0; i < 3; ++i) q.p.on_ack(q.ports[i], at - (q.t - 1'000), at);
  q.p.choose(0, false, at);  // the tick between two RX bursts
  q.p.choose(0, false, at);
}

}  // namespace

TEST_CASE("a gap in the sender's own loop takes no path out") {
  Qp4 q;
  // Three packets on each path: enough unanswered ones for a silence.
  for (int k = 0; k < 3; ++k) q.send_round();
  const uint64_t stall_from = q.t, stall_to = q.t + 2'000'000;  // descheduled for 2 ms
  q.p.on_local_gap(stall_from, stall_to);
  burst_without_path3(q, stall_to);
  q.p.on_ack(q.ports[3], stall_to - stall_from, stall_to + 1'000);  // the next RX burst
  CHECK(q.removals() == 0);
  CHECK(q.p.health().up_count() == 4);
  CHECK(q.p.path_stats(3).stall_excused == 1);
}

TEST_CASE("a stall of the peer (every path quiet, then a burst of ACKs) takes no path out") {
  Qp4 q;
  q.send_round();
  // The peer stalls for 3 ms: the sender keeps running and sending (and
  // judging) while no path answers.
  const uint64_t start = q.t;
  for (; q.t < start + 3'000'000; q.t += 5'000) q.p.choose(0, false, q.t);
  CHECK(q.removals() == 0);
  // It resumes: its first burst of ACKs covers paths 0..2 (later packets),
  // path 3's answer comes in its next burst.
  burst_without_path3(q, q.t);
  q.p.on_ack(q.ports[3], 20'000, q.t + 5'000);
  CHECK(q.removals() == 0);
  CHECK(q.p.path_stats(3).stall_excused == 1);
}

TEST_CASE("silence on every path at once for 20 ms takes no path out and costs no RTT estimate") {
  Qp4 q;
  const uint64_t srtt = q.p.health().srtt_ns(0);
  const uint64_t start = q.t;
  for (; q.t < start + 20'000'000; q.t += 10'000) q.p.choose(0, false, q.t);
  // Every path answers again; the samples span the silence.
  for (uint16_t port : q.ports) q.p.on_ack(port, q.t - start, q.t);
  CHECK(q.removals() == 0);
  CHECK(q.p.health().srtt_ns(0) == srtt);
}

TEST_CASE("a burst of ACKs after a silence, covering several paths, convicts no straggler") {
  Qp4 q;
  q.send_round();
  // 500 us of silence on every path (ACKs held back by the peer's ACK
  // generation), then two paths' ACKs, a tick, the others' 40 us later.
  const uint64_t at = q.t + 500'000;
  q.p.on_ack(q.ports[0], at - (q.t - 3'000), at);
  q.p.on_ack(q.ports[1], at - (q.t - 2'000), at);
  for (int k = 0; k < 4; ++k) q.p.choose(0, false, at + k * 10'000);
  q.p.on_ack(q.ports[2], 40'000, at + 40'000);
  q.p.on_ack(q.ports[3], 40'000, at + 40'000);
  CHECK(q.removals() == 0);
}

TEST_CASE("one path silent while the others answer later packets is out within its deadline") {
  for (bool gap : {false, true}) {
    Qp4 q;
    const uint64_t deadline = q.p.health().silence_ns(1);
    // Path 1 dies now; the others answer each packet after kRtt. With
    // `gap`, the sender's loop also stalls 1 ms in the middle.
    const uint64_t died = q.t;
    uint64_t missed = 0;
    for (; q.t < died + 5'000'000 && q.p.health().up(1); q.t += 1'000) {
      if (gap && q.t == died + 50'000) {
        q.p.on_local_gap(q.t, q.t + 1'000'000);
        missed = 1'000'000;
        q.t += 1'000'000;
      }
      const uint16_t port = q.p.choose(0, false, q.t);
      if (port != q.ports[1]) q.p.on_ack(port, kRtt, q.t + kRtt);
    }
    CHECK_FALSE(q.p.health().up(1));
    CHECK(q.p.path_stats(1).silent_removals == 1);
    CHECK(q.removals() == 1);
    // Out within its own deadline after its third unanswered packet (a
    // packet on it every 4 us; plus a packet time), not counting the time
    // the sender's loop did not run.
    CHECK(q.p.path_stats(1).first_removed_ns <= died + 2 * 4'000 + deadline + missed + 5'000);
  }
}
