// The agent's and the RNIC's channel state machines wired back to back
// (two queues for the rings, a Bar in memory), driven with explicit time.
#include <catch2/catch.hpp>

#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <unistd.h>

#include "dpu/channel/agent_channel.h"
#include "dpu/model/address.h"
#include "dpu/store/store.h"
#include "dpu/txn/derive.h"
#include "rnic/table/level2_table.h"
#include "rnic/table/rnic_channel.h"

using namespace tandem::dpu;
using namespace tandem::common;
using tandem::rnic::Level2Table;
using tandem::rnic::Level2TableConfig;
using tandem::rnic::RnicChannel;
using tandem::rnic::RnicChannelConfig;

namespace {

constexpr uint64_t kMs = 1'000'000;

Level2Entry egress(uint32_t vnic, uint32_t ip, uint32_t dst) {
  EgressAction a;
  a.underlay_src_ip = 0x0A000001;
  a.underlay_dst_ip = dst;
  a.vni = 100;
  return make_egress_entry(egress_key(vnic, ip), a);
}

ChangeSet puts(uint64_t tag, uint32_t first, uint32_t n, uint32_t dst = 7) {
  ChangeSet cs;
  cs.tag = tag;
  for (uint32_t i = 0; i < n; ++i) cs.put(egress(1, first + i, dst));
  return cs;
}

// One RNIC (table + channel end + BAR) that can be restarted.
struct RnicSide {
  uint32_t capacity;
  VersionRange versions;
  uint64_t instance = 1;
  std::unique_ptr<Level2Table> table;
  std::unique_ptr<RnicChannel> ch;
  std::unique_ptr<Bar> bar = std::make_unique<Bar>();
  bool alive = true;        // worker loop runs (ticks, BAR heartbeat)
  bool processing = true;   // consumes commands

  RnicSide(uint32_t cap = 1024, VersionRange v = kOurVersions) : capacity(cap), versions(v) { boot(); }
  void boot() {
    table = std::make_unique<Level2Table>(Level2TableConfig{capacity});
    RnicChannelConfig c;
    c.versions = versions;
    c.agent_timeout_ns = 3000 * kMs;
    c.rnic_instance = instance;
    ch = std::make_unique<RnicChannel>(*table, c);
  }
  void restart() {
    ++instance;
    boot();
  }
  const Level2Entry* lookup(const EntryKey& k) const { return table->lookup(table->begin_read(), k); }
};

struct Link {
  AgentChannel agent;
  RnicSide& rnic;
  uint64_t now = 0;
  std::deque<RawMessage> cmd_ring, evt_ring;
  std::function<bool(const RawMessage&)> drop_cmd;  // fault injection

  Link(RnicSide& r, AgentChannelConfig cfg = {}, Level2Shadow shadow = {})
      : agent("rnic0", cfg, std::move(shadow)), rnic(r) {}

  // One loop iteration of both processes, 1 ms apart.
  void step() {
    now += kMs;
    RawMessage m;
    while (agent.pop_command(m))
      if (!drop_cmd || !drop_cmd(m)) cmd_ring.push_back(m);
    if (rnic.alive) {
      if (rnic.processing)
        while (!cmd_ring.empty()) {
          rnic.ch->on_command(cmd_ring.front(), now);
          cmd_ring.pop_front();
        }
      rnic.ch->tick(now);
      rnic.ch->publish(*rnic.bar);
      while (rnic.ch->pop_event(m)) evt_ring.push_back(m);
    }
    while (!evt_ring.empty()) {
      agent.on_event(evt_ring.front(), now);
      evt_ring.pop_front();
    }
    agent.on_bar(sample_bar(*rnic.bar), now);
    agent.tick(now);
  }
  void run(uint64_t ms) {
    for (uint64_t i = 0; i < ms; ++i) step();
  }
  bool run_until(const std::function<bool()>& done, uint64_t max_ms = 20000) {
    for (uint64_t i = 0; i < max_ms; ++i) {
      if (done()) return true;
      step();
    }
    return done();
  }
  bool active_and_idle() {
    return agent.state() == ChannelState::kActive && !agent.txn_in_flight() &&
           agent.queued_change_sets() == 0 && rnic.ch->state() == RnicChannelState::kActive;
  }
  void start() {
    agent.start(now);
    REQUIRE(run_until([&] { return active_and_idle(); }));
  }
  // The RNIC holds exactly what the agent believes it committed.
  void require_in_sync() {
    REQUIRE(rnic.table->version() == agent.shadow().version());
    REQUIRE(rnic.table->digest() == agent.shadow().digest());
    for (const auto& [k, e] : agent.shadow().entries()) {
      const Level2Entry* got = rnic.lookup(k);
      REQUIRE(got != nullptr);
      REQUIRE(*got == e);
    }
  }
};

}  // namespace

TEST_CASE("txn builder emits BEGIN, the ops and COMMIT with the next version and digest") {
  Level2Shadow shadow;
  shadow.reset(4, {egress(1, 1, 1)});
  std::deque<RawMessage> out;
  ChangeSet cs = puts(0, 2, 2);
  cs.del(egress_key(1, 1));
  PendingTxn p = TxnBuilder::build(shadow, 9, cs.ops, out);
  REQUIRE(out.size() == 5);
  CHECK(out[0].type() == MessageType::kBegin);
  CHECK(as<BeginMsg>(out[0]).base_version == 4);
  CHECK(out[1].type() == MessageType::kPut);
  CHECK(out[3].type() == MessageType::kDel);
  auto c = as<CommitMsg>(out[4]);
  CHECK(c.hdr.type == MessageType::kCommit);
  CHECK(c.version == 5);
  TableDigest expect;
  expect.add(egress(1, 2, 7));
  expect.add(egress(1, 3, 7));
  CHECK(c.digest == expect.value);
  CHECK(c.entry_count == 2);
  CHECK(p.expected == expect);
}

TEST_CASE("fresh agent and RNIC reach ACTIVE without a replay when both are empty") {
  RnicSide r;
  Link l(r);
  l.start();
  CHECK(l.agent.version() == kProtocolVersionCurrent);
  CHECK(l.agent.stats().replays == 0);
  CHECK(l.agent.stats().reconcile_skips == 1);
}

TEST_CASE("change sets commit on the RNIC and the shadow follows") {
  RnicSide r;
  Link l(r);
  l.start();
  for (uint64_t t = 1; t <= 5; ++t) l.agent.submit(puts(t, t * 10, 3));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  auto outcomes = l.agent.take_outcomes();
  // Queued change sets were merged into one transaction.
  REQUIRE(outcomes.size() == 1);
  CHECK(outcomes[0].committed);
  CHECK(outcomes[0].tags == std::vector<uint64_t>{1, 2, 3, 4, 5});
  CHECK(outcomes[0].net_puts.size() == 15);
  CHECK(r.table->size() == 15);
  l.require_in_sync();

  ChangeSet del;
  del.tag = 6;
  del.del(egress_key(1, 10));
  l.agent.submit(del);
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  CHECK(r.lookup(egress_key(1, 10)) == nullptr);
  l.require_in_sync();
}

TEST_CASE("an RNIC one protocol version behind is driven with full replays") {
  RnicSide r(1024, VersionRange{1, 1});
  Link l(r);
  l.start();
  CHECK(l.agent.version() == 1);
  CHECK(l.agent.stats().replays == 1);  // v1 has no digest reconcile
  l.agent.submit(puts(1, 1, 4));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  l.require_in_sync();
}

TEST_CASE("no common protocol version leaves the channel DEGRADED with a reason") {
  constexpr uint16_t kNewer = kProtocolVersionCurrent + 1;  // an RNIC that dropped everything we speak
  RnicSide r(1024, VersionRange{kNewer, kNewer});
  Link l(r);
  l.agent.start(l.now);
  l.run(5);
  CHECK(l.agent.state() == ChannelState::kDegraded);
  CHECK(l.agent.last_error().find("no common protocol version") != std::string::npos);
}

TEST_CASE("a restarted agent with a matching shadow skips the replay") {
  RnicSide r;
  Level2Shadow saved;
  {
    Link l(r);
    l.start();
    l.agent.submit(puts(1, 1, 20));
    REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
    saved = l.agent.shadow();  // what the store would hold
  }
  AgentChannelConfig cfg;
  cfg.agent_instance = 2;
  Link l2(r, cfg, saved);
  l2.start();
  CHECK(l2.agent.stats().replays == 0);
  CHECK(l2.agent.stats().reconcile_skips == 1);
  l2.require_in_sync();
}

TEST_CASE("a restarted agent with a stale shadow replays it in full") {
  RnicSide r;
  Level2Shadow stale;
  {
    Link l(r);
    l.start();
    l.agent.submit(puts(1, 1, 5));
    REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
    stale = l.agent.shadow();
    l.agent.submit(puts(2, 100, 5));  // committed, but "lost" by the restarted agent
    REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  }
  AgentChannelConfig cfg;
  cfg.agent_instance = 2;
  Link l2(r, cfg, stale);
  l2.start();
  CHECK(l2.agent.stats().replays == 1);
  CHECK(r.table->size() == 5);
  CHECK(r.lookup(egress_key(1, 100)) == nullptr);
  l2.require_in_sync();
}

TEST_CASE("an RNIC restart is seen in the BAR and the table is replayed") {
  RnicSide r;
  Link l(r);
  l.start();
  l.agent.submit(puts(1, 1, 8));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  r.restart();  // empty table, new instance number
  l.cmd_ring.clear();
  REQUIRE(l.run_until([&] { return l.agent.stats().resets == 1; }));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  CHECK(r.table->size() == 8);
  CHECK(l.agent.stats().replays == 1);
  l.require_in_sync();
}

TEST_CASE("a stalled RNIC heartbeat degrades the channel; recovery goes through RESET") {
  RnicSide r;
  AgentChannelConfig cfg;
  cfg.heartbeat_timeout_ns = 200 * kMs;
  Link l(r, cfg);
  l.start();
  r.alive = false;
  l.run(150);
  CHECK(l.agent.state() == ChannelState::kActive);
  l.agent.submit(puts(1, 1, 2));  // waits while the RNIC is stuck
  l.run(100);
  CHECK(l.agent.state() == ChannelState::kDegraded);
  CHECK(l.agent.last_error() == "RNIC rnic0 heartbeat stalled");
  r.alive = true;
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  CHECK(l.agent.stats().resets >= 1);
  CHECK(r.lookup(egress_key(1, 1)) != nullptr);  // the requeued change set landed
  l.require_in_sync();
}

TEST_CASE("HELLO without an answer times out, and RESET retries it") {
  RnicSide r;
  AgentChannelConfig cfg;
  cfg.hello_timeout_ns = 50 * kMs;
  cfg.degraded_reset_ns = 100 * kMs;
  Link l(r, cfg);
  r.processing = false;
  l.agent.start(l.now);
  l.run(60);
  CHECK(l.agent.state() == ChannelState::kDegraded);
  CHECK(l.agent.stats().hellos == 1);
  l.run(110);
  CHECK(l.agent.stats().resets == 1);
  CHECK(l.agent.stats().hellos == 2);
  r.processing = true;
  l.cmd_ring.clear();
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
}

TEST_CASE("an agent started long before its RNIC waits in DOWN without degrading, then goes ACTIVE") {
  RnicSide r;
  r.alive = false;  // no worker attached: the BAR is all zero
  Link l(r);
  l.agent.start(l.now);
  l.run(5000);  // 10 x hello_timeout, 5 x degraded_reset
  CHECK(l.agent.state() == ChannelState::kDown);
  CHECK(l.agent.waiting_for_rnic());
  CHECK(l.agent.stats().degraded == 0);
  CHECK(l.agent.stats().resets == 0);
  CHECK(l.agent.stats().hellos == 0);
  CHECK(l.cmd_ring.empty());  // no stale HELLO waiting for the worker
  r.alive = true;
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  CHECK(l.agent.stats().degraded == 0);
  CHECK(l.agent.stats().hellos == 1);
  CHECK(l.agent.last_error().empty());
  l.agent.submit(puts(1, 1, 2));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  l.require_in_sync();
}

TEST_CASE("a BAR left behind by a dead worker does not count as an attached RNIC") {
  RnicSide r;
  r.alive = false;
  r.bar->state.value = static_cast<uint64_t>(RnicChannelState::kActive);
  r.bar->rnic_instance.value = 41;
  r.bar->heartbeat.value = 12345;  // frozen
  Link l(r);
  l.agent.start(l.now);
  l.run(3000);
  CHECK(l.agent.state() == ChannelState::kDown);
  CHECK(l.agent.stats().hellos == 0);
  CHECK(l.agent.stats().degraded == 0);
  r.alive = true;  // a new worker (instance 1) attaches
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  CHECK(l.agent.stats().degraded == 0);
}

TEST_CASE("a stale HELLO of an earlier agent left in the ring does not confuse the handshake") {
  RnicSide r;
  r.alive = false;
  AgentChannelConfig cfg;
  cfg.agent_instance = 2;
  Link l(r, cfg);
  HelloMsg old;
  old.agent_instance = 1;  // the previous agent's, never answered
  l.cmd_ring.push_back(to_raw(old));
  l.cmd_ring.push_back(to_raw(HeartbeatMsg{}));
  l.agent.start(l.now);
  l.run(2000);
  CHECK(l.agent.stats().hellos == 0);
  r.alive = true;
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  CHECK(l.agent.stats().hellos == 1);
  CHECK(l.agent.stats().degraded == 0);
  CHECK(l.agent.stats().stale_events >= 1);  // the old agent's HELLO_ACK, ignored
  l.agent.submit(puts(1, 1, 2));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  l.require_in_sync();
}

TEST_CASE("an attached RNIC that leaves HELLO unanswered still degrades the channel") {
  RnicSide r;
  r.processing = false;  // worker runs and beats, but never reads its command ring
  Link l(r);
  l.agent.start(l.now);
  l.run(600);
  CHECK(l.agent.state() == ChannelState::kDegraded);
  CHECK(l.agent.stats().degraded == 1);
  CHECK(l.agent.last_error() == "HELLO to RNIC rnic0 unanswered");
}

TEST_CASE("a worker that dies degrades the channel once, then the agent waits quietly for the next one") {
  RnicSide r;
  Link l(r);
  l.start();
  l.agent.submit(puts(1, 1, 4));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  r.alive = false;
  l.run(10000);
  CHECK(l.agent.stats().degraded == 1);
  CHECK(l.agent.state() == ChannelState::kDown);
  CHECK(l.agent.stats().hellos == 1);
  r.restart();
  r.alive = true;
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  CHECK(l.agent.stats().degraded == 1);
  CHECK(l.agent.stats().replays == 1);  // the new worker's table is empty
  l.require_in_sync();
}

TEST_CASE("an unanswered transaction times out while the BAR still beats") {
  RnicSide r;
  AgentChannelConfig cfg;
  cfg.txn_timeout_ns = 100 * kMs;
  Link l(r, cfg);
  l.start();
  r.processing = false;
  l.agent.submit(puts(1, 1, 1));
  l.run(120);
  CHECK(l.agent.state() == ChannelState::kDegraded);
  CHECK(l.agent.last_error().find("unanswered") != std::string::npos);
  r.processing = true;
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  l.require_in_sync();
}

TEST_CASE("the RNIC goes HEADLESS without the agent, keeps its table and refuses changes") {
  RnicSide r;
  auto link = std::make_unique<Link>(r);
  link->start();
  link->agent.submit(puts(1, 1, 3));
  REQUIRE(link->run_until([&] { return link->active_and_idle(); }));
  uint64_t now = link->now;
  link.reset();  // the agent process dies

  r.ch->tick(now + 2000 * kMs);
  CHECK(r.ch->state() == RnicChannelState::kActive);
  r.ch->tick(now + 3500 * kMs);
  CHECK(r.ch->state() == RnicChannelState::kHeadless);
  CHECK(r.lookup(egress_key(1, 1)) != nullptr);  // forwarding state kept

  BeginMsg b;
  b.txn = 77;
  b.base_version = r.table->version();
  r.ch->on_command(to_raw(b), now + 3600 * kMs);
  RawMessage ev;
  REQUIRE(r.ch->pop_event(ev));
  REQUIRE(ev.type() == MessageType::kAborted);
  CHECK(as<AbortedMsg>(ev).reason == AbortReason::kHeadless);
  CHECK(r.ch->stats().refused_headless == 1);

  // A new agent says HELLO and takes over without a replay.
  r.ch->tick(now + 3600 * kMs);
  Level2Shadow saved;
  saved.reset(r.table->version(), [&] {
    std::vector<Level2Entry> v;
    r.table->for_each_committed([&](const Level2Entry& e) { v.push_back(e); });
    return v;
  }());
  AgentChannelConfig cfg;
  cfg.agent_instance = 9;
  Link l2(r, cfg, saved);
  l2.now = now + 3600 * kMs;
  l2.start();
  CHECK(l2.agent.stats().replays == 0);
  l2.require_in_sync();
}

TEST_CASE("a transaction that does not fit is aborted whole and reported") {
  RnicSide r(4);
  Link l(r);
  l.start();
  l.agent.submit(puts(1, 1, 3));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  l.agent.take_outcomes();
  l.agent.submit(puts(2, 10, 3));  // 6 > capacity 4
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  auto o = l.agent.take_outcomes();
  REQUIRE(o.size() == 1);
  CHECK_FALSE(o[0].committed);
  CHECK(o[0].reason == AbortReason::kTableFull);
  CHECK(l.agent.stats().table_full == 1);
  CHECK(r.table->size() == 3);
  CHECK(r.lookup(egress_key(1, 10)) == nullptr);  // nothing of it applied
  l.require_in_sync();
  l.agent.submit(puts(3, 20, 1));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  CHECK(r.table->size() == 4);
  l.require_in_sync();
}

TEST_CASE("a version mismatch makes the agent replay, then retry its change set") {
  RnicSide r;
  Link l(r);
  l.start();
  l.agent.submit(puts(1, 1, 2));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  // Someone changes the RNIC table behind the agent's back.
  REQUIRE(r.table->begin() == tandem::rnic::TableStatus::kOk);
  REQUIRE(r.table->put(egress(5, 5, 5)) == tandem::rnic::TableStatus::kOk);
  REQUIRE(r.table->commit() == tandem::rnic::TableStatus::kOk);
  l.agent.submit(puts(2, 50, 2));
  REQUIRE(l.run_until([&] { return l.active_and_idle() && l.agent.stats().txns_committed >= 3; }));
  CHECK(l.agent.stats().replays == 1);
  CHECK(r.lookup(egress_key(5, 5)) == nullptr);
  CHECK(r.lookup(egress_key(1, 50)) != nullptr);
  l.require_in_sync();
}

TEST_CASE("a lost command is detected by sequence number and the channel recovers") {
  RnicSide r;
  AgentChannelConfig cfg;
  cfg.degraded_reset_ns = 10 * kMs;
  Link l(r, cfg);
  l.start();
  bool dropped = false;
  l.drop_cmd = [&](const RawMessage& m) {
    if (!dropped && m.type() == MessageType::kPut) return dropped = true;
    return false;
  };
  l.agent.submit(puts(1, 1, 4));
  REQUIRE(l.run_until([&] { return l.agent.state() == ChannelState::kDegraded; }));
  CHECK(r.ch->stats().sequence_gaps == 1);
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  CHECK(r.table->size() == 4);
  l.require_in_sync();
}

TEST_CASE("punts reach the agent with their slot and missed key") {
  RnicSide r;
  Link l(r);
  l.start();
  r.ch->punt(3, 11, 64, 0, egress_key(2, 0xC0A80009));
  l.step();
  auto p = l.agent.take_punts();
  REQUIRE(p.size() == 1);
  CHECK(p[0].slot == 3);
  CHECK(p[0].generation == 11);
  CHECK(p[0].missed == egress_key(2, 0xC0A80009));
}

TEST_CASE("expected digest follows repeated keys within one transaction") {
  for (uint32_t filler : {0u, 100u}) {  // small txns scan back, large ones index their ops
    Level2Shadow shadow;
    shadow.reset(1, {egress(1, 1, 1), egress(1, 2, 2)});
    ChangeSet cs;
    cs.put(egress(1, 1, 10));   // replace a committed entry
    cs.put(egress(1, 1, 11));   // and again
    cs.del(egress_key(1, 1));   // then delete it
    cs.put(egress(1, 1, 12));   // and bring it back
    cs.del(egress_key(1, 2));   // delete a committed entry
    cs.put(egress(1, 3, 3));
    cs.put(egress(1, 3, 3));    // same entry twice: a no-op
    cs.del(egress_key(1, 99));  // absent
    for (uint32_t i = 0; i < filler; ++i) cs.put(egress(2, i, i));
    TableDigest expected = shadow.digest_after(cs.ops);
    Level2Shadow applied = shadow;
    std::vector<Level2Entry> puts;
    std::vector<EntryKey> dels;
    applied.apply(cs.ops, 2, &puts, &dels);
    CHECK(expected == applied.digest());
    CHECK(applied.entries().size() == 2 + filler);
    CHECK(puts.size() == 2 + filler);
    CHECK(dels.size() == 2);  // (1,2) and the absent (1,99)
    // And the RNIC table ends with the same digest.
    Level2Table t({1024});
    REQUIRE(t.begin() == tandem::rnic::TableStatus::kOk);
    for (auto& e : shadow.entries()) REQUIRE(t.put(e.second) == tandem::rnic::TableStatus::kOk);
    REQUIRE(t.commit() == tandem::rnic::TableStatus::kOk);
    REQUIRE(t.begin() == tandem::rnic::TableStatus::kOk);
    for (auto& op : cs.ops)
      REQUIRE((op.del ? t.del(op.entry.key) : t.put(op.entry)) == tandem::rnic::TableStatus::kOk);
    REQUIRE(t.commit() == tandem::rnic::TableStatus::kOk);
    CHECK(t.digest() == expected);
  }
}

TEST_CASE("an agent restarted from its store reconciles by digest instead of replaying") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("tandem-sm-store-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string db = (dir / "agent.db").string();
  RnicSide r;
  {
    Store store(db);
    Link l(r);
    l.start();
    for (uint64_t t = 1; t <= 3; ++t) {
      l.agent.submit(puts(t, t * 100, 10));
      ChangeSet del;
      del.tag = 10 + t;
      del.del(egress_key(1, t * 100));
      l.agent.submit(del);
      REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
      // What the agent does with each outcome: persist it before moving on.
      for (const TxnOutcome& o : l.agent.take_outcomes())
        if (o.committed)
          store.save_level2("rnic0", o.version, l.agent.shadow().digest().value, o.net_puts, o.net_dels, false);
    }
  }  // the agent process ends; the RNIC keeps forwarding
  Store store(db);
  Level2Snapshot snap = store.load_level2("rnic0");
  Level2Shadow shadow;
  shadow.reset(snap.version, snap.entries);
  CHECK(shadow.digest().value == snap.digest);
  CHECK(shadow.entries().size() == 27);
  AgentChannelConfig cfg;
  cfg.agent_instance = 2;
  Link l2(r, cfg, shadow);
  l2.start();
  CHECK(l2.agent.stats().replays == 0);
  CHECK(l2.agent.stats().reconcile_skips == 1);
  l2.require_in_sync();
  fs::remove_all(dir);
}

TEST_CASE("entries replaced over and over are recycled, so a small table never fills") {
  RnicSide r(8);  // pool of 16 records: without reclamation this fails by the 3rd txn
  Link l(r);
  l.start();
  for (uint32_t round = 1; round <= 50; ++round) {
    l.agent.submit(puts(round, 0, 8, round));
    REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  }
  for (const TxnOutcome& o : l.agent.take_outcomes()) CHECK(o.committed);
  CHECK(r.table->stats().full_pool == 0);
  CHECK(r.lookup(egress_key(1, 3))->egress.underlay_dst_ip == 50);
  l.require_in_sync();
}

TEST_CASE("a replaced mapping reaches the RNIC as one transaction: egress overwritten, ingress moved, never absent") {
  auto ip = [](const char* x) { return *parse_ipv4(x); };
  auto mac = [](const char* x) { return *parse_mac(x); };
  Level1State st;
  REQUIRE(st.apply(AddTenant{100, "blue"}).ok());
  REQUIRE(st.apply(AddRnic{"rnic0", ip("10.0.0.1"), mac("02:00:00:00:00:01"), 0xC000, 4}).ok());
  REQUIRE(st.apply(AddVnic{1, 100, "rnic0", ip("192.168.0.1"), mac("02:aa:00:00:00:01")}).ok());
  REQUIRE(st.apply(AddVnic{2, 100, "rnic0", ip("192.168.0.2"), mac("02:aa:00:00:00:02")}).ok());
  REQUIRE(st.apply(AddMapping{100, ip("192.168.1.9"), ip("10.0.1.7"), mac("02:00:00:00:01:00"), "far0"}).ok());
  REQUIRE(st.apply(AddMapping{100, ip("192.168.1.8"), ip("10.0.1.6"), mac("02:00:00:00:01:00"), "far0"}).ok());
  RnicSide r;
  Link l(r);
  l.start();
  // vNIC 1 talks to .9 and .8; vNIC 2 to .9 too (its ingress key is then ambiguous: deleted).
  uint64_t tag = 1;
  for (auto [vnic, dst] : {std::pair{1u, "192.168.1.9"}, {1u, "192.168.1.8"}, {2u, "192.168.1.9"}}) {
    std::string target;
    ResolveStatus why;
    auto cs = change_set_for_miss(st, egress_key(vnic, ip(dst)), tag++, &target, &why, &l.agent.shadow());
    REQUIRE(cs);
    l.agent.submit(std::move(*cs));
    REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  }
  EntryKey eg1 = egress_key(1, ip("192.168.1.9")), eg2 = egress_key(2, ip("192.168.1.9"));
  REQUIRE(r.lookup(eg1) != nullptr);
  REQUIRE(r.lookup(eg2) != nullptr);
  CHECK(r.lookup(ingress_key_vni(ip("10.0.1.7"), 100)) == nullptr);  // ambiguous
  REQUIRE(r.lookup(ingress_key_vni(ip("10.0.1.6"), 100)) != nullptr);

  // The VM behind .9 moves; .8 moves onto .9's old host.
  REQUIRE(st.apply(AddMapping{100, ip("192.168.1.9"), ip("10.0.3.3"), mac("02:00:00:00:03:00"), "far3", true}).ok());
  REQUIRE(st.apply(AddMapping{100, ip("192.168.1.8"), ip("10.0.1.7"), mac("02:00:00:00:01:00"), "far0", true}).ok());
  std::vector<MappingKey> keys{{100, ip("192.168.1.9")}, {100, ip("192.168.1.8")}};
  ChangeSet cs = changes_for_replaced_mappings(st, l.agent.shadow(), "rnic0", keys);
  cs.tag = tag++;
  CHECK(changes_for_replaced_mappings(st, l.agent.shadow(), "rnic1", keys).ops.size() == 4);  // not rnic1's: DELs
  uint64_t v0 = r.table->version(), committed0 = l.agent.stats().txns_committed;
  l.agent.submit(std::move(cs));
  for (int i = 0; i < 2000 && !l.active_and_idle(); ++i) {
    l.step();
    REQUIRE(r.lookup(eg1) != nullptr);  // every version the RNIC forwards on has the entry
    REQUIRE(r.lookup(eg2) != nullptr);
  }
  REQUIRE(l.active_and_idle());
  CHECK(l.agent.stats().txns_committed == committed0 + 1);
  CHECK(r.table->version() == v0 + 1);
  CHECK(r.lookup(eg1)->egress.underlay_dst_ip == ip("10.0.3.3"));
  CHECK(r.lookup(eg1)->egress.dst_mac == mac("02:00:00:00:03:00"));
  CHECK(r.lookup(eg2)->egress.underlay_dst_ip == ip("10.0.3.3"));
  CHECK(r.lookup(egress_key(1, ip("192.168.1.8")))->egress.underlay_dst_ip == ip("10.0.1.7"));
  CHECK(r.lookup(ingress_key_vni(ip("10.0.1.6"), 100)) == nullptr);  // moved away with .8
  const Level2Entry* in8 = r.lookup(ingress_key_vni(ip("10.0.1.7"), 100));
  REQUIRE(in8 != nullptr);  // .8 now arrives from 10.0.1.7, for vNIC 1 only
  CHECK(in8->ingress.overlay_src_ip == ip("192.168.1.8"));
  CHECK(in8->ingress.local_vnic_id == 1);
  CHECK(r.lookup(ingress_key_vni(ip("10.0.3.3"), 100)) == nullptr);  // .9's: still two receivers
  l.require_in_sync();
  // Replacing with the same values installs nothing.
  CHECK(changes_for_replaced_mappings(st, l.agent.shadow(), "rnic0", keys).ops.empty());
}

// --- vNIC entries across protocol versions -----------------------------------

namespace {
Level2Entry vnic(uint32_t id, uint32_t ip) {
  VnicAction a;
  a.vnic_id = id;
  a.overlay_ip = ip;
  a.vni = 100;
  a.overlay_mac = {2, 0, 0, 0, 1, static_cast<uint8_t>(id)};
  return make_vnic_entry(a);
}
ChangeSet with_vnics(uint64_t tag) {
  ChangeSet cs = puts(tag, 1, 2);
  cs.put(vnic(1, 0xC0A80701));
  cs.put(vnic(4, 0xC0A80704));
  return cs;
}
}  // namespace

TEST_CASE("a v3 RNIC learns its vNICs from committed transactions, and loses one deleted by the agent") {
  RnicSide r;
  Link l(r);
  l.start();
  CHECK(r.ch->vnics_from_agent());
  l.agent.submit(with_vnics(1));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  l.require_in_sync();
  const auto& list = r.ch->vnics();
  REQUIRE(list.committed().size() == 2);
  CHECK(list.find(1)->overlay_ip == 0xC0A80701);
  CHECK(list.version() == r.table->version());
  uint64_t gen = list.generation();
  ChangeSet del;
  del.tag = 2;
  del.del(vnic_key(4));
  del.del(egress_key(1, 1));
  l.agent.submit(del);
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  CHECK(list.find(4) == nullptr);
  CHECK(list.find(1) != nullptr);
  CHECK(list.generation() > gen);
  l.require_in_sync();
}

TEST_CASE("a new agent withholds vNIC entries from an RNIC that negotiated v2, which keeps its own vNICs") {
  RnicSide r(1024, VersionRange{1, 2});  // the previous release of the RNIC
  Link l(r);
  l.start();
  CHECK(l.agent.version() == 2);
  l.agent.submit(with_vnics(1));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  for (const TxnOutcome& o : l.agent.take_outcomes()) CHECK(o.committed);
  CHECK(l.agent.stats().vnic_ops_withheld == 2);
  CHECK(l.agent.stats().txns_aborted == 0);
  CHECK(r.lookup(vnic_key(1)) == nullptr);
  CHECK(r.lookup(egress_key(1, 1)) != nullptr);  // the flows went through
  CHECK(l.agent.shadow().find(vnic_key(1)) == nullptr);
  CHECK_FALSE(r.ch->vnics_from_agent());
  CHECK(r.ch->vnics().committed().empty());
  l.require_in_sync();
}

TEST_CASE("an agent of the previous release meets a new RNIC at v2; the RNIC keeps its own vNICs") {
  RnicSide r;
  AgentChannelConfig old;
  old.versions = VersionRange{1, 2};
  Link l(r, old);
  l.start();
  CHECK(l.agent.version() == 2);
  CHECK(r.ch->negotiated_version() == 2);
  CHECK_FALSE(r.ch->vnics_from_agent());
  l.agent.submit(puts(1, 1, 3));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  l.require_in_sync();
  CHECK(r.ch->vnics().committed().empty());
}

TEST_CASE("an RNIC at v2 refuses a vNIC entry sent anyway, as a bad entry, and keeps its table") {
  RnicSide r(1024, VersionRange{1, 2});
  RnicChannel& ch = *r.ch;
  uint32_t seq = 0;
  auto send = [&](auto m) {
    m.hdr.seq = seq++;
    ch.on_command(to_raw(m), 0);
  };
  HelloMsg h;
  send(h);
  REQUIRE(ch.negotiated_version() == 2);
  BeginMsg b;
  b.txn = 7;
  send(b);
  PutMsg p;
  p.txn = 7;
  p.entry = vnic(1, 0xC0A80701);
  send(p);
  RawMessage ev;
  bool aborted = false;
  while (ch.pop_event(ev))
    if (ev.type() == MessageType::kAborted) aborted = as<AbortedMsg>(ev).reason == AbortReason::kBadEntry;
  CHECK(aborted);
  CHECK(ch.stats().vnic_entries_refused == 1);
  CHECK(r.table->version() == 0);
  CHECK(ch.vnics().committed().empty());
}

TEST_CASE("a shadow holding vNIC entries is replayed to a v2 RNIC without them, and reconciled when a v3 RNIC returns") {
  // The store of a v3 agent: flows and vNIC entries.
  Level2Shadow stored;
  stored.apply(with_vnics(1).ops, 5);
  RnicSide r(1024, VersionRange{1, 2});
  Link l(r, {}, stored);
  l.start();
  CHECK(l.agent.stats().replays == 1);
  CHECK(l.agent.shadow().find(vnic_key(1)) == nullptr);  // forgotten: that RNIC cannot hold it
  CHECK(l.agent.shadow().entries().size() == 2);
  l.require_in_sync();
  uint64_t s2 = l.agent.session();
  // The worker is upgraded: a v3 RNIC restarts on the same channel.
  r.versions = kOurVersions;
  r.restart();
  REQUIRE(l.run_until([&] { return l.agent.session() > s2 && l.active_and_idle(); }));
  CHECK(l.agent.version() == kProtocolVersionCurrent);
  CHECK(r.ch->vnics_from_agent());
  CHECK(r.ch->vnics().committed().empty());  // the replay carried what the shadow had
  // What the agent loop does on a new v3 session: make the vNIC entries level 1's.
  Level1State st;
  REQUIRE(st.apply(AddTenant{100, "blue"}).ok());
  REQUIRE(st.apply(AddRnic{"rnic0", 0x0A000001, {2, 0, 0, 0, 0, 1}, 0xC000, 4}).ok());
  REQUIRE(st.apply(AddVnic{1, 100, "rnic0", 0xC0A80701, {2, 0, 0, 0, 1, 1}}).ok());
  ChangeSet cs = changes_for_vnics(st, l.agent.shadow(), "rnic0");
  REQUIRE(cs.ops.size() == 1);
  cs.tag = 9;
  l.agent.submit(std::move(cs));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  REQUIRE(r.ch->vnics().find(1) != nullptr);
  CHECK(r.ch->vnics().find(1)->overlay_ip == 0xC0A80701);
  CHECK(changes_for_vnics(st, l.agent.shadow(), "rnic0").ops.empty());
  l.require_in_sync();
}

TEST_CASE("a v3 RNIC whose agent goes away keeps the agent's vNICs while headless, and a restarted agent skips the replay") {
  RnicSide r;
  Level2Shadow kept;
  uint64_t t = 0;
  {
    Link l(r);
    l.start();
    l.agent.submit(with_vnics(1));
    REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
    kept = l.agent.shadow();  // what its store holds
    t = l.now;
  }
  AgentChannelConfig cfg;
  cfg.agent_instance = 2;
  Link l2(r, cfg, kept);
  l2.now = t;
  REQUIRE(l2.run_until([&] { return r.ch->state() == RnicChannelState::kHeadless; }, 10000));
  CHECK(r.ch->vnics_from_agent());
  CHECK(r.ch->vnics().committed().size() == 2);
  l2.start();
  CHECK(l2.agent.stats().replays == 0);
  CHECK(l2.agent.stats().reconcile_skips == 1);
  CHECK(r.ch->vnics().committed().size() == 2);
  l2.require_in_sync();
}

TEST_CASE("rings replaced under a live channel: the txn in flight is requeued and commits after the new HELLO") {
  RnicSide r;
  Link l(r);
  l.start();
  l.agent.submit(puts(1, 1, 3));
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  l.agent.submit(puts(2, 100, 2));
  l.step();  // BEGIN .. COMMIT of tag 2 are on the old ring
  REQUIRE(l.agent.txn_in_flight());
  // The agent found the old file scribbled on: both ends drop the old rings.
  l.cmd_ring.clear();
  l.evt_ring.clear();
  l.agent.transport_reset(l.now, "test");
  r.ch->rings_replaced();
  r.bar = std::make_unique<Bar>();  // the new file's BAR starts empty
  CHECK(l.agent.state() == ChannelState::kDown);
  CHECK(l.agent.stats().transport_resets == 1);
  CHECK(r.ch->state() == RnicChannelState::kAwaitHello);
  CHECK(r.lookup(egress_key(1, 1)) != nullptr);  // the committed table stays in use
  REQUIRE(l.run_until([&] { return l.active_and_idle(); }));
  CHECK(r.lookup(egress_key(1, 100)) != nullptr);
  CHECK(l.agent.stats().replays == 0);  // digests agreed: no replay
  l.require_in_sync();
}
