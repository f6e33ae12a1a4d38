// The requester's RACK reorder window: packets that are merely late (a slow
// or queued path among sprayed ones) stop being retransmitted once the
// window has grown from the spurious losses it saw, while a real loss is
// still repaired long before the retransmission timeout; with losses only,
// the window stays closed.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <memory>

#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;
namespace common = tandem::common;

namespace {

constexpr uint32_t kMsgBytes = 512 * 1024;
constexpr uint32_t kMsgs = 8;
constexpr uint64_t kFastNs = 2'000;

QpSetup setup() {
  QpSetup s;
  s.mode = Reliability::kIrn;
  s.mtu = 1024;
  s.window = 1024;
  s.cc_window = 256 * 1024;
  s.reorder_delay_ns = 20'000;  // shorter than the slow path's extra delay
  s.timeout_ns = 2'000'000;
  return s;
}

// Every 4th request A sends takes a queued path: 40-49 us later than the
// others (as after a heal, when an empty path overtakes queued ones).
void slow_path(Loop& l, std::function<bool(const common::RocePacket&)> drop = {}) {
  auto n = std::make_shared<uint64_t>(0);
  l.delay = [n](bool from_a, const common::RocePacket& p) -> uint64_t {
    if (!from_a || p.payload_len == 0) return kFastNs;
    const uint64_t k = (*n)++;
    return k % 4 == 0 ? kFastNs + 40'000 + (k * 7919 % 10) * 1'000 : kFastNs;
  };
  if (drop) l.filter = [drop](bool from_a, const common::RocePacket& p) { return !(from_a && drop(p)); };
}

// Posts message i (A -> B WRITE) and runs until it completes.
void write_msg(Loop& l, uint32_t i) {
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, i, l.a, uint64_t{i} * kMsgBytes, kMsgBytes, &l.b,
                              uint64_t{i} * kMsgBytes)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == i + 1; }));
  REQUIRE(l.a.done[i].status == IBV_WC_SUCCESS);
}

struct Run {
  uint64_t retx_first_half = 0, retx_second_half = 0, timeouts = 0, window = 0, spurious = 0;
};

Run run_slow_path(bool adaptive) {
  TransportConfig cfg;
  cfg.rack_adaptive = adaptive;
  Loop l(kMsgs * kMsgBytes, setup(), {}, 1, cfg);
  REQUIRE(l.ok);
  slow_path(l);
  fill_pattern(l.a.mem, 0, l.a.mem.size(), 7);
  Run r;
  for (uint32_t i = 0; i < kMsgs / 2; ++i) write_msg(l, i);
  r.retx_first_half = l.a.counters().retx_pkts;
  for (uint32_t i = kMsgs / 2; i < kMsgs; ++i) write_msg(l, i);
  r.retx_second_half = l.a.counters().retx_pkts - r.retx_first_half;
  r.timeouts = l.a.counters().timeouts;
  r.window = l.a.t.reorder_window(l.a.qpn);
  r.spurious = l.a.t.spurious_losses(l.a.qpn);
  CHECK(std::memcmp(l.a.mem.data(), l.b.mem.data(), l.a.mem.size()) == 0);
  return r;
}

}  // namespace

TEST_CASE("a fixed reorder window resends every packet of a slow path", "[rack]") {
  const Run r = run_slow_path(false);
  CAPTURE(r.retx_first_half, r.retx_second_half, r.spurious);
  // A quarter of the packets take the slow path: most are resent, in both halves.
  CHECK(r.retx_second_half > (kMsgs / 2) * (kMsgBytes / 1024) / 8);
  CHECK(r.window == 0);
}

TEST_CASE("once the window has adapted, late packets on a slow path are not resent", "[rack]") {
  const Run fixed = run_slow_path(false);
  const Run r = run_slow_path(true);
  CAPTURE(r.retx_first_half, r.retx_second_half, r.window, r.spurious, fixed.retx_second_half);
  CHECK(r.spurious > 0);
  CHECK(r.window > 0);
  // Bounded: at most RACK's smoothed RTT and a quarter of the timeout.
  CHECK(r.window <= setup().timeout_ns / 4);
  // The second half runs on the adapted window: nothing (or next to nothing) resent.
  CHECK(r.retx_second_half * 20 < fixed.retx_second_half);
  CHECK(r.retx_first_half + r.retx_second_half < fixed.retx_first_half + fixed.retx_second_half);
  CHECK(r.timeouts == 0);
}

TEST_CASE("after the window has adapted, a real loss is still repaired well before the timeout", "[rack]") {
  Loop l(kMsgs * kMsgBytes, setup());
  REQUIRE(l.ok);
  // Drop the first transmission of one PSN of the last message.
  bool armed = false, dropped = false;
  uint32_t victim = 0;
  uint64_t dropped_at = 0, resent_at = 0;
  slow_path(l, [&](const common::RocePacket& p) {
    if (!armed || p.payload_len == 0) return false;
    if (!dropped) {
      dropped = true;
      victim = p.bth.psn;
      dropped_at = l.now;
      return true;
    }
    if (p.bth.psn == victim && resent_at == 0) resent_at = l.now;
    return false;
  });
  fill_pattern(l.a.mem, 0, l.a.mem.size(), 9);
  for (uint32_t i = 0; i + 1 < kMsgs; ++i) write_msg(l, i);
  const uint64_t window = l.a.t.reorder_window(l.a.qpn);
  REQUIRE(window > 0);
  const uint64_t timeouts = l.a.counters().timeouts;
  armed = true;
  write_msg(l, kMsgs - 1);
  REQUIRE(dropped);
  CAPTURE(window, dropped_at, resent_at);
  REQUIRE(resent_at != 0);
  CHECK(l.a.counters().timeouts == timeouts);
  // Lost once a later packet is reported and the window has passed: within
  // a few path RTTs (the slow path's ~50 us) plus the SACK's reorder delay,
  // far from the 2 ms timeout.
  CHECK(resent_at - dropped_at < 250'000);
  CHECK(std::memcmp(l.a.mem.data(), l.b.mem.data(), l.a.mem.size()) == 0);
}

TEST_CASE("with real losses and no reordering the reorder window stays closed", "[rack]") {
  NetConfig net;
  net.loss = 0.01;
  net.delay_ns = kFastNs;
  Loop l(kMsgs * kMsgBytes, setup(), net, 3);
  REQUIRE(l.ok);
  for (uint32_t i = 0; i < kMsgs; ++i) write_msg(l, i);
  CHECK(l.a.counters().retx_pkts > 0);
  CHECK(l.a.t.spurious_losses(l.a.qpn) == 0);
  CHECK(l.a.t.reorder_window(l.a.qpn) == 0);
}
