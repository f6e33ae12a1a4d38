// The hpcc policy on its own: INT echoes in, window and pacing rate out; and
// the tuning keys policies take in their names.
#include <catch2/catch.hpp>

#include <cmath>

#include "rnic/core/cc_dcqcn.h"
#include "rnic/core/cc_hpcc.h"
#include "rnic/core/policy_factory.h"

using namespace tandem::rnic;

namespace {

// Base RTT 12 us at 100 Gb/s: a BDP of 150 kB.
constexpr uint64_t kT = 12'000;
constexpr uint64_t kBdp = 150'000;

CcHpcc make(HpccParams p = {}) {
  CcHpcc c(p);
  c.reset(CcParams{1024, kBdp, 100, 0});
  return c;
}

// One hop at `ts`, `tx` bytes sent so far, `qlen` queued, 100 Gb/s.
IntEcho hop(uint64_t ts, uint64_t tx, uint32_t qlen) {
  IntEcho e;
  e.hops = 1;
  e.hop[0] = IntHop{ts, tx, qlen, 100};
  return e;
}

// An ACK of `bytes` carrying `e`.
void ack(CcHpcc& c, const IntEcho& e, uint64_t bytes, uint64_t now) {
  c.on_int(e, now);
  c.on_ack(bytes, 0, now);
}

}  // namespace

TEST_CASE("hpcc starts at line rate with the base BDP as its window") {
  auto c = make();
  CHECK(c.rate_gbps() == Approx(100));
  CHECK(c.window_bytes() == kBdp);
  CHECK(c.can_send(0, 1024, 0));
  CHECK(c.can_send(kBdp - 1024, 1024, 0));
  CHECK_FALSE(c.can_send(kBdp - 1000, 1024, 0));
  CHECK(c.next_send_time(0) == 0);  // a full window waits for an ACK, not a timer
}

TEST_CASE("hpcc: a link at full rate with half a BDP queued cuts to Rc / (U / eta) + AI once per RTT") {
  auto c = make();
  c.on_sent(2048, 0);
  ack(c, hop(1'000, 0, 75'000), 1024, 1'000);  // the first echo is only a reference
  CHECK(c.rate_gbps() == Approx(100));
  c.on_sent(1024, 1'000);
  // One base RTT later the hop sent a BDP (100 %) and kept 75 kB queued:
  // U = 1 + 75 kB / (B T) = 1.5. This ACK covers no data sent after the
  // reference: a fast reaction moves the rate but not the reference.
  ack(c, hop(1'000 + kT, kBdp, 75'000), 1024, 1'000 + kT);
  const double r = 100 / (1.5 / 0.95) + 0.04;
  CHECK(c.utilisation() == Approx(1.5));
  CHECK(c.rate_gbps() == Approx(r));
  CHECK(c.reference_gbps() == Approx(100));
  CHECK(c.window_bytes() == static_cast<uint64_t>(kBdp * r / 100));
  // The next ACK covers data sent after the reference: a full update.
  ack(c, hop(1'000 + 2 * kT, 2 * kBdp, 75'000), 1024, 1'000 + 2 * kT);
  CHECK(c.reference_gbps() == Approx(c.rate_gbps()));
  CHECK(c.rate_gbps() < 100);
  CHECK(c.stats().rate_cuts >= 1);
}

TEST_CASE("hpcc paces below line rate and the pacing timer is only reported while it holds the QP") {
  auto c = make();
  c.on_sent(1024, 0);
  ack(c, hop(0, 0, 150'000), 1024, 0);
  c.on_sent(1024, 0);
  ack(c, hop(kT, 2 * kBdp, 150'000), 1024, kT);  // U = 2 + 1 = 3: rate 100 / (3 / 0.95) + 0.04
  const double rate = c.rate_gbps();
  CHECK(rate == Approx(100 / (3 / 0.95) + 0.04));
  c.on_sent(1024, kT);
  const uint64_t gap = static_cast<uint64_t>(std::ceil(1024 * 8 / rate));
  CHECK_FALSE(c.can_send(0, 1024, kT + 1));
  CHECK(c.next_send_time(0) == kT + gap);
  CHECK(c.can_send(0, 1024, kT + gap));
}

TEST_CASE("hpcc: an idle path lets the rate climb back to the line rate, never past it") {
  HpccParams p;
  p.eta = 0.95;
  auto c = make(p);
  c.on_sent(1024, 0);
  ack(c, hop(0, 0, 0), 1024, 0);
  uint64_t sent = 1024, tx = 0;
  // A congested RTT first, then empty ones: U = 0.1.
  c.on_sent(1024, 0);
  sent += 1024;
  tx += 2 * kBdp;
  ack(c, hop(kT, tx, 150'000), 1024, kT);
  for (int k = 2; k < 30; ++k) {
    c.on_sent(1024, k * kT);
    sent += 1024;
    tx += kBdp / 10;
    ack(c, hop(k * kT, tx, 0), 1024, k * kT);
  }
  CHECK(c.rate_gbps() == Approx(100));
}

TEST_CASE("policies take tuning keys in their names; unknown keys or values are refused") {
  CHECK(make_cc_policy("hpcc") != nullptr);
  CHECK(make_cc_policy("hpcc:eta=0.99,ai_mbps=50,max_stage=5") != nullptr);
  CHECK(make_cc_policy("dcqcn:alpha_us=1,increase_us=300,byte_counter=0,fast_recovery=1,ai_mbps=20,"
                       "hai_mbps=200,min_mbps=1000,clamp=0,var_window=1") != nullptr);
  CHECK(make_cc_policy("hpcc:nope=1") == nullptr);
  CHECK(make_cc_policy("hpcc:eta") == nullptr);
  CHECK(make_cc_policy("hpcc:eta=abc") == nullptr);
  CHECK(make_cc_policy("dcqcn:g=2") == nullptr);
  CHECK(make_cc_policy("fixed_window:x=1") == nullptr);
  CHECK(make_cc_policy("hpcc:") != nullptr);
}

TEST_CASE("dcqcn without clamping keeps the target across back-to-back cuts; var_window scales the window") {
  CcDcqcn c;
  REQUIRE(c.configure("clamp", 0));
  REQUIRE(c.configure("var_window", 1));
  c.reset(CcParams{1024, kBdp, 100, 0});
  c.on_cnp(0);
  CHECK(c.rate_gbps() == Approx(50));
  CHECK(c.target_gbps() == Approx(100));
  c.on_cnp(1'000);  // no increase event between: the target stays
  CHECK(c.target_gbps() == Approx(100));
  CHECK(c.rate_gbps() == Approx(25));
  // A window of 150 kB at 100 Gb/s is 37.5 kB at 25.
  CHECK(c.can_send(36'000, 1'000, 2'000));
  CHECK_FALSE(c.can_send(37'000, 1'000, 2'000));
}

TEST_CASE("dcqcn with the byte counter off climbs by the timer alone: recovery, one AI step, then HAI steps") {
  CcDcqcn c;
  REQUIRE(c.configure("byte_counter", 0));
  REQUIRE(c.configure("fast_recovery", 1));
  REQUIRE(c.configure("increase_us", 300));
  REQUIRE(c.configure("ai_mbps", 20));
  REQUIRE(c.configure("hai_mbps", 200));
  c.reset(CcParams{1024, kBdp, 100, 0});
  c.on_cnp(0);                  // rc 50, rt 100
  c.can_send(0, 1, 300'000);    // stage 0: fast recovery, rc 75
  CHECK(c.rate_gbps() == Approx(75));
  CHECK(c.target_gbps() == Approx(100));
  c.on_cnp(300'000);            // rc 75 * (1 - alpha/2), rt 75 (an increase came between)
  CHECK(c.target_gbps() == Approx(75));
  c.can_send(0, 1, 600'000);    // fast recovery
  c.can_send(0, 1, 900'000);    // stage 1: the AI step
  CHECK(c.target_gbps() == Approx(75.02));
  c.can_send(0, 1, 1'200'000);  // stage 2: a HAI step
  CHECK(c.target_gbps() == Approx(75.22));
}
