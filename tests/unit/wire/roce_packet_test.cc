#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "common/wire/roce_packet.h"

using namespace tandem::common;

namespace {

RocePacket make_spec(uint8_t opcode) {
  RocePacket p;
  p.eth.dst = {0x02, 0, 0, 0, 0, 2};
  p.eth.src = {0x02, 0, 0, 0, 0, 1};
  p.ip.src = 0x0a000001;
  p.ip.dst = 0x0a000002;
  p.udp.sport = 0xC123;
  p.bth.opcode = opcode;
  p.bth.dqpn = 0x000123;
  p.bth.psn = 0xFFFFFE;
  p.bth.ack_req = true;
  p.reth = {0x7f0000001000ull, 0x1234, 300};
  p.aeth = {0x1F, 77};
  p.imm = 0xCAFEBABE;
  p.atomic = {0x1000, 0x55, 9, 8};
  p.atomic_ack = 42;
  return p;
}

std::vector<uint8_t> build(const RocePacket& spec, std::size_t payload_len) {
  std::vector<uint8_t> payload(payload_len);
  for (std::size_t i = 0; i < payload_len; ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<uint8_t> out(9000);
  std::size_t n = build_roce(spec, payload, out.data(), out.size());
  out.resize(n);
  return out;
}

}  // namespace

TEST_CASE("every RC opcode builds and parses back with the same fields") {
  for (int op = 0; op < 256; ++op) {
    if (!opcode_known(static_cast<uint8_t>(op))) continue;
    const bool payload = opcode_has(static_cast<uint8_t>(op), kOpPayload);
    for (std::size_t len : payload ? std::vector<std::size_t>{0, 1, 3, 4, 1023, 4096}
                                   : std::vector<std::size_t>{0}) {
      INFO("opcode " << op << " payload " << len);
      auto spec = make_spec(static_cast<uint8_t>(op));
      auto frame = build(spec, len);
      REQUIRE(!frame.empty());
      RocePacket got;
      REQUIRE(parse_roce(frame.data(), frame.size(), got) == DropReason::kNone);
      CHECK(got.bth.opcode == op);
      CHECK(got.bth.dqpn == 0x123);
      CHECK(got.bth.psn == 0xFFFFFE);
      CHECK(got.bth.pad == roce_pad(len));
      CHECK(got.payload_len == len);
      CHECK(got.udp.sport == 0xC123);
      CHECK(got.icrc == got.icrc_computed);
      if (opcode_has(op, kOpReth)) CHECK(got.reth.rkey == 0x1234);
      if (opcode_has(op, kOpAeth)) CHECK(got.aeth.msn == 77);
      if (opcode_has(op, kOpImm)) CHECK(got.imm == 0xCAFEBABE);
      if (opcode_has(op, kOpAtomicEth)) CHECK(got.atomic.compare == 8);
      if (opcode_has(op, kOpAtomicAck)) CHECK(got.atomic_ack == 42);
      if (len) CHECK(frame[got.payload_offset + len - 1] == static_cast<uint8_t>((len - 1) * 7 + 1));
    }
  }
}

TEST_CASE("every truncated length is refused without reading past the buffer") {
  for (uint8_t op : {uint8_t{IBV_OPCODE_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE},
                     uint8_t{IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE}, uint8_t{IBV_OPCODE_RC_SEND_MIDDLE}}) {
    auto frame = build(make_spec(op), 37);
    for (std::size_t n = 0; n < frame.size(); ++n) {
      // A fresh heap copy of exactly n bytes, so ASan sees any over-read.
      std::vector<uint8_t> cut(frame.begin(), frame.begin() + n);
      RocePacket got;
      DropReason r = parse_roce(cut.data(), cut.size(), got);
      CHECK(r == DropReason::kTruncated);
    }
  }
}

TEST_CASE("ethernet padding after the IP datagram is ignored") {
  auto frame = build(make_spec(IBV_OPCODE_RC_ACKNOWLEDGE), 0);
  frame.resize(frame.size() + 6, 0);  // trailer/padding some NICs leave
  RocePacket got;
  CHECK(parse_roce(frame.data(), frame.size(), got) == DropReason::kNone);
}

TEST_CASE("a flipped payload bit is a bad ICRC; masked fields are not") {
  auto frame = build(make_spec(IBV_OPCODE_RC_SEND_ONLY), 100);
  RocePacket got;
  auto bad = frame;
  bad[bad.size() - 10] ^= 0x04;
  CHECK(parse_roce(bad.data(), bad.size(), got) == DropReason::kBadIcrc);
  CHECK(got.payload_len == 100);  // fields are still filled for tools
  auto ecn = frame;
  ecn[14 + 1] |= 0x03;  // switch marks CE: TOS is masked, IP checksum not checked here
  ParseOptions o;
  o.check_ip_checksum = false;
  CHECK(parse_roce(ecn.data(), ecn.size(), got, o) == DropReason::kNone);
}

TEST_CASE("malformed headers give their own drop reason") {
  const auto good = build(make_spec(IBV_OPCODE_RC_SEND_ONLY), 8);
  RocePacket got;
  auto f = good;
  f[12] = 0x86; f[13] = 0xDD;
  CHECK(parse_roce(f.data(), f.size(), got) == DropReason::kNotIpv4);
  f = good; f[14] = 0x65;
  CHECK(parse_roce(f.data(), f.size(), got) == DropReason::kBadIpHeader);
  f = good; f[14 + 12] ^= 1;
  CHECK(parse_roce(f.data(), f.size(), got) == DropReason::kBadIpChecksum);
  ParseOptions nock;
  nock.check_ip_checksum = false;
  f = good; f[14 + 9] = 6;
  CHECK(parse_roce(f.data(), f.size(), got, nock) == DropReason::kNotUdp);
  f = good; f[14 + 20 + 3] = 0x13;  // dport 4883
  CHECK(parse_roce(f.data(), f.size(), got) == DropReason::kNotRoce);
  f = good; f[14 + 20 + 5] += 1;  // UDP length
  CHECK(parse_roce(f.data(), f.size(), got) == DropReason::kBadUdpLength);
  f = good; f[14 + 28 + 1] |= 0x01;  // tver 1
  CHECK(parse_roce(f.data(), f.size(), got) == DropReason::kBadBthVersion);
  f = good; f[14 + 28] = 0x15;
  CHECK(parse_roce(f.data(), f.size(), got) == DropReason::kUnknownOpcode);
  f = good; f[14 + 6] = 0x20;  // more fragments
  CHECK(parse_roce(f.data(), f.size(), got, nock) == DropReason::kIpFragment);
}

TEST_CASE("an ACK claiming payload or a pad longer than its data is refused") {
  auto spec = make_spec(IBV_OPCODE_RC_SEND_ONLY);
  auto f = build(spec, 8);
  f[14 + 28] = IBV_OPCODE_RC_ACKNOWLEDGE;  // 8 payload bytes left over after AETH
  RocePacket got;
  ParseOptions o;
  o.check_icrc = false;
  CHECK(parse_roce(f.data(), f.size(), got, o) == DropReason::kBadPad);
  f = build(make_spec(IBV_OPCODE_RC_RDMA_READ_REQUEST), 0);
  f[14 + 28 + 1] |= 0x30;  // pad 3 with no payload
  CHECK(parse_roce(f.data(), f.size(), got, o) == DropReason::kBadPad);
}

TEST_CASE("802.1Q tagged frames parse; VXLAN carries the RoCE packet inside") {
  auto spec = make_spec(IBV_OPCODE_RC_RDMA_WRITE_ONLY);
  spec.eth.has_vlan = true;
  spec.eth.vlan_tci = 100;
  auto f = build(spec, 64);
  RocePacket got;
  REQUIRE(parse_roce(f.data(), f.size(), got) == DropReason::kNone);
  CHECK(got.eth.vlan_tci == 100);
  CHECK(got.ip_offset == 18);

  spec.eth.has_vlan = false;
  spec.has_outer = true;
  spec.outer.ip.src = 0xc0a80001;
  spec.outer.ip.dst = 0xc0a80002;
  spec.outer.udp.sport = 0xD000;
  spec.outer.vxlan.vni = 5001;
  f = build(spec, 64);
  REQUIRE(parse_roce(f.data(), f.size(), got) == DropReason::kNone);
  CHECK(got.has_outer);
  CHECK(got.outer.vxlan.vni == 5001);
  CHECK(got.outer.ip.dst == 0xc0a80002);
  CHECK(got.ip.dst == 0x0a000002);
  CHECK(got.payload_len == 64);
  CHECK(got.ip_offset == 14 + 20 + 8 + 8 + 14);
  // The outer TTL is not covered by the ICRC either way; the inner packet is.
  f[f.size() - 20] ^= 0xFF;
  CHECK(parse_roce(f.data(), f.size(), got) == DropReason::kBadIcrc);
}

TEST_CASE("build refuses a buffer that is too small") {
  auto spec = make_spec(IBV_OPCODE_RC_SEND_ONLY);
  std::vector<uint8_t> payload(100), out(100);
  CHECK(build_roce(spec, payload, out.data(), out.size()) == 0);
}

TEST_CASE("build refuses a VXLAN frame whose outer IPv4 length would overflow") {
  auto spec = make_spec(IBV_OPCODE_RC_SEND_ONLY);
  spec.has_outer = true;
  // The inner datagram fits in 16 bits, the outer (36 + 14 bytes more) does not.
  const std::size_t inner_max = 0xFFFF - (kIpv4HdrLen + kUdpHdrLen + kBthLen + kIcrcLen);
  std::vector<uint8_t> payload(inner_max - 40), out(70000);
  CHECK(build_roce(spec, payload, out.data(), out.size()) == 0);
  payload.resize(0xFFFF - 51 - (kIpv4HdrLen + kUdpHdrLen + kBthLen + kIcrcLen));  // 65440: no pad
  const std::size_t n = build_roce(spec, payload, out.data(), out.size());
  REQUIRE(n != 0);
  RocePacket got;
  CHECK(parse_roce(out.data(), n, got) == DropReason::kNone);
  CHECK(got.outer.ip.total_len == 0xFFFE);
}

// parse_roce checks an option-less IPv4 header's checksum by adding native
// 32-bit words (roce_packet.cc): any header that write_ipv4 checksummed
// passes, and any one flipped bit in the checksummed fields is refused.
TEST_CASE("the IPv4 checksum check accepts every valid header and refuses every single-bit error") {
  std::mt19937 rng(5);
  for (int t = 0; t < 300; ++t) {
    RocePacket spec = make_spec(IBV_OPCODE_RC_SEND_ONLY);
    spec.ip.src = static_cast<uint32_t>(rng());
    spec.ip.dst = static_cast<uint32_t>(rng());
    spec.ip.tos = static_cast<uint8_t>(rng());
    spec.ip.ttl = static_cast<uint8_t>(rng());
    spec.ip.id = static_cast<uint16_t>(rng());
    const auto good = build(spec, rng() % 64);
    RocePacket got;
    REQUIRE(parse_roce(good.data(), good.size(), got) == DropReason::kNone);
    // TOS, id, flags/fragment, TTL, protocol, checksum, addresses: the
    // checksum is checked before what these fields mean.
    static const std::size_t kFields[] = {1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
    const std::size_t byte = 14 + kFields[rng() % 17];
    auto f = good;
    f[byte] ^= static_cast<uint8_t>(1u << (rng() % 8));
    CHECK(parse_roce(f.data(), f.size(), got) == DropReason::kBadIpChecksum);
  }
}
