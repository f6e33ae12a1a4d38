// What the core tells the I/O layer: descriptors (zero-copy payload, peer,
// path), coalesced ACKs, ECN echo, and the deadline it must be called back at.
#include <catch2/catch.hpp>

#include "common/wire/entropy.h"
#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;
using tandem::common::DropReason;

TEST_CASE("data descriptors point into registered memory and name the peer and path") {
  QpSetup s;
  s.mtu = 1024;
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 4096, 3000, &l.b, 0)) == 0);
  l.a.t.poll(l.now);
  REQUIRE(l.a.t.tx().size() == 3);
  uint16_t port = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    const TxDesc& d = l.a.t.tx().front();
    CHECK(d.local_qpn == l.a.qpn);
    CHECK(d.remote_qpn == l.b.qpn);
    CHECK(d.bth.dqpn == l.b.qpn);
    CHECK(d.peer == 2);
    CHECK(tandem::common::is_entropy_port(d.udp_sport));
    if (i == 0) port = d.udp_sport;
    CHECK(d.udp_sport == port);  // "single": one path per QP
    CHECK(d.bth.psn == s.sq_psn_a + i);
    CHECK(d.num_segs == 1);
    CHECK(d.segs[0].data == l.a.mem.data() + 4096 + i * 1024);  // zero copy
    CHECK(d.payload_len == (i < 2 ? 1024u : 952u));
    CHECK(d.has_xeth);
    CHECK(d.xeth.msg_offset == i * 1024);
    CHECK(d.bth.ack_req == (i == 2));
    l.a.t.tx().pop();
  }
}

TEST_CASE("the responder coalesces ACKs: one per AckReq or per ack_every packets") {
  QpSetup s;
  s.mtu = 256;
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  // 64 packets in one message: AckReq every 16th (ack_every) and on the last.
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 64 * 256, &l.b, 0)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(l.b.counters().rx_pkts == 64);
  CHECK(l.b.counters().acks_tx <= 5);
  CHECK(l.b.counters().acks_tx >= 1);
}

TEST_CASE("a CE-marked request is echoed to the requester in the next ACK") {
  QpSetup s;
  Loop l(1 << 16, s);
  REQUIRE(l.ok);
  l.record = true;
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 100, &l.b, 0)) == 0);
  l.a.t.poll(l.now);
  const TxDesc d = l.a.t.tx().front();
  l.a.t.tx().pop();
  uint8_t buf[2048];
  FrameAddrs fa;
  fa.tos = 0x03;  // CE
  const std::size_t n = build_frame(d, fa, buf, sizeof buf);
  CHECK(l.inject(l.b, std::vector<uint8_t>(buf, buf + n)) == DropReason::kNone);
  CHECK(l.b.counters().ecn_ce_rx == 1);
  l.b.t.poll(l.now);
  REQUIRE(!l.b.t.tx().empty());
  const TxDesc& ack = l.b.t.tx().front();
  CHECK(ack.bth.opcode == IBV_OPCODE_RC_ACKNOWLEDGE);
  CHECK(ack.bth.becn);
  CHECK(ack.bth.psn == d.bth.psn);
}

TEST_CASE("with a CNP interval, CE-marked requests make CNPs, at most one per interval") {
  QpSetup s;
  Loop l(1 << 16, s);
  REQUIRE(l.ok);
  QpAttr a;
  a.peer = 1;
  a.reorder_delay_ns = s.reorder_delay_ns;
  a.cnp_interval_ns = 50'000;
  REQUIRE(l.b.t.modify_qp(l.b.qpn, a, IBV_QP_AV) == 0);
  for (int i = 0; i < 3; ++i)
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, i, l.a, 0, 100, &l.b, 0)) == 0);
  l.a.t.poll(l.now);
  std::vector<TxDesc> d;
  while (!l.a.t.tx().empty()) { d.push_back(l.a.t.tx().front()); l.a.t.tx().pop(); }
  REQUIRE(d.size() == 3);
  uint8_t buf[2048];
  FrameAddrs ce;
  ce.tos = 0x03;
  for (int i = 0; i < 3; ++i) {
    const std::size_t n = build_frame(d[i], ce, buf, sizeof buf);
    CHECK(l.inject(l.b, std::vector<uint8_t>(buf, buf + n)) == DropReason::kNone);
  }
  l.b.t.poll(l.now);
  int cnps = 0;
  while (!l.b.t.tx().empty()) {
    const TxDesc& x = l.b.t.tx().front();
    if (x.bth.opcode == tandem::common::kOpcodeCnp) {
      ++cnps;
      CHECK(x.bth.dqpn == l.a.qpn);
      const std::size_t n = build_frame(x, FrameAddrs{}, buf, sizeof buf);
      CHECK(l.inject(l.a, std::vector<uint8_t>(buf, buf + n)) == DropReason::kNone);
    }
    l.b.t.tx().pop();
  }
  CHECK(cnps == 1);
  CHECK(l.b.counters().cnp_tx == 1);
  CHECK(l.a.counters().cnp_rx == 1);
}

TEST_CASE("next_deadline exposes the retransmission timer and the reorder delay") {
  QpSetup s;
  s.mtu = 256;
  s.timeout_ns = 100'000;
  s.reorder_delay_ns = 7'000;
  Loop l(1 << 16, s);
  REQUIRE(l.ok);
  CHECK(l.a.t.next_deadline() == kNever);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 3 * 256, &l.b, 0)) == 0);
  const uint64_t t0 = l.now;
  l.a.t.poll(t0);
  CHECK(l.a.t.next_deadline() == t0 + s.timeout_ns);
  // Deliver packets 0 and 2 only: B has a gap and will SACK it after the delay.
  std::vector<TxDesc> d;
  while (!l.a.t.tx().empty()) { d.push_back(l.a.t.tx().front()); l.a.t.tx().pop(); }
  REQUIRE(d.size() == 3);
  uint8_t buf[2048];
  for (int i : {0, 2}) {
    const std::size_t n = build_frame(d[i], FrameAddrs{}, buf, sizeof buf);
    CHECK(l.inject(l.b, std::vector<uint8_t>(buf, buf + n)) == DropReason::kNone);
  }
  CHECK(l.b.t.next_deadline() == t0 + s.reorder_delay_ns);
  CHECK(l.b.counters().reorder_depth_max == 1);  // one PSN ahead of the expected one
  l.b.t.poll(t0 + s.reorder_delay_ns - 1);
  while (!l.b.t.tx().empty()) {
    CHECK(l.b.t.tx().front().bth.opcode != IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE);  // no SACK yet
    l.b.t.tx().pop();
  }
  l.b.t.poll(t0 + s.reorder_delay_ns);
  bool sack = false;
  while (!l.b.t.tx().empty()) {
    const TxDesc& x = l.b.t.tx().front();
    if (x.bth.opcode == IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE) {
      sack = true;
      CHECK(x.bth.psn == d[0].bth.psn);            // cumulative: packet 0
      CHECK(sack_base(x.atomic_ack) == d[1].bth.psn);  // the gap
      CHECK(sack_bitmap(x.atomic_ack) == 0b10);     // packet 2 arrived
    }
    l.b.t.tx().pop();
  }
  CHECK(sack);
}

// The QP calls the default policies (fixed_window, single) directly rather
// than through their interfaces: they must still hold the window and see
// every packet sent and every ACK that gives an RTT sample.
TEST_CASE("the default policies, called directly, hold the window and count every packet and ACK") {
  QpSetup s;
  s.mtu = 1024;
  s.cc_window = 16 * 1024;  // 16 packets, an AckReq (ack_every) at the end of each round
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 64 * 1024, &l.b, 0)) == 0);
  l.a.t.poll(l.now);
  CHECK(l.a.t.tx().size() == 16);  // the window, not the 64 packets
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  const PathStats ps = l.a.t.path_policy(l.a.qpn)->path_stats(0);
  const QpCounters& c = l.a.counters();
  REQUIRE(c.retx_pkts == 0);
  CHECK(c.tx_data_pkts == 64);
  CHECK(ps.pkts == c.tx_pkts);
  CHECK(ps.acks == 64);
  CHECK(l.b.t.path_policy(l.b.qpn)->path_stats(0).pkts == l.b.counters().tx_pkts);
}
