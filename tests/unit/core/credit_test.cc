// Receiver-driven credits through the transport: the unscheduled packets go
// at once, the rest only against credit the responder puts in its ACKs'
// AETH credit field (credit_wire.h); QPs without credits send "invalid".
#include <catch2/catch.hpp>

#include <set>

#include "rnic/core/credit_wire.h"
#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;

TEST_CASE("a credit QP sends its unscheduled packets, then only against granted credit") {
  QpSetup s;
  s.mtu = 1024;
  s.cc = "credit";
  s.credit_unsched_bytes = 8 * 1024;  // 8 packets
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  for (uint32_t i = 0; i < 64 * 1024; ++i) l.a.mem[i] = static_cast<uint8_t>(i * 7 + 1);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 64 * 1024, &l.b, 128 * 1024)) == 0);
  l.a.t.poll(l.now);
  CHECK(l.a.t.tx().size() == 8);  // nothing granted yet
  std::set<uint8_t> codes;
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    if (!from_a && p.bth.opcode == IBV_OPCODE_RC_ACKNOWLEDGE) codes.insert(p.aeth.syndrome & 0x1F);
    return true;
  };
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
  CHECK(std::equal(l.a.mem.begin(), l.a.mem.begin() + 64 * 1024, l.b.mem.begin() + 128 * 1024));
  REQUIRE_FALSE(codes.empty());
  CHECK(codes.count(kCreditInvalid) == 0);
  const CcStats st = l.a.t.cc_policy(l.a.qpn)->stats();
  CHECK(st.credits_used == 64 - 8);
  CHECK(st.credits_received >= 56);
  CHECK(st.credit_stalls >= 1);
  CHECK(l.b.t.credits_granted() >= 56);
}

TEST_CASE("a credit sender whose ACKs are lost still completes (credit is absolute)") {
  QpSetup s;
  s.mtu = 1024;
  s.cc = "credit";
  s.credit_unsched_bytes = 4 * 1024;
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  int acks = 0;
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    // Drop every other ACK: the next one carries the whole limit.
    if (!from_a && p.bth.opcode == IBV_OPCODE_RC_ACKNOWLEDGE) return (++acks % 2) == 0;
    return true;
  };
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 32 * 1024, &l.b, 0)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
}

TEST_CASE("without the credit policy ACKs carry the invalid credit code") {
  QpSetup s;
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  std::set<uint8_t> codes;
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    if (!from_a && p.bth.opcode == IBV_OPCODE_RC_ACKNOWLEDGE) codes.insert(p.aeth.syndrome & 0x1F);
    return true;
  };
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 8 * 1024, &l.b, 0)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(codes == std::set<uint8_t>{kCreditInvalid});
}

TEST_CASE("round_robin sprays one QP's packets over its path set") {
  QpSetup s;
  s.path = "round_robin";
  s.num_paths = 4;
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 8 * 1024, &l.b, 0)) == 0);
  l.a.t.poll(l.now);
  std::set<uint16_t> ports;
  while (!l.a.t.tx().empty()) {
    ports.insert(l.a.t.tx().front().udp_sport);
    l.a.t.tx().pop();
  }
  CHECK(ports.size() == 4);
}
