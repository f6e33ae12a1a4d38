// Trace units: the ring (single writer, readers that never see a torn
// record), rule matching and parsing, the tracer's rule hand-over, the
// merge of several processes' rings into per-packet timelines, and a
// process's one ring per lcore.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "common/trace/trace_file.h"
#include "common/trace/trace_merge.h"
#include "common/trace/trace_ring.h"
#include "common/trace/trace_rule.h"
#include "common/trace/tracer.h"

using namespace tandem::common::trace;

namespace {

constexpr uint32_t kA = 0x0A000001, kB = 0x0A000002;  // 10.0.0.1, 10.0.0.2

struct Ring {
  std::vector<uint64_t> mem;
  RingHeader* h;
  explicit Ring(uint64_t cap, int64_t offset = 0) : mem(ring_bytes(cap) / 8 + 1) {
    h = ring_init(mem.data(), cap, offset, "test");
  }
};

Record rec(uint64_t ts, Stage s, uint32_t psn, uint8_t verdict = 0, uint16_t sport = 0xC000, uint32_t src = kB,
           uint32_t dst = kA, uint8_t flags = 0, uint16_t ip_id = 0) {
  Record r;
  r.ip_id = ip_id;
  r.ts_ns = ts;
  r.src_ip = src;
  r.dst_ip = dst;
  r.dqpn = 0x10000;
  r.psn = psn;
  r.opcode = 0x0A;  // RDMA WRITE only
  r.stage = s;
  r.verdict = verdict;
  r.sport = sport;
  r.flags = flags;
  return r;
}

std::string namer(Stage s, uint8_t v) {
  if (v == 0) return "ok";
  if (s == Stage::kFabricDrop) return v == 2 ? "random_loss" : "path_down";
  return v == 17 ? "duplicate" : v == 24 ? "pkey_violation" : "drop" + std::to_string(v);
}

}  // namespace

TEST_CASE("a ring keeps the newest records, oldest first, with their sequence numbers") {
  Ring r(8);
  for (uint32_t i = 0; i < 5; ++i) ring_push(r.h, rec(i, Stage::kTx, i));
  auto v = ring_read(r.h);
  REQUIRE(v.size() == 5);
  CHECK(v.front().psn == 0);
  for (uint32_t i = 5; i < 20; ++i) ring_push(r.h, rec(i, Stage::kTx, i));
  v = ring_read(r.h);
  REQUIRE(v.size() == 8);  // the capacity: the oldest were overwritten
  CHECK(v.front().psn == 12);
  CHECK(v.back().psn == 19);
  CHECK(v.back().seq == 19);
}

TEST_CASE("a reader racing the writer never returns a torn record") {
  Ring r(64);
  std::atomic<bool> done{false};
  std::thread w([&] {
    for (uint32_t i = 0; i < 2000000; ++i) {
      Record x = rec(i, Stage::kTx, i);
      x.src_ip = x.dst_ip = x.aux = i;  // every field tells the same index
      ring_push(r.h, x);
    }
    done = true;
  });
  uint64_t seen = 0, reads = 0;
  do {
    for (const Record& x : ring_read(r.h)) {
      REQUIRE(x.src_ip == x.psn);
      REQUIRE(x.aux == x.seq);
      ++seen;
    }
    ++reads;
  } while (!done);
  w.join();
  CHECK(seen > 0);
  INFO(reads << " reads while writing");
}

TEST_CASE("rules match either direction between two addresses, by QP and partition") {
  auto r = parse_rule("a=10.0.0.1,b=10.0.0.2,qpns=65536:0x20000,count=100,ms=5000");
  REQUIRE(r);
  CHECK(r->matches(kA, kB, 0x10000, 0x8001));
  CHECK(r->matches(kB, kA, 0x20000, 0x8001));
  CHECK_FALSE(r->matches(kA, kB, 0x30000, 0x8001));          // another QP
  CHECK_FALSE(r->matches(kA, 0x0A000003, 0x10000, 0x8001));  // another host
  CHECK(r->count == 100);
  CHECK(r->ms == 5000);
  CHECK(parse_rule(format_rule(*r))->matches(kB, kA, 0x20000, 1));
  auto any = parse_rule("pkey=0x8002");
  CHECK(any->matches(1, 2, 3, 0x8002));
  CHECK_FALSE(any->matches(1, 2, 3, 0x8001));
  CHECK_FALSE(parse_rule("off"));
  CHECK_THROWS_AS(parse_rule("a=10.0.0"), std::invalid_argument);
  CHECK_THROWS_AS(parse_rule("colour=red"), std::invalid_argument);
  CHECK_THROWS_AS(parse_rule("qpns=1:2:3:4:5:6:7:8:9"), std::invalid_argument);
}

TEST_CASE("the tracer adopts a rule in poll, stops at its count or its time, and records nothing without one") {
  Ring r(64);
  Tracer t;
  t.attach(r.h);
  t.record(rec(1, Stage::kTx, 1));
  CHECK(ring_read(r.h).empty());
  t.request(*parse_rule("a=10.0.0.1,count=3"));
  CHECK_FALSE(t.active());  // not before the lcore's poll
  t.poll(100);
  REQUIRE(t.active());
  for (uint32_t i = 0; i < 5; ++i) t.record(rec(i, Stage::kTx, i));
  CHECK(ring_read(r.h).size() == 3);
  CHECK_FALSE(t.active());
  CHECK(t.written() == 3);
  t.request(*parse_rule("a=10.0.0.1,ms=2"));
  t.poll(1'000'000);
  CHECK(t.active());
  t.poll(2'999'999);
  CHECK(t.active());
  t.poll(3'000'000);
  CHECK_FALSE(t.active());
  t.request(*parse_rule("a=10.0.0.1"));
  t.poll(4'000'000);
  t.stop();
  t.poll(4'000'001);
  CHECK_FALSE(t.active());
}

TEST_CASE("merge: rings on different clocks become one timeline per packet, in time order") {
  // Sender B's clock runs 1 ms behind the receiver A's; the fabric's 5 ms ahead.
  RingDump b{"rnic B", 1'000'000, {}}, fab{"fabric", -5'000'000, {}}, a{"rnic A", 0, {}};
  b.records = {rec(10'000, Stage::kTx, 7)};
  fab.records = {rec(5'000'000 + 1'011'000, Stage::kFabricEnqueue, 7),
                 rec(5'000'000 + 1'013'000, Stage::kFabricDeliver, 7)};
  a.records = {rec(1'020'000, Stage::kRxCore, 7)};
  Merged m = merge({a, fab, b}, namer);  // rings in any order
  REQUIRE(m.packets.size() == 1);
  const Timeline& t = m.packets[0];
  REQUIRE(t.events.size() == 4);
  CHECK(t.events[0].r.stage == Stage::kTx);
  CHECK(t.events[1].r.stage == Stage::kFabricEnqueue);
  CHECK(t.events[3].process == "rnic A");
  CHECK(t.outcome == Outcome::kDelivered);
  CHECK(t.end_ns - t.first_ns == 10'000);
  CHECK(m.hops["tx>fabric_enqueue"] == std::vector<uint64_t>{1'000});
  CHECK(m.hops["fabric_deliver>rx_core"] == std::vector<uint64_t>{7'000});
}

TEST_CASE("merge: TSC writers whose rates were measured differently agree to the cycle") {
  // Two processes on one TSC (3 GHz): one measured 2.99 GHz, the other 3.01 GHz,
  // and they started at different cycles. The same moment, 10 s in, must
  // come out the same; their own ns (plus a start offset) would be 67 ms apart.
  auto mult = [](double hz) { return static_cast<uint64_t>((static_cast<unsigned __int128>(1'000'000'000u) << 32) / hz); };
  auto ns = [](uint64_t cycles, uint64_t base, uint64_t m) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(cycles - base) * m) >> 32);
  };
  const uint64_t moment = 40'000'000'000ull;  // cycles
  RingDump slow{"slow", 0, {}, 1'000'000'000ull, mult(2.99e9)}, fast{"fast", 0, {}, 7'000'000'000ull, mult(3.01e9)};
  slow.records = {rec(ns(moment, slow.tsc_base, slow.tsc_mult), Stage::kTx, 1)};
  fast.records = {rec(ns(moment, fast.tsc_base, fast.tsc_mult), Stage::kRxCore, 1)};
  const TscCalibration cal{30'000'000'000ull, 5'000'000'000, 3e9};  // the reader's: 10e9 cycles (3.33 s) before `moment`
  Merged m = merge({slow, fast}, namer, &cal);
  REQUIRE(m.packets.size() == 1);
  const auto& ev = m.packets[0].events;
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].t_ns == Approx(8'333'333'333.0).margin(2));
  CHECK(ev[1].t_ns == Approx(8'333'333'333.0).margin(2));
  CHECK(m.packets[0].end_ns - m.packets[0].first_ns <= 2);
}

TEST_CASE("merge: a dropped copy, its retransmission delivered, a packet lost for good, one in flight, a foreign one") {
  RingDump b{"rnic B", 0, {}}, fab{"fabric", 0, {}}, a{"rnic A", 0, {}};
  // PSN 1: copy 1 (IPv4 id 1) dropped on fabric path 2, copy 2 (id 2, resent on another port) delivered.
  b.records.push_back(rec(100, Stage::kTx, 1, 0, 0xC001, kB, kA, 0, 1));
  fab.records.push_back(rec(110, Stage::kFabricEnqueue, 1, 0, 0xC001, kB, kA, 0, 1));
  fab.records.push_back(rec(111, Stage::kFabricDrop, 1, 2, 0xC001, kB, kA, 0, 1));
  b.records.push_back(rec(500, Stage::kTx, 1, 0, 0xC002, kB, kA, kFlagRetransmit, 2));
  fab.records.push_back(rec(510, Stage::kFabricEnqueue, 1, 0, 0xC002, kB, kA, 0, 2));
  fab.records.push_back(rec(512, Stage::kFabricDeliver, 1, 0, 0xC002, kB, kA, 0, 2));
  a.records.push_back(rec(520, Stage::kRxCore, 1, 0, 0xC002, kB, kA, 0, 2));
  // PSN 2: delivered before PSN 1's retransmission: out of order.
  b.records.push_back(rec(120, Stage::kTx, 2, 0, 0xC000, kB, kA, 0, 3));
  a.records.push_back(rec(140, Stage::kRxCore, 2, 0, 0xC000, kB, kA, 0, 3));
  // PSN 3: dropped, never resent within the trace.
  b.records.push_back(rec(130, Stage::kTx, 3, 0, 0xC000, kB, kA, 0, 4));
  fab.records.push_back(rec(131, Stage::kFabricDrop, 3, 2, 0xC000, kB, kA, 0, 4));
  // PSN 4: sent, nothing after.
  b.records.push_back(rec(600, Stage::kTx, 4, 0, 0xC000, kB, kA, 0, 5));
  // A frame from another sender aimed at the traced QP, dropped at the tenant check.
  a.records.push_back(rec(700, Stage::kRxIngress, 9, 24, 0xD000, 0x0A000009));
  // PSN 10 delivered last, so every process recorded until at least 800.
  b.records.push_back(rec(800, Stage::kTx, 10, 0, 0xC000, kB, kA, 0, 6));
  fab.records.push_back(rec(805, Stage::kFabricEnqueue, 10, 0, 0xC000, kB, kA, 0, 6));
  fab.records.push_back(rec(806, Stage::kFabricDeliver, 10, 0, 0xC000, kB, kA, 0, 6));
  a.records.push_back(rec(810, Stage::kRxCore, 10, 0, 0xC000, kB, kA, 0, 6));
  // PSN 11: sent before the fabric and A were recording (their first records are later): the window's edge.
  b.records.push_back(rec(50, Stage::kTx, 11, 0, 0xC000, kB, kA, 0, 7));
  Merged m = merge({b, fab, a}, namer);
  REQUIRE(m.packets.size() == 7);
  CHECK(m.window_start_ns == 140);
  CHECK(m.window_end_ns == 800);
  std::map<uint32_t, const Timeline*> by_psn;
  for (const Timeline& t : m.packets) by_psn[t.key.psn] = &t;
  const Timeline& p1 = *by_psn[1];
  CHECK(p1.outcome == Outcome::kDelivered);
  CHECK(p1.copies == 2);
  CHECK(p1.drops == 1);
  CHECK(p1.events[2].copy == 1);  // the drop belongs to the first copy
  CHECK(p1.events.back().copy == 2);
  CHECK(p1.out_of_order);
  CHECK_FALSE(by_psn[2]->out_of_order);
  CHECK(by_psn[3]->outcome == Outcome::kDropped);
  CHECK(by_psn[3]->events[by_psn[3]->drop].r.stage == Stage::kFabricDrop);
  CHECK(by_psn[4]->outcome == Outcome::kInFlight);
  CHECK(by_psn[9]->outcome == Outcome::kDropped);
  CHECK(by_psn[9]->foreign);
  CHECK(by_psn[11]->outcome == Outcome::kEdge);
  CHECK_FALSE(by_psn[11]->foreign);
  CHECK(m.outcomes["delivered"] == 3);
  CHECK(m.drops_at["fabric_drop/random_loss"] == 2);
  CHECK(m.drops_at["rx_ingress/pkey_violation"] == 1);
  // Two ACKs of one PSN (not retransmissions) are two packets, even when the
  // second is sent before the first arrives: the IPv4 id says which is which.
  RingDump acks{"rnic A", 0, {rec(10, Stage::kTx, 5, 0, 0xC000, kA, kB, 0, 10), rec(20, Stage::kTx, 5, 0, 0xC000, kA, kB, 0, 11),
                              rec(30, Stage::kRxCore, 5, 0, 0xC000, kA, kB, 0, 10),
                              rec(40, Stage::kRxCore, 5, 0, 0xC000, kA, kB, 0, 11)}};
  Merged m2 = merge({acks}, namer);
  REQUIRE(m2.packets.size() == 2);
  for (const Timeline& t : m2.packets) {
    CHECK(t.copies == 1);
    CHECK(t.outcome == Outcome::kDelivered);
    CHECK(t.end_ns - t.first_ns == 20);
  }
  std::vector<uint64_t> xs{5, 1, 4, 2, 3};
  CHECK(percentile(xs, 50) == 3);
  CHECK(percentile(xs, 100) == 5);
}

namespace {

// A set-up record: RNIC `src`'s egress entry for vNIC 2 -> overlay 192.168.8.1.
Record setup_rec(uint64_t ts, Stage s, uint32_t src, uint32_t dst, uint8_t verdict = 0, uint32_t aux = 0) {
  Record r;
  r.ts_ns = ts;
  r.stage = s;
  r.src_ip = src;
  r.dst_ip = dst;
  r.dqpn = 2;
  r.psn = 0xC0A80801;
  r.verdict = verdict;
  r.aux = aux;
  return r;
}

}  // namespace

TEST_CASE("merge: a set-up is its punt, the agent's resolution and commit, then the first packet after it") {
  RingDump b{"rnic B", 0, {}}, agent{"agent", 0, {}}, a{"rnic A", 0, {}};
  // B punts (twice: re-asked before the answer), the agent resolves and the RNIC commits v7.
  b.records.push_back(setup_rec(100, Stage::kPunt, kB, 0));
  b.records.push_back(setup_rec(150, Stage::kPunt, kB, 0));
  agent.records.push_back(setup_rec(160, Stage::kAgentResolve, kB, kA));
  // The first packet may leave before the agent hears of the commit: it is
  // still the set-up's first packet (it cannot leave before the resolution).
  b.records.push_back(rec(200, Stage::kTx, 1, 0, 0xC000, kB, kA, 0, 1));
  agent.records.push_back(setup_rec(210, Stage::kTxnCommit, kB, kA, 0, 7));
  a.records.push_back(rec(260, Stage::kRxCore, 1, 0, 0xC000, kB, kA, 0, 1));
  b.records.push_back(rec(300, Stage::kTx, 2, 0, 0xC000, kB, kA, 0, 2));
  a.records.push_back(rec(900, Stage::kRxCore, 2, 0, 0xC000, kB, kA, 0, 2));
  // A's miss for another overlay address: refused (no mapping), never committed.
  Record refused_punt = setup_rec(400, Stage::kPunt, kA, 0);
  refused_punt.psn = 0xC0A80809;
  Record refusal = setup_rec(420, Stage::kAgentResolve, kA, 0, static_cast<uint8_t>(SetupVerdict::kRefused));
  refusal.psn = 0xC0A80809;
  a.records.push_back(refused_punt);
  agent.records.push_back(refusal);
  Merged m = merge({b, agent, a}, namer);
  // Set-up records neither make packets nor narrow the window to the agent's few moments.
  REQUIRE(m.packets.size() == 2);
  CHECK(m.window_start_ns == 260);  // B's first packet record 200, A's 260
  CHECK(m.window_end_ns == 300);
  REQUIRE(m.setups.size() == 2);
  const Setup& s = m.setups[0];
  CHECK(s.src_ip == kB);
  CHECK(s.dst_ip == kA);
  CHECK(s.vnic == 2);
  CHECK(s.overlay == 0xC0A80801);
  CHECK(s.outcome == SetupOutcome::kDelivered);
  CHECK(s.version == 7);
  REQUIRE(s.first_packet >= 0);
  CHECK(m.packets[static_cast<std::size_t>(s.first_packet)].key.psn == 1);
  std::vector<Stage> way;
  for (const Event& e : s.events) way.push_back(e.r.stage);
  CHECK(way == std::vector<Stage>{Stage::kPunt, Stage::kPunt, Stage::kAgentResolve, Stage::kTxnCommit, Stage::kTx,
                                  Stage::kRxCore});
  CHECK(s.last_setup == 3);
  CHECK(s.end_ns == 260);
  CHECK(m.setup_hops["punt>agent_resolve"] == std::vector<uint64_t>{60});
  CHECK(m.setup_hops["agent_resolve>txn_commit"] == std::vector<uint64_t>{50});
  CHECK(m.setup_hops["punt>delivered"] == std::vector<uint64_t>{160});
  CHECK(m.setups[1].outcome == SetupOutcome::kRefused);
  CHECK(m.setups[1].first_packet == -1);
  CHECK(m.setup_outcomes["delivered"] == 1);
  CHECK(m.setup_outcomes["refused"] == 1);
  // An entry punted again after its commit (withdrawn, asked again) is a set-up of its own.
  RingDump again{"rnic B", 0, {setup_rec(10, Stage::kPunt, kB, 0), setup_rec(20, Stage::kAgentResolve, kB, kA),
                               setup_rec(30, Stage::kTxnCommit, kB, kA, 0, 3), setup_rec(40, Stage::kPunt, kB, 0)}};
  Merged m2 = merge({again}, namer);
  REQUIRE(m2.setups.size() == 2);
  CHECK(m2.setups[0].outcome == SetupOutcome::kCommitted);
  CHECK(m2.setups[1].outcome == SetupOutcome::kPunted);
}

TEST_CASE("rules: one end alone (a punt) matches when it may be either end of the rule's pair") {
  Rule r;
  r.ip_a = kA;
  r.ip_b = kB;
  r.pkey = 0x8002;
  CHECK(r.matches_end(kA, 0x8002));
  CHECK(r.matches_end(kB, 0x8002));
  CHECK_FALSE(r.matches_end(0x0A000009, 0x8002));
  CHECK_FALSE(r.matches_end(kA, 0xFFFF));
  CHECK(r.matches_pair(kB, kA, 0x8002));
  CHECK_FALSE(r.matches_pair(kB, 0x0A000009, 0x8002));
  Rule any;
  CHECK(any.matches_end(0x0A000009, 0xFFFF));
}

TEST_CASE("a process with several lcores has one ring per lcore beside lcore 0's, found in lcore order") {
  CHECK(lcore_ring_name(0) == kRingFileName);
  CHECK(lcore_ring_name(1) == "tandem-trace.lcore1.ring");
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("tandem-trace-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  for (uint32_t k : {0u, 2u, 10u, 1u}) std::ofstream(dir / lcore_ring_name(k)) << "x";
  std::ofstream(dir / "tandem-trace.lcoreX.ring") << "x";  // not an lcore's
  std::ofstream(dir / "other.ring") << "x";
  const std::string first = (dir / kRingFileName).string();
  const std::vector<std::string> rings = process_rings(first);
  REQUIRE(rings.size() == 4);
  CHECK(rings[0] == first);
  CHECK(rings[1] == (dir / "tandem-trace.lcore1.ring").string());
  CHECK(rings[2] == (dir / "tandem-trace.lcore2.ring").string());
  CHECK(rings[3] == (dir / "tandem-trace.lcore10.ring").string());
  // A ring under another name (the agent's, given by path) stands alone.
  CHECK(process_rings((dir / "other.ring").string()) == std::vector<std::string>{(dir / "other.ring").string()});
  std::filesystem::remove_all(dir);
}

TEST_CASE("merge: a process's lcore rings are one recording: a QP on lcore 1 gets its timelines, and the window "
          "spans the process's rings together") {
  // Receiver A writes two rings: lcore 0's QP had packets early, lcore 1's late.
  RingDump b{"rnic B", 0, {}}, a0{"rnic A", 0, {}}, a1{"rnic A", 0, {}};
  b.records = {rec(100, Stage::kTx, 1, 0, 0xC000, kB, kA, 0, 1), rec(250, Stage::kTx, 2, 0, 0xC000, kB, kA, 0, 2),
               rec(300, Stage::kTx, 3, 0, 0xC000, kB, kA, 0, 3), rec(400, Stage::kTx, 4, 0, 0xC000, kB, kA, 0, 4)};
  b.records[2].dqpn = b.records[3].dqpn = 0x20000;  // lcore 1's QP
  a0.records = {rec(110, Stage::kRxCore, 1, 0, 0xC000, kB, kA, 0, 1)};
  a1.records = {rec(310, Stage::kRxCore, 3, 0, 0xC000, kB, kA, 0, 3), rec(410, Stage::kRxCore, 4, 0, 0xC000, kB, kA, 0, 4)};
  a1.records[0].dqpn = a1.records[1].dqpn = 0x20000;
  Merged m = merge({b, a0, a1}, namer);
  REQUIRE(m.packets.size() == 4);
  CHECK(m.window_start_ns == 110);  // A recorded from 110 (lcore 0) to 410 (lcore 1)
  CHECK(m.window_end_ns == 400);
  std::map<uint32_t, const Timeline*> by_psn;
  for (const Timeline& t : m.packets) by_psn[t.key.psn] = &t;
  CHECK(by_psn[3]->outcome == Outcome::kDelivered);
  CHECK(by_psn[3]->key.dqpn == 0x20000);
  // Sent while A was recording (on either lcore), nothing after: in flight, not the window's edge.
  CHECK(by_psn[2]->outcome == Outcome::kInFlight);
  CHECK(m.outcomes["delivered"] == 3);
}
