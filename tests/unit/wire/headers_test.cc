#include <catch2/catch.hpp>

#include <vector>

#include "common/wire/headers.h"

using namespace tandem::common;

TEST_CASE("bth round-trips every field") {
  Bth b;
  b.opcode = 0x0a;
  b.se = true;
  b.mig = true;
  b.pad = 3;
  b.pkey = 0x8001;
  b.fecn = true;
  b.becn = false;
  b.dqpn = 0xABCDEF;
  b.ack_req = true;
  b.psn = 0xFFFFFF;
  uint8_t buf[kBthLen];
  REQUIRE(write_bth(buf, b) == kBthLen);
  Bth r = read_bth(buf);
  CHECK(r.opcode == 0x0a);
  CHECK(r.se);
  CHECK(r.mig);
  CHECK(r.pad == 3);
  CHECK(r.tver == 0);
  CHECK(r.pkey == 0x8001);
  CHECK(r.fecn);
  CHECK_FALSE(r.becn);
  CHECK(r.dqpn == 0xABCDEF);
  CHECK(r.ack_req);
  CHECK(r.psn == 0xFFFFFF);
}

TEST_CASE("reth, aeth and atomic eth round-trip") {
  uint8_t buf[64];
  write_reth(buf, Reth{0x1122334455667788ull, 0xdeadbeef, 4096});
  Reth r = read_reth(buf);
  CHECK(r.va == 0x1122334455667788ull);
  CHECK(r.rkey == 0xdeadbeef);
  CHECK(r.len == 4096);

  write_aeth(buf, Aeth{static_cast<uint8_t>(kAethNak | kNakRemoteAccess), 0x123456});
  Aeth a = read_aeth(buf);
  CHECK(aeth_kind(a.syndrome) == kAethNak);
  CHECK(aeth_value(a.syndrome) == kNakRemoteAccess);
  CHECK(a.msn == 0x123456);

  write_atomic_eth(buf, AtomicEth{1, 2, 3, 4});
  AtomicEth e = read_atomic_eth(buf);
  CHECK(e.va == 1);
  CHECK(e.rkey == 2);
  CHECK(e.swap_add == 3);
  CHECK(e.compare == 4);
}

TEST_CASE("ethernet with and without 802.1Q; truncated tags are refused") {
  EthHeader h;
  h.dst = {1, 2, 3, 4, 5, 6};
  h.src = {7, 8, 9, 10, 11, 12};
  h.has_vlan = true;
  h.vlan_tci = 0x0123;
  uint8_t buf[32];
  REQUIRE(write_eth(buf, h) == 18);
  bool ok = false;
  EthHeader r = read_eth(buf, 18, &ok);
  REQUIRE(ok);
  CHECK(r.has_vlan);
  CHECK(r.vlan_tci == 0x0123);
  CHECK(r.ethertype == kEtherTypeIpv4);
  CHECK(r.dst == h.dst);
  for (std::size_t n = 0; n < 18; ++n) {
    read_eth(buf, n, &ok);
    CHECK_FALSE(ok);
  }
  h.has_vlan = false;
  REQUIRE(write_eth(buf, h) == 14);
  r = read_eth(buf, 14, &ok);
  CHECK(ok);
  CHECK_FALSE(r.has_vlan);
}

TEST_CASE("ipv4 header checksum verifies to zero") {
  Ipv4Header ip;
  ip.src = 0x0a000001;
  ip.dst = 0x0a000002;
  ip.total_len = 56;
  ip.id = 1;
  uint8_t buf[kIpv4HdrLen];
  write_ipv4(buf, ip);
  CHECK(ipv4_checksum(buf, kIpv4HdrLen) == 0);
  // Same header as scapy builds for this packet (checksum 0x26b2).
  CHECK(load_be16(buf + 10) == 0x26b2);
  Ipv4Header r = read_ipv4(buf);
  CHECK(r.src == ip.src);
  CHECK(r.dst == ip.dst);
  CHECK(r.ttl == 64);
}
