// A region deregistered while work still holds it (issue 30: a tenant that
// frees the MR of a SEND being retried killed the worker). The region's
// memory is unmapped right after dereg_mr in every case here, so a core that
// touched it again would fault the test: the work fails instead, with the
// error verbs gives (LOC_PROT_ERR locally, a NAK for the peer).
#include <sys/mman.h>

#include <catch2/catch.hpp>

#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;
using tandem::common::DropReason;

namespace {

constexpr std::size_t kMem = 1 << 16;
constexpr std::size_t kMapped = 1 << 20;
constexpr uint32_t kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
const Reliability kModes[] = {Reliability::kIrn, Reliability::kGoBackN};

// Memory of its own, registered in `t`, that the test unmaps after dereg.
struct MappedRegion {
  explicit MappedRegion(Transport& t) {
    p = static_cast<uint8_t*>(mmap(nullptr, kMapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(p != MAP_FAILED);
    for (std::size_t i = 0; i < kMapped; ++i) p[i] = static_cast<uint8_t>(i * 7);
    mr = t.reg_mr(p, kMapped, kAll);
    REQUIRE(mr.lkey != 0);
  }
  // Deregisters it and takes the pages away: any later touch is SIGSEGV.
  void gone(Transport& t) {
    REQUIRE(t.dereg_mr(mr.lkey) == 0);
    REQUIRE(munmap(p, kMapped) == 0);
    p = nullptr;
  }
  ~MappedRegion() {
    if (p != nullptr) munmap(p, kMapped);
  }
  uint8_t* p = nullptr;
  MemoryRegion mr;
};

SendWr wr_from(const MappedRegion& m, ibv_wr_opcode op, uint64_t id, uint32_t len, const Host* remote = nullptr) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.num_sge = 1;
  wr.sg_list[0] = Sge{m.mr.addr, len, m.mr.lkey};
  if (remote != nullptr) {
    wr.remote_addr = remote->va(0);
    wr.rkey = remote->mr.rkey;
  }
  return wr;
}

const Completion* find(const std::vector<Completion>& v, uint64_t wr_id) {
  for (const Completion& c : v)
    if (c.wr_id == wr_id) return &c;
  return nullptr;
}

}  // namespace

TEST_CASE("a SEND waiting out RNR fails with LOC_PROT_ERR once its region is deregistered; its pages are not read again") {
  for (Reliability mode : kModes) {
    CAPTURE(static_cast<int>(mode));
    QpSetup s;
    s.mode = mode;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    MappedRegion m(l.a.t);
    REQUIRE(l.send(l.a, wr_from(m, IBV_WR_SEND, 1, 256 << 10)) == 0);
    // No receive at B: RNR NAKs, and A retries.
    REQUIRE(l.run([&] { return l.a.counters().rnr_naks_rx >= 2; }));
    m.gone(l.a.t);
    REQUIRE(l.recv(l.b, make_recv(9, l.b, 0, kMem)) == 0);
    REQUIRE(l.run([&] { return find(l.a.done, 1) != nullptr; }));
    CHECK(find(l.a.done, 1)->status == IBV_WC_LOC_PROT_ERR);
    CHECK(l.a.t.qp_state(l.a.qpn) == QpState::kError);
    CHECK(l.a.counters().region_gone == 1);
    l.settle();
    CHECK(find(l.b.done, 9) == nullptr);  // nothing of the message completed at B
  }
}

TEST_CASE("a WRITE whose source region goes between its packets stops, and what is queued for the port is dropped") {
  TransportConfig cfg;
  cfg.tx_queue_capacity = 8;
  QpSetup s;
  Loop l(kMem, s, {}, 1, cfg);
  REQUIRE(l.ok);
  MappedRegion m(l.a.t);
  SendWr wr = wr_from(m, IBV_WR_RDMA_WRITE, 2, 32 << 10, &l.b);
  REQUIRE(l.send(l.a, wr) == 0);
  l.a.t.poll(l.now);
  REQUIRE(l.a.t.tx().size() == 8);  // eight of its 32 packets wait for the I/O layer
  m.gone(l.a.t);
  uint32_t dropped = 0;
  while (!l.a.t.tx().empty()) {
    dropped += TxQueue::dropped(l.a.t.tx().front());
    CHECK(l.a.t.tx().front().num_segs == 0);
    l.a.t.tx().pop();
  }
  CHECK(dropped == 8);
  REQUIRE(l.run([&] { return find(l.a.done, 2) != nullptr; }));
  CHECK(find(l.a.done, 2)->status == IBV_WC_LOC_PROT_ERR);
}

TEST_CASE("a receive whose region was deregistered fails with LOC_PROT_ERR and the sender gets REM_OP_ERR") {
  for (Reliability mode : kModes) {
    CAPTURE(static_cast<int>(mode));
    QpSetup s;
    s.mode = mode;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    MappedRegion m(l.b.t);
    RecvWr r;
    r.wr_id = 5;
    r.num_sge = 1;
    r.sg_list[0] = Sge{m.mr.addr, 64 << 10, m.mr.lkey};
    REQUIRE(l.recv(l.b, r) == 0);
    m.gone(l.b.t);
    fill_pattern(l.a.mem, 0, 8192, 3);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 6, l.a, 0, 8192)) == 0);
    REQUIRE(l.run([&] { return find(l.a.done, 6) != nullptr && find(l.b.done, 5) != nullptr; }));
    CHECK(find(l.a.done, 6)->status == IBV_WC_REM_OP_ERR);
    CHECK(find(l.b.done, 5)->status == IBV_WC_LOC_PROT_ERR);
    CHECK(l.b.t.qp_state(l.b.qpn) == QpState::kError);
  }
}

TEST_CASE("a READ being answered from a region deregistered meanwhile is NAKed: REM_ACCESS_ERR, nothing more read") {
  for (Reliability mode : kModes) {
    CAPTURE(static_cast<int>(mode));
    TransportConfig cfg;
    cfg.tx_queue_capacity = 8;
    QpSetup s;
    s.mode = mode;
    Loop l(kMem, s, {}, 1, cfg);
    REQUIRE(l.ok);
    MappedRegion m(l.b.t);
    // The READ request goes to B by hand, so B answers only part of it first.
    l.record = true;
    l.filter = [](bool from_a, const tandem::common::RocePacket& p) {
      return !(from_a && p.bth.opcode == IBV_OPCODE_RC_RDMA_READ_REQUEST);
    };
    SendWr wr = make_wr(IBV_WR_RDMA_READ, 7, l.a, 0, kMem);
    wr.remote_addr = m.mr.addr;
    wr.rkey = m.mr.rkey;
    REQUIRE(l.send(l.a, wr) == 0);
    l.run([&] { return !l.sent_by_a.empty(); });
    l.filter = nullptr;
    REQUIRE(l.inject(l.b, l.sent_by_a.back()) == DropReason::kNone);
    l.b.t.poll(l.now);
    REQUIRE(l.b.t.tx().size() == 8);  // the first responses; the rest of the job waits
    m.gone(l.b.t);
    REQUIRE(l.run([&] { return find(l.a.done, 7) != nullptr; }));
    CHECK(find(l.a.done, 7)->status == IBV_WC_REM_ACCESS_ERR);
    CHECK(l.b.counters().region_gone == 1);
  }
}

TEST_CASE("a READ whose landing region is deregistered before the responses arrive fails with LOC_PROT_ERR") {
  QpSetup s;
  Loop l(kMem, s);
  REQUIRE(l.ok);
  MappedRegion m(l.a.t);
  SendWr wr = wr_from(m, IBV_WR_RDMA_READ, 8, 16 << 10, &l.b);
  REQUIRE(l.send(l.a, wr) == 0);
  m.gone(l.a.t);
  REQUIRE(l.run([&] { return find(l.a.done, 8) != nullptr; }));
  CHECK(find(l.a.done, 8)->status == IBV_WC_LOC_PROT_ERR);
  CHECK(l.a.counters().drop(DropReason::kRegionGone) >= 1);
}

namespace {

// A request or response forged on A's behalf, delivered to `to` now.
DropReason forge(Loop& l, Host& to, uint32_t dqpn, uint8_t opcode, uint32_t psn, uint64_t va = 0, uint32_t rkey = 0,
                 uint32_t len = 0, uint8_t syndrome = 0) {
  TxDesc d{};
  d.bth.opcode = opcode;
  d.bth.dqpn = dqpn;
  d.bth.psn = psn;
  d.reth = tandem::common::Reth{va, rkey, len};
  d.aeth = tandem::common::Aeth{syndrome, 0};
  uint8_t buf[256];
  FrameAddrs fa;
  fa.src_ip = &to == &l.b ? 1 : 2;
  fa.dst_ip = &to == &l.b ? 2 : 1;
  const std::size_t n = build_frame(d, fa, buf, sizeof buf);
  REQUIRE(n > 0);
  return l.inject(to, std::vector<uint8_t>(buf, buf + n));
}

}  // namespace

TEST_CASE("a duplicate READ is answered only within the READ the responder received, never for the packet's length") {
  for (Reliability mode : kModes) {
    CAPTURE(static_cast<int>(mode));
    QpSetup s;
    s.mode = mode;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    SendWr wr = make_wr(IBV_WR_RDMA_READ, 10, l.a, 0, 4096, &l.b, 0);
    REQUIRE(l.send(l.a, wr) == 0);
    REQUIRE(l.run([&] { return find(l.a.done, 10) != nullptr; }));
    const uint32_t read_psn = s.sq_psn_a;  // the READ was A's first request
    const uint64_t before = l.b.counters().tx_data_pkts;
    // The same PSN, address and key, asking for 4 GiB: answered with the 4 KiB it first asked for.
    CHECK(forge(l, l.b, l.b.qpn, IBV_OPCODE_RC_RDMA_READ_REQUEST, read_psn, l.b.va(0), l.b.mr.rkey, 0xFFFFFFFF) ==
          DropReason::kDuplicate);
    l.b.t.poll(l.now);
    CHECK(l.b.counters().tx_data_pkts - before == 4);
    // A PSN before it (nothing was received there), or another address: no record, no answer.
    CHECK(forge(l, l.b, l.b.qpn, IBV_OPCODE_RC_RDMA_READ_REQUEST, read_psn - 10, l.b.va(0), l.b.mr.rkey, 4096) ==
          DropReason::kUnknownRead);
    CHECK(forge(l, l.b, l.b.qpn, IBV_OPCODE_RC_RDMA_READ_REQUEST, read_psn, l.b.va(1024), l.b.mr.rkey, 4096) ==
          DropReason::kUnknownRead);
    l.b.t.poll(l.now);
    CHECK(l.b.counters().tx_data_pkts - before == 4);
    CHECK(l.b.counters().drop(DropReason::kUnknownRead) == 2);
  }
}

TEST_CASE("a READ longer than 2^31 bytes or past the end of the address space is NAKed") {
  QpSetup s;
  {
    Loop l(kMem, s);
    REQUIRE(l.ok);
    CHECK(forge(l, l.b, l.b.qpn, IBV_OPCODE_RC_RDMA_READ_REQUEST, s.sq_psn_a, l.b.va(0), l.b.mr.rkey,
                0x80000001u) == DropReason::kInvalidRequest);
    CHECK(l.b.t.qp_state(l.b.qpn) != QpState::kReset);
  }
  {
    Loop l(kMem, s);
    REQUIRE(l.ok);
    CHECK(forge(l, l.b, l.b.qpn, IBV_OPCODE_RC_RDMA_READ_REQUEST, s.sq_psn_a, ~uint64_t{0} - 100, l.b.mr.rkey, 4096) ==
          DropReason::kAccessViolation);
  }
}

TEST_CASE("ACKs, NAKs and READ responses for PSNs never sent are dropped and counted") {
  QpSetup s;
  Loop l(kMem, s);
  REQUIRE(l.ok);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 11, l.a, 0, 1024, &l.b, 0)) == 0);
  REQUIRE(l.run([&] { return find(l.a.done, 11) != nullptr; }));
  const uint32_t next = s.sq_psn_a + 1;  // A sent one PSN
  CHECK(forge(l, l.a, l.a.qpn, IBV_OPCODE_RC_ACKNOWLEDGE, next + 5, 0, 0, 0, 0x1F) == DropReason::kUnsentPsn);
  CHECK(forge(l, l.a, l.a.qpn, IBV_OPCODE_RC_ACKNOWLEDGE, next + 100, 0, 0, 0, 0x60 | 2) == DropReason::kUnsentPsn);
  CHECK(forge(l, l.a, l.a.qpn, IBV_OPCODE_RC_RDMA_READ_RESPONSE_ONLY, next + 3, 0, 0, 0, 0x1F) ==
        DropReason::kUnsentPsn);
  CHECK(l.a.counters().drop(DropReason::kUnsentPsn) == 3);
  CHECK(l.a.t.qp_state(l.a.qpn) == QpState::kRts);  // the forged NAK changed nothing
}

TEST_CASE("a receive the host refused fails when a SEND needs it: LOC_PROT_ERR there, a remote operational error at the sender") {
  for (Reliability mode : kModes) {
    CAPTURE(static_cast<int>(mode));
    QpSetup s;
    s.mode = mode;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    RecvWr bad;
    bad.wr_id = 21;
    bad.invalid = true;  // what the host hands over for a receive whose lkey, PD or bounds it refused
    REQUIRE(l.recv(l.b, bad) == 0);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 3, l.a, 0, 1024)) == 0);
    REQUIRE(l.run([&] { return find(l.a.done, 3) != nullptr && find(l.b.done, 21) != nullptr; }));
    CHECK(find(l.a.done, 3)->status == IBV_WC_REM_OP_ERR);  // NAKed at once, not retried out
    CHECK(find(l.b.done, 21)->status == IBV_WC_LOC_PROT_ERR);
    CHECK(l.b.t.qp_state(l.b.qpn) == QpState::kError);
    CHECK(l.b.counters().drop(DropReason::kBadRecvWqe) == 1);
    CHECK(l.a.counters().timeouts == 0);
  }
}

TEST_CASE("a region moved to another PD (ibv_rereg_mr) is gone for receives posted under the old one") {
  QpSetup s;
  Loop l(kMem, s);
  REQUIRE(l.ok);
  REQUIRE(l.recv(l.b, make_recv(22, l.b, 0, kMem)) == 0);  // checked and posted under PD 0
  REQUIRE(l.b.t.modify_mr(l.b.mr.lkey, 7, l.b.mr.access) == 0);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 4, l.a, 0, 512)) == 0);
  REQUIRE(l.run([&] { return find(l.a.done, 4) != nullptr && find(l.b.done, 22) != nullptr; }));
  CHECK(find(l.a.done, 4)->status == IBV_WC_REM_OP_ERR);
  CHECK(find(l.b.done, 22)->status == IBV_WC_LOC_PROT_ERR);
  // Moved back, it is usable again by a QP reset and connected anew (covered
  // end to end by rdma-core's test_mr_rereg_pd); the key never changed.
  REQUIRE(l.b.t.modify_mr(l.b.mr.lkey, 0, l.b.mr.access) == 0);
  CHECK(l.b.t.find_mr(l.b.mr.lkey, 0) != nullptr);
  CHECK(l.b.t.modify_mr(l.b.mr.lkey ^ 0xFF00, 0, 0) == EINVAL);
}
