#include <catch2/catch.hpp>

#include <cstring>

#include "common/fabric/ecn.h"
#include "common/fabric/rng.h"
#include "common/fabric/route_table.h"
#include "common/wire/headers.h"

using namespace tandem::common;

TEST_CASE("the rng repeats for one seed and differs between seeds") {
  Rng a(9), b(9), c(10);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next();
    REQUIRE(x == b.next());
    if (x != c.next()) differs = true;
  }
  REQUIRE(differs);
}

TEST_CASE("rng below() stays in range and covers it evenly") {
  Rng r(1);
  int hist[10] = {};
  for (int i = 0; i < 100000; ++i) {
    const uint64_t v = r.below(10);
    REQUIRE(v < 10);
    ++hist[v];
  }
  for (int h : hist) REQUIRE(h == Approx(10000).epsilon(0.05));
  REQUIRE(r.uniform01() < 1.0);
}

namespace {
std::vector<uint8_t> ipv4_header(uint8_t tos) {
  std::vector<uint8_t> b(20);
  Ipv4Header h;
  h.tos = tos;
  h.total_len = 60;
  h.ttl = 64;
  h.proto = 17;
  h.src = 0x0A000001;
  h.dst = 0x0A000002;
  write_ipv4(b.data(), h);
  return b;
}
}  // namespace

TEST_CASE("marking an ECT(0) packet sets CE and keeps the IPv4 checksum valid") {
  for (uint8_t tos : {uint8_t{0x02}, uint8_t{0x01}, uint8_t{0xB6}, uint8_t{0xFE}}) {
    auto b = ipv4_header(tos);
    REQUIRE(mark_ce_ipv4(b.data(), b.size()) == EcnMark::kMarked);
    REQUIRE((b[1] & 0x03) == 0x03);
    REQUIRE((b[1] & 0xFC) == (tos & 0xFC));
    REQUIRE(ipv4_checksum(b.data(), 20) == 0);  // a valid header sums to zero
    auto fresh = ipv4_header(b[1]);
    REQUIRE(std::memcmp(fresh.data(), b.data(), 20) == 0);
  }
}

TEST_CASE("not-ECT, already-CE and non-IPv4 packets are left untouched") {
  auto a = ipv4_header(0x00);
  auto before = a;
  REQUIRE(mark_ce_ipv4(a.data(), a.size()) == EcnMark::kNotEct);
  REQUIRE(a == before);
  auto c = ipv4_header(0x03);
  before = c;
  REQUIRE(mark_ce_ipv4(c.data(), c.size()) == EcnMark::kAlreadyCe);
  REQUIRE(c == before);
  uint8_t v6[40] = {0x60};
  REQUIRE(mark_ce_ipv4(v6, sizeof v6) == EcnMark::kNotIpv4);
  REQUIRE(mark_ce_ipv4(a.data(), 10) == EcnMark::kNotIpv4);
}

TEST_CASE("the route table finds every host and misses unknown ones") {
  std::vector<std::pair<uint32_t, uint16_t>> routes;
  for (uint32_t i = 0; i < 100; ++i) routes.push_back({0x0A000000 + i, static_cast<uint16_t>(i % 7)});
  RouteTable t(routes);
  REQUIRE(t.size() == 100);
  for (uint32_t i = 0; i < 100; ++i) REQUIRE(t.lookup(0x0A000000 + i) == static_cast<int>(i % 7));
  REQUIRE(t.lookup(0x0B000000) == RouteTable::kMiss);
  REQUIRE(RouteTable().lookup(1) == RouteTable::kMiss);
  REQUIRE_THROWS_AS(RouteTable({{1, 0}, {1, 1}}), std::invalid_argument);
}

TEST_CASE("IPv4 text parses to host order and back") {
  REQUIRE(parse_ipv4("10.0.0.2") == 0x0A000002);
  REQUIRE(format_ipv4(0xC0A80101) == "192.168.1.1");
  REQUIRE_THROWS_AS(parse_ipv4("10.0.0"), std::invalid_argument);
}
