// A QP whose route leads to a standard RoCEv2 RNIC (QpAttr::standard_peer):
// whatever mode and CC policy it was created with, from RTR on it sends only
// what a plain RoCE stack parses (no IRN placement header, no SACK in
// RC_ATOMIC_ACKNOWLEDGE, no credits in the AETH) and recovers by go-back-N;
// reconnected to a Tandem peer it is IRN again.
#include <catch2/catch.hpp>

#include "rnic/core/credit_wire.h"
#include "rnic/core/irn_wire.h"
#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;
namespace cw = tandem::common;

namespace {

struct WireLook {
  uint64_t data_pkts = 0, xeth_like = 0, atomic_acks = 0, credit_acks = 0, naks = 0;
  uint64_t payload_bytes = 0;
  uint64_t path_bits = 0;  // packets whose BTH reserved bits carry IRN path feedback (irn_wire.h)
};

void watch(Loop& l, WireLook& w) {
  l.filter = [&l, &w](bool, const cw::RocePacket& p) {
    const uint8_t op = p.bth.opcode;
    if (op == IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE) ++w.atomic_acks;
    if (p.bth.resv7 != 0) ++w.path_bits;
    if (cw::opcode_has(op, cw::kOpAeth)) {
      const uint8_t syn = p.aeth.syndrome;
      if ((syn >> 5) == 0 && (syn & 0x1F) != kCreditInvalid) ++w.credit_acks;
      if ((syn >> 5) == 3) ++w.naks;
    }
    const bool request_data = op <= IBV_OPCODE_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE;
    if (request_data && cw::opcode_has(op, cw::kOpPayload)) {
      ++w.data_pkts;
      w.payload_bytes += p.payload_len;
    }
    (void)l;
    return true;
  };
}

}  // namespace

TEST_CASE("a QP to a standard peer sends no Tandem-only header whatever its mode and CC say") {
  QpSetup s;
  s.mode = Reliability::kIrn;
  s.cc = "credit";
  s.path = "round_robin";  // spraying the UDP source port stays: plain RoCE accepts any
  s.num_paths = 4;
  s.standard_peer = true;
  Loop l(1 << 20, s, NetConfig{.loss = 0.02}, 7);
  REQUIRE(l.ok);
  WireLook w;
  watch(l, w);
  fill_pattern(l.a.mem, 0, 64 * 1024, 3);
  fill_pattern(l.b.mem, 512 * 1024, 30001, 4);
  REQUIRE(l.recv(l.b, make_recv(1, l.b, 256 * 1024, 64 * 1024)) == 0);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 64 * 1024, &l.b, 128 * 1024)) == 0);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 2, l.a, 1000, 3001)) == 0);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_READ, 3, l.a, 768 * 1024, 30001, &l.b, 512 * 1024)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 3 && l.b.done.size() == 1; }));
  for (const Completion& c : l.a.done) CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(std::equal(l.a.mem.begin(), l.a.mem.begin() + 64 * 1024, l.b.mem.begin() + 128 * 1024));
  CHECK(std::equal(l.a.mem.begin() + 1000, l.a.mem.begin() + 4001, l.b.mem.begin() + 256 * 1024));
  CHECK(std::equal(l.b.mem.begin() + 512 * 1024, l.b.mem.begin() + 512 * 1024 + 30001, l.a.mem.begin() + 768 * 1024));
  CHECK(w.atomic_acks == 0);   // no SACK
  CHECK(w.path_bits == 0);     // BTH reserved bits 0: no path feedback
  CHECK(w.credit_acks == 0);   // AETH credit field: "invalid", as a plain RC responder without EEC sends
  CHECK(w.naks > 0);           // 2 % loss: go-back-N's sequence NAKs did the recovery
  // No placement header: every request data packet carries exactly its data (retransmissions resend
  // whole packets, so the bytes are a multiple of what the messages hold, and none is 24 bytes longer).
  CHECK(w.payload_bytes >= 64 * 1024 + 3001);
  CHECK(l.a.counters().sacks_rx == 0);
}

TEST_CASE("the same QPs to a Tandem peer carry path feedback in the BTH's reserved bits") {
  QpSetup s;
  s.mode = Reliability::kIrn;
  s.cc = "credit";
  s.path = "round_robin";
  s.num_paths = 4;
  Loop l(1 << 20, s, NetConfig{.loss = 0.02}, 7);
  REQUIRE(l.ok);
  WireLook w;
  watch(l, w);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 64 * 1024, &l.b, 128 * 1024)) == 0);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 2, l.a, 0, 64 * 1024, &l.b, 128 * 1024)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
  CHECK(w.path_bits > 0);  // the check above can see them
}

TEST_CASE("without loss a standard peer's data packets are the data and nothing more") {
  QpSetup s;
  s.standard_peer = true;
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  WireLook w;
  watch(l, w);
  REQUIRE(l.recv(l.b, make_recv(1, l.b, 0, 4096)) == 0);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 2500, &l.b, 8192)) == 0);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 2, l.a, 0, 1023)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 2 && l.b.done.size() == 1; }));
  CHECK(w.data_pkts == 3 + 1);  // 2500 B at MTU 1024, then 1023 B
  CHECK(w.payload_bytes == 2500 + 1023);
}

TEST_CASE("a QP reconnected from a standard peer to a Tandem peer is IRN again") {
  QpSetup s;
  s.standard_peer = true;
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  WireLook w;
  watch(l, w);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 2048, &l.b, 8192)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(w.payload_bytes == 2048);
  // Back through RESET to a Tandem peer: the placement header is there again.
  QpSetup t = s;
  t.standard_peer = false;
  QpAttr r;
  r.state = QpState::kReset;
  REQUIRE(l.a.t.modify_qp(l.a.qpn, r, IBV_QP_STATE) == 0);
  REQUIRE(l.b.t.modify_qp(l.b.qpn, r, IBV_QP_STATE) == 0);
  REQUIRE(bring_up(l.a, l.b.qpn, 300, 7000, t, 2) == 0);
  REQUIRE(bring_up(l.b, l.a.qpn, 7000, 300, t, 1) == 0);
  w = WireLook{};
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 2, l.a, 0, 2048, &l.b, 8192)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
  CHECK(w.payload_bytes == 2048 + 2 * kXethLen);
}

TEST_CASE("a go-back-N responder's ACK never covers a READ whose response is not out yet") {
  // Linux's rxe completes a READ WQE that an ACK covers before the response comes, without its
  // data (found against rxe: a WRITE and a READ arriving together got one ACK at the READ's PSN).
  QpSetup s;
  s.standard_peer = true;
  Loop l(1 << 20, s);
  REQUIRE(l.ok);
  const uint32_t read_psn = s.sq_psn_a + 1;  // after a one-packet WRITE
  bool response_seen = false;
  int covering_acks = 0, acks = 0;
  uint32_t resp_msn = 0, ack_msn_before = 0;
  l.filter = [&](bool from_a, const cw::RocePacket& p) {
    if (from_a) return true;
    if (p.bth.opcode == IBV_OPCODE_RC_ACKNOWLEDGE) {
      ++acks;
      if (!response_seen && !cw::psn_lt(p.bth.psn, read_psn)) ++covering_acks;
      if (!response_seen) ack_msn_before = p.aeth.msn;
    }
    if (p.bth.opcode == IBV_OPCODE_RC_RDMA_READ_RESPONSE_ONLY) {
      response_seen = true;
      resp_msn = p.aeth.msn;
    }
    return true;
  };
  fill_pattern(l.b.mem, 4096, 1023, 9);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 100, &l.b, 0)) == 0);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_READ, 2, l.a, 8192, 1023, &l.b, 4096)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
  CHECK(std::equal(l.b.mem.begin() + 4096, l.b.mem.begin() + 4096 + 1023, l.a.mem.begin() + 8192));
  CHECK(response_seen);
  CHECK(acks >= 1);
  CHECK(covering_acks == 0);
  CHECK(ack_msn_before == 1);  // the WRITE
  CHECK(resp_msn == 2);        // the READ is the second message
}
