// Transport::on_packets (a receive burst, one QP lookup per run of requests
// to one QP) is on_packet on each frame in order: two receivers with the same
// memory addresses and keys, fed the same recorded request stream (reordered,
// lost and duplicated on the way, plus foreign QPNs, ACKs, CNPs and a request
// with a bad R_Key that sends the QP to ERROR), one frame by frame and one in
// bursts, give the same verdicts, ACK/NAK/SACK/READ-response frames,
// completions, counters and memory.
#include <catch2/catch.hpp>

#include <set>

#include "common/wire/byte_order.h"
#include "common/wire/opcode.h"
#include "tests/unit/core/loop.h"
#include "tests/unit/core/replay_rx.h"

using namespace tandem;
using namespace tandem::rnic;
using namespace tandem::rnic::test;

namespace {

constexpr std::size_t kMem = 256 * 1024;
constexpr uint32_t kSlot = 2048;
constexpr uint32_t kMsgs = 48;

using Rx = ReplayRx<kMem>;

struct Frame {
  common::RocePacket pkt;
  std::vector<uint8_t> payload;
};

std::vector<uint8_t> frame_bytes(const TxDesc& d) {
  uint8_t buf[9100];
  FrameAddrs fa;
  fa.src_ip = 2;
  fa.dst_ip = 1;
  const std::size_t n = build_frame(d, fa, buf, sizeof buf);
  return {buf, buf + n};
}

uint64_t run_case(Reliability mode, uint64_t seed) {
  QpSetup s;
  s.mode = mode;
  s.mtu = 1024;
  NetConfig net;
  net.loss = 0.03;
  net.duplicate = 0.03;
  net.jitter_ns = 10'000;
  Loop gen(kMem, s, net, seed);
  REQUIRE(gen.ok);
  gen.record = true;
  std::mt19937_64 rng(seed);
  const ibv_wr_opcode ops[] = {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
                               IBV_WR_RDMA_READ};
  std::vector<RecvWr> recvs;
  for (uint32_t i = 0; i < kMsgs; ++i) {
    const ibv_wr_opcode op = ops[rng() % 5];
    const uint32_t len = rng() % 3 == 0 ? static_cast<uint32_t>(rng() % 80) : static_cast<uint32_t>(rng() % kSlot);
    fill_pattern(gen.a.mem, i * kSlot, len, i);
    if (op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM) {
      recvs.push_back(make_recv(i, gen.b, kMem / 2 + i * kSlot, kSlot));
      REQUIRE(gen.recv(gen.b, recvs.back()) == 0);
    }
    if (op == IBV_WR_RDMA_READ)
      REQUIRE(gen.send(gen.a, make_wr(op, i, gen.a, kMem / 2 + i * kSlot, len, &gen.b, i * kSlot)) == 0);
    else
      REQUIRE(gen.send(gen.a, make_wr(op, i, gen.a, i * kSlot, len, &gen.b, kMem / 2 + i * kSlot, i)) == 0);
  }
  gen.settle();
  REQUIRE(gen.sent_by_a.size() > kMsgs);

  // The stream: every request A sent (retransmissions included), with some
  // swapped (IRN), duplicated, sent to another QPN, and ACKs and CNPs among them;
  // the first transmission of a WRITE past three fifths of its PSNs carries a bad
  // R_Key (refused, and the QP goes to ERROR).
  std::vector<Frame> stream;
  for (const auto& f : gen.sent_by_a) {
    Frame fr;
    REQUIRE(common::parse_roce(f.data(), f.size(), fr.pkt) == common::DropReason::kNone);
    fr.payload.assign(f.begin() + fr.pkt.payload_offset, f.begin() + fr.pkt.payload_offset + fr.pkt.payload_len);
    stream.push_back(fr);
    const uint64_t x = rng() % 100;
    if (x < 5) stream.push_back(fr);
    if (x >= 5 && x < 8) {
      Frame o = fr;
      o.pkt.bth.dqpn = 0x777;
      stream.push_back(o);
    }
    if (x >= 8 && x < 11) {
      Frame a;
      a.pkt.bth.opcode = x == 8 ? common::kOpcodeCnp : static_cast<uint8_t>(IBV_OPCODE_RC_ACKNOWLEDGE);
      a.pkt.bth.dqpn = fr.pkt.bth.dqpn;
      a.pkt.bth.psn = fr.pkt.bth.psn;
      a.pkt.aeth.syndrome = 0x1F;
      stream.push_back(a);
    }
  }
  // (Go-back-N would refuse everything after the first swap: its receiver
  // only moves on with the retransmissions the recording happens to hold.)
  if (mode == Reliability::kIrn)
    for (std::size_t i = 0; i + 1 < stream.size(); i += 2 + rng() % 5) std::swap(stream[i], stream[i + 1]);
  std::set<uint32_t> psns, seen;
  for (const Frame& f : stream) psns.insert(f.pkt.bth.psn);
  for (Frame& f : stream) {
    const bool first = seen.insert(f.pkt.bth.psn).second;
    if (seen.size() < psns.size() * 3 / 5 || !first || !common::opcode_has(f.pkt.bth.opcode, common::kOpWrite))
      continue;
    if (mode == Reliability::kIrn) common::store_be32(f.payload.data() + 12, 0x4242);
    else if (common::opcode_has(f.pkt.bth.opcode, common::kOpReth)) f.pkt.reth.rkey = 0x4242;
    else continue;
    break;
  }

  Rx one, burst;
  make_rx(one, gen.b, s, gen.a.qpn);
  make_rx(burst, gen.b, s, gen.a.qpn);
  for (const RecvWr& w : recvs) {
    REQUIRE(one.t.post_recv(one.qpn, w) == 0);
    REQUIRE(burst.t.post_recv(burst.qpn, w) == 0);
  }

  uint64_t now = 1'000'000;
  std::vector<RxPacketRef> refs;
  std::vector<common::DropReason> why(32);
  uint64_t runs_with_drops = 0;
  for (std::size_t at = 0; at < stream.size();) {
    const std::size_t n = std::min<std::size_t>(stream.size() - at, 1 + rng() % 32);
    refs.clear();
    for (std::size_t i = at; i < at + n; ++i)
      refs.push_back(RxPacketRef{&stream[i].pkt, stream[i].payload.data(), static_cast<uint32_t>(stream[i].payload.size())});
    const uint32_t took = burst.t.on_packets(refs.data(), static_cast<uint32_t>(n), now, why.data());
    uint32_t took_one = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const common::DropReason r = one.t.on_packet(*refs[i].pkt, refs[i].payload, refs[i].payload_len, now);
      INFO("frame " << at + i << " opcode " << int(refs[i].pkt->bth.opcode) << " psn " << refs[i].pkt->bth.psn);
      REQUIRE(why[i] == r);
      took_one += r == common::DropReason::kNone;
    }
    REQUIRE(took == took_one);
    runs_with_drops += took != n;
    // Their responses, frame for frame.
    one.t.poll(now);
    burst.t.poll(now);
    REQUIRE(one.t.tx().size() == burst.t.tx().size());
    while (!one.t.tx().empty()) {
      REQUIRE(frame_bytes(one.t.tx().front()) == frame_bytes(burst.t.tx().front()));
      one.t.tx().pop();
      burst.t.tx().pop();
    }
    Completion c1[64], c2[64];
    uint32_t n1, n2;
    while ((n1 = one.t.poll_cq(one.cq, c1, 64)) | (n2 = burst.t.poll_cq(burst.cq, c2, 64))) {
      REQUIRE(n1 == n2);
      for (uint32_t i = 0; i < n1; ++i) {
        REQUIRE(c1[i].wr_id == c2[i].wr_id);
        REQUIRE(c1[i].status == c2[i].status);
        REQUIRE(c1[i].opcode == c2[i].opcode);
        REQUIRE(c1[i].byte_len == c2[i].byte_len);
        REQUIRE(c1[i].imm_data == c2[i].imm_data);
      }
    }
    at += n;
    now += 3'000;
  }
  REQUIRE(runs_with_drops > 0);
  REQUIRE(one.t.counters().rx_pkts == burst.t.counters().rx_pkts);
  REQUIRE(one.t.counters().drops == burst.t.counters().drops);
  const QpCounters& q1 = *one.t.qp_counters(one.qpn);
  const QpCounters& q2 = *burst.t.qp_counters(burst.qpn);
  REQUIRE(q1.rx_pkts == q2.rx_pkts);
  REQUIRE(q1.rx_bytes == q2.rx_bytes);
  REQUIRE(q1.tx_pkts == q2.tx_pkts);
  REQUIRE(q1.acks_tx == q2.acks_tx);
  REQUIRE(q1.naks_tx == q2.naks_tx);
  REQUIRE(q1.reorder_depth_max == q2.reorder_depth_max);
  REQUIRE(q1.drops == q2.drops);
  REQUIRE(one.mem == burst.mem);
  // The stream exercised what it was built to.
  const auto& d = one.t.counters();
  CHECK(d.drop(common::DropReason::kUnknownQpn) > 0);
  CHECK(d.drop(common::DropReason::kDuplicate) > 0);
  CHECK(q1.rx_pkts > kMsgs / 2);
  return d.drop(common::DropReason::kAccessViolation);
}

}  // namespace

TEST_CASE("on_packets gives what on_packet gives frame by frame, IRN", "[core][rx_burst]") {
  uint64_t refused = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) refused += run_case(Reliability::kIrn, seed);
  CHECK(refused > 0);
}

TEST_CASE("on_packets gives what on_packet gives frame by frame, go-back-N", "[core][rx_burst]") {
  uint64_t refused = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) refused += run_case(Reliability::kGoBackN, seed);
  CHECK(refused > 0);
}
