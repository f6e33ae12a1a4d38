// Memory protection in the core: regions by key and protection domain, keys a
// host interface hands out (reg_mr_with_key), the application's addresses
// differing from where the core reads and writes, zero-length accesses (IBTA
// C9-88), and inline data that names no region.
#include <catch2/catch.hpp>

#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;
using tandem::common::DropReason;

namespace {
constexpr std::size_t kMem = 1 << 16;
constexpr uint32_t kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
const Reliability kModes[] = {Reliability::kIrn, Reliability::kGoBackN};

bool zero(const std::vector<uint8_t>& m) {
  for (uint8_t b : m)
    if (b != 0) return false;
  return true;
}

TransportConfig big_table() {
  TransportConfig c;
  c.max_mrs = 1u << 16;
  return c;
}
}  // namespace

TEST_CASE("reg_mr_with_key takes the caller's key once; key 0, generation 0, a slot in use or past the table are refused") {
  Transport t(big_table());
  std::vector<uint8_t> mem(4096);
  CHECK(t.reg_mr_with_key(0, 0x1000, mem.data(), 4096, kRemote, 1) == EINVAL);
  CHECK(t.reg_mr_with_key(0x1200, 0x1000, mem.data(), 4096, kRemote, 1) == EINVAL);  // generation 0
  CHECK(t.reg_mr_with_key(0x0100'0001, 0x1000, mem.data(), 4096, kRemote, 1) == EINVAL);  // index 2^16
  CHECK(t.reg_mr_with_key(0x1205, 0x1000, nullptr, 4096, kRemote, 1) == EINVAL);
  REQUIRE(t.reg_mr_with_key(0x1205, 0x1000, mem.data(), 4096, kRemote, 1) == 0);
  CHECK(t.reg_mr_with_key(0x1206, 0x1000, mem.data(), 4096, kRemote, 1) == EINVAL);  // index 0x12 in use
  // Index 0 is a valid slot for a host interface's keys (its first MR).
  REQUIRE(t.reg_mr_with_key(0x0007, 0x9000, mem.data(), 4096, kRemote, 1) == 0);
  CHECK(t.find_mr(0x0007, 1) != nullptr);
  CHECK(t.find_mr(0, 1) == nullptr);
  const MemoryRegion* mr = t.find_mr(0x1205, 1);
  REQUIRE(mr != nullptr);
  CHECK(mr->addr == 0x1000);
  CHECK(mr->host_ptr == mem.data());
  CHECK(t.find_mr(0x1205, 2) == nullptr);  // another PD
  CHECK(t.find_mr(0x1204, 1) == nullptr);  // a stale generation
  CHECK(t.dereg_mr(0x1204) == EINVAL);
  REQUIRE(t.dereg_mr(0x1205) == 0);
  CHECK(t.find_mr(0x1205, 1) == nullptr);
  REQUIRE(t.reg_mr_with_key(0x1206, 0x1000, mem.data(), 4096, kRemote, 1) == 0);  // the slot again, next generation
  CHECK(t.find_mr(0x1205, 1) == nullptr);
}

TEST_CASE("a remote access to a region of another protection domain is NAKed and touches nothing") {
  for (Reliability mode : kModes) {
    for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ}) {
      CAPTURE(static_cast<int>(mode), static_cast<int>(op));
      QpSetup s;
      s.mode = mode;
      s.mtu = 256;
      Loop l(kMem, s);
      REQUIRE(l.ok);
      // B's second region (PD 9) over other bytes, with every right: its key
      // and addresses are valid, but B's QP is in PD 0.
      std::vector<uint8_t> other(8192);
      const MemoryRegion foreign = l.b.t.reg_mr(reinterpret_cast<uint64_t>(other.data()), other.data(), other.size(), kRemote, 9);
      REQUIRE(foreign.lkey != 0);
      fill_pattern(l.a.mem, 0, 4096, 3);
      SendWr wr = make_wr(op, 1, l.a, 0, 1000);
      wr.remote_addr = foreign.addr;
      wr.rkey = foreign.rkey;
      REQUIRE(l.send(l.a, wr) == 0);
      REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
      CHECK(l.a.done[0].status == IBV_WC_REM_ACCESS_ERR);
      CHECK(zero(other));
      CHECK(l.b.counters().drop(DropReason::kAccessViolation) >= 1);
      if (op == IBV_WR_RDMA_READ) CHECK(l.a.mem[5000] == 0);
    }
  }
}

TEST_CASE("a region keyed by the host interface is reached at the application's address, not the core's") {
  for (Reliability mode : kModes) {
    CAPTURE(static_cast<int>(mode));
    QpSetup s;
    s.mode = mode;
    s.mtu = 512;
    Loop l(kMem, s, {}, 1, big_table());
    REQUIRE(l.ok);
    // The application sees its buffer at 0x7f00'0000'0000; the core reads and
    // writes it at b.mem + 8192 (the worker's mapping of the same pages).
    constexpr uint64_t kAppVa = 0x7f00'0000'0000;
    constexpr uint32_t kKey = 0xABCD05;
    REQUIRE(l.b.t.reg_mr_with_key(kKey, kAppVa, l.b.mem.data() + 8192, 4096, kRemote, 0) == 0);
    fill_pattern(l.a.mem, 0, 3000, 11);
    SendWr wr = make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 3000);
    wr.remote_addr = kAppVa + 100;
    wr.rkey = kKey;
    REQUIRE(l.send(l.a, wr) == 0);
    // The worker's own address of those bytes is not an address of the region.
    SendWr raw = make_wr(IBV_WR_RDMA_WRITE, 2, l.a, 0, 16);
    raw.remote_addr = reinterpret_cast<uint64_t>(l.b.mem.data() + 8192);
    raw.rkey = kKey;
    REQUIRE(l.send(l.a, raw) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
    CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
    CHECK(l.a.done[1].status == IBV_WC_REM_ACCESS_ERR);
    CHECK(std::memcmp(l.b.mem.data() + 8192 + 100, l.a.mem.data(), 3000) == 0);
    CHECK(l.b.mem[8192 + 99] == 0);
    CHECK(l.b.mem[8192 + 3100] == 0);
  }
}

TEST_CASE("a zero-length WRITE or READ names no memory: its R_Key is not checked (IBTA C9-88)") {
  for (Reliability mode : kModes) {
    CAPTURE(static_cast<int>(mode));
    QpSetup s;
    s.mode = mode;
    Loop l(kMem, s);
    REQUIRE(l.ok);
    for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ}) {
      SendWr wr;
      wr.wr_id = 7;
      wr.opcode = op;
      wr.num_sge = 0;
      wr.rkey = 0;
      wr.remote_addr = 0;
      REQUIRE(l.send(l.a, wr) == 0);
    }
    REQUIRE(l.run([&] { return l.a.done.size() == 2; }));
    CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
    CHECK(l.a.done[1].status == IBV_WC_SUCCESS);
    CHECK(zero(l.b.mem));
  }
}

TEST_CASE("local SGEs must name a region of the QP's protection domain; inline data names none") {
  QpSetup s;
  Loop l(kMem, s);
  REQUIRE(l.ok);
  std::vector<uint8_t> other(4096);
  const MemoryRegion foreign = l.a.t.reg_mr(reinterpret_cast<uint64_t>(other.data()), other.data(), other.size(), kRemote, 4);
  REQUIRE(foreign.lkey != 0);
  SendWr wr = make_wr(IBV_WR_RDMA_WRITE, 1, l.a, 0, 64, &l.b, 0);
  wr.sg_list[0] = Sge{foreign.addr, 64, foreign.lkey};
  CHECK(l.send(l.a, wr) == EINVAL);
  RecvWr rw = make_recv(2, l.b, 0, 64);
  const MemoryRegion b_foreign = l.b.t.reg_mr(reinterpret_cast<uint64_t>(other.data()), other.data(), other.size(), kRemote, 4);
  rw.sg_list[0] = Sge{b_foreign.addr, 64, b_foreign.lkey};
  CHECK(l.recv(l.b, rw) == EINVAL);
  // An SRQ of PD 4 takes that region and refuses PD 0's.
  const uint32_t srq = l.b.t.create_srq(8, 4);
  REQUIRE(srq != 0);
  CHECK(l.b.t.post_srq_recv(srq, rw) == 0);
  CHECK(l.b.t.post_srq_recv(srq, make_recv(3, l.b, 0, 64)) == EINVAL);

  // Inline: the caller's bytes, any lkey; a READ cannot be inline.
  const char msg[] = "inline bytes, no region";
  SendWr in;
  in.wr_id = 9;
  in.opcode = IBV_WR_RDMA_WRITE;
  in.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  in.num_sge = 1;
  in.sg_list[0] = Sge{reinterpret_cast<uint64_t>(msg), sizeof msg, 0};
  in.remote_addr = l.b.va(1024);
  in.rkey = l.b.mr.rkey;
  REQUIRE(l.send(l.a, in) == 0);
  SendWr bad = in;
  bad.opcode = IBV_WR_RDMA_READ;
  CHECK(l.send(l.a, bad) == EINVAL);
  REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
  CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(l.b.mem.data() + 1024, msg, sizeof msg) == 0);
}
