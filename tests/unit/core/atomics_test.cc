// RC atomics: CMP_AND_SWP and FETCH_AND_ADD end to end, the responder's
// replay of duplicates from its saved values (IBA 9.7.5.1.3), the alignment
// and access NAKs, the SACK mark that keeps IRN's SACKs apart from atomic
// answers, and atomicity against atomics from another thread (another lcore).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <set>
#include <thread>

#include "common/wire/opcode.h"
#include "rnic/core/irn_wire.h"
#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;
using tandem::common::DropReason;

namespace {
constexpr std::size_t kMem = 1 << 16;
const Reliability kModes[] = {Reliability::kIrn, Reliability::kGoBackN};
constexpr uint32_t kAtomicAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_ATOMIC;

QpSetup atomic_setup(Reliability mode) {
  QpSetup s;
  s.mode = mode;
  s.access = kAtomicAccess;
  return s;
}

// An MR over the whole of h's memory that remote atomics may use.
MemoryRegion atomic_mr(Host& h) { return h.t.reg_mr(h.mem.data(), h.mem.size(), kAtomicAccess); }

SendWr atomic_wr(ibv_wr_opcode op, uint64_t wr_id, const Host& local, uint64_t loff, const MemoryRegion& remote,
                 uint64_t roff, uint64_t compare_add, uint64_t swap = 0) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.num_sge = 1;
  wr.sg_list[0] = Sge{local.va(loff), 8, local.mr.lkey};
  wr.remote_addr = remote.addr + roff;
  wr.rkey = remote.rkey;
  wr.compare_add = compare_add;
  wr.swap = swap;
  return wr;
}

uint64_t word(const Host& h, std::size_t off) {
  uint64_t v;
  std::memcpy(&v, h.mem.data() + off, 8);
  return v;
}
void set_word(Host& h, std::size_t off, uint64_t v) { std::memcpy(h.mem.data() + off, &v, 8); }
}  // namespace

TEST_CASE("CMP_AND_SWP and FETCH_AND_ADD change the remote word and return its original value") {
  for (Reliability mode : kModes) {
    CAPTURE(static_cast<int>(mode));
    Loop l(kMem, atomic_setup(mode));
    REQUIRE(l.ok);
    const MemoryRegion rb = atomic_mr(l.b);
    set_word(l.b, 64, 1000);
    set_word(l.b, 128, 7);
    REQUIRE(l.send(l.a, atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, l.a, 0, rb, 64, 5)) == 0);
    REQUIRE(l.send(l.a, atomic_wr(IBV_WR_ATOMIC_CMP_AND_SWP, 2, l.a, 8, rb, 128, 7, 99)) == 0);   // matches: swapped
    REQUIRE(l.send(l.a, atomic_wr(IBV_WR_ATOMIC_CMP_AND_SWP, 3, l.a, 16, rb, 128, 7, 55)) == 0);  // 99 now: kept
    REQUIRE(l.run([&] { return l.a.done.size() == 3; }));
    for (const Completion& c : l.a.done) {
      CHECK(c.status == IBV_WC_SUCCESS);
      CHECK(c.byte_len == 8);
    }
    CHECK(l.a.done[0].opcode == IBV_WC_FETCH_ADD);
    CHECK(l.a.done[1].opcode == IBV_WC_COMP_SWAP);
    CHECK(word(l.a, 0) == 1000);
    CHECK(word(l.a, 8) == 7);
    CHECK(word(l.a, 16) == 99);
    CHECK(word(l.b, 64) == 1005);
    CHECK(word(l.b, 128) == 99);
    CHECK(l.b.counters().atomics_executed == 3);
  }
}

TEST_CASE("a lost atomic response is answered from the saved value, and the atomic never runs twice") {
  for (Reliability mode : kModes) {
    CAPTURE(static_cast<int>(mode));
    Loop l(kMem, atomic_setup(mode));
    REQUIRE(l.ok);
    const MemoryRegion rb = atomic_mr(l.b);
    set_word(l.b, 0, 40);
    int answers_dropped = 0;
    l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
      if (!from_a && p.bth.opcode == IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE && !(p.bth.resv7 & kSackMark) &&
          answers_dropped < 2) {
        ++answers_dropped;
        return false;
      }
      return true;
    };
    REQUIRE(l.send(l.a, atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, l.a, 0, rb, 0, 2)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
    CHECK(answers_dropped == 2);
    CHECK(l.a.done[0].status == IBV_WC_SUCCESS);
    CHECK(word(l.a, 0) == 40);  // the value before the one execution
    CHECK(word(l.b, 0) == 42);  // added once
    CHECK(l.b.counters().atomics_executed == 1);
    CHECK(l.b.counters().atomic_replays == 2);
    CHECK(l.a.counters().retx_pkts >= 2);
  }
}

TEST_CASE("a replayed atomic is answered, never run; one older than the saved ones is dropped") {
  Loop l(kMem, atomic_setup(Reliability::kGoBackN));
  REQUIRE(l.ok);
  const MemoryRegion rb = atomic_mr(l.b);
  l.record = true;
  // 40 atomics: more than the responder keeps (max_dest_rd_atomic, 16).
  for (uint64_t i = 0; i < 40; ++i) {
    REQUIRE(l.send(l.a, atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, i, l.a, 8 * i, rb, 0, 1)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == i + 1; }));
  }
  CHECK(word(l.b, 0) == 40);
  std::vector<std::vector<uint8_t>> atomics;
  for (const auto& f : l.sent_by_a) {
    tandem::common::RocePacket p;
    REQUIRE(tandem::common::parse_roce(f.data(), f.size(), p) == DropReason::kNone);
    if (p.bth.opcode == IBV_OPCODE_RC_FETCH_ADD) atomics.push_back(f);
  }
  REQUIRE(atomics.size() == 40);
  const uint64_t acks_before = l.b.counters().acks_tx;
  CHECK(l.inject(l.b, atomics.back()) == DropReason::kDuplicate);  // recent: answered again
  CHECK(l.inject(l.b, atomics.front()) == DropReason::kDuplicate);  // 40 ago: no longer saved
  l.settle();
  CHECK(word(l.b, 0) == 40);
  CHECK(l.b.counters().atomics_executed == 40);
  CHECK(l.b.counters().atomic_replays == 1);
  CHECK(l.b.counters().atomic_replay_misses == 1);
  CHECK(l.b.counters().acks_tx == acks_before + 1);
}

TEST_CASE("a misaligned atomic is NAKed as an invalid request and changes nothing") {
  for (Reliability mode : kModes) {
    Loop l(kMem, atomic_setup(mode));
    REQUIRE(l.ok);
    const MemoryRegion rb = atomic_mr(l.b);
    REQUIRE(l.send(l.a, atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, l.a, 0, rb, 4, 1)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
    CHECK(l.a.done[0].status == IBV_WC_REM_INV_REQ_ERR);
    CHECK(word(l.b, 0) == 0);
    CHECK(word(l.b, 8) == 0);
    CHECK(l.b.counters().drop(DropReason::kInvalidRequest) == 1);
    CHECK(l.a.t.qp_state(l.a.qpn) == QpState::kError);
  }
}

TEST_CASE("an atomic without remote atomic rights on the QP or the MR, or with a bad R_Key, is NAKed") {
  for (Reliability mode : kModes) {
    for (int kind = 0; kind < 3; ++kind) {
      CAPTURE(static_cast<int>(mode), kind);
      QpSetup s = atomic_setup(mode);
      if (kind == 0) s.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
      Loop l(kMem, s);
      REQUIRE(l.ok);
      MemoryRegion rb = kind == 1 ? l.b.mr : atomic_mr(l.b);  // l.b.mr: no REMOTE_ATOMIC
      if (kind == 2) rb.rkey ^= 0x100;
      REQUIRE(l.send(l.a, atomic_wr(IBV_WR_ATOMIC_CMP_AND_SWP, 1, l.a, 0, rb, 0, 0, 5)) == 0);
      REQUIRE(l.run([&] { return l.a.done.size() == 1; }));
      CHECK(l.a.done[0].status == IBV_WC_REM_ACCESS_ERR);
      CHECK(word(l.b, 0) == 0);
      CHECK(l.b.counters().drop(DropReason::kAccessViolation) == 1);
    }
  }
}

TEST_CASE("an atomic is posted with one 8-byte gather entry with local write, nothing inline") {
  Loop l(kMem, atomic_setup(Reliability::kIrn));
  REQUIRE(l.ok);
  const MemoryRegion rb = atomic_mr(l.b);
  SendWr wr = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, l.a, 0, rb, 0, 1);
  wr.sg_list[0].length = 4;
  CHECK(l.send(l.a, wr) == EINVAL);
  wr.sg_list[0].length = 8;
  wr.num_sge = 2;
  wr.sg_list[1] = wr.sg_list[0];
  CHECK(l.send(l.a, wr) == EINVAL);
  wr.num_sge = 1;
  wr.send_flags |= IBV_SEND_INLINE;
  CHECK(l.send(l.a, wr) == EINVAL);
  wr.send_flags = IBV_SEND_SIGNALED;
  const MemoryRegion ro = l.a.t.reg_mr(l.a.mem.data(), l.a.mem.size(), IBV_ACCESS_REMOTE_READ);
  wr.sg_list[0].lkey = ro.lkey;  // the original value cannot land there
  CHECK(l.send(l.a, wr) == EINVAL);
  wr.sg_list[0].lkey = l.a.mr.lkey;
  CHECK(l.send(l.a, wr) == 0);
}

TEST_CASE("IRN: atomics among WRITEs over a lossy, reordering network, SACKs marked, answers not") {
  QpSetup s = atomic_setup(Reliability::kIrn);
  s.mtu = 256;
  NetConfig net;
  net.loss = 0.03;
  net.jitter_ns = 30'000;
  Loop l(kMem, s, net, 7);
  REQUIRE(l.ok);
  const MemoryRegion rb = atomic_mr(l.b);
  uint64_t sacks = 0, unmarked_sacks = 0, answers = 0;
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    if (from_a || p.bth.opcode != IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE) return true;
    if (p.bth.resv7 & kSackMark) ++sacks;
    else ++answers;
    // An answer's PSN is an atomic's; a SACK's base is in the window near it.
    if (!(p.bth.resv7 & kSackMark) && p.atomic_ack > 1000) ++unmarked_sacks;
    return true;
  };
  fill_pattern(l.a.mem, 4096, 8192, 3);
  constexpr uint64_t kN = 200;
  for (uint64_t i = 0; i < kN; ++i) {
    REQUIRE(l.send(l.a, make_wr(IBV_WR_RDMA_WRITE, 1000 + i, l.a, 4096, 2000, &l.b, 8192)) == 0);
    REQUIRE(l.send(l.a, atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, i, l.a, 8 * i, rb, 0, 1)) == 0);
  }
  REQUIRE(l.run([&] { return l.a.done.size() == 2 * kN; }));
  std::set<uint64_t> originals;
  for (const Completion& c : l.a.done) CHECK(c.status == IBV_WC_SUCCESS);
  for (uint64_t i = 0; i < kN; ++i) originals.insert(word(l.a, 8 * i));
  CHECK(word(l.b, 0) == kN);
  CHECK(originals.size() == kN);  // each ran once, in its own turn
  CHECK(*originals.rbegin() == kN - 1);
  CHECK(std::memcmp(l.a.mem.data() + 4096, l.b.mem.data() + 8192, 2000) == 0);
  CHECK(l.b.counters().atomics_executed == kN);
  CHECK(answers >= kN);
  CHECK(sacks > 0);  // the loss made the responder SACK
  CHECK(unmarked_sacks == 0);
}

TEST_CASE("go-back-N sends no SACK: every ATOMIC_ACKNOWLEDGE is a standard answer") {
  QpSetup s = atomic_setup(Reliability::kGoBackN);
  NetConfig net;
  net.loss = 0.05;
  Loop l(kMem, s, net, 3);
  REQUIRE(l.ok);
  const MemoryRegion rb = atomic_mr(l.b);
  uint64_t marked = 0;
  l.filter = [&](bool from_a, const tandem::common::RocePacket& p) {
    if (!from_a && p.bth.resv7 != 0) ++marked;
    return true;
  };
  for (uint64_t i = 0; i < 50; ++i)
    REQUIRE(l.send(l.a, atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, i, l.a, 8 * i, rb, 0, 3)) == 0);
  REQUIRE(l.run([&] { return l.a.done.size() == 50; }));
  CHECK(word(l.b, 0) == 150);
  CHECK(marked == 0);
}

TEST_CASE("atomics from two ports' QPs on different threads to one word are atomic") {
  // Two independent pairs (each its own Transport, as two lcores have), whose
  // responders' MRs cover the same 8 bytes: the adds must all count.
  alignas(64) static uint64_t shared[8];
  shared[0] = 0;
  constexpr uint64_t kPerThread = 5000;
  std::atomic<int> failures{0};
  std::vector<uint64_t> seen[2];
  auto run = [&](int k) {
    Loop l(kMem, atomic_setup(k == 0 ? Reliability::kIrn : Reliability::kGoBackN));
    if (!l.ok) {
      ++failures;
      return;
    }
    const MemoryRegion rb = l.b.t.reg_mr(reinterpret_cast<uint64_t>(shared), reinterpret_cast<uint8_t*>(shared),
                                         sizeof shared, kAtomicAccess);
    for (uint64_t i = 0; i < kPerThread; ++i) {
      if (l.send(l.a, atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, i, l.a, 0, rb, 0, 1)) != 0 ||
          !l.run([&] { return l.a.done.size() == i + 1; })) {
        ++failures;
        return;
      }
      seen[k].push_back(word(l.a, 0));
    }
  };
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  REQUIRE(failures == 0);
  CHECK(__atomic_load_n(&shared[0], __ATOMIC_SEQ_CST) == 2 * kPerThread);
  std::set<uint64_t> all(seen[0].begin(), seen[0].end());
  all.insert(seen[1].begin(), seen[1].end());
  CHECK(all.size() == 2 * kPerThread);  // no two adds saw the same value
}
