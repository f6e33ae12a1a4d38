// Responder checks (R_Key, bounds, access rights, receive buffers), RNR,
// duplicates and stale packets, and the requester's retry limits.
#include <catch2/catch.hpp>

#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;
using tandem::common::DropReason;

namespace {
constexpr std::size_t kMem = 1 << 18;
const Reliability kModes[] = {Reliability::kIrn, Reliability::kGoBackN};

bool untouched(const Host& h, std::size_t off, std::size_t len) {
  for (std::size_t i = 0; i < len; ++i)
    if (h.mem[off + i] != 0) return false;
  return true;
}
}  // namespace

TEST_CASE("a WRITE with a bad R_Key, out of bounds or without rights is NAKed and writes nothing") {
  for (Reliability mode : kModes) {
    for (int kind = 0; kind < 4; ++kind) {
      CAPTURE(static_cast<int>(mode), kind);
      QpSetup s;
      s.mode = mode;
      s.mtu = 256;
      if (kind == 3) s.access = IBV_ACCESS_REMOTE_READ;  // QP grants no remote write
      Loop l(kMem, s);
      REQUIRE(l.ok);
      fill_pattern(l.a.mem, 0, 4096, 9);
      SendWr wr = make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 1000, &l.b, 1000);
      if (kind == 0) wr.rkey ^= 0x100;                    // unknown key
      if (kind == 1) wr.remote_addr = l.b.va(kMem - 500); // runs past the region
      if (kind == 2) {                                    // region without REMOTE_WRITE
        const MemoryRegion ro = l.b.t.reg_mr(l.b.mem.data(), kMem, IBV_ACCESS_REMOTE_READ);
        wr.rkey = ro.rkey;
      }
      REQUIRE(l.send(l.a, wr) == 0);
      REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 2, l.a, 0, 10, &l.b, 0)) == 0);
      REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
      CHECK(l.a.done[0].status == IBV_WC_REM_ACCESS_ERR);
      CHECK(l.a.done[1].status == IBV_WC_WR_FLUSH_ERR);
      CHECK(l.a.t.qp_state(l.a.qpn) == QpState::kError);
      CHECK(untouched(l.b, 0, kMem));
      CHECK(l.b.counters().drop(DropReason::kAccessViolation) >= 1);
      CHECK(l.b.counters().naks_tx >= 1);
    }
  }
}

TEST_CASE("a READ without remote read rights is NAKed and returns nothing") {
  for (Reliability mode : kModes) {
    QpSetup s;
    s.mode = mode;
    s.access = IBV_ACCESS_REMOTE_WRITE;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    fill_pattern(l.b.mem, 0, 4096, 4);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_READ, 1, l.a, 0, 3000, &l.b, 0)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
    CHECK(l.a.done[0].status == IBV_WC_REM_ACCESS_ERR);
    CHECK(untouched(l.a, 0, kMem));
  }
}

TEST_CASE("a SEND longer than the posted RECV is NAKed as an invalid request") {
  for (Reliability mode : kModes) {
    QpSetup s;
    s.mode = mode;
    s.mtu = 256;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    REQUIRE(l.recv(l.b, make_recv(5, l.b, 0, 100)) == 0);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 1, l.a, 0, 101)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
    CHECK(l.a.done[0].status == IBV_WC_REM_INV_REQ_ERR);
  }
}

TEST_CASE("a SEND without a posted RECV gets RNR NAKs and completes once a RECV is posted") {
  for (Reliability mode : kModes) {
    QpSetup s;
    s.mode = mode;
    s.mtu = 256;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    fill_pattern(l.a.mem, 0, 2000, 8);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 1, l.a, 0, 1000)) == 0);
    // Let it be refused a few times.
    REQUIRE(l.run([&] { return l.a.counters().rnr_naks_rx >= 3; }));
    CHECK(l.b.counters().rnr_naks_tx >= 3);
    CHECK(l.a.done.empty());
    REQUIRE(l.recv(l.b, make_recv(5, l.b, 0, 1000)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 1 && l.b.done.size() == 1; }));
    CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
    CHECK(l.b.done[0].byte_len == 1000);
    CHECK(std::memcmp(l.a.mem.data(), l.b.mem.data(), 1000) == 0);
  }
}

TEST_CASE("RNR retries run out with IBV_WC_RNR_RETRY_EXC_ERR") {
  for (Reliability mode : kModes) {
    QpSetup s;
    s.mode = mode;
    s.rnr_retry = 2;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 1, l.a, 0, 10)) == 0);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 2, l.a, 0, 10)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
    CHECK(l.a.done[0].status == IBV_WC_RNR_RETRY_EXC_ERR);
    CHECK(l.a.done[1].status == IBV_WC_WR_FLUSH_ERR);
    CHECK(l.a.counters().rnr_naks_rx == 3);
  }
}

TEST_CASE("a peer that never answers ends in IBV_WC_RETRY_EXC_ERR after retry_cnt timeouts") {
  for (Reliability mode : kModes) {
    QpSetup s;
    s.mode = mode;
    s.retry_cnt = 3;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    l.block_a_to_b = true;
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 3000, &l.b, 0)) == 0);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_READ, 2, l.a, 0, 10, &l.b, 0)) == 0);
    const uint64_t start = l.now;
    REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
    CHECK(l.a.done[0].status == IBV_WC_RETRY_EXC_ERR);
    CHECK(l.a.done[1].status == IBV_WC_WR_FLUSH_ERR);
    CHECK(l.a.counters().timeouts == 4);
    // Exponential backoff: 1 + 2 + 4 + 8 timeouts' worth of waiting.
    CHECK(l.now - start >= 15 * s.timeout_ns);
    CHECK(l.a.t.next_deadline() == kNever);
  }
}

TEST_CASE("IRN's quick tail timeouts (RTO_low) do not use up retry_cnt: a stall shorter than the timeout recovers") {
  QpSetup s;
  s.mode = Reliability::kIrn;
  s.retry_cnt = 3;
  s.timeout_ns = 10'000'000;  // what the application asked for: 4 x 10 ms of patience
  Loop l(kMem, s);
  REQUIRE(l.ok);
  // A few round trips first: the RTT sample makes the single-packet tail timer ~100 us.
  for (uint64_t i = 0; i < 4; ++i) {
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, i, l.a, 0, 64, &l.b, 0)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == i + 1; }));
  }
  // The path to B is dead for 3 ms: several RTO_low expiries, well under one timeout.
  l.block_a_to_b = true;
  const uint64_t heal = l.now + 3'000'000;
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 9, l.a, 0, 64, &l.b, 0)) == 0);
  REQUIRE(l.run([&] {
    if (l.now >= heal) l.block_a_to_b = false;
    return l.a.done.size() == 5;
  }));
  CHECK(l.a.counters().timeouts >= 4);  // more than retry_cnt quick ones fired
  CHECK(l.a.done[4].status == IBV_WC_SUCCESS);
  CHECK(l.a.done[4].wr_id == 9);
}

TEST_CASE("duplicate packets are acknowledged again but placed and completed once") {
  for (Reliability mode : kModes) {
    QpSetup s;
    s.mode = mode;
    s.mtu = 256;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    l.record = true;
    fill_pattern(l.a.mem, 0, 4096, 2);
    REQUIRE(l.recv(l.b, make_recv(1, l.b, 8192, 1000)) == 0);
    REQUIRE(l.recv(l.b, make_recv(2, l.b, 16384, 1000)) == 0);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 1, l.a, 0, 1000)) == 0);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 2, l.a, 0, 700, &l.b, 0)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 2 && l.b.done.size() == 1; }));
    const auto acks_before = l.b.counters().acks_tx;
    // Replay everything A sent, after the fact.
    std::memset(l.b.mem.data(), 0, 700);
    for (const auto& f : l.sent_by_a) CHECK(l.inject(l.b, f) == DropReason::kDuplicate);
    l.settle();
    CHECK(l.b.done.size() == 1);          // the second RECV is still posted
    CHECK(untouched(l.b, 0, 700));        // nothing written again
    CHECK(l.b.counters().drop(DropReason::kDuplicate) == l.sent_by_a.size());
    CHECK(l.b.counters().acks_tx > acks_before);
  }
}

TEST_CASE("stale ACKs, packets for unknown QPs and PSNs beyond the window are dropped and counted") {
  QpSetup s;
  s.window = 64;
  Loop l(kMem, s);
  REQUIRE(l.ok);
  l.record = true;
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 10, &l.b, 0)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  REQUIRE(!l.sent_by_a.empty());

  tandem::common::RocePacket p;
  std::vector<uint8_t> f = l.sent_by_a[0];
  REQUIRE(tandem::common::parse_roce(f.data(), f.size(), p) == DropReason::kNone);
  // Same packet, PSN far ahead of the window.
  TxDesc d;
  d.bth = p.bth;
  d.bth.psn = (p.bth.psn + 1000) & 0xFFFFFF;
  d.reth = p.reth;
  d.has_xeth = true;
  d.xeth = Xeth{0, 0, 10, l.b.mr.rkey, l.b.va(0)};
  d.payload_len = 10;
  d.num_segs = 1;
  d.segs[0] = TxSeg{l.a.mem.data(), 10};
  uint8_t buf[2048];
  std::size_t n = build_frame(d, FrameAddrs{}, buf, sizeof buf);
  CHECK(l.inject(l.b, std::vector<uint8_t>(buf, buf + n)) == DropReason::kPsnOutOfWindow);
  // Unknown destination QP.
  d.bth.dqpn = 0x777;
  n = build_frame(d, FrameAddrs{}, buf, sizeof buf);
  CHECK(l.inject(l.b, std::vector<uint8_t>(buf, buf + n)) == DropReason::kUnknownQpn);
  CHECK(l.b.t.counters().drop(DropReason::kUnknownQpn) == 1);
  // An ACK older than anything outstanding.
  TxDesc ack;
  ack.bth.opcode = IBV_OPCODE_RC_ACKNOWLEDGE;
  ack.bth.dqpn = l.a.qpn;
  ack.bth.psn = (s.sq_psn_a - 5) & 0xFFFFFF;
  n = build_frame(ack, FrameAddrs{}, buf, sizeof buf);
  CHECK(l.inject(l.a, std::vector<uint8_t>(buf, buf + n)) == DropReason::kDuplicate);
  // An ACK for a PSN never sent.
  ack.bth.psn = (s.sq_psn_a + 50) & 0xFFFFFF;
  n = build_frame(ack, FrameAddrs{}, buf, sizeof buf);
  CHECK(l.inject(l.a, std::vector<uint8_t>(buf, buf + n)) == DropReason::kUnsentPsn);
}

TEST_CASE("RECVs posted late, under loss and reordering: RNR waits end in success, bytes intact") {
  for (Reliability mode : kModes) {
    QpSetup s;
    s.mode = mode;
    s.mtu = 256;
    s.window = 128;
    s.reorder_delay_ns = 10'000;
    NetConfig net;
    net.loss = 0.02;
    net.jitter_ns = 8'000;
    Loop l(1 << 22, s, net, 21);
    REQUIRE(l.ok);
    constexpr uint32_t kN = 24;
    fill_pattern(l.a.mem, 0, kN * 4096, 6);
    std::vector<uint32_t> len(kN);
    for (uint32_t i = 0; i < kN; ++i) {
      len[i] = (i * 977) % 3000;
      const ibv_wr_opcode op = i % 3 == 2 ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_SEND;
      REQUIRE(l.send(l.a, make_wr(op, i, l.a, i * 4096, len[i], &l.b, (1 << 21) + i * 4096, i)) == 0);
    }
    // One RECV every 15 us, while the sender is already sending.
    uint32_t posted = 0;
    const uint64_t t0 = l.now;
    REQUIRE(l.run([&] {
      while (posted < kN && l.now >= t0 + posted * 15'000) {
        REQUIRE(l.recv(l.b, make_recv(posted, l.b, (1 << 20) + posted * 4096, 4096)) == 0);
        ++posted;
      }
      return l.a.done.size() == kN && l.b.done.size() == kN;
    }));
    CHECK(l.a.counters().rnr_naks_rx > 0);
    for (const auto& c : l.a.done) CHECK(c.status == IBV_WC_SUCCESS);
    for (const auto& c : l.b.done) {
      const uint32_t i = static_cast<uint32_t>(c.wr_id);
      CHECK(c.status == IBV_WC_SUCCESS);
      CHECK(c.byte_len == len[i]);
      const uint8_t* dst = l.b.mem.data() + (i % 3 == 2 ? (1 << 21) : (1 << 20)) + i * 4096;
      CHECK(std::memcmp(l.a.mem.data() + i * 4096, dst, len[i]) == 0);
    }
  }
}

TEST_CASE("IRN: a NAK past a gap fails only its own WR; earlier ones are not falsely completed") {
  QpSetup s;
  s.mtu = 256;
  Loop l(kMem, s);
  REQUIRE(l.ok);
  // Drop the first packet of WR 1 (a good WRITE) once; WR 2 has a bad R_Key.
  bool dropped = false;
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    if (from_a && !dropped && p.bth.psn == s.sq_psn_a) { dropped = true; return false; }
    return true;
  };
  fill_pattern(l.a.mem, 0, 4096, 3);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 512, &l.b, 0)) == 0);
  SendWr bad = make_wr(IBV_WR_RDMA_WRITE, 2, l.a, 0, 100, &l.b, 4096);
  bad.rkey ^= 0x100;
  REQUIRE(l.send(l.a, bad) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
  // WR 1's first packet never arrived: it may not complete successfully.
  CHECK(l.a.done[0].wr_id == 1);
  CHECK(l.a.done[0].status == IBV_WC_WR_FLUSH_ERR);
  CHECK(l.a.done[1].wr_id == 2);
  CHECK(l.a.done[1].status == IBV_WC_REM_ACCESS_ERR);
  CHECK(untouched(l.b, 4096, 100));
}
