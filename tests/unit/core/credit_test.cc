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

// The lab's path failure, in simulated time: 4 paths chosen by UDP source
// port (as an ECMP hash does), one of them dead in both directions from
// 50 us on, credits on, and a 20 ms QP timeout as tandem-perf asks for. Data
// on the dead path, credit ACKs on it and the last packets of a burst on it
// must all be recovered in far less than one QP timeout: path health moves
// new data off the path and never probes with a retransmission, the
// receiver kicks a silent sender with its grant again, and a short tail
// timer (RTO_low) resends a lost tail.
TEST_CASE("a dead path under credits is recovered without waiting for the QP timeout") {
  QpSetup s;
  s.mtu = 1024;
  s.cc = "credit";
  s.path = "round_robin";
  s.num_paths = 4;
  s.timeout_ns = 20'000'000;
  s.credit_unsched_bytes = 8 * 1024;
  Loop l(4 << 20, s);
  REQUIRE(l.ok);
  l.net.delay_ns = 50'000;  // RTTs like the lab's, where processes share cores
  int dead = -1;
  uint64_t dead_data = 0, dead_acks = 0;
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    const int path = p.udp.sport % 4;
    if (dead < 0 && from_a) dead = path;  // the path A's first packet took
    if (l.now < 50'000 || path != dead) return true;
    ++(from_a ? dead_data : dead_acks);
    return false;
  };
  for (uint32_t i = 0; i < 2 << 20; ++i) l.a.mem[i] = static_cast<uint8_t>(i * 13 + 5);
  constexpr uint32_t kMsgs = 32, kLen = 64 * 1024;
  for (uint32_t m = 0; m < kMsgs; ++m)
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, m, l.a, m * kLen, kLen, &l.b, m * kLen)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == kMsgs; }));
  for (const auto& c : l.a.done) CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(std::equal(l.a.mem.begin(), l.a.mem.begin() + kMsgs * kLen, l.b.mem.begin()));
  CHECK(dead_data > 0);
  CHECK(dead_acks > 0);
  CHECK(l.a.t.path_policy(l.a.qpn)->path_stats(0).removals +
            l.a.t.path_policy(l.a.qpn)->path_stats(1).removals +
            l.a.t.path_policy(l.a.qpn)->path_stats(2).removals +
            l.a.t.path_policy(l.a.qpn)->path_stats(3).removals >= 1);
  // No timeout waited for: one alone would be 20 ms.
  CHECK(l.a.counters().timeouts == 0);
  CHECK(l.now < 20'000'000);
}

// Credit ACKs all lost for a while (the ACK path died): the sender has used
// its credit and waits; the receiver hears nothing. Its kick (the whole
// grant again, and a batch more) restarts the sender long before the QP's
// 20 ms timeout would.
TEST_CASE("a silent credit sender is kicked with its grant again") {
  QpSetup s;
  s.mtu = 1024;
  s.cc = "credit";
  s.timeout_ns = 20'000'000;
  s.credit_unsched_bytes = 4 * 1024;
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    return from_a || l.now < 20'000 || l.now > 60'000 || p.bth.opcode != IBV_OPCODE_RC_ACKNOWLEDGE;
  };
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 256 * 1024, &l.b, 0)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
  CHECK(l.b.t.credit_kicks() >= 1);
  CHECK(l.now < 2'000'000);
}

// Every credit-only ACK lost (the receiver's grants between data ACKs, and
// its kicks, which repeat the last acknowledged PSN): once a data ACK acks
// everything and grants nothing new, the sender is out of credit with
// nothing in flight, and the receiver gives up kicking after 8. Without its
// persist timer the sender would wait forever; with it, one packet goes
// without credit after an RTO, and that packet's ACK brings the grant.
TEST_CASE("a credit sender whose grants and kicks all died probes after an RTO") {
  QpSetup s;
  s.mtu = 1024;
  s.cc = "credit";
  s.timeout_ns = 1'000'000;
  s.credit_unsched_bytes = 4 * 1024;
  TransportConfig cfg;
  cfg.credit.rate_gbps = 0.01;  // a grant every ~0.8 ms: each goes in a credit-only ACK
  Loop l(1 << 20, s, {}, 1, cfg);
  REQUIRE(l.ok);
  uint32_t last_psn = UINT32_MAX;
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    if (from_a || p.bth.opcode != IBV_OPCODE_RC_ACKNOWLEDGE) return true;
    if (p.bth.psn == last_psn) return false;
    last_psn = p.bth.psn;
    return true;
  };
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 16 * 1024, &l.b, 0)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
  CHECK(l.a.t.qp_counters(l.a.qpn)->credit_probes >= 1);
}

// The last packets of a burst lost, nothing sent after them: no SACK can
// reveal the loss, only a timer. With few packets out the QP uses a timer
// of a few RTTs (IRN's RTO_low), not its 20 ms timeout.
TEST_CASE("a lost tail is resent after a few RTTs, not after the QP timeout") {
  QpSetup s;
  s.mtu = 1024;
  s.timeout_ns = 20'000'000;
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  bool dropped_tail = false;
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    // The message's last packet, first transmission only.
    if (from_a && !dropped_tail && p.bth.psn == 100 + 63) {
      dropped_tail = true;
      return false;
    }
    return true;
  };
  // A first message gives the QP its RTT estimate.
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 32 * 1024, &l.b, 0)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 2, l.a, 0, 32 * 1024, &l.b, 0)) == 0);
  const uint64_t t0 = l.now;
  REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
  CHECK(dropped_tail);
  CHECK(l.a.done[1].status == IBV_WC_SUCCESS);
  CHECK(l.a.counters().timeouts == 1);
  CHECK(l.now - t0 < 1'000'000);
}

// grant_credits visits only QPs whose senders are active: a credit QP joins
// the granting list with its first request and leaves it once silent with
// its kicks spent, so thousands of idle credit QPs cost a poll nothing.
TEST_CASE("idle credit QPs leave the granting list; a new request brings its QP back") {
  QpSetup s;
  s.mtu = 1024;
  s.cc = "credit";
  s.credit_unsched_bytes = 4 * 1024;
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  CHECK(l.b.t.granting_qps() == 0);  // connected, nothing received yet
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 64 * 1024, &l.b, 0)) == 0);
  bool listed = false;
  REQUIRE(l.run([&] {
    listed = listed || l.b.t.granting_qps() == 1;
    return l.a.done.size() == 1;
  }));
  CHECK(listed);
  CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
  // Silent for longer than kMaxKicks x kIdleNs (8 x 100 us): kicked, then off the list.
  const uint64_t kicks = l.b.t.credit_kicks();
  l.run([&] { return l.b.t.granting_qps() == 0; });
  CHECK(l.b.t.granting_qps() == 0);
  CHECK(l.b.t.credit_kicks() > kicks);
  CHECK(l.b.t.credit_kicks() - kicks <= 8);
  const uint64_t after = l.b.t.credit_kicks();
  for (int i = 0; i < 100; ++i) {
    l.now += 1'000'000;
    l.b.t.poll(l.now);
  }
  CHECK(l.b.t.credit_kicks() == after);  // off the list: no more kicks for this silence
  // A new transfer: the QP is granted credit again and completes.
  for (uint32_t i = 0; i < 64 * 1024; ++i) l.a.mem[i] = static_cast<uint8_t>(i * 13 + 5);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 2, l.a, 0, 64 * 1024, &l.b, 128 * 1024)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
  CHECK(l.a.done[1].status == IBV_WC_SUCCESS);
  CHECK(std::equal(l.a.mem.begin(), l.a.mem.begin() + 64 * 1024, l.b.mem.begin() + 128 * 1024));
}
