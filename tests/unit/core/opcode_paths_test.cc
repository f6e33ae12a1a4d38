// Every verb in both reliability modes, at the message sizes around the MTU.
#include <catch2/catch.hpp>

#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;

namespace {

constexpr std::size_t kMem = 1 << 20;

bool same(const Host& x, uint64_t xo, const Host& y, uint64_t yo, std::size_t n) {
  return std::memcmp(x.mem.data() + xo, y.mem.data() + yo, n) == 0;
}

const char* mode_name(Reliability m) { return m == Reliability::kIrn ? "irn" : "gobackn"; }

}  // namespace

TEST_CASE("every verb places the exact bytes at 0, 1, MTU-1, MTU, MTU+1 and 3 MTU+17 bytes") {
  for (Reliability mode : {Reliability::kIrn, Reliability::kGoBackN}) {
    for (uint32_t mtu : {256u, 1024u, 4096u}) {
      for (uint32_t len : {0u, 1u, mtu - 1, mtu, mtu + 1, 3 * mtu + 17}) {
        CAPTURE(mode_name(mode), mtu, len);
        QpSetup s;
        s.mode = mode;
        s.mtu = mtu;
        Loop l(kMem, s);
        REQUIRE(l.ok);
        fill_pattern(l.a.mem, 0, 64 * 1024, len + 1);
        fill_pattern(l.b.mem, 256 * 1024, 64 * 1024, len + 7);

        // WRITE a[0..len) -> b[100000..)
        REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, len, &l.b, 100000)) == 0);
        // WRITE_WITH_IMM a[0..) -> b[200000..), consumes a RECV on b
        REQUIRE(l.recv(l.b, make_recv(50, l.b, 500000, 16)) == 0);
        REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE_WITH_IMM, 2, l.a, 0, len, &l.b, 200000,
                                    0xABCD0001)) == 0);
        // SEND and SEND_WITH_IMM a[0..) -> b's RECVs
        REQUIRE(l.recv(l.b, make_recv(51, l.b, 300000, len + 10)) == 0);
        REQUIRE(l.recv(l.b, make_recv(52, l.b, 400000, len)) == 0);
        REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 3, l.a, 0, len)) == 0);
        REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND_WITH_IMM, 4, l.a, 0, len, nullptr, 0, 77)) == 0);
        // READ b[256K..) -> a[600000..)
        REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_READ, 5, l.a, 600000, len, &l.b, 256 * 1024)) == 0);

        REQUIRE(l.run([&] { return l.a.done.size() == 5 && l.b.done.size() == 3; }));
        for (std::size_t i = 0; i < 5; ++i) {
          CHECK(l.a.done[i].status == IBV_WC_SUCCESS);
          CHECK(l.a.done[i].wr_id == i + 1);
        }
        CHECK(l.a.done[0].opcode == IBV_WC_RDMA_WRITE);
        CHECK(l.a.done[2].opcode == IBV_WC_SEND);
        CHECK(l.a.done[4].opcode == IBV_WC_RDMA_READ);
        CHECK(l.a.done[4].byte_len == len);
        CHECK(same(l.a, 0, l.b, 100000, len));
        CHECK(same(l.a, 0, l.b, 200000, len));
        CHECK(same(l.a, 0, l.b, 300000, len));
        CHECK(same(l.a, 0, l.b, 400000, len));
        CHECK(same(l.a, 600000, l.b, 256 * 1024, len));

        const Completion& wi = l.b.done[0];
        CHECK(wi.wr_id == 50);
        CHECK(wi.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
        CHECK(wi.byte_len == len);
        CHECK((wi.wc_flags & IBV_WC_WITH_IMM));
        CHECK(wi.imm_data == 0xABCD0001);
        CHECK(l.b.done[1].wr_id == 51);
        CHECK(l.b.done[1].opcode == IBV_WC_RECV);
        CHECK(l.b.done[1].byte_len == len);
        CHECK(!(l.b.done[1].wc_flags & IBV_WC_WITH_IMM));
        CHECK(l.b.done[2].wr_id == 52);
        CHECK(l.b.done[2].imm_data == 77);
        CHECK(l.b.done[2].src_qp == l.a.qpn);
        CHECK(l.a.counters().retx_pkts == 0);
      }
    }
  }
}

TEST_CASE("a gather list on the send side arrives as one contiguous message") {
  for (Reliability mode : {Reliability::kIrn, Reliability::kGoBackN}) {
    QpSetup s;
    s.mode = mode;
    s.mtu = 256;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    fill_pattern(l.a.mem, 0, 8192, 3);
    SendWr wr = make_wr(IBV_WR_RDMA_WRITE, 9, l.a, 0, 0, &l.b, 50000);
    // Pieces of odd sizes from scattered places, crossing packet boundaries.
    const uint32_t off[] = {0, 1000, 3000, 5000, 7000};
    const uint32_t len[] = {100, 1, 700, 300, 511};
    wr.num_sge = 5;
    uint32_t total = 0;
    for (int i = 0; i < 5; ++i) {
      wr.sg_list[i] = Sge{l.a.va(off[i]), len[i], l.a.mr.lkey};
      total += len[i];
    }
    REQUIRE(l.send(l.a, wr) == 0);
    // And a scatter list on the receive side for a SEND of the same pieces.
    RecvWr rw;
    rw.wr_id = 1;
    rw.num_sge = 2;
    rw.sg_list[0] = Sge{l.b.va(100000), 600, l.b.mr.lkey};
    rw.sg_list[1] = Sge{l.b.va(200000), 2000, l.b.mr.lkey};
    REQUIRE(l.recv(l.b, rw) == 0);
    SendWr sw = wr;
    sw.opcode = IBV_WR_SEND;
    sw.wr_id = 10;
    REQUIRE(l.send(l.a, sw) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 2 && l.b.done.size() == 1; }));
    std::vector<uint8_t> expect;
    for (int i = 0; i < 5; ++i)
      expect.insert(expect.end(), l.a.mem.begin() + off[i], l.a.mem.begin() + off[i] + len[i]);
    CHECK(std::memcmp(l.b.mem.data() + 50000, expect.data(), total) == 0);
    CHECK(std::memcmp(l.b.mem.data() + 100000, expect.data(), 600) == 0);
    CHECK(std::memcmp(l.b.mem.data() + 200000, expect.data() + 600, total - 600) == 0);
    CHECK(l.b.done[0].byte_len == total);
  }
}

TEST_CASE("multi-megabyte WRITE, SEND and READ complete with identical bytes") {
  for (Reliability mode : {Reliability::kIrn, Reliability::kGoBackN}) {
    CAPTURE(mode_name(mode));
    constexpr uint32_t kLen = 6 * 1024 * 1024 + 123;
    QpSetup s;
    s.mode = mode;
    s.mtu = 4096;
    Loop l(2 * kLen + 4096, s);
    REQUIRE(l.ok);
    fill_pattern(l.a.mem, 0, kLen, 11);
    fill_pattern(l.b.mem, kLen, kLen, 12);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, kLen, &l.b, 0)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
    CHECK(same(l.a, 0, l.b, 0, kLen));
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_READ, 2, l.a, kLen, kLen, &l.b, kLen)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
    CHECK(l.a.done[1].status == IBV_WC_SUCCESS);
    CHECK(same(l.a, kLen, l.b, kLen, kLen));
    fill_pattern(l.a.mem, 0, kLen, 13);
    REQUIRE(l.recv(l.b, make_recv(7, l.b, 0, kLen)) == 0);
    REQUIRE(l.send(l.a, make_wr(IBV_WR_SEND, 3, l.a, 0, kLen)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 3 && l.b.done.size() == 1; }));
    CHECK(same(l.a, 0, l.b, 0, kLen));
    CHECK(l.b.done[0].byte_len == kLen);
  }
}

TEST_CASE("a 64 MB WRITE is segmented lazily through a small TX queue") {
  constexpr uint32_t kLen = 64 * 1024 * 1024;
  QpSetup s;
  s.mtu = 4096;
  s.cc_window = 16ull << 20;  // so that the TX queue, not the window, fills first
  Loop l(kLen, s);
  REQUIRE(l.ok);
  fill_pattern(l.a.mem, 0, kLen, 5);
  REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, kLen, &l.b, 0)) == 0);
  // One poll queues at most the TX queue's capacity, never the message.
  l.a.t.poll(l.now);
  CHECK(l.a.t.tx().size() <= l.a.t.tx().capacity());
  CHECK(l.a.t.pending());
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
  CHECK(same(l.a, 0, l.b, 0, kLen));
  CHECK(l.a.counters().tx_data_pkts == kLen / 4096);
}
