// UD QPs in the transport core (ud.cc): datagrams addressed per work request,
// a DETH with the Q_Key and source QPN on the wire, the GRH (20 zero bytes and
// the IPv4 header) before the payload in the receive buffer, a Q_Key mismatch
// or a missing receive WQE dropped and counted, a message over the MTU
// refused with an error completion.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/wire/byte_order.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/frame.h"
#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;
using tandem::common::DropReason;

namespace {

constexpr uint32_t kIpA = 0x0A000001, kIpB = 0x0A000002;
constexpr uint32_t kQkey = 0x11111111;

uint32_t make_ud(Host& h, uint32_t qkey = kQkey, uint32_t mtu = 1024, uint32_t srq = 0) {
  QpInitAttr init;
  init.type = QpType::kUd;
  init.send_cq = init.recv_cq = h.cq;
  init.srq = srq;
  const uint32_t qpn = h.t.create_qp(init);
  if (qpn == 0) return 0;
  QpAttr a;
  a.state = QpState::kInit;
  a.qkey = qkey;
  if (h.t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_QKEY) != 0) return 0;
  a.state = QpState::kRtr;
  a.path_mtu = mtu;
  if (h.t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_PATH_MTU) != 0) return 0;
  a.state = QpState::kRts;
  a.sq_psn = 77;
  if (h.t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_SQ_PSN) != 0) return 0;
  return qpn;
}

SendWr ud_wr(const Host& h, uint64_t wr_id, uint64_t off, uint32_t len, uint32_t dqpn, uint32_t qkey = kQkey) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_SEND;
  wr.num_sge = 1;
  wr.sg_list[0] = Sge{h.va(off), len, h.mr.lkey};
  wr.ud = UdDest{kIpB, 3, dqpn, qkey};
  return wr;
}

// Polls `from`, serialises what it queued (A's address to B's) and hands
// each frame to `to`; returns the frames and each one's verdict.
struct Wire {
  std::vector<std::vector<uint8_t>> frames;
  std::vector<DropReason> why;
};
Wire carry(Host& from, Host& to, uint64_t now = 1000) {
  Wire w;
  from.t.poll(now);
  while (!from.t.tx().empty()) {
    const TxDesc d = from.t.tx().front();
    from.t.tx().pop();
    std::vector<uint8_t> f(9000);
    FrameAddrs fa;
    fa.src_ip = kIpA;
    fa.dst_ip = kIpB;
    f.resize(build_frame(d, fa, f.data(), f.size()));
    tandem::common::RocePacket p;
    REQUIRE(tandem::common::parse_roce(f.data(), f.size(), p) == DropReason::kNone);
    w.why.push_back(to.t.on_packet(p, f.data() + p.payload_offset, p.payload_len, now));
    w.frames.push_back(std::move(f));
  }
  from.t.poll(now + 1);  // the send completes once the I/O layer took it
  from.drain_cq();
  to.drain_cq();
  return w;
}

}  // namespace

TEST_CASE("UD: a datagram arrives with a GRH, its source QPN and IBV_WC_GRH") {
  Host a(1 << 16), b(1 << 16);
  const uint32_t qa = make_ud(a), qb = make_ud(b);
  REQUIRE(qa != 0);
  REQUIRE(qb != 0);
  fill_pattern(a.mem, 0, 300, 7);
  REQUIRE(b.t.post_recv(qb, make_recv(5, b, 1000, 40 + 512)) == 0);
  SendWr wr = ud_wr(a, 9, 0, 300, qb);
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = 0xABCD;
  REQUIRE(a.t.post_send(qa, wr) == 0);
  Wire w = carry(a, b);
  REQUIRE(w.frames.size() == 1);
  REQUIRE(w.why[0] == DropReason::kNone);

  // On the wire: UD_SEND_ONLY_WITH_IMMEDIATE, the DETH, the PSN from RTS.
  tandem::common::RocePacket p;
  REQUIRE(tandem::common::parse_roce(w.frames[0].data(), w.frames[0].size(), p) == DropReason::kNone);
  CHECK(p.bth.opcode == IBV_OPCODE_UD_SEND_ONLY_WITH_IMMEDIATE);
  CHECK(p.bth.dqpn == qb);
  CHECK(p.bth.psn == 77);
  CHECK(p.deth.qkey == kQkey);
  CHECK(p.deth.src_qp == qa);
  CHECK(p.imm == 0xABCD);
  CHECK(p.payload_len == 300);

  REQUIRE(b.done.size() == 1);
  const Completion& c = b.done[0];
  CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(c.opcode == IBV_WC_RECV);
  CHECK(c.wr_id == 5);
  CHECK(c.byte_len == 40 + 300);
  CHECK(c.src_qp == qa);
  CHECK(c.qp_num == qb);
  CHECK(c.wc_flags == (IBV_WC_GRH | IBV_WC_WITH_IMM));
  CHECK(c.imm_data == 0xABCD);
  // GRH: 20 zero bytes, then the IPv4 header exactly as it was on the wire.
  const uint8_t* grh = b.mem.data() + 1000;
  CHECK(std::vector<uint8_t>(grh, grh + 20) == std::vector<uint8_t>(20, 0));
  CHECK(std::memcmp(grh + 20, w.frames[0].data() + p.ip_offset, 20) == 0);
  CHECK(tandem::common::load_be32(grh + 20 + 12) == kIpA);
  CHECK(std::memcmp(b.mem.data() + 1040, a.mem.data(), 300) == 0);

  REQUIRE(a.done.size() == 1);
  CHECK(a.done[0].wr_id == 9);
  CHECK(a.done[0].status == IBV_WC_SUCCESS);
  CHECK(a.done[0].opcode == IBV_WC_SEND);
  CHECK(a.t.qp_counters(qa)->tx_pkts == 1);
  CHECK(b.t.qp_counters(qb)->rx_pkts == 1);
}

TEST_CASE("UD: each datagram goes where its work request says; a Q_Key with the high bit set is the QP's") {
  Host a(1 << 16), b(1 << 16);
  const uint32_t qa = make_ud(a), qb1 = make_ud(b), qb2 = make_ud(b);
  REQUIRE(qb2 != 0);
  REQUIRE(b.t.post_recv(qb1, make_recv(1, b, 0, 1024)) == 0);
  REQUIRE(b.t.post_recv(qb2, make_recv(2, b, 2048, 1024)) == 0);
  REQUIRE(a.t.post_send(qa, ud_wr(a, 1, 0, 10, qb2)) == 0);
  REQUIRE(a.t.post_send(qa, ud_wr(a, 2, 0, 20, qb1, 0x80000000u)) == 0);
  Wire w = carry(a, b);
  REQUIRE(w.why == std::vector<DropReason>{DropReason::kNone, DropReason::kNone});
  REQUIRE(b.done.size() == 2);
  CHECK(b.done[0].qp_num == qb2);
  CHECK(b.done[0].byte_len == 50);
  CHECK(b.done[1].qp_num == qb1);
  CHECK(b.done[1].byte_len == 60);
  CHECK(a.done.size() == 2);
}

TEST_CASE("UD: a wrong Q_Key, or no receive WQE, drops the datagram with a counted reason") {
  Host a(1 << 16), b(1 << 16);
  const uint32_t qa = make_ud(a), qb = make_ud(b);
  REQUIRE(b.t.post_recv(qb, make_recv(1, b, 0, 1024)) == 0);
  REQUIRE(a.t.post_send(qa, ud_wr(a, 1, 0, 10, qb, 0x2222)) == 0);
  Wire w = carry(a, b);
  CHECK(w.why == std::vector<DropReason>{DropReason::kBadQkey});
  CHECK(b.done.empty());
  CHECK(b.t.qp_counters(qb)->drop(DropReason::kBadQkey) == 1);
  CHECK(b.t.counters().drop(DropReason::kBadQkey) == 1);
  CHECK(a.done.size() == 1);  // unreliable: the sender is not told

  REQUIRE(a.t.post_send(qa, ud_wr(a, 2, 0, 10, qb)) == 0);  // takes the one WQE
  REQUIRE(a.t.post_send(qa, ud_wr(a, 3, 0, 10, qb)) == 0);  // finds none
  w = carry(a, b);
  CHECK(w.why == std::vector<DropReason>{DropReason::kNone, DropReason::kNoRecvWqe});
  CHECK(b.done.size() == 1);
  CHECK(b.t.qp_counters(qb)->drop(DropReason::kNoRecvWqe) == 1);
  CHECK(b.t.qp_state(qb) == QpState::kRts);
}

TEST_CASE("UD: a message over the MTU completes with IBV_WC_LOC_LEN_ERR; a short receive buffer too") {
  Host a(1 << 16), b(1 << 16);
  const uint32_t qa = make_ud(a, kQkey, 1024), qb = make_ud(b);
  REQUIRE(b.t.post_recv(qb, make_recv(1, b, 0, 40 + 100)) == 0);
  REQUIRE(a.t.post_send(qa, ud_wr(a, 1, 0, 101, qb)) == 0);  // one byte too long for the buffer
  Wire w = carry(a, b);
  REQUIRE(b.done.size() == 1);
  CHECK(b.done[0].status == IBV_WC_LOC_LEN_ERR);
  CHECK(b.t.qp_state(qb) == QpState::kRts);

  REQUIRE(a.t.post_send(qa, ud_wr(a, 2, 0, 1025, qb)) == 0);
  REQUIRE(a.t.post_send(qa, ud_wr(a, 3, 0, 10, qb)) == 0);
  a.done.clear();
  w = carry(a, b);
  CHECK(w.frames.empty());
  REQUIRE(a.done.size() == 2);
  CHECK(a.done[0].wr_id == 2);
  CHECK(a.done[0].status == IBV_WC_LOC_LEN_ERR);
  CHECK(a.done[1].status == IBV_WC_WR_FLUSH_ERR);
  CHECK(a.t.qp_state(qa) == QpState::kError);
}

TEST_CASE("UD: verbs' rules for the QP: Q_Key at INIT, SEND opcodes only, RC and UD packets kept apart") {
  Host a(1 << 16), b(1 << 16);
  QpInitAttr init;
  init.type = QpType::kUd;
  init.send_cq = init.recv_cq = a.cq;
  const uint32_t q = a.t.create_qp(init);
  QpAttr at;
  at.state = QpState::kInit;
  CHECK(a.t.modify_qp(q, at, IBV_QP_STATE) == EINVAL);  // no Q_Key
  const uint32_t qa = make_ud(a), qb = make_ud(b);
  SendWr wr = ud_wr(a, 1, 0, 8, qb);
  wr.opcode = IBV_WR_RDMA_WRITE;
  CHECK(a.t.post_send(qa, wr) == EINVAL);
  // Memory of another protection domain is refused, as for RC.
  const MemoryRegion other = a.t.reg_mr(a.va(8192), a.mem.data() + 8192, 4096, IBV_ACCESS_LOCAL_WRITE, 7);
  SendWr foreign = ud_wr(a, 2, 0, 8, qb);
  foreign.sg_list[0] = Sge{other.addr, 8, other.lkey};
  CHECK(a.t.post_send(qa, foreign) == EINVAL);

  // A UD datagram to an RC QP is refused.
  Loop l(1 << 16);
  REQUIRE(l.ok);
  REQUIRE(a.t.post_send(qa, ud_wr(a, 2, 0, 8, l.b.qpn)) == 0);
  Wire w = carry(a, l.b);
  CHECK(w.why == std::vector<DropReason>{DropReason::kInvalidRequest});
}

TEST_CASE("UD on an SRQ takes its WQEs in posting order") {
  Host a(1 << 16), b(1 << 16);
  const uint32_t srq = b.t.create_srq(8);
  const uint32_t qa = make_ud(a), qb = make_ud(b, kQkey, 1024, srq);
  REQUIRE(qb != 0);
  REQUIRE(b.t.post_srq_recv(srq, make_recv(11, b, 0, 1024)) == 0);
  REQUIRE(b.t.post_srq_recv(srq, make_recv(12, b, 2048, 1024)) == 0);
  REQUIRE(a.t.post_send(qa, ud_wr(a, 1, 0, 10, qb)) == 0);
  REQUIRE(a.t.post_send(qa, ud_wr(a, 2, 0, 10, qb)) == 0);
  carry(a, b);
  REQUIRE(b.done.size() == 2);
  CHECK(b.done[0].wr_id == 11);
  CHECK(b.done[1].wr_id == 12);
  CHECK(b.t.srq_posted(srq) == 0);
}
