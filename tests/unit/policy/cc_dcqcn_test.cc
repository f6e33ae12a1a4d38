// The dcqcn policy on its own: CNPs in, rates and pacing out.
#include <catch2/catch.hpp>

#include <cmath>

#include "rnic/core/cc_dcqcn.h"

using namespace tandem::rnic;

namespace {
CcDcqcn make() {
  CcDcqcn c;
  c.reset(CcParams{4096, 1 << 20, 100, 64 << 10});
  return c;
}
}  // namespace

TEST_CASE("dcqcn starts at line rate and paces packets by their size") {
  auto c = make();
  CHECK(c.rate_gbps() == Approx(100));
  CHECK(c.can_send(0, 4096, 0));
  c.on_sent(4096, 0);
  // 4096 B at 100 Gb/s = 327.68 ns
  CHECK_FALSE(c.can_send(4096, 4096, 100));
  CHECK(c.next_send_time(0) == 328);
  CHECK(c.can_send(4096, 4096, 328));
  CHECK(c.next_send_time(0) == 0);  // not paced now: nothing to wait for
}

TEST_CASE("dcqcn: the first CNP halves the rate (alpha starts at 1), later cuts shrink with alpha") {
  auto c = make();
  c.on_cnp(1000);
  CHECK(c.rate_gbps() == Approx(50));
  CHECK(c.target_gbps() == Approx(100));
  CHECK(c.alpha() == Approx(1.0));  // (1-g)*1 + g
  c.on_cnp(2000);
  CHECK(c.rate_gbps() == Approx(25));
  CHECK(c.stats().rate_cuts == 2);
  CHECK(c.stats().min_rate_gbps == Approx(25));
}

TEST_CASE("dcqcn: alpha decays by (1-g) per alpha timer without CNPs") {
  auto c = make();
  c.on_cnp(0);
  c.can_send(0, 1, 55'000 * 10);
  CHECK(c.alpha() == Approx(std::pow(1 - 1.0 / 256, 10)));
}

TEST_CASE("dcqcn recovers: fast recovery halves the gap, then additive increase raises the target") {
  auto c = make();
  c.on_cnp(0);  // rc 50, rt 100
  c.can_send(0, 1, 55'000);  // one timer event: fast recovery
  CHECK(c.rate_gbps() == Approx(75));
  CHECK(c.target_gbps() == Approx(100));
  c.on_cnp(55'000);  // rc 75*(1-alpha/2), rt 75
  const double after_cut = c.rate_gbps();
  CHECK(c.target_gbps() == Approx(75));
  // Five fast-recovery steps approach the target but never pass it.
  for (int k = 1; k <= 5; ++k) c.can_send(0, 1, 55'000 + k * 55'000ull);
  CHECK(c.rate_gbps() > after_cut);
  CHECK(c.rate_gbps() < 75);
  CHECK(c.target_gbps() == Approx(75));
  // The sixth step is additive: the target rises by 0.5 Gb/s.
  c.can_send(0, 1, 55'000 + 6 * 55'000ull);
  CHECK(c.target_gbps() == Approx(75.5));
  // Long enough without CNPs: back to line rate, never above.
  c.can_send(0, 1, 100'000'000);
  CHECK(c.rate_gbps() == Approx(100));
}

TEST_CASE("dcqcn never cuts below its floor") {
  auto c = make();
  for (int k = 0; k < 100; ++k) c.on_cnp(k * 1000);
  CHECK(c.rate_gbps() >= 0.1 - 1e-9);
}
