// QpInitAttr::bench_any_psn (benchmark only): a requester's recorded request
// stream, replayed in a loop into a fresh receiver as pktgen replays a pcap,
// is placed on every pass; each pass after the first restarts the sequence
// from behind (one bench_duplicate per pass), a frame lost before a packet
// restarts it from ahead (bench_gap); access checks still refuse. Off (the
// default), the same replay is RC: the later passes are duplicates.
#include <catch2/catch.hpp>

#include <map>
#include <memory>

#include "common/wire/opcode.h"
#include "tests/unit/core/loop.h"

using namespace tandem;
using namespace tandem::rnic;
using namespace tandem::rnic::test;
using common::DropReason;

namespace {

constexpr std::size_t kMem = 128 * 1024;
constexpr uint32_t kSlot = 4096;
constexpr uint32_t kMsgs = 12;  // WRITEs of 1..3 packets and SENDs

struct Frame {
  common::RocePacket pkt;
  std::vector<uint8_t> payload;
};

struct Recorded {
  std::vector<Frame> requests;  // what A sent, in order (no loss: no retransmissions)
  std::vector<uint8_t> b_mem;   // B's memory after the honest run
  uint32_t sends = 0;
  uint64_t a_rkey = 0;
};

struct Rx {
  Transport t;
  std::vector<uint8_t> mem = std::vector<uint8_t>(kMem);
  uint32_t cq = 0;
  uint32_t qpn = 0;
};

Recorded record(Reliability mode, QpSetup& s, Loop*& keep) {
  s.mode = mode;
  s.mtu = 1024;
  keep = new Loop(kMem, s);
  Loop& gen = *keep;
  REQUIRE(gen.ok);
  gen.record = true;
  Recorded r;
  for (uint32_t i = 0; i < kMsgs; ++i) {
    const bool send = i % 3 == 2;
    const uint32_t len = 200 + (i * 977) % 2800;  // 1 to 3 packets at MTU 1024
    fill_pattern(gen.a.mem, i * kSlot, len, i + 1);
    if (send) {
      REQUIRE(gen.recv(gen.b, make_recv(i, gen.b, kMem / 2 + i * kSlot, kSlot)) == 0);
      REQUIRE(gen.send(gen.a, make_wr(IBV_WR_SEND, i, gen.a, i * kSlot, len)) == 0);
      ++r.sends;
    } else {
      REQUIRE(gen.send(gen.a, make_wr(IBV_WR_RDMA_WRITE, i, gen.a, i * kSlot, len, &gen.b, i * kSlot)) == 0);
    }
  }
  gen.settle();
  REQUIRE(gen.b.counters().rx_pkts > kMsgs);
  for (const auto& f : gen.sent_by_a) {
    Frame fr;
    REQUIRE(common::parse_roce(f.data(), f.size(), fr.pkt) == DropReason::kNone);
    if (!common::opcode_has(fr.pkt.bth.opcode, common::kOpSend | common::kOpWrite)) continue;
    fr.payload.assign(f.begin() + fr.pkt.payload_offset, f.begin() + fr.pkt.payload_offset + fr.pkt.payload_len);
    r.requests.push_back(fr);
  }
  REQUIRE(r.requests.size() == gen.b.counters().rx_pkts);
  r.b_mem = gen.b.mem;
  return r;
}

// A receiver with B's address, key, QPN and PSN, its RECVs for `passes` replays posted.
void make_rx(Rx& r, const Loop& gen, const QpSetup& s, bool bench, uint32_t passes) {
  r.cq = r.t.create_cq(1 << 12);
  const MemoryRegion mr = r.t.reg_mr(gen.b.mr.addr, r.mem.data(), r.mem.size(),
                                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  REQUIRE(mr.rkey == gen.b.mr.rkey);
  QpInitAttr init = qp_init(s, r.cq);
  init.bench_any_psn = bench;
  r.qpn = r.t.create_qp(init);
  REQUIRE(r.qpn == gen.b.qpn);
  REQUIRE(bring_up(r.t, r.qpn, gen.a.qpn, s.sq_psn_b, s.sq_psn_a, s, 1) == 0);
  const Host& like = gen.b;
  for (uint32_t p = 0; p < passes; ++p)
    for (uint32_t i = 0; i < kMsgs; ++i)
      if (i % 3 == 2) REQUIRE(r.t.post_recv(r.qpn, make_recv(i, like, kMem / 2 + i * kSlot, kSlot)) == 0);
}

struct Outcome {
  uint64_t accepted = 0, acks = 0, recv_ok = 0;
  std::map<DropReason, uint64_t> drops;
};

// Replays the stream `passes` times, in bursts of up to 32, skipping frame `skip` of pass 1.
Outcome replay(Rx& r, const std::vector<Frame>& stream, uint32_t passes, std::size_t skip = SIZE_MAX) {
  Outcome o;
  std::vector<RxPacketRef> refs;
  std::vector<DropReason> why(32);
  uint64_t now = 1'000'000;
  for (uint32_t p = 0; p < passes; ++p) {
    for (std::size_t at = 0; at < stream.size();) {
      refs.clear();
      for (; at < stream.size() && refs.size() < 32; ++at) {
        if (p == 1 && at == skip) continue;
        refs.push_back(RxPacketRef{&stream[at].pkt, stream[at].payload.data(),
                                   static_cast<uint32_t>(stream[at].payload.size())});
      }
      o.accepted += r.t.on_packets(refs.data(), static_cast<uint32_t>(refs.size()), now, why.data());
      for (std::size_t i = 0; i < refs.size(); ++i)
        if (why[i] != DropReason::kNone) ++o.drops[why[i]];
      r.t.poll(now);
      while (!r.t.tx().empty()) {
        o.acks += r.t.tx().front().bth.opcode == IBV_OPCODE_RC_ACKNOWLEDGE;
        r.t.tx().pop();
      }
      Completion c[64];
      while (uint32_t n = r.t.poll_cq(r.cq, c, 64))
        for (uint32_t i = 0; i < n; ++i) o.recv_ok += c[i].status == IBV_WC_SUCCESS;
      now += 1'000;
    }
  }
  return o;
}

void looped_replay(Reliability mode) {
  QpSetup s;
  Loop* gen = nullptr;
  const Recorded rec = record(mode, s, gen);
  const std::unique_ptr<Loop> own(gen);
  const uint64_t n = rec.requests.size();

  SECTION("bench_any_psn: every pass placed, one duplicate restart per later pass") {
    Rx r;
    make_rx(r, *gen, s, true, 3);
    const Outcome o = replay(r, rec.requests, 3);
    CHECK(o.drops.empty());
    CHECK(o.accepted == 3 * n);
    CHECK(r.t.counters().bench_accepted == 3 * n);
    CHECK(r.t.counters().bench_duplicate == 2);
    CHECK(r.t.counters().bench_gap == 0);
    CHECK(o.recv_ok == 3 * rec.sends);
    CHECK(o.acks > 0);  // the accept path answers as RC does
    CHECK(r.mem == rec.b_mem);
  }
  SECTION("bench_any_psn: a frame lost before a packet restarts from ahead") {
    Rx r;
    make_rx(r, *gen, s, true, 3);
    // A whole one-packet message (the next packet starts a message), so the
    // packet after the gap is a valid place to restart.
    auto only = [&](std::size_t i) {
      const uint8_t op = rec.requests[i].pkt.bth.opcode;
      return common::opcode_has(op, common::kOpFirst) && common::opcode_has(op, common::kOpLast);
    };
    std::size_t skip = 1;
    while (skip + 1 < n && !(only(skip) && common::opcode_has(rec.requests[skip + 1].pkt.bth.opcode, common::kOpFirst)))
      ++skip;
    REQUIRE(skip + 1 < n);
    const Outcome o = replay(r, rec.requests, 3, skip);
    CHECK(o.drops.empty());
    CHECK(o.accepted == 3 * n - 1);
    CHECK(r.t.counters().bench_duplicate == 2);
    CHECK(r.t.counters().bench_gap == 1);
  }
  SECTION("off by default: the later passes are RC duplicates, nothing restarts") {
    Rx r;
    make_rx(r, *gen, s, false, 3);
    const Outcome o = replay(r, rec.requests, 3);
    CHECK(o.accepted == n);
    CHECK(o.drops.at(DropReason::kDuplicate) == 2 * n);
    CHECK(r.t.counters().bench_accepted == 0);
    CHECK(r.t.counters().bench_duplicate == 0);
    CHECK(o.recv_ok == rec.sends);
    CHECK(r.mem == rec.b_mem);
  }
  SECTION("bench_any_psn keeps the access checks: a bad R_Key is refused and the QP stops") {
    Rx r;
    make_rx(r, *gen, s, true, 3);
    std::vector<Frame> bad = rec.requests;
    for (Frame& f : bad) {
      if (!common::opcode_has(f.pkt.bth.opcode, common::kOpWrite)) continue;
      if (mode == Reliability::kIrn) common::store_be32(f.payload.data() + 12, 0x4242);
      if (common::opcode_has(f.pkt.bth.opcode, common::kOpReth)) f.pkt.reth.rkey = 0x4242;
    }
    const Outcome o = replay(r, bad, 1);
    CHECK(o.drops.at(DropReason::kAccessViolation) == 1);
    CHECK(o.accepted < n);
    CHECK(r.t.counters().bench_accepted == o.accepted);
  }
}

}  // namespace

TEST_CASE("bench_any_psn: looped replay, IRN", "[core][bench_any_psn]") { looped_replay(Reliability::kIrn); }

TEST_CASE("bench_any_psn: looped replay, go-back-N", "[core][bench_any_psn]") {
  looped_replay(Reliability::kGoBackN);
}
