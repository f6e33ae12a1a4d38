// Pipelined transactions (AgentChannelConfig::pipeline): the agent's and the
// RNIC's channel ends back to back, with the command ring delivered a few
// messages at a time so that a second txn is sent before the first commits.
#include <catch2/catch.hpp>

#include <deque>
#include <map>
#include <memory>
#include <random>

#include "dpu/channel/agent_channel.h"
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

Level2Entry egress(uint32_t ip, uint32_t dst) {
  EgressAction a;
  a.underlay_src_ip = 0x0A000001;
  a.underlay_dst_ip = dst;
  a.vni = 100;
  return make_egress_entry(egress_key(1, ip), a);
}

struct Pair {
  Level2Table table;
  RnicChannel rnic;
  AgentChannel agent;
  std::unique_ptr<Bar> bar = std::make_unique<Bar>();
  std::deque<RawMessage> cmd_ring;
  uint64_t now = 0;
  std::size_t per_step = 1u << 30;  // commands the RNIC takes per step
  std::size_t begins_sent = 0;
  std::size_t max_in_flight = 0;  // BEGINs sent and not answered yet, at the end of a step
  std::vector<TxnOutcome> outcomes;

  explicit Pair(uint32_t capacity, bool pipeline = true)
      : table(Level2TableConfig{capacity}), rnic(table, RnicChannelConfig{}), agent("rnic0", config(pipeline)) {}
  static AgentChannelConfig config(bool pipeline) {
    AgentChannelConfig c;
    c.pipeline = pipeline;
    return c;
  }

  void step() {
    now += kMs;
    RawMessage m;
    while (agent.pop_command(m)) {
      begins_sent += m.type() == MessageType::kBegin;
      cmd_ring.push_back(m);
    }
    for (std::size_t i = 0; i < per_step && !cmd_ring.empty(); ++i) {
      rnic.on_command(cmd_ring.front(), now);
      cmd_ring.pop_front();
    }
    rnic.tick(now);
    rnic.publish(*bar);
    while (rnic.pop_event(m)) agent.on_event(m, now);
    agent.on_bar(sample_bar(*bar), now);
    agent.tick(now);
    for (TxnOutcome& o : agent.take_outcomes()) outcomes.push_back(std::move(o));
    // A txn refused at BEGIN behind a failed one never gets an outcome: the
    // tests read this only while none was refused.
    if (begins_sent > outcomes.size()) max_in_flight = std::max(max_in_flight, begins_sent - outcomes.size());
  }
  bool idle() const {
    return agent.state() == ChannelState::kActive && !agent.txn_in_flight() && agent.queued_change_sets() == 0 &&
           cmd_ring.empty();
  }
  void run_until_idle() {
    for (int i = 0; i < 100000 && !idle(); ++i) step();
    REQUIRE(idle());
  }
  void start() {
    agent.start(now);
    run_until_idle();
    outcomes.clear();
  }
  void require_in_sync() {
    REQUIRE(table.version() == agent.shadow().version());
    REQUIRE(table.digest() == agent.shadow().digest());
    for (const auto& [k, e] : agent.shadow().entries()) {
      const Level2Entry* got = table.lookup(table.begin_read(), k);
      REQUIRE(got != nullptr);
      REQUIRE(*got == e);
    }
  }
};

ChangeSet puts(uint64_t tag, uint32_t first, uint32_t n, uint32_t dst) {
  ChangeSet cs;
  cs.tag = tag;
  for (uint32_t i = 0; i < n; ++i) cs.put(egress(first + i, dst));
  return cs;
}

}  // namespace

TEST_CASE("with pipelining a second txn is sent before the first commits, and both commit in order") {
  Pair p(1024);
  p.start();
  const uint64_t v0 = p.table.version();
  p.per_step = 3;  // a slow RNIC: the first txn is still being staged when the second is built
  p.agent.submit(puts(1, 0, 8, 5));
  p.step();
  // The second rewrites some of the first's keys, deletes one and adds new ones:
  // its digest must be computed on top of the first's ops, not the shadow.
  ChangeSet b = puts(2, 4, 8, 6);
  b.del(egress_key(1, 0));
  p.agent.submit(std::move(b));
  p.step();
  p.step();
  CHECK(p.max_in_flight == 2);
  p.run_until_idle();
  REQUIRE(p.outcomes.size() == 2);
  CHECK(p.outcomes[0].committed);
  CHECK(p.outcomes[0].tags == std::vector<uint64_t>{1});
  CHECK(p.outcomes[0].version == v0 + 1);
  CHECK(p.outcomes[1].committed);
  CHECK(p.outcomes[1].tags == std::vector<uint64_t>{2});
  CHECK(p.outcomes[1].version == v0 + 2);
  CHECK(p.agent.stats().txns_aborted == 0);
  p.require_in_sync();
  CHECK(p.table.lookup(p.table.begin_read(), egress_key(1, 0)) == nullptr);
  CHECK(p.table.lookup(p.table.begin_read(), egress_key(1, 5))->egress.underlay_dst_ip == 6);
  CHECK(p.table.lookup(p.table.begin_read(), egress_key(1, 2))->egress.underlay_dst_ip == 5);
}

TEST_CASE("without pipelining the second txn waits for the first's COMMITTED") {
  Pair p(1024, false);
  p.start();
  p.per_step = 3;
  p.agent.submit(puts(1, 0, 8, 5));
  p.step();
  p.agent.submit(puts(2, 4, 8, 6));
  p.step();
  p.run_until_idle();
  CHECK(p.max_in_flight == 1);
  REQUIRE(p.outcomes.size() == 2);
  p.require_in_sync();
}

TEST_CASE("a txn pipelined behind one refused as table full is sent again on the old version, without a replay") {
  Pair p(16);
  p.start();
  const uint64_t replays = p.agent.stats().replays;
  const uint64_t v0 = p.table.version();
  p.per_step = 4;
  p.agent.submit(puts(1, 0, 20, 5));  // more than the table holds
  p.step();
  p.agent.submit(puts(2, 100, 3, 6));
  p.step();
  p.step();
  CHECK(p.max_in_flight == 2);
  p.run_until_idle();
  REQUIRE(p.outcomes.size() == 2);
  CHECK_FALSE(p.outcomes[0].committed);
  CHECK(p.outcomes[0].reason == AbortReason::kTableFull);
  CHECK(p.outcomes[0].tags == std::vector<uint64_t>{1});
  CHECK(p.outcomes[1].committed);
  CHECK(p.outcomes[1].tags == std::vector<uint64_t>{2});
  CHECK(p.outcomes[1].version == v0 + 1);  // on the version the RNIC kept
  CHECK(p.agent.stats().replays == replays);
  CHECK(p.agent.state() == ChannelState::kActive);
  CHECK(p.table.size() == 3);
  p.require_in_sync();
}

TEST_CASE("random pipelined histories: every change set gets one outcome, in order, and the tables agree") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Pair p(48);
    p.start();
    const uint64_t replays = p.agent.stats().replays;
    std::mt19937 rng(seed);
    uint64_t tag = 1, full = 0;
    for (int round = 0; round < 400; ++round) {
      p.per_step = 1 + rng() % 12;
      for (int k = 0, n = rng() % 3; k < n; ++k) {
        ChangeSet cs;
        cs.tag = tag++;
        for (int op = 0, m = 1 + rng() % (rng() % 10 ? 6 : 40); op < m; ++op) {
          uint32_t ip = rng() % 64;
          if (rng() % 4 == 0)
            cs.del(egress_key(1, ip));
          else
            cs.put(egress(ip, 1 + rng() % 3));
        }
        p.agent.submit(std::move(cs));
      }
      p.step();
    }
    p.run_until_idle();
    uint64_t expect = 1, last_version = 0;
    for (const TxnOutcome& o : p.outcomes) {
      for (uint64_t t : o.tags) REQUIRE(t == expect++);  // each change set once, in submission order
      if (o.committed) {
        REQUIRE(o.version > last_version);
        last_version = o.version;
      } else {
        REQUIRE(o.reason == AbortReason::kTableFull);
        ++full;
      }
    }
    REQUIRE(expect == tag);
    CHECK(full > 0);
    CHECK(p.max_in_flight >= 2);
    CHECK(p.agent.stats().replays == replays);  // refusals behind a failed txn cause no replay
    p.require_in_sync();
  }
}

TEST_CASE("random pipelined histories of several owners: a refused merge is split, each change set answered once") {
  // As above with three owners (tenants): a merged txn the table refuses is
  // sent again in pieces (agent_channel.h), so only a change set refused in
  // a txn of its own is reported refused, and each owner's stay in order.
  for (uint32_t seed : {4u, 5u, 6u}) {
    Pair p(48);
    p.start();
    const uint64_t replays = p.agent.stats().replays;
    std::mt19937 rng(seed);
    uint64_t tag = 1;
    std::map<uint64_t, uint32_t> owner_of;
    for (int round = 0; round < 400; ++round) {
      p.per_step = 1 + rng() % 12;
      for (int k = 0, n = rng() % 4; k < n; ++k) {
        ChangeSet cs;
        cs.tag = tag++;
        cs.owner = 100 + rng() % 3;
        owner_of[cs.tag] = cs.owner;
        for (int op = 0, m = 1 + rng() % (rng() % 10 ? 4 : 30); op < m; ++op) {
          uint32_t ip = rng() % 64;
          if (rng() % 4 == 0)
            cs.del(egress_key(1, ip));
          else
            cs.put(egress(ip, 1 + rng() % 3));
        }
        p.agent.submit(std::move(cs));
      }
      p.step();
    }
    p.run_until_idle();
    std::map<uint64_t, int> answered;
    std::map<uint32_t, uint64_t> last_of_owner;
    uint64_t refused = 0;
    for (const TxnOutcome& o : p.outcomes) {
      if (!o.committed) {
        REQUIRE(o.reason == AbortReason::kTableFull);
        REQUIRE(o.tags.size() == 1);  // alone: nobody else's change set fails with it
        ++refused;
      }
      for (uint64_t t : o.tags) {
        REQUIRE(++answered[t] == 1);
        uint64_t& last = last_of_owner[owner_of[t]];
        REQUIRE(t > last);  // an owner's change sets in submission order
        last = t;
      }
    }
    REQUIRE(answered.size() == tag - 1);
    const AgentChannelStats& s = p.agent.stats();
    CHECK(refused > 0);
    CHECK(s.change_sets_refused == refused);
    CHECK(s.refusals_split > 0);
    CHECK(s.split_txns <= 2 * (tag - 1));
    CHECK(s.replays == replays);
    p.require_in_sync();
  }
}
