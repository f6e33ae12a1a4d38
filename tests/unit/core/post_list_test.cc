// Posting a list of send WRs in one call (as ibv_post_send takes a linked
// list) and selective signalling (IBV_SEND_SIGNALED on some WRs only).
#include <catch2/catch.hpp>

#include <cerrno>
#include <vector>

#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;

namespace {

// Every descriptor A's core queues for what was posted, as the I/O layer
// would read them, with addresses made relative to A's and B's memory.
struct Seen {
  uint8_t opcode;
  uint32_t psn;
  bool ack_req;
  uint64_t reth_va;
  uint32_t reth_len;
  uint32_t xeth_off;
  uint32_t xeth_len;
  uint32_t recv_idx;
  uint32_t payload_len;
  std::ptrdiff_t seg0;
  bool operator==(const Seen&) const = default;
};

std::vector<Seen> drain_tx(Host& h, const Host& remote) {
  std::vector<Seen> out;
  h.t.poll(1'000);
  while (!h.t.tx().empty()) {
    const TxDesc& d = h.t.tx().front();
    out.push_back(Seen{d.bth.opcode, d.bth.psn, d.bth.ack_req, d.reth.va ? d.reth.va - remote.mr.addr : 0, d.reth.len, d.xeth.msg_offset,
                       d.xeth.msg_len, d.xeth.recv_idx, d.payload_len,
                       d.num_segs ? d.segs[0].data - h.mem.data() : -1});
    h.t.tx().pop();
  }
  return out;
}

std::vector<SendWr> mixed_wrs(const Loop& l) {
  std::vector<SendWr> wrs;
  wrs.push_back(make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 64, &l.b, 0));
  wrs.push_back(make_wr(IBV_WR_RDMA_WRITE, 2, l.a, 100, 3000, &l.b, 4096));  // 3 packets
  wrs.push_back(make_wr(IBV_WR_SEND, 3, l.a, 200, 17));
  wrs.push_back(make_wr(IBV_WR_RDMA_WRITE_WITH_IMM, 4, l.a, 300, 0, &l.b, 8192, 0xabc));
  wrs.push_back(make_wr(IBV_WR_RDMA_READ, 5, l.a, 8192, 2500, &l.b, 0));
  wrs.push_back(make_wr(IBV_WR_SEND_WITH_IMM, 6, l.a, 400, 1500, nullptr, 0, 7));
  return wrs;
}

}  // namespace

TEST_CASE("a list of WRs posted in one call queues the same packets as posting them one by one") {
  Loop one(1 << 16), list(1 << 16);
  REQUIRE(one.ok);
  REQUIRE(list.ok);
  for (const SendWr& wr : mixed_wrs(one)) REQUIRE(one.send(one.a, wr) == 0);
  const std::vector<SendWr> wrs = mixed_wrs(list);
  uint32_t bad = 99;
  REQUIRE(list.a.t.post_send(list.a.qpn, wrs.data(), static_cast<uint32_t>(wrs.size()), &bad) == 0);
  CHECK(bad == wrs.size());
  const std::vector<Seen> a = drain_tx(one.a, one.b), b = drain_tx(list.a, list.b);
  CHECK(a.size() == 1 + 3 + 1 + 1 + 1 + 2);
  CHECK(a == b);
}

TEST_CASE("a posted list completes every WR, in order, with the bytes in place") {
  Loop l(1 << 16);
  REQUIRE(l.ok);
  for (uint32_t i = 0; i < 4096; ++i) l.a.mem[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<SendWr> wrs;
  for (uint32_t i = 0; i < 8; ++i) wrs.push_back(make_wr(IBV_WR_RDMA_WRITE, 100 + i, l.a, i * 512, 512, &l.b, i * 512));
  REQUIRE(l.a.t.post_send(l.a.qpn, wrs.data(), 8) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 8; }));
  for (uint32_t i = 0; i < 8; ++i) {
    CHECK(l.a.done[i].wr_id == 100 + i);
    CHECK(l.a.done[i].status == IBV_WC_SUCCESS);
  }
  CHECK(std::equal(l.a.mem.begin(), l.a.mem.begin() + 4096, l.b.mem.begin()));
}

TEST_CASE("a list stops at the first WR refused: the ones before it are posted, bad names it") {
  Loop l(1 << 16);
  REQUIRE(l.ok);
  std::vector<SendWr> wrs;
  for (uint32_t i = 0; i < 5; ++i) wrs.push_back(make_wr(IBV_WR_RDMA_WRITE, i, l.a, i * 64, 64, &l.b, i * 64));
  wrs[2].sg_list[0].lkey ^= 0x55;  // no such memory region
  uint32_t bad = 99;
  CHECK(l.a.t.post_send(l.a.qpn, wrs.data(), 5, &bad) == EINVAL);
  CHECK(bad == 2);
  REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
  l.settle();
  REQUIRE(l.a.done.size() == 2);  // WRs 3 and 4 were never posted
  CHECK(l.a.done[0].wr_id == 0);
  CHECK(l.a.done[1].wr_id == 1);
  CHECK(l.a.t.post_send(0xdead, wrs.data(), 1, &bad) == EINVAL);
  CHECK(bad == 0);
}

TEST_CASE("a list longer than the free send queue posts what fits and reports ENOMEM at the first that does not") {
  QpSetup s;
  s.sq_depth = 4;
  Loop l(1 << 16, s);
  REQUIRE(l.ok);
  std::vector<SendWr> wrs;
  for (uint32_t i = 0; i < 6; ++i) wrs.push_back(make_wr(IBV_WR_RDMA_WRITE, i, l.a, 0, 64, &l.b, 0));
  uint32_t bad = 99;
  CHECK(l.a.t.post_send(l.a.qpn, wrs.data(), 6, &bad) == ENOMEM);
  CHECK(bad == 4);
  REQUIRE(l.run([&] { return l.a.done.size() == 4; }));
}

TEST_CASE("with selective signalling only signalled WRs complete, each after every WR before it") {
  Loop l(1 << 16);
  REQUIRE(l.ok);
  std::vector<SendWr> wrs;
  for (uint32_t i = 0; i < 10; ++i) {
    wrs.push_back(make_wr(IBV_WR_RDMA_WRITE, i, l.a, i * 100, 100, &l.b, i * 100));
    wrs.back().send_flags = (i + 1) % 5 == 0 ? IBV_SEND_SIGNALED : 0;
  }
  for (uint32_t i = 0; i < 4096; ++i) l.a.mem[i] = static_cast<uint8_t>(i ^ 0x3c);
  REQUIRE(l.a.t.post_send(l.a.qpn, wrs.data(), 10) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
  l.settle();
  REQUIRE(l.a.done.size() == 2);
  CHECK(l.a.done[0].wr_id == 4);
  CHECK(l.a.done[1].wr_id == 9);
  CHECK(std::equal(l.a.mem.begin(), l.a.mem.begin() + 1000, l.b.mem.begin()));
  // The send queue's slots of unsignalled WRs are free again: a full queue's
  // worth posts.
  std::vector<SendWr> more(512, make_wr(IBV_WR_RDMA_WRITE, 50, l.a, 0, 8, &l.b, 0));
  for (SendWr& w : more) w.send_flags = 0;
  more.back().send_flags = IBV_SEND_SIGNALED;
  CHECK(l.a.t.post_send(l.a.qpn, more.data(), 512) == 0);
}

TEST_CASE("unsignalled WRs still report errors: a flush completes every WR not done") {
  Loop l(1 << 16);
  REQUIRE(l.ok);
  l.block_a_to_b = true;
  std::vector<SendWr> wrs;
  for (uint32_t i = 0; i < 4; ++i) {
    wrs.push_back(make_wr(IBV_WR_RDMA_WRITE, i, l.a, 0, 64, &l.b, 0));
    wrs.back().send_flags = 0;
  }
  REQUIRE(l.a.t.post_send(l.a.qpn, wrs.data(), 4) == 0);
  l.a.t.poll(l.now);
  REQUIRE(move_to_error(l.a) == 0);
  REQUIRE(l.a.done.size() == 4);
  for (uint32_t i = 0; i < 4; ++i) {
    CHECK(l.a.done[i].wr_id == i);
    CHECK(l.a.done[i].status == IBV_WC_WR_FLUSH_ERR);
  }
}
