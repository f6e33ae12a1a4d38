// The active-QP list: poll() and next_deadline() visit only QPs with work
// (WRs to send, packets in flight, ACKs to send, timers), so that a port
// with thousands of idle QPs costs no more per poll than one with a few.
#include <catch2/catch.hpp>

#include <vector>

#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;

namespace {

// Brings `n` more QPs on `h` to RTS, connected to QPNs nobody has: they
// exist and accept work, but have none.
std::vector<uint32_t> add_idle_qps(Host& h, uint32_t n) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < n; ++i) {
    QpInitAttr init;
    init.send_cq = init.recv_cq = h.cq;
    const uint32_t q = h.t.create_qp(init);
    REQUIRE(q != 0);
    QpAttr a;
    a.state = QpState::kInit;
    REQUIRE(h.t.modify_qp(q, a, IBV_QP_STATE) == 0);
    a.state = QpState::kRtr;
    a.dest_qp_num = 0x7000 + i;
    a.peer = 9;
    REQUIRE(h.t.modify_qp(q, a, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU |
                                    IBV_QP_AV) == 0);
    a.state = QpState::kRts;
    REQUIRE(h.t.modify_qp(q, a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
    out.push_back(q);
  }
  return out;
}

}  // namespace

TEST_CASE("idle QPs leave the active list; a WR puts its QP back and the transfer completes") {
  Loop l(1 << 16);
  REQUIRE(l.ok);
  const std::vector<uint32_t> idle = add_idle_qps(l.a, 60);
  l.settle();
  CHECK(l.a.t.active_qps() == 0);
  CHECK(l.b.t.active_qps() == 0);
  CHECK(l.a.t.next_deadline() == kNever);
  CHECK(l.a.t.poll(l.now) == 0);

  fill_pattern(l.a.mem, 0, 5000, 7);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 5000, &l.b, 8192)) == 0);
  CHECK(l.a.t.active_qps() == 1);  // only the QP that has work
  REQUIRE(l.run([&] { return !l.a.done.empty(); }));
  CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
  CHECK(std::equal(l.a.mem.begin(), l.a.mem.begin() + 5000, l.b.mem.begin() + 8192));
  l.settle();
  // The responder's ACK went out and the requester's data was acknowledged:
  // neither side has a QP with work left.
  CHECK(l.a.t.active_qps() == 0);
  CHECK(l.b.t.active_qps() == 0);
  CHECK(l.a.t.next_deadline() == kNever);
  // The idle QPs sent nothing all along.
  for (uint32_t q : idle) CHECK(l.a.t.qp_counters(q)->tx_pkts == 0);
}

TEST_CASE("a QP with unacknowledged packets stays active and its retransmission timer fires") {
  QpSetup s;
  s.timeout_ns = 100'000;
  Loop l(1 << 16, s);
  REQUIRE(l.ok);
  add_idle_qps(l.a, 30);
  l.settle();
  REQUIRE(l.a.t.active_qps() == 0);
  l.block_a_to_b = true;
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 3000, &l.b, 0)) == 0);
  // Everything sent, nothing acknowledged: the QP keeps a timer.
  l.run([&] { return l.a.counters().tx_data_pkts >= 3; });
  l.a.t.poll(l.now);
  CHECK(l.a.t.active_qps() == 1);
  CHECK(l.a.t.next_deadline() != kNever);
  l.block_a_to_b = false;
  REQUIRE(l.run([&] { return !l.a.done.empty(); }));
  CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
  CHECK(l.a.counters().timeouts >= 1);
  l.settle();
  CHECK(l.a.t.active_qps() == 0);
}

TEST_CASE("a received request makes the responder's QP active until its ACK is sent") {
  Loop l(1 << 16);
  REQUIRE(l.ok);
  add_idle_qps(l.b, 40);
  l.settle();
  REQUIRE(l.b.t.active_qps() == 0);
  l.record = true;
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 100, &l.b, 0)) == 0);
  l.a.t.poll(l.now);
  REQUIRE(l.a.t.tx().size() == 1);
  // Deliver A's request to B by hand: B has an ACK to send.
  TxDesc d = l.a.t.tx().front();
  l.a.t.tx().pop();
  uint8_t frame[512];
  FrameAddrs fa;
  const std::size_t n = build_frame(d, fa, frame, sizeof frame);
  REQUIRE(n > 0);
  CHECK(l.inject(l.b, std::vector<uint8_t>(frame, frame + n)) == tandem::common::DropReason::kNone);
  CHECK(l.b.t.active_qps() == 1);
  CHECK(l.b.t.poll(l.now) == 1);  // the ACK
  CHECK(l.b.t.tx().front().bth.opcode == IBV_OPCODE_RC_ACKNOWLEDGE);
  CHECK(l.b.t.active_qps() == 0);
}

TEST_CASE("destroying an active QP takes it off the list; moving to ERROR leaves nothing to poll") {
  Loop l(1 << 16);
  REQUIRE(l.ok);
  const std::vector<uint32_t> idle = add_idle_qps(l.a, 3);
  l.settle();
  // WRs toward QPNs nobody has: packets in flight, never acknowledged.
  REQUIRE(l.a.t.post_send(idle[0], make_wr(IBV_WR_SEND, 1, l.a, 0, 10)) == 0);
  REQUIRE(l.a.t.post_send(idle[1], make_wr(IBV_WR_SEND, 2, l.a, 0, 10)) == 0);
  CHECK(l.a.t.active_qps() == 2);
  l.a.t.poll(l.now);
  CHECK(l.a.t.active_qps() == 2);
  REQUIRE(l.a.t.destroy_qp(idle[0]) == 0);
  CHECK(l.a.t.active_qps() == 1);
  QpAttr a;
  a.state = QpState::kError;
  REQUIRE(l.a.t.modify_qp(idle[1], a, IBV_QP_STATE) == 0);
  l.a.t.poll(l.now);
  CHECK(l.a.t.active_qps() == 0);
  l.a.drain_cq();
  REQUIRE(l.a.done.size() == 1);
  CHECK(l.a.done[0].wr_id == 2);
  CHECK(l.a.done[0].status == IBV_WC_WR_FLUSH_ERR);
}

TEST_CASE("a QP with a huge message queues a quantum, then the others get their turn in the same poll") {
  TransportConfig cfg;
  cfg.tx_queue_capacity = 4096;
  QpSetup s;
  s.window = 4096;
  s.cc_window = 64ull << 20;
  Loop l(1 << 22, s, {}, 1, cfg);
  REQUIRE(l.ok);
  // A second connected pair on the same two transports.
  const uint32_t a2 = l.a.t.create_qp(qp_init(s, l.a.cq)), b2 = l.b.t.create_qp(qp_init(s, l.b.cq));
  REQUIRE(a2 != 0);
  REQUIRE(b2 != 0);
  REQUIRE(bring_up(l.a.t, a2, b2, 7000, 9000, s, 2) == 0);
  REQUIRE(bring_up(l.b.t, b2, l.a.qpn, 9000, 7000, s, 1) == 0);
  // The first QP posts 2 MiB (2,048 packets), then the second a single packet.
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 2 << 20, &l.b, 0)) == 0);
  REQUIRE(l.a.t.post_send(a2, make_wr(IBV_WR_RDMA_WRITE, 2, l.a, 0, 512, &l.b, 3 << 20)) == 0);
  l.a.t.poll(l.now);
  TxQueue& tx = l.a.t.tx();
  REQUIRE(tx.size() > Transport::kTxQuantum);
  uint32_t i = 0, second_at = UINT32_MAX;
  for (; !tx.empty(); tx.pop(), ++i)
    if (tx.front().local_qpn == a2 && second_at == UINT32_MAX) second_at = i;
  // Whichever QP went first, the second's packet is within the first two quanta.
  CHECK(second_at <= Transport::kTxQuantum);
  CHECK(i == 2048 + 1);  // and the queue still took everything it had room for in one poll
}

TEST_CASE("TX turns go by owner: eight busy QPs of one application do not outweigh another's one") {
  // A TX queue smaller than what the busy QPs have: each poll fills it, and
  // who fills it is the fairness question (the doorbell storm of tests/system/hostile).
  TransportConfig cfg;
  cfg.tx_queue_capacity = 256;
  cfg.owner_inflight_pkts = 0;  // turns only (the in-flight share: the next case)
  QpSetup s;
  s.window = 4096;
  s.cc_window = 64ull << 20;
  Loop l(1 << 22, s, {}, 1, cfg);
  REQUIRE(l.ok);
  // The loop's own pair is the hostile application's first QP; seven more, and the victim's one.
  auto pair = [&](uint32_t owner, uint32_t i) {
    QpInitAttr ia = qp_init(s, l.a.cq), ib = qp_init(s, l.b.cq);
    ia.owner = owner;
    const uint32_t a = l.a.t.create_qp(ia), b = l.b.t.create_qp(ib);
    REQUIRE(a != 0);
    REQUIRE(b != 0);
    REQUIRE(bring_up(l.a.t, a, b, 100 * i, 5000 * i, s, 2) == 0);
    REQUIRE(bring_up(l.b.t, b, a, 5000 * i, 100 * i, s, 1) == 0);
    return a;
  };
  std::vector<uint32_t> hostile;
  for (uint32_t i = 1; i <= 8; ++i) hostile.push_back(pair(1, i));
  const uint32_t victim = pair(2, 9);
  // Every QP has 1 MiB (1,024 packets) to send: far more than a poll's queue.
  for (uint32_t i = 0; i < hostile.size(); ++i)
    REQUIRE(l.a.t.post_send(hostile[i], make_wr(IBV_WR_RDMA_WRITE, i, l.a, 0, 1 << 20, &l.b, 0)) == 0);
  REQUIRE(l.a.t.post_send(victim, make_wr(IBV_WR_RDMA_WRITE, 99, l.a, 0, 1 << 20, &l.b, 1 << 20)) == 0);
  // Several polls, so the rotation's starting point moves; count who got the queue.
  uint32_t mine = 0, theirs = 0;
  for (int p = 0; p < 6; ++p) {
    l.a.t.poll(l.now);
    TxQueue& tx = l.a.t.tx();
    REQUIRE(tx.full());
    for (; !tx.empty(); tx.pop()) (tx.front().local_qpn == victim ? mine : theirs) += 1;
  }
  // Turns per QP gave the victim 64 of these 1,536 packets (one poll in six
  // started its round near it); per owner it gets half.
  CHECK(mine >= 2 * 1536 / 5);
  CHECK(theirs >= 2 * 1536 / 5);
}

TEST_CASE("one owner's QPs share TransportConfig::owner_inflight_pkts, zero-length packets included") {
  TransportConfig cfg;
  cfg.tx_queue_capacity = 4096;
  cfg.owner_inflight_pkts = 300;
  QpSetup s;
  s.window = 4096;
  Loop l(1 << 20, s, {}, 1, cfg);
  REQUIRE(l.ok);
  std::vector<uint32_t> mine;
  for (uint32_t i = 1; i <= 5; ++i) {
    QpInitAttr ia = qp_init(s, l.a.cq), ib = qp_init(s, l.b.cq);
    ia.owner = i == 5 ? 8 : 7;
    const uint32_t a = l.a.t.create_qp(ia), b = l.b.t.create_qp(ib);
    REQUIRE(a != 0);
    REQUIRE(b != 0);
    REQUIRE(bring_up(l.a.t, a, b, 100 * i, 5000 * i, s, 2) == 0);
    REQUIRE(bring_up(l.b.t, b, a, 5000 * i, 100 * i, s, 1) == 0);
    mine.push_back(a);
  }
  const uint32_t late = mine.back();  // owner 8's
  mine.pop_back();
  // 4 x 200 zero-length WRITEs: nothing in any byte window, 800 packets.
  for (uint32_t q : mine)
    for (uint32_t k = 0; k < 200; ++k)
      REQUIRE(l.a.t.post_send(q, make_wr(IBV_WR_RDMA_WRITE, k, l.a, 0, 0, &l.b, 0)) == 0);
  // The loop's own QP has no owner: its 400 packets are not held back.
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1000, l.a, 0, 400 << 10, &l.b, 0)) == 0);
  for (int p = 0; p < 4; ++p) l.a.t.poll(l.now);  // nothing acknowledged yet
  uint32_t owned = 0, other = 0;
  for (TxQueue& tx = l.a.t.tx(); !tx.empty(); tx.pop()) (tx.front().local_qpn == l.a.qpn ? other : owned) += 1;
  CHECK(owned == 300);  // alone, owner 7 has the whole budget
  CHECK(other == 400);
  // A second owner gets an equal part: half of the budget.
  for (uint32_t k = 0; k < 400; ++k)
    REQUIRE(l.a.t.post_send(late, make_wr(IBV_WR_RDMA_WRITE, 2000 + k, l.a, 0, 0, &l.b, 0)) == 0);
  l.a.t.poll(l.now);
  CHECK(l.a.t.tx().size() == 150);
  while (!l.a.t.tx().empty()) l.a.t.tx().pop();
  // Acknowledged packets give the share back: everything completes (what
  // was popped above is lost: the retransmission timers resend it).
  REQUIRE(l.run([&] { return l.a.done.size() == 1201; }));
  for (const Completion& c : l.a.done) CHECK(c.status == IBV_WC_SUCCESS);
  // READs and atomics hold no share (their responses come back, nothing of
  // theirs is in flight): one done leaves owner 8 idle and owner 7 the whole budget.
  // (Its first response lost, and a WRITE after it, whose ACK then covers
  // the READ's PSNs: neither that nor the loss takes them out of flight.)
  bool dropped = false;
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    if (from_a || dropped || p.bth.opcode != IBV_OPCODE_RC_RDMA_READ_RESPONSE_FIRST) return true;
    dropped = true;
    return false;
  };
  REQUIRE(l.a.t.post_send(late, make_wr(IBV_WR_RDMA_READ, 3000, l.a, 0, 8192, &l.b, 0)) == 0);
  REQUIRE(l.a.t.post_send(late, make_wr(IBV_WR_RDMA_WRITE, 3001, l.a, 0, 0, &l.b, 0)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1203; }));
  CHECK(dropped);
  CHECK(l.a.done.back().status == IBV_WC_SUCCESS);
  for (uint32_t k = 0; k < 300; ++k)
    REQUIRE(l.a.t.post_send(mine[2], make_wr(IBV_WR_RDMA_WRITE, k, l.a, 0, 0, &l.b, 0)) == 0);
  l.a.t.poll(l.now);
  CHECK(l.a.t.tx().size() == 300);
  REQUIRE(l.run([&] { return l.a.done.size() == 1503; }));
  // A destroyed QP's packets leave the share with it: the owner can send again.
  for (uint32_t k = 0; k < 200; ++k)
    REQUIRE(l.a.t.post_send(mine[0], make_wr(IBV_WR_RDMA_WRITE, k, l.a, 0, 0, &l.b, 0)) == 0);
  l.a.t.poll(l.now);
  REQUIRE(l.a.t.tx().size() == 200);
  while (!l.a.t.tx().empty()) l.a.t.tx().pop();
  REQUIRE(l.a.t.destroy_qp(mine[0]) == 0);
  for (uint32_t k = 0; k < 250; ++k)
    REQUIRE(l.a.t.post_send(mine[1], make_wr(IBV_WR_RDMA_WRITE, k, l.a, 0, 0, &l.b, 0)) == 0);
  l.a.t.poll(l.now);
  CHECK(l.a.t.tx().size() == 250);
}
