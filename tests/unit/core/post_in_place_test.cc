// SendSlots: send WRs written into the SQ slot and checked there (the
// worker's one-copy post): the core's own lkey, bounds and access checks,
// inline bytes held by the core, every WR completing when asked.
#include <catch2/catch.hpp>

#include <cstring>

#include "rnic/core/send_slots.h"
#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;

namespace {
constexpr std::size_t kMem = 1 << 16;

// One WRITE of `len` bytes from a's offset `loff` to b's offset `roff`, posted in place.
int post_write(Host& a, const Host& b, uint64_t wr_id, uint64_t loff, uint32_t len, uint64_t roff,
               uint32_t flags = IBV_SEND_SIGNALED, uint32_t lkey = 0) {
  SendSlots s(a.t, a.qpn);
  if (s.room() == 0) return ENOMEM;
  s.begin(wr_id, IBV_WR_RDMA_WRITE, flags, 0, b.va(roff), b.mr.rkey);
  s.sge(0, a.va(loff), len, lkey ? lkey : a.mr.lkey);
  return s.post();
}
}  // namespace

TEST_CASE("a WR posted in place moves its bytes and completes as a SendWr would") {
  Loop l(kMem);
  REQUIRE(l.ok);
  fill_pattern(l.a.mem, 0, 3000, 7);
  REQUIRE(post_write(l.a, l.b, 41, 0, 3000, 100) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(l.a.done[0].wr_id == 41);
  CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
  CHECK(l.a.done[0].opcode == IBV_WC_RDMA_WRITE);
  CHECK(std::memcmp(l.a.mem.data(), l.b.mem.data() + 100, 3000) == 0);
}

TEST_CASE("the core refuses a WR posted in place with a bad lkey, bounds or access, and keeps nothing of it") {
  Loop l(kMem);
  REQUIRE(l.ok);
  SendSlots probe(l.a.t, l.a.qpn);
  const uint32_t room = probe.room();
  CHECK(post_write(l.a, l.b, 1, 0, 64, 0, IBV_SEND_SIGNALED, l.a.mr.lkey ^ 0x100) == EINVAL);  // unknown key
  CHECK(post_write(l.a, l.b, 2, kMem - 10, 64, 0) == EINVAL);                                  // past the region
  {
    // A READ lands in its SGEs: a region without local write is refused.
    const MemoryRegion ro = l.a.t.reg_mr(l.a.mem.data(), kMem, 0);
    SendSlots s(l.a.t, l.a.qpn);
    s.begin(3, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, 0, l.b.va(0), l.b.mr.rkey);
    s.sge(0, l.a.va(0), 64, ro.lkey);
    CHECK(s.post() == EINVAL);
  }
  {
    SendSlots s(l.a.t, l.a.qpn);  // an opcode the core does not post
    s.begin(4, IBV_WR_LOCAL_INV, IBV_SEND_SIGNALED, 0, l.b.va(0), l.b.mr.rkey);
    s.sge(0, l.a.va(0), 8, l.a.mr.lkey);
    CHECK(s.post() == EINVAL);
  }
  {
    SendSlots s(l.a.t, l.a.qpn);  // an atomic's result is one 8-byte entry
    s.begin(4, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_SEND_SIGNALED, 0, l.b.va(0), l.b.mr.rkey);
    s.atomic(1, 2);
    s.sge(0, l.a.va(0), 4, l.a.mr.lkey);
    CHECK(s.post() == EINVAL);
  }
  CHECK(probe.room() == room);
  l.settle();
  CHECK(l.a.done.empty());
  // The QP goes on: the next good WR is the first to complete.
  REQUIRE(post_write(l.a, l.b, 5, 0, 64, 0) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(l.a.done[0].wr_id == 5);
}

TEST_CASE("inline bytes posted in place are the core's: the caller may reuse its buffer at once") {
  QpSetup s;
  s.max_inline = 96;
  Loop l(kMem, s);
  REQUIRE(l.ok);
  uint8_t app[96];
  for (int i = 0; i < 96; ++i) app[i] = static_cast<uint8_t>(i * 3 + 1);
  {
    SendSlots slots(l.a.t, l.a.qpn);
    slots.begin(9, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, 0, l.b.va(512), l.b.mr.rkey);
    uint8_t* d = slots.inline_data(96);
    REQUIRE(d != nullptr);
    std::memcpy(d, app, 96);
    REQUIRE(slots.post() == 0);
    // Over max_inline: refused.
    slots.begin(10, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, 0, l.b.va(0), l.b.mr.rkey);
    CHECK(slots.inline_data(97) == nullptr);
    CHECK(slots.post() == EINVAL);
  }
  const uint8_t sent[96] = {};
  std::memcpy(app, sent, 96);  // the application's buffer changes before the packet goes
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(l.a.done[0].wr_id == 9);
  for (int i = 0; i < 96; ++i) CHECK(l.b.mem[512 + i] == static_cast<uint8_t>(i * 3 + 1));
}

TEST_CASE("with complete_unsignaled every WR completes, the unsignalled ones marked kWcUnsignaled") {
  QpSetup s;
  s.complete_unsignaled = true;
  Loop l(kMem, s);
  REQUIRE(l.ok);
  REQUIRE(post_write(l.a, l.b, 1, 0, 64, 0, 0) == 0);
  REQUIRE(post_write(l.a, l.b, 2, 0, 64, 0, IBV_SEND_SIGNALED) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
  CHECK(l.a.done[0].wr_id == 1);
  CHECK((l.a.done[0].wc_flags & kWcUnsignaled) != 0);
  CHECK(l.a.done[1].wr_id == 2);
  CHECK((l.a.done[1].wc_flags & kWcUnsignaled) == 0);
  // Without it an unsignalled WR completes silently (verbs).
  Loop q(kMem);
  REQUIRE(q.ok);
  REQUIRE(post_write(q.a, q.b, 1, 0, 64, 0, 0) == 0);
  REQUIRE(post_write(q.a, q.b, 2, 0, 64, 0) == 0);
  REQUIRE(q.run([&] { return q.a.done.size() == 1; }));
  q.settle();
  REQUIRE(q.a.done.size() == 1);
  CHECK(q.a.done[0].wr_id == 2);
}

TEST_CASE("a WR posted in place on a QP in ERROR completes with FLUSH_ERR; one for no QP has no room") {
  Loop l(kMem);
  REQUIRE(l.ok);
  REQUIRE(move_to_error(l.a) == 0);
  REQUIRE(post_write(l.a, l.b, 7, 0, 64, 0) == 0);
  l.a.drain_cq();
  REQUIRE(l.a.done.size() == 1);
  CHECK(l.a.done[0].wr_id == 7);
  CHECK(l.a.done[0].status == IBV_WC_WR_FLUSH_ERR);
  SendSlots none(l.a.t, 0xABCDEF);
  CHECK(!none.ok());
  CHECK(none.room() == 0);
}

TEST_CASE("receives posted in place: a QP's RQ and an SRQ check the slot's SGEs and keep nothing refused") {
  Loop l(kMem);
  REQUIRE(l.ok);
  Transport& t = l.b.t;
  const uint32_t room = t.recv_room(l.b.qpn);
  REQUIRE(room > 0);
  auto post = [&](uint64_t wr_id, uint64_t off, uint32_t len, uint32_t lkey) {
    RecvWr* w = t.recv_slot(l.b.qpn);
    REQUIRE(w != nullptr);
    w->wr_id = wr_id;
    w->num_sge = 1;
    w->sg_list[0] = Sge{l.b.va(off), len, lkey};
    return t.post_recv_slot(l.b.qpn);
  };
  CHECK(post(1, 0, 64, l.b.mr.lkey ^ 0x100) == EINVAL);  // unknown key
  CHECK(post(2, kMem - 8, 64, l.b.mr.lkey) == EINVAL);   // past the region
  CHECK(t.recv_room(l.b.qpn) == room);
  REQUIRE(post(3, 256, 512, l.b.mr.lkey) == 0);
  CHECK(t.recv_room(l.b.qpn) == room - 1);
  fill_pattern(l.a.mem, 0, 300, 5);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 8, l.a, 0, 300)) == 0);
  REQUIRE(l.run([&] { return l.b.done.size() == 1; }));
  CHECK(l.b.done[0].wr_id == 3);
  CHECK(l.b.done[0].opcode == IBV_WC_RECV);
  CHECK(l.b.done[0].byte_len == 300);
  CHECK(std::memcmp(l.a.mem.data(), l.b.mem.data() + 256, 300) == 0);

  const uint32_t srq = t.create_srq(2);
  REQUIRE(srq != 0);
  CHECK(t.srq_room(srq) == 2);
  RecvWr* w = t.srq_recv_slot(srq);
  REQUIRE(w != nullptr);
  *w = make_recv(20, l.b, 0, 64);
  w->sg_list[0].lkey ^= 0x100;
  CHECK(t.post_srq_recv_slot(srq) == EINVAL);
  CHECK(t.srq_room(srq) == 2);
  for (uint64_t id : {21, 22}) {
    w = t.srq_recv_slot(srq);
    REQUIRE(w != nullptr);
    *w = make_recv(id, l.b, 0, 64);
    REQUIRE(t.post_srq_recv_slot(srq) == 0);
  }
  CHECK(t.srq_room(srq) == 0);
  CHECK(t.srq_recv_slot(srq) == nullptr);
  CHECK(t.srq_posted(srq) == 2);
  CHECK(t.recv_slot(0xABCDEF) == nullptr);
}
