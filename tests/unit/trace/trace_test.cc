// Trace units: the ring (single writer, readers that never see a torn
// record), rule matching and parsing, the tracer's rule hand-over, and the
// merge of several processes' rings into per-packet timelines.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

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
           uint32_t dst = kA, uint8_t flags = 0) {
  Record r;
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

TEST_CASE("merge: a dropped copy, its retransmission delivered, a packet lost for good, one in flight, a foreign one") {
  RingDump b{"rnic B", 0, {}}, fab{"fabric", 0, {}}, a{"rnic A", 0, {}};
  // PSN 1: copy 1 dropped on fabric path 2, copy 2 (resent on another port) delivered.
  b.records.push_back(rec(100, Stage::kTx, 1, 0, 0xC001));
  fab.records.push_back(rec(110, Stage::kFabricEnqueue, 1, 0, 0xC001));
  fab.records.push_back(rec(111, Stage::kFabricDrop, 1, 2, 0xC001));
  b.records.push_back(rec(500, Stage::kTx, 1, 0, 0xC002, kB, kA, kFlagRetransmit));
  fab.records.push_back(rec(510, Stage::kFabricEnqueue, 1, 0, 0xC002));
  fab.records.push_back(rec(512, Stage::kFabricDeliver, 1, 0, 0xC002));
  a.records.push_back(rec(520, Stage::kRxCore, 1));
  // PSN 2: delivered before PSN 1's retransmission: out of order.
  b.records.push_back(rec(120, Stage::kTx, 2));
  a.records.push_back(rec(140, Stage::kRxCore, 2));
  // PSN 3: dropped, never resent within the trace.
  b.records.push_back(rec(130, Stage::kTx, 3));
  fab.records.push_back(rec(131, Stage::kFabricDrop, 3, 2));
  // PSN 4: sent, nothing after.
  b.records.push_back(rec(600, Stage::kTx, 4));
  // A frame from another sender aimed at the traced QP, dropped at the tenant check.
  a.records.push_back(rec(700, Stage::kRxIngress, 9, 24, 0xD000, 0x0A000009));
  Merged m = merge({b, fab, a}, namer);
  REQUIRE(m.packets.size() == 5);
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
  CHECK(m.outcomes["delivered"] == 2);
  CHECK(m.drops_at["fabric_drop/random_loss"] == 2);
  CHECK(m.drops_at["rx_ingress/pkey_violation"] == 1);
  std::vector<uint64_t> xs{5, 1, 4, 2, 3};
  CHECK(percentile(xs, 50) == 3);
  CHECK(percentile(xs, 100) == 5);
}
