// The credit policy's pieces on their own: the AETH credit encoding, the
// sender's bookkeeping and the receiving port's grant pacing.
#include <catch2/catch.hpp>

#include "rnic/core/cc_credit.h"
#include "rnic/core/credit_wire.h"

using namespace tandem::rnic;

TEST_CASE("credit encoding rounds down and decodes to the IBA table") {
  CHECK(credit_decode(credit_encode(0)) == 0);
  CHECK(credit_decode(credit_encode(4)) == 4);
  CHECK(credit_decode(credit_encode(5)) == 4);
  CHECK(credit_decode(credit_encode(6)) == 6);
  CHECK(credit_decode(credit_encode(100)) == 96);
  CHECK(credit_decode(credit_encode(1u << 20)) == 32768);
  for (uint32_t v = 0; v < 40000; v += 7) CHECK(credit_decode(credit_encode(v)) <= v);
  CHECK(credit_encode(1u << 30) < kCreditInvalid);
  CHECK(credit_decode(kCreditInvalid) == 0);
}

TEST_CASE("credit sender: unscheduled packets from the BDP, counters for grants, use and stalls") {
  CcCredit c;
  c.reset(CcParams{4096, 1 << 20, 100, 64 << 10});
  CHECK(c.uses_credits());
  CHECK(c.unscheduled_pkts() == 16);
  c.on_credit(3, 10);
  c.on_credit(2, 20);
  c.on_credit_used(30);
  c.on_credit_stall(40);
  c.on_credit_stall(41);  // still the same stall
  c.on_credit(1, 50);
  c.on_credit_stall(60);
  const CcStats s = c.stats();
  CHECK(s.credits_received == 6);
  CHECK(s.credits_used == 1);
  CHECK(s.credit_stalls == 2);
  CHECK(c.can_send(0, 4096, 0));
}

TEST_CASE("credit grantor: tokens accrue at the port rate, capped at a small burst") {
  CreditGrantor g;
  g.configure(CreditConfig{100, 32, false, 8, 4}, 4096);
  // 100 Gb/s = 12.5 B/ns: one 4096 B packet every 327.68 ns; burst cap 2.
  CHECK(g.refill(0) == 2);
  g.spend(2);
  CHECK(g.refill(300) == 0);
  CHECK(g.next_token_time() == 328);
  CHECK(g.refill(328) == 1);
  CHECK(g.refill(1'000'000) == 2);  // idle time does not bank credit
  CHECK(g.window_pkts() == 32);
  CHECK(g.batch_pkts() == 1);
}

TEST_CASE("credit grantor with jitter mitigation: headroom and batches") {
  CreditGrantor g;
  g.configure(CreditConfig{100, 32, true, 8, 4}, 4096);
  CHECK(g.window_pkts() == 40);
  CHECK(g.batch_pkts() == 4);
  CHECK(g.refill(0) == 4);
}
