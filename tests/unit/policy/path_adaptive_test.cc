// The adaptive spraying policy on its own: RTT and loss feedback in, path
// shares out.
#include <catch2/catch.hpp>

#include <map>
#include <vector>

#include "rnic/core/path_adaptive.h"

using namespace tandem::rnic;

namespace {
struct Fixture {
  PathAdaptive p;
  std::vector<uint16_t> ports;
  explicit Fixture(uint32_t n) {
    p.reset(PathPolicyParams{0x321, 5, n});
    for (uint32_t i = 0; i < n; ++i) ports.push_back(p.choose(i, false, 0));
  }
  std::map<uint16_t, int> shares(int n, uint64_t now) {
    std::map<uint16_t, int> m;
    for (int i = 0; i < n; ++i) ++m[p.choose(0, false, now)];
    return m;
  }
};
}  // namespace

TEST_CASE("adaptive without feedback spreads evenly over distinct paths") {
  Fixture f(4);
  auto m = f.shares(400, 10);
  REQUIRE(m.size() == 4);
  for (auto& [port, n] : m) CHECK(n == 100);
}

TEST_CASE("adaptive gives a path with 3x the RTT about 1/9 of a fast path's share") {
  Fixture f(2);
  for (int k = 0; k < 20; ++k) {
    f.p.on_ack(f.ports[0], 10'000, 1'000);
    f.p.on_ack(f.ports[1], 30'000, 1'000);
  }
  CHECK(f.p.weight(0) == Approx(1.0));
  CHECK(f.p.weight(1) == Approx(1.0 / 9).epsilon(0.01));
  auto m = f.shares(1000, 2'000);
  CHECK(m[f.ports[1]] == Approx(100).margin(2));
  CHECK(m[f.ports[0]] == Approx(900).margin(2));
}

TEST_CASE("adaptive shifts load away from a lossy path and keeps a trickle on it") {
  Fixture f(2);
  f.p.on_ack(f.ports[0], 10'000, 1'000);
  f.p.on_ack(f.ports[1], 10'000, 1'000);
  f.p.on_loss(f.ports[1], 500, 2'000);
  f.p.on_loss(f.ports[1], 500, 2'000);
  CHECK(f.p.health().up(1));  // two losses: not out, only lighter
  CHECK(f.p.weight(1) == Approx(1.0 / 3));
  auto m = f.shares(400, 3'000);
  CHECK(m[f.ports[1]] == 100);
  CHECK(m[f.ports[0]] == 300);
}

TEST_CASE("adaptive skips a path health took out") {
  Fixture f(3);
  for (uint16_t port : f.ports) f.p.on_ack(port, 1'000, 4'000);  // sent at 3 us
  for (int k = 0; k < 3; ++k) f.p.on_loss(f.ports[2], 1'000, 5'000);
  REQUIRE_FALSE(f.p.health().up(2));
  auto m = f.shares(60, 6'000);
  CHECK(m.count(f.ports[2]) == 0);
}
