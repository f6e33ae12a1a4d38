// Shared receive queues in the transport core: QPs on one SRQ take its WQEs
// in the order they were posted, one per message when the message arrives;
// completions go to each QP's receive CQ with its QPN; an empty SRQ makes the
// QP answer with an RNR NAK until a WQE is posted.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <vector>

#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;

namespace {

// Loop's two hosts, plus `n` connected pairs whose B side is on one SRQ of
// `srq_depth` WQEs.
struct SrqRig {
  explicit SrqRig(uint32_t n, uint32_t srq_depth = 64, const QpSetup& s = {}, const NetConfig& net = {})
      : l(1 << 20, s, net) {
    srq = l.b.t.create_srq(srq_depth);
    for (uint32_t i = 0; i < n; ++i) {
      QpInitAttr ia = qp_init(s, l.a.cq);
      QpInitAttr ib = qp_init(s, l.b.cq);
      ib.srq = srq;
      const uint32_t qa = l.a.t.create_qp(ia), qb = l.b.t.create_qp(ib);
      ok = ok && qa != 0 && qb != 0 && bring_up(l.a.t, qa, qb, 100 + i * 1000, 7000 + i * 1000, s, 2) == 0 &&
           bring_up(l.b.t, qb, qa, 7000 + i * 1000, 100 + i * 1000, s, 1) == 0;
      a.push_back(qa);
      b.push_back(qb);
    }
    ok = ok && srq != 0 && l.ok;
  }
  int post_srq(uint64_t wr_id, uint64_t off, uint32_t len) {
    return l.b.t.post_srq_recv(srq, make_recv(wr_id, l.b, off, len));
  }
  int send(uint32_t i, uint64_t wr_id, uint64_t off, uint32_t len) {
    return l.a.t.post_send(a[i], make_wr(IBV_WR_SEND, wr_id, l.a, off, len));
  }
  std::vector<Completion> recvs() const {
    std::vector<Completion> r;
    for (const Completion& c : l.b.done)
      if (c.opcode == IBV_WC_RECV || c.opcode == IBV_WC_RECV_RDMA_WITH_IMM) r.push_back(c);
    return r;
  }
  Loop l;
  uint32_t srq = 0;
  std::vector<uint32_t> a, b;
  bool ok = true;
};

}  // namespace

TEST_CASE("QPs on one SRQ take its WQEs in posting order, each completion on its own QPN") {
  SrqRig r(2);
  REQUIRE(r.ok);
  for (uint32_t i = 0; i < 4; ++i) REQUIRE(r.post_srq(10 + i, 4096 * i, 4096) == 0);
  fill_pattern(r.l.a.mem, 0, 3 * 4096, 5);
  // One message at a time, alternating QPs: the WQE is taken when the SEND arrives.
  const uint32_t order[] = {0, 1, 0};
  for (uint32_t k = 0; k < 3; ++k) {
    REQUIRE(r.send(order[k], k, 4096 * k, 1000 + k) == 0);
    REQUIRE(r.l.run([&] { return r.recvs().size() == k + 1; }));
    const Completion c = r.recvs().back();
    CHECK(c.status == IBV_WC_SUCCESS);
    CHECK(c.wr_id == 10 + k);
    CHECK(c.qp_num == r.b[order[k]]);
    CHECK(c.src_qp == r.a[order[k]]);
    CHECK(c.byte_len == 1000 + k);
    CHECK(std::memcmp(r.l.b.mem.data() + 4096 * k, r.l.a.mem.data() + 4096 * k, 1000 + k) == 0);
  }
  CHECK(r.l.b.t.srq_posted(r.srq) == 1);  // the fourth is still there for whichever QP needs it
}

TEST_CASE("an empty SRQ makes the QP send RNR NAKs; a WQE posted later completes the message") {
  SrqRig r(1);
  REQUIRE(r.ok);
  fill_pattern(r.l.a.mem, 0, 2000, 9);
  REQUIRE(r.send(0, 1, 0, 2000) == 0);
  REQUIRE(r.l.run([&] { return r.l.b.t.qp_counters(r.b[0])->rnr_naks_tx >= 2; }));
  CHECK(r.recvs().empty());
  CHECK(r.l.b.t.srq_empty(r.srq) >= 2);
  REQUIRE(r.post_srq(77, 8192, 4096) == 0);
  REQUIRE(r.l.run([&] { return r.recvs().size() == 1 && r.l.a.done.size() == 1; }));
  CHECK(r.recvs()[0].wr_id == 77);
  CHECK(r.recvs()[0].status == IBV_WC_SUCCESS);
  CHECK(r.l.a.done[0].status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(r.l.b.mem.data() + 8192, r.l.a.mem.data(), 2000) == 0);
}

TEST_CASE("out-of-order arrival (IRN) still gives message k the k-th WQE a QP took") {
  NetConfig net;
  net.jitter_ns = 30'000;  // reorders packets of many messages
  SrqRig r(2, 256, {}, net);
  REQUIRE(r.ok);
  constexpr uint32_t kMsgs = 40;
  for (uint32_t i = 0; i < 2 * kMsgs; ++i) REQUIRE(r.post_srq(1000 + i, 4096 * i, 4096) == 0);
  for (uint32_t k = 0; k < kMsgs; ++k) {
    fill_pattern(r.l.a.mem, 4096 * k, 3000, k + 1);
    for (uint32_t q = 0; q < 2; ++q) REQUIRE(r.send(q, k, 4096 * k, 3000) == 0);
  }
  REQUIRE(r.l.run([&] { return r.recvs().size() == 2 * kMsgs; }));
  // Per QP, completions come in message order; each WQE holds its message.
  std::vector<uint32_t> seen(2, 0);
  std::vector<bool> used(2 * kMsgs, false);
  std::vector<int64_t> last_slot(2, -1);
  for (const Completion& c : r.recvs()) {
    REQUIRE(c.status == IBV_WC_SUCCESS);
    const uint32_t q = c.qp_num == r.b[0] ? 0 : 1;
    REQUIRE(c.qp_num == r.b[q]);
    const uint32_t k = seen[q]++;
    const uint64_t slot = c.wr_id - 1000;
    REQUIRE(slot < 2 * kMsgs);
    CHECK(!used[slot]);
    used[slot] = true;
    CHECK(static_cast<int64_t>(slot) > last_slot[q]);  // a QP's messages take WQEs in their order
    last_slot[q] = static_cast<int64_t>(slot);
    CHECK(c.byte_len == 3000);
    CHECK(std::memcmp(r.l.b.mem.data() + 4096 * slot, r.l.a.mem.data() + 4096 * k, 3000) == 0);
  }
  CHECK(r.l.b.t.qp_counters(r.b[0])->reorder_depth_max > 0);  // packets did arrive out of order
  CHECK(seen[0] == kMsgs);
  CHECK(seen[1] == kMsgs);
  CHECK(r.l.b.t.srq_posted(r.srq) == 0);
}

TEST_CASE("a QP going to ERR flushes the WQE it took; the rest stay on the SRQ for the others") {
  SrqRig r(2);
  REQUIRE(r.ok);
  REQUIRE(r.post_srq(1, 0, 4096) == 0);
  REQUIRE(r.post_srq(2, 4096, 4096) == 0);
  // QP 0's message loses its last packet: its WQE is taken, not completed.
  r.l.filter = [](bool from_a, const tandem::common::RocePacket& p) {
    return !(from_a && p.bth.opcode == IBV_OPCODE_RC_SEND_LAST);
  };
  REQUIRE(r.send(0, 1, 0, 3000) == 0);
  REQUIRE(r.l.run([&] { return r.l.b.t.srq_posted(r.srq) == 1; }));
  QpAttr err;
  err.state = QpState::kError;
  REQUIRE(r.l.b.t.modify_qp(r.b[0], err, IBV_QP_STATE) == 0);
  r.l.b.drain_cq();
  REQUIRE(r.recvs().size() == 1);
  CHECK(r.recvs()[0].wr_id == 1);
  CHECK(r.recvs()[0].status == IBV_WC_WR_FLUSH_ERR);
  CHECK(r.recvs()[0].qp_num == r.b[0]);
  CHECK(r.l.b.t.srq_posted(r.srq) == 1);
  r.l.filter = nullptr;
  REQUIRE(r.send(1, 2, 8192, 500) == 0);
  REQUIRE(r.l.run([&] { return r.recvs().size() == 2; }));
  CHECK(r.recvs()[1].wr_id == 2);
  CHECK(r.recvs()[1].qp_num == r.b[1]);
  CHECK(r.recvs()[1].status == IBV_WC_SUCCESS);
}

TEST_CASE("SRQ control: full, bad WRs, posts to an SRQ QP's own queue, destroy while used") {
  Host h(1 << 16);
  const uint32_t srq = h.t.create_srq(2);
  REQUIRE(srq != 0);
  CHECK(h.t.create_srq(0) == 0);
  CHECK(h.t.post_srq_recv(srq + 5, make_recv(1, h, 0, 64)) == EINVAL);
  CHECK(h.t.post_srq_recv(srq, make_recv(1, h, 1 << 16, 64)) == EINVAL);  // out of the MR
  RecvWr bad_key = make_recv(1, h, 0, 64);
  bad_key.sg_list[0].lkey ^= 0x100;
  CHECK(h.t.post_srq_recv(srq, bad_key) == EINVAL);
  CHECK(h.t.post_srq_recv(srq, make_recv(1, h, 0, 64)) == 0);
  CHECK(h.t.post_srq_recv(srq, make_recv(2, h, 64, 64)) == 0);
  CHECK(h.t.post_srq_recv(srq, make_recv(3, h, 128, 64)) == ENOMEM);
  CHECK(h.t.srq_posted(srq) == 2);

  QpInitAttr init = qp_init(QpSetup{}, h.cq);
  init.srq = srq + 9;
  CHECK(h.t.create_qp(init) == 0);  // unknown SRQ
  init.srq = srq;
  const uint32_t qpn = h.t.create_qp(init);
  REQUIRE(qpn != 0);
  CHECK(h.t.post_recv(qpn, make_recv(4, h, 0, 64)) == EINVAL);
  CHECK(h.t.destroy_srq(srq) == EBUSY);
  CHECK(h.t.destroy_qp(qpn) == 0);
  CHECK(h.t.destroy_srq(srq) == 0);
  CHECK(h.t.destroy_srq(srq) == EINVAL);
  CHECK(h.t.create_srq(4) == srq);  // the id is reused
}
