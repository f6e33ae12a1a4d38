// Integrity under random loss, duplication and heavy reordering, in both
// reliability modes: a mixed workload in both directions, every message
// completes successfully, in order, with identical bytes.
#include <catch2/catch.hpp>

#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;

namespace {

constexpr uint32_t kSlot = 24 * 1024;  // bytes per message slot
constexpr uint32_t kMsgs = 60;         // per direction

struct Workload {
  struct Msg {
    ibv_wr_opcode op;
    uint32_t len;
  };
  std::vector<Msg> msgs;
};

Workload make_workload(uint64_t seed) {
  std::mt19937_64 r(seed);
  const ibv_wr_opcode ops[] = {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
                               IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_READ};
  Workload w;
  for (uint32_t i = 0; i < kMsgs; ++i) {
    const uint32_t len = (r() % 4 == 0) ? static_cast<uint32_t>(r() % 3) : r() % kSlot;
    w.msgs.push_back({ops[r() % 5], len});
  }
  return w;
}

// Posts the workload from `src` to `dst`: message i uses slot i of the
// source's first half and of the destination's second half.
void post(Loop& l, Host& src, Host& dst, const Workload& w) {
  const uint64_t half = src.mem.size() / 2;
  for (uint32_t i = 0; i < w.msgs.size(); ++i) {
    const auto& m = w.msgs[i];
    if (m.op == IBV_WR_SEND || m.op == IBV_WR_SEND_WITH_IMM || m.op == IBV_WR_RDMA_WRITE_WITH_IMM)
      REQUIRE(l.recv(dst, make_recv(i, dst, half + i * kSlot, kSlot)) == 0);
    if (m.op == IBV_WR_RDMA_READ) {
      REQUIRE(l.send(src, make_wr(m.op, i, src, half + i * kSlot, m.len, &dst, i * kSlot)) == 0);
    } else {
      REQUIRE(l.send(src, make_wr(m.op, i, src, i * kSlot, m.len, &dst, half + i * kSlot, i)) == 0);
    }
  }
}

uint32_t recvs_expected(const Workload& w) {
  uint32_t n = 0;
  for (const auto& m : w.msgs) n += m.op != IBV_WR_RDMA_WRITE && m.op != IBV_WR_RDMA_READ;
  return n;
}

void check(const Host& src, const Host& dst, const Workload& w) {
  const uint64_t half = src.mem.size() / 2;
  REQUIRE(src.done.size() == w.msgs.size());
  for (uint32_t i = 0; i < w.msgs.size(); ++i) {
    CHECK(src.done[i].wr_id == i);
    CHECK(src.done[i].status == IBV_WC_SUCCESS);
    const auto& m = w.msgs[i];
    if (m.op == IBV_WR_RDMA_READ)
      CHECK(std::memcmp(src.mem.data() + half + i * kSlot, dst.mem.data() + i * kSlot, m.len) == 0);
    else
      CHECK(std::memcmp(src.mem.data() + i * kSlot, dst.mem.data() + half + i * kSlot, m.len) == 0);
  }
}

void run_case(Reliability mode, double loss, uint64_t jitter, double dup, uint64_t seed) {
  CAPTURE(mode == Reliability::kIrn ? "irn" : "gobackn", loss, jitter, dup, seed);
  QpSetup s;
  s.mode = mode;
  s.mtu = 1024;
  s.window = 256;
  s.reorder_delay_ns = 30'000;
  s.cc_window = 128 * 1024;
  NetConfig net;
  net.loss = loss;
  net.jitter_ns = jitter;
  net.duplicate = dup;
  Loop l(2 * kMsgs * kSlot, s, net, seed);
  REQUIRE(l.ok);
  fill_pattern(l.a.mem, 0, kMsgs * kSlot, static_cast<uint32_t>(seed));
  fill_pattern(l.b.mem, 0, kMsgs * kSlot, static_cast<uint32_t>(seed + 1));
  const Workload wa = make_workload(seed), wb = make_workload(seed + 100);
  post(l, l.a, l.b, wa);
  post(l, l.b, l.a, wb);
  const uint32_t ra = recvs_expected(wb), rb = recvs_expected(wa);
  // a.done holds A's send completions and the RECVs B's messages consumed.
  REQUIRE(l.run([&] { return l.a.done.size() == kMsgs + ra && l.b.done.size() == kMsgs + rb; }));
  // Split the two kinds of completion.
  auto split = [](Host& h) {
    std::vector<Completion> sends, recvs;
    for (const auto& c : h.done) {
      (c.opcode == IBV_WC_RECV || c.opcode == IBV_WC_RECV_RDMA_WITH_IMM ? recvs : sends).push_back(c);
    }
    h.done = sends;
    return recvs;
  };
  const auto recv_a = split(l.a), recv_b = split(l.b);
  check(l.a, l.b, wa);
  check(l.b, l.a, wb);
  // RECVs complete in posting order.
  for (std::size_t i = 1; i < recv_b.size(); ++i) CHECK(recv_b[i].wr_id > recv_b[i - 1].wr_id);
  for (std::size_t i = 1; i < recv_a.size(); ++i) CHECK(recv_a[i].wr_id > recv_a[i - 1].wr_id);
  for (const auto& c : recv_b) CHECK(c.byte_len == wa.msgs[c.wr_id].len);
  for (const auto& c : recv_a) CHECK(c.byte_len == wb.msgs[c.wr_id].len);
  if (loss > 0) CHECK(l.a.counters().retx_pkts + l.b.counters().retx_pkts > 0);
  if (getenv("CORE_DEBUG")) {
    for (Host* h : {&l.a, &l.b}) {
      const auto& c = h->counters();
      printf("mode %d loss %g frames %lu dropped %lu: tx %lu retx %lu sack tx/rx %lu/%lu nak tx/rx %lu/%lu rnr %lu/%lu to %lu depth %u\n", int(mode), loss, (unsigned long)l.frames, (unsigned long)l.dropped, (unsigned long)c.tx_data_pkts, (unsigned long)c.retx_pkts, (unsigned long)c.sacks_tx, (unsigned long)c.sacks_rx, (unsigned long)c.naks_tx, (unsigned long)c.naks_rx, (unsigned long)c.rnr_naks_tx, (unsigned long)c.rnr_naks_rx, (unsigned long)c.timeouts, c.reorder_depth_max);
    }
  }
}

}  // namespace

TEST_CASE("IRN: every message completes with identical bytes under 0.1-5% loss and reordering") {
  for (double loss : {0.001, 0.01, 0.05}) {
    for (uint64_t seed : {1, 2}) run_case(Reliability::kIrn, loss, 20'000, 0.0, seed);
  }
  run_case(Reliability::kIrn, 0.02, 60'000, 0.02, 3);  // heavy reordering and duplicates
}

TEST_CASE("GoBackN: every message completes with identical bytes under 0.1-5% loss and reordering") {
  for (double loss : {0.001, 0.01, 0.05}) {
    run_case(Reliability::kGoBackN, loss, 5'000, 0.0, 1);  // go-back-N is slow under reordering: one seed
  }
  run_case(Reliability::kGoBackN, 0.02, 60'000, 0.02, 3);
}

TEST_CASE("IRN absorbs reordering shorter than the reorder delay without retransmitting") {
  for (Reliability mode : {Reliability::kIrn, Reliability::kGoBackN}) {
    QpSetup s;
    s.mode = mode;
    s.reorder_delay_ns = 50'000;
    s.timeout_ns = 1'000'000;
    NetConfig net;
    net.jitter_ns = 10'000;
    Loop l(1 << 19, s, net, 9);
    REQUIRE(l.ok);
    fill_pattern(l.a.mem, 0, 1 << 18, 1);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 1 << 18, &l.b, 0)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
    CHECK(std::memcmp(l.a.mem.data(), l.b.mem.data(), 1 << 18) == 0);
    CHECK(l.b.counters().reorder_depth_max > 0);
    if (mode == Reliability::kIrn) {
      CHECK(l.a.counters().retx_pkts == 0);
      CHECK(l.b.counters().sacks_tx == 0);
    } else {
      CHECK(l.a.counters().retx_pkts > 0);  // go-back-N pays for every reordering
      CHECK(l.b.counters().naks_tx > 0);
    }
  }
}

TEST_CASE("IRN retransmits only what a SACK reports missing") {
  QpSetup s;
  s.mtu = 1024;
  s.reorder_delay_ns = 10'000;
  s.timeout_ns = 10'000'000;  // long: recovery must come from the SACK
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  // Drop the 5th and 9th data packets once.
  int data_seen = 0;
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    if (!from_a || !tandem::common::opcode_has(p.bth.opcode, tandem::common::kOpWrite)) return true;
    ++data_seen;
    return data_seen != 5 && data_seen != 9;
  };
  fill_pattern(l.a.mem, 0, 32 * 1024, 4);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 32 * 1024, &l.b, 0)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(std::memcmp(l.a.mem.data(), l.b.mem.data(), 32 * 1024) == 0);
  CHECK(l.a.counters().retx_pkts == 2);
  CHECK(l.a.counters().timeouts == 0);
  CHECK(l.b.counters().sacks_tx >= 1);
  CHECK(l.a.counters().sacks_rx >= 1);
}
