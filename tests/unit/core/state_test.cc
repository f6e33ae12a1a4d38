// QP state machine: verbs transitions, what each state accepts, flush on
// error, and PSN wrap-around.
#include <catch2/catch.hpp>

#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;

TEST_CASE("QP moves RESET -> INIT -> RTR -> RTS only with the required attributes") {
  Host h(4096);
  QpInitAttr init;
  init.send_cq = init.recv_cq = h.cq;
  const uint32_t qpn = h.t.create_qp(init);
  REQUIRE(qpn != 0);
  CHECK(h.t.qp_state(qpn) == QpState::kReset);
  QpAttr a;
  a.state = QpState::kRtr;
  CHECK(h.t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU |
                                  IBV_QP_AV) == EINVAL);  // RESET -> RTR
  a.state = QpState::kInit;
  REQUIRE(h.t.modify_qp(qpn, a, IBV_QP_STATE) == 0);
  CHECK(h.t.qp_state(qpn) == QpState::kInit);
  a.state = QpState::kRts;
  CHECK(h.t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_SQ_PSN) == EINVAL);  // INIT -> RTS
  a.state = QpState::kRtr;
  CHECK(h.t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_DEST_QPN) == EINVAL);  // missing attrs
  a.path_mtu = 1000;
  CHECK(h.t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU |
                                  IBV_QP_AV) == EINVAL);  // not an IB MTU
  a.path_mtu = 2048;
  REQUIRE(h.t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU |
                                    IBV_QP_AV) == 0);
  CHECK(h.t.qp_state(qpn) == QpState::kRtr);
  a.state = QpState::kRts;
  CHECK(h.t.modify_qp(qpn, a, IBV_QP_STATE) == EINVAL);  // needs SQ PSN
  REQUIRE(h.t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
  CHECK(h.t.qp_state(qpn) == QpState::kRts);
  a.state = QpState::kReset;
  REQUIRE(h.t.modify_qp(qpn, a, IBV_QP_STATE) == 0);
  CHECK(h.t.qp_state(qpn) == QpState::kReset);
}

TEST_CASE("posting is refused before the QP can use the work request") {
  Host h(4096);
  QpInitAttr init;
  init.send_cq = init.recv_cq = h.cq;
  h.qpn = h.t.create_qp(init);
  CHECK(h.t.post_recv(h.qpn, make_recv(1, h, 0, 10)) == EINVAL);  // RESET
  CHECK(h.t.post_send(h.qpn, make_wr(IBV_WR_SEND, 1, h, 0, 10)) == EINVAL);
  QpAttr a;
  a.state = QpState::kInit;
  REQUIRE(h.t.modify_qp(h.qpn, a, IBV_QP_STATE) == 0);
  CHECK(h.t.post_recv(h.qpn, make_recv(1, h, 0, 10)) == 0);       // INIT accepts RECVs
  CHECK(h.t.post_send(h.qpn, make_wr(IBV_WR_SEND, 1, h, 0, 10)) == EINVAL);
}

TEST_CASE("bad creation attributes and bad work requests are rejected") {
  Host h(4096);
  QpInitAttr init;
  init.send_cq = init.recv_cq = h.cq;
  init.window_pkts = 1000;  // not a power of two
  CHECK(h.t.create_qp(init) == 0);
  init.window_pkts = 256;
  init.policy.cc = "no_such_policy";
  CHECK(h.t.create_qp(init) == 0);
  init.policy.cc = "fixed_window";
  init.send_cq = 99;
  CHECK(h.t.create_qp(init) == 0);

  Loop l(4096);
  REQUIRE(l.ok);
  SendWr wr = make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 10, &l.b, 0);
  wr.sg_list[0].lkey = 0x12345;
  CHECK(l.send(l.a, wr) == EINVAL);  // unknown lkey
  wr = make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 4000, 200, &l.b, 0);
  CHECK(l.send(l.a, wr) == EINVAL);  // past the end of the region
  CHECK(l.send(l.a, make_wr(IBV_WR_LOCAL_INV, 1, l.a, 0, 8, &l.b, 0)) == EINVAL);              // not executed
  CHECK(l.send(l.a, make_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, l.a, 0, 4, &l.b, 0)) == EINVAL);  // not 8 bytes
}

TEST_CASE("moving to ERROR flushes every outstanding work request") {
  Loop l(1 << 16);
  REQUIRE(l.ok);
  l.block_a_to_b = true;
  for (int i = 0; i < 3; ++i)
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 10 + i, l.a, 0, 5000, &l.b, 0)) == 0);
  REQUIRE(l.recv(l.a, make_recv(20, l.a, 0, 100)) == 0);
  l.a.t.poll(l.now);
  REQUIRE(move_to_error(l.a) == 0);
  REQUIRE(l.a.done.size() == 4);
  for (const auto& c : l.a.done) CHECK(c.status == IBV_WC_WR_FLUSH_ERR);
  CHECK(l.a.done[0].wr_id == 10);
  CHECK(l.a.done[3].wr_id == 20);
  CHECK(l.a.done[3].opcode == IBV_WC_RECV);
  // Posting to a QP in ERROR completes at once with a flush error.
  REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 30, l.a, 0, 1)) == 0);
  l.a.drain_cq();
  REQUIRE(l.a.done.size() == 5);
  CHECK(l.a.done[4].status == IBV_WC_WR_FLUSH_ERR);
  // Packets for a QP in ERROR are dropped and counted.
  CHECK(l.a.t.poll(l.now) == 0);
}

TEST_CASE("PSNs wrap around 2^24 without losing or reordering messages") {
  for (Reliability mode : {Reliability::kIrn, Reliability::kGoBackN}) {
    QpSetup s;
    s.mode = mode;
    s.mtu = 256;
    s.sq_psn_a = 0xFFFFF0;
    s.sq_psn_b = 0xFFFFFE;
    NetConfig net;
    net.loss = 0.02;
    net.jitter_ns = 3000;
    Loop l(1 << 20, s, net, 42);
    REQUIRE(l.ok);
    fill_pattern(l.a.mem, 0, 1 << 18, 1);
    fill_pattern(l.b.mem, 1 << 19, 1 << 16, 2);
    for (int i = 0; i < 8; ++i) {
      REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, i, l.a, i * 4096, 4096, &l.b, i * 4096)) == 0);
    }
    REQUIRE(l.send(l.b, make_wr(IBV_WR_RDMA_WRITE, 99, l.b, 1 << 19, 10000, &l.a, 1 << 19)) == 0);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_READ, 100, l.a, 600000, 9000, &l.b, 1 << 19)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 9 && l.b.done.size() == 1; }));
    for (std::size_t i = 0; i < 9; ++i) {
      CHECK(l.a.done[i].status == IBV_WC_SUCCESS);
      CHECK(l.a.done[i].wr_id == (i < 8 ? i : 100));
    }
    CHECK(std::memcmp(l.a.mem.data(), l.b.mem.data(), 8 * 4096) == 0);
    CHECK(std::memcmp(l.a.mem.data() + (1 << 19), l.b.mem.data() + (1 << 19), 10000) == 0);
    CHECK(std::memcmp(l.a.mem.data() + 600000, l.b.mem.data() + (1 << 19), 9000) == 0);
  }
}

TEST_CASE("several QPs share one transport and its TX queue, each with its own PSNs") {
  for (Reliability mode : {Reliability::kIrn, Reliability::kGoBackN}) {
    QpSetup s;
    s.mode = mode;
    s.mtu = 512;
    NetConfig net;
    net.loss = 0.01;
    net.jitter_ns = 5000;
    Loop l(1 << 20, s, net, 77);
    REQUIRE(l.ok);
    // A second and third QP pair next to the loop's own.
    QpInitAttr init;
    init.mode = mode;
    init.send_cq = init.recv_cq = l.a.cq;
    const uint32_t a2 = l.a.t.create_qp(init), a3 = l.a.t.create_qp(init);
    init.send_cq = init.recv_cq = l.b.cq;
    const uint32_t b2 = l.b.t.create_qp(init), b3 = l.b.t.create_qp(init);
    REQUIRE((a2 && a3 && b2 && b3));
    auto up = [&](Host& h, uint32_t q, uint32_t remote, uint32_t sq, uint32_t rq) {
      const uint32_t keep = h.qpn;
      h.qpn = q;
      const int r = bring_up(h, remote, sq, rq, s, 9);
      h.qpn = keep;
      return r;
    };
    REQUIRE(up(l.a, a2, b2, 0xFFFFF0, 0x10) == 0);
    REQUIRE(up(l.b, b2, a2, 0x10, 0xFFFFF0) == 0);
    REQUIRE(up(l.a, a3, b3, 7, 7) == 0);
    REQUIRE(up(l.b, b3, a3, 7, 7) == 0);
    fill_pattern(l.a.mem, 0, 3 * 65536, 3);
    const uint32_t qps[] = {l.a.qpn, a2, a3};
    for (int q = 0; q < 3; ++q) {
      SendWr wr = make_wr(IBV_WR_RDMA_WRITE_WITH_IMM, q, l.a, q * 65536, 65536, &l.b,
                          (4 + q) * 65536, 100 + q);
      REQUIRE(l.b.t.post_recv(q == 0 ? l.b.qpn : q == 1 ? b2 : b3, make_recv(q, l.b, 0, 0)) == 0);
      REQUIRE(l.a.t.post_send(qps[q], wr) == 0);
    }
    REQUIRE(l.run([&] { return l.a.done.size() == 3 && l.b.done.size() == 3; }));
    for (const auto& c : l.a.done) {
      CHECK(c.status == IBV_WC_SUCCESS);
      CHECK(c.qp_num == qps[c.wr_id]);
    }
    for (const auto& c : l.b.done) {
      CHECK(c.imm_data == 100 + c.wr_id);
      CHECK(c.byte_len == 65536);
      CHECK(std::memcmp(l.a.mem.data() + c.wr_id * 65536, l.b.mem.data() + (4 + c.wr_id) * 65536,
                        65536) == 0);
    }
    // A destroyed QP's packets are unknown from then on.
    REQUIRE(l.b.t.destroy_qp(b3) == 0);
    CHECK(l.b.t.qp_counters(b3) == nullptr);
    CHECK(l.b.t.destroy_qp(b3) == EINVAL);
  }
}
