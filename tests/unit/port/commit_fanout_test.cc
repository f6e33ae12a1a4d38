// DPU mode on several lcores (rnic/port/commit_fanout.h): the commit rule across
// lcores on a real level-2 table and channel end, no DPDK, no clock. Lcore 0
// consumes the channel and publishes; each lcore adopts between iterations; the
// agent hears COMMITTED only when every lcore acknowledged the version; a lcore
// that has not adopted yet keeps reading the whole old version, however far
// lcore 0 has gone, and the table's reclaim waits for it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "rnic/port/commit_fanout.h"

using namespace tandem;
using namespace tandem::rnic;
using namespace tandem::rnic::port;
using namespace tandem::common;

namespace {

constexpr uint32_t kVnic = 1;
constexpr uint32_t kRemoteA = 0xC0A80702, kRemoteB = 0xC0A80703;

Level2Entry route(uint32_t remote, uint32_t underlay) {
  EgressAction a;
  a.underlay_dst_ip = underlay;
  a.path_count = 1;
  return make_egress_entry(egress_key(kVnic, remote), a);
}

class Sink final : public PuntSink {
 public:
  void punt(const EntryKey& k, uint64_t) noexcept override { keys.push_back(k); }
  std::vector<EntryKey> keys;
};

// One port with two lcores: the table, lcore 0's channel end and fanout, both lcores' views.
struct Port {
  explicit Port(bool bound = true, uint32_t capacity = 64) : table(Level2TableConfig{capacity}) {
    RnicChannelConfig cc;
    cc.readers = bound ? &fanout : nullptr;  // false: what one lcore alone would do (the contrast)
    ch = std::make_unique<RnicChannel>(table, cc);
    HelloMsg h;
    h.agent_instance = 7;
    send(h);
  }
  template <class M>
  void send(M m) {
    m.hdr.seq = seq++;
    ch->on_command(to_raw(m), now += 1000);
  }
  void txn(const std::vector<Level2Entry>& puts, const std::vector<EntryKey>& dels) {
    BeginMsg b;
    b.txn = ++txn_id;
    b.base_version = table.version();
    send(b);
    for (const Level2Entry& e : puts) {
      PutMsg p;
      p.txn = b.txn;
      p.entry = e;
      send(p);
    }
    for (const EntryKey& k : dels) {
      DelMsg d;
      d.txn = b.txn;
      d.key = k;
      send(d);
    }
    CommitMsg c;
    c.txn = b.txn;
    c.version = table.version() + 1;
    c.digest = table.staged_digest().value;
    c.entry_count = table.staged_digest().count;
    send(c);
  }
  // Lcore 0's turn after the commands: reclaim, publish, its own view, the events the rule lets go.
  void lcore0_turn() {
    ch->tick(now += 1000);
    fanout.publish(ch.get());
    lane0.adopt();
    lane0.acknowledge();
    while (const RawMessage* m = ch->peek_event()) {
      if (!commit_event_ready(*m, fanout.visible_version())) break;
      RawMessage r;
      ch->pop_event(r);
      if (r.type() == MessageType::kCommitted) told.push_back(as<CommittedMsg>(r).version);
      if (r.type() == MessageType::kAborted) ++aborted;
    }
  }
  void lcore1_turn() {
    lane1.adopt();
    lane1.acknowledge();
  }
  // What a packet of lcore k would see for the two keys (0: a miss).
  std::pair<uint32_t, uint32_t> seen(const LcoreAgent& lane) const {
    const Level2Table::Snapshot s = lane.view()->snap;
    const Level2Entry* a = table.lookup(s, egress_key(kVnic, kRemoteA));
    const Level2Entry* b = table.lookup(s, egress_key(kVnic, kRemoteB));
    return {a ? a->egress.underlay_dst_ip : 0, b ? b->egress.underlay_dst_ip : 0};
  }

  Level2Table table;
  CommitFanout fanout{table, 2};
  std::unique_ptr<RnicChannel> ch;
  Sink sink;
  LcoreAgent lane0{fanout, 0, &sink};
  LcoreAgent lane1{fanout, 1, nullptr};
  uint32_t seq = 0, txn_id = 0;
  uint64_t now = 0;
  std::vector<uint64_t> told;  // versions the agent was told are committed
  uint64_t aborted = 0;        // transactions the agent was told were not
};

}  // namespace

TEST_CASE("commit fanout: COMMITTED waits until both lcores acknowledged the version") {
  Port p;
  p.lcore1_turn();
  p.txn({route(kRemoteA, 0x0A000002)}, {});
  REQUIRE(p.table.version() == 1);
  p.lcore0_turn();
  CHECK(p.lane0.view()->snap.version == 1);
  CHECK(p.fanout.visible_version() == 0);
  CHECK(p.told.empty());  // lcore 1 reads version 0 still
  p.lcore0_turn();
  CHECK(p.told.empty());  // and nothing lets it go but lcore 1
  p.lcore1_turn();
  CHECK(p.fanout.visible_version() == 1);
  p.lcore0_turn();
  CHECK(p.told == std::vector<uint64_t>{1});
  // Two commits in one burst of commands: each told once both lcores see it, in order.
  p.txn({route(kRemoteB, 0x0A000002)}, {});
  p.txn({route(kRemoteB, 0x0A000003)}, {});
  p.lcore0_turn();
  CHECK(p.told == std::vector<uint64_t>{1});
  p.lcore1_turn();
  p.lcore0_turn();
  CHECK(p.told == std::vector<uint64_t>{1, 2, 3});
}

TEST_CASE("commit fanout: a HELLO_ACK naming a committed version waits like a COMMITTED; other events do not") {
  HelloAckMsg h;
  h.committed_version = 4;
  CHECK_FALSE(commit_event_ready(to_raw(h), 3));
  CHECK(commit_event_ready(to_raw(h), 4));
  CommittedMsg c;
  c.version = 5;
  CHECK_FALSE(commit_event_ready(to_raw(c), 4));
  CommittedTable t;
  REQUIRE(committed_table_of(to_raw(c), t));
  CHECK(t.version == 5);
  PuntMsg pm;
  CHECK(commit_event_ready(to_raw(pm), 0));
  AbortedMsg am;
  am.committed_version = 9;
  CHECK(commit_event_ready(to_raw(am), 0));
}

TEST_CASE("commit fanout: lcore 1 between the swap and its acknowledgement sees all of the old version, "
          "however far lcore 0 goes, and then all of the new") {
  Port p;
  p.txn({route(kRemoteA, 1), route(kRemoteB, 1)}, {});  // version 1: both at underlay 1
  p.lcore0_turn();
  p.lcore1_turn();
  p.lcore0_turn();
  REQUIRE(p.seen(p.lane1) == std::pair<uint32_t, uint32_t>{1, 1});
  // Lcore 0 moves on: both moved (2), both removed (3), both back elsewhere (4), with
  // reclaim turns in between; lcore 1 takes no turn.
  p.txn({route(kRemoteA, 2), route(kRemoteB, 2)}, {});
  for (int i = 0; i < 4; ++i) p.lcore0_turn();
  CHECK(p.seen(p.lane0) == std::pair<uint32_t, uint32_t>{2, 2});
  p.txn({}, {egress_key(kVnic, kRemoteA), egress_key(kVnic, kRemoteB)});
  for (int i = 0; i < 4; ++i) p.lcore0_turn();
  CHECK(p.seen(p.lane0) == std::pair<uint32_t, uint32_t>{0, 0});
  p.txn({route(kRemoteA, 4), route(kRemoteB, 4)}, {});
  for (int i = 0; i < 4; ++i) p.lcore0_turn();
  CHECK(p.seen(p.lane0) == std::pair<uint32_t, uint32_t>{4, 4});
  // Lcore 1: version 1 whole; nothing it can see was unlinked or freed under it.
  CHECK(p.lane1.view()->snap.version == 1);
  CHECK(p.seen(p.lane1) == std::pair<uint32_t, uint32_t>{1, 1});
  CHECK(p.table.stats().freed == 0);
  CHECK(p.told == std::vector<uint64_t>{1});
  // It adopts: the newest version whole, the agent hears of 2, 3 and 4, and what
  // no lcore can see any more is reclaimed.
  p.lcore1_turn();
  CHECK(p.seen(p.lane1) == std::pair<uint32_t, uint32_t>{4, 4});
  for (int i = 0; i < 3; ++i) {
    p.lcore0_turn();
    p.lcore1_turn();
  }
  CHECK(p.told == std::vector<uint64_t>{1, 2, 3, 4});
  CHECK(p.table.stats().freed == 4);  // the two entries of version 1 and of version 2

  SECTION("without the fanout's bound (one lcore's reclaim), the same steps pull version 1 from under lcore 1") {
    Port q(false);
    q.txn({route(kRemoteA, 1), route(kRemoteB, 1)}, {});
    q.lcore0_turn();
    q.lcore1_turn();
    q.txn({route(kRemoteA, 2), route(kRemoteB, 2)}, {});
    for (int i = 0; i < 4; ++i) q.lcore0_turn();
    CHECK(q.lane1.view()->snap.version == 1);
    CHECK(q.seen(q.lane1) == std::pair<uint32_t, uint32_t>{0, 0});  // unlinked: a half-gone version
  }
}

TEST_CASE("commit fanout: lcore 1's misses reach lcore 0's channel once per key and version a millisecond") {
  Port p;
  p.lcore1_turn();
  const EntryKey a = egress_key(kVnic, kRemoteA), b = egress_key(kVnic, kRemoteB);
  p.lane1.punt(a, 1'000);
  p.lane1.punt(a, 2'000);  // every packet of a missing route misses: handed once
  p.lane1.punt(b, 3'000);
  p.lane0.punt(a, 3'000);  // lcore 0's own go to the channel directly
  std::vector<EntryKey> handed;
  CHECK(p.fanout.drain_punts([&](const EntryKey& k) { handed.push_back(k); }) == 2);
  CHECK(handed == std::vector<EntryKey>{a, b});
  CHECK(p.sink.keys == std::vector<EntryKey>{a});
  CHECK(p.lane1.counters().punts_handed == 2);
  CHECK(p.lane1.counters().punts_repeated == 1);
  p.lane1.punt(a, 1'002'000);  // a millisecond on: again
  p.txn({route(kRemoteB, 1)}, {});
  p.lcore0_turn();
  p.lcore1_turn();
  p.lane1.punt(a, 1'003'000);  // a new version: at once
  CHECK(p.lane1.counters().punts_handed == 4);
  // A full ring (lcore 0 away) is counted, never blocks.
  for (uint32_t i = 0; i < CommitFanout::kPuntRing + 10; ++i) p.lane1.punt(egress_key(kVnic, 0x0B000000 + i), 2'000'000);
  CHECK(p.lane1.counters().punts_ring_full == 12);
}

TEST_CASE("commit fanout: under concurrent commits, every burst of lcore 1 sees one whole version") {
  Port p;
  p.txn({route(kRemoteA, 1), route(kRemoteB, 1)}, {});
  p.lcore0_turn();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> torn{0}, bursts{0}, adopted{0};
  std::thread lcore1([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      if (p.lane1.adopt()) adopted.fetch_add(1, std::memory_order_relaxed);
      p.lane1.acknowledge();
      for (int i = 0; i < 8; ++i) {  // a burst's lookups, all at the adopted version
        const auto [a, b] = p.seen(p.lane1);
        if (a != b) torn.fetch_add(1, std::memory_order_relaxed);
      }
      bursts.fetch_add(1, std::memory_order_relaxed);
    }
  });
  // Lcore 0: commits that move both keys together, delete both, put both back;
  // the agent sends the next when told of the last (removed entries wait for
  // lcore 1 to be reclaimed: an agent that never waited would fill the table
  // while lcore 1 is off its core). Lcore 1 reads meanwhile.
  uint32_t u = 1;
  for (int i = 0; i < 2000; ++i) {
    if (i % 7 == 3)
      p.txn({}, {egress_key(kVnic, kRemoteA), egress_key(kVnic, kRemoteB)});
    else
      ++u, p.txn({route(kRemoteA, u), route(kRemoteB, u)}, {});
    while (true) {
      p.lcore0_turn();
      if (!p.told.empty()) REQUIRE(p.told.back() <= p.fanout.visible_version());
      if (p.told.size() + p.aborted == static_cast<std::size_t>(i) + 2) break;
      std::this_thread::yield();
    }
  }
  while (bursts.load() < 100) std::this_thread::yield();
  stop = true;
  lcore1.join();
  CHECK(torn.load() == 0);
  CHECK(adopted.load() > 0);
  // Lcore 1 caught up (acknowledging as it went): every commit is told, what is gone is freed.
  p.lcore1_turn();
  for (int i = 0; i < 3; ++i) {
    p.lcore0_turn();
    p.lcore1_turn();
  }
  CHECK(p.told.size() == 2001);
  CHECK(p.aborted == 0);
  CHECK(p.table.stats().freed > 1000);
  CHECK(std::is_sorted(p.told.begin(), p.told.end()));
}
