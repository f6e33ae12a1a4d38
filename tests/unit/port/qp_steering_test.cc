// Several lcores per port (rnic/port/qp_steering.h): the QP slot ranges of
// each lcore, and the destination QP read from a frame to find its owner.
#include <catch2/catch.hpp>

#include <vector>

#include "common/wire/roce_packet.h"
#include "rnic/port/qp_steering.h"

using namespace tandem;
using namespace tandem::rnic::port;

namespace {

std::vector<uint8_t> frame(uint32_t dqpn, bool vlan = false, bool vxlan = false) {
  common::RocePacket p;
  p.eth.dst = {2, 0, 0, 0, 0, 2};
  p.eth.src = {2, 0, 0, 0, 0, 1};
  p.eth.has_vlan = vlan;
  p.eth.vlan_tci = 7;
  p.ip.src = 0x0a000001;
  p.ip.dst = 0x0a000002;
  p.udp.sport = 0xC001;
  p.bth.opcode = IBV_OPCODE_RC_RDMA_WRITE_ONLY;
  p.bth.dqpn = dqpn;
  p.reth = {0x1000, 5, 64};
  if (vxlan) {
    p.has_outer = true;
    p.outer.ip.src = 0xc0a80001;
    p.outer.ip.dst = 0xc0a80002;
    p.outer.vxlan.vni = 100;
  }
  std::vector<uint8_t> payload(64, 0x5A), out(2048);
  out.resize(common::build_roce(p, payload, out.data(), out.size()));
  return out;
}

}  // namespace

TEST_CASE("each lcore's QP slots are its own range, and the owner of a QPN is the lcore of its slot") {
  for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 8u}) {
    INFO("lcores " << n);
    const QpShards sh(n);
    CHECK(sh.lcores() == n);
    CHECK(sh.slots_per_lcore() * n <= kQpSlots);
    for (uint32_t k = 0; k < n; ++k) {
      const uint32_t first = sh.slot_base(k), last = first + sh.slots_per_lcore() - 1;
      CHECK(last < kQpSlots);
      for (uint32_t gen : {1u, 7u, 255u}) {  // host QPN = generation << 16 | slot
        CHECK(sh.owner(gen << 16 | first) == k);
        CHECK(sh.owner(gen << 16 | last) == k);
      }
      if (k > 0) CHECK(first == sh.slot_base(k - 1) + sh.slots_per_lcore());
    }
    // Slots past the last lcore's range (3 lcores use 4 ranges) belong to no
    // lcore: such a frame stays with lcore 0, which drops it as unknown_qpn.
    CHECK(sh.owner(1u << 16 | (kQpSlots - 1)) == (n == 3 || n == 5 ? 0 : n - 1));
  }
}

TEST_CASE("the destination QP is read from plain, VLAN and VXLAN RoCEv2 frames") {
  for (bool vlan : {false, true})
    for (bool vxlan : {false, true}) {
      INFO("vlan " << vlan << " vxlan " << vxlan);
      const auto f = frame(0x18123, vlan, vxlan);
      CHECK(peek_dest_qpn(f.data(), static_cast<uint32_t>(f.size())) == 0x18123);
      CHECK(QpShards(2).owner(peek_dest_qpn(f.data(), static_cast<uint32_t>(f.size()))) == 1);
    }
}

TEST_CASE("frames that are not RoCEv2, or too short to hold a BTH, name no QP") {
  auto f = frame(0x10001);
  for (uint32_t len = 0; len < 14 + 20 + 8 + 12; ++len)  // every cut before the BTH's QPN ends
    CHECK(peek_dest_qpn(f.data(), len) == kNoQpn);
  auto arp = f;
  arp[12] = 0x08;
  arp[13] = 0x06;
  CHECK(peek_dest_qpn(arp.data(), static_cast<uint32_t>(arp.size())) == kNoQpn);
  auto tcp = f;
  tcp[14 + 9] = 6;
  CHECK(peek_dest_qpn(tcp.data(), static_cast<uint32_t>(tcp.size())) == kNoQpn);
  auto other_port = f;
  other_port[14 + 20 + 2] = 0x13;  // UDP destination 0x13B7, not 4791 (0x12B7)
  CHECK(peek_dest_qpn(other_port.data(), static_cast<uint32_t>(other_port.size())) == kNoQpn);
  auto bad_ihl = f;
  bad_ihl[14] = 0x44;  // IHL 4: shorter than an IPv4 header
  CHECK(peek_dest_qpn(bad_ihl.data(), static_cast<uint32_t>(bad_ihl.size())) == kNoQpn);
  auto vx = frame(0x10001, false, true);
  for (uint32_t len = 0; len < 14 + 20 + 8 + 8 + 14 + 20 + 8 + 12; ++len)
    CHECK(peek_dest_qpn(vx.data(), len) == kNoQpn);
}
