// The agent core (dpu/agent) driven over fake channel files with fake
// workers on their other ends (fake_channel.h), changes through ControlApi
// as tandemctl sends them: punts resolved and installed, isolation and
// quotas refused and counted, fair service per tenant, committed
// resolutions undone when level 1 moved, a scribbling worker reset, a
// resolution pending across a worker restart or a HEADLESS reset, a punt of
// another RNIC's vNIC refused.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "dpu/agent/agent_core.h"
#include "dpu/model/address.h"
#include "tests/unit/dpu/fake_channel.h"
#include "tests/unit/dpu/sync_counting_vfs.h"

using namespace tandem::dpu;
using tandem::common::EntryKey;
using tandem::common::egress_key;
using tandem::test::FakeOpener;
using tandem::test::FakeWorker;
using nlohmann::json;

namespace {

constexpr uint64_t kMs = 1'000'000;

uint32_t ip(const char* s) { return *parse_ipv4(s); }

struct TempDb {
  std::string path = "/tmp/tandem-agent-core-test-" + std::to_string(getpid()) + ".sqlite";
  TempDb() { clean(); }
  ~TempDb() { clean(); }
  void clean() {
    for (const char* s : {"", "-wal", "-shm"}) std::remove((path + s).c_str());
  }
};

// tandem-dpu without its I/O: level 1, the store, the core, the API, two
// RNICs A and B with a fake worker each, and the time.
struct Harness {
  TempDb db;
  Level1State state;
  Store store{db.path};
  FakeOpener dir;
  std::vector<std::string> log;
  AgentCore core;
  ControlApi api{state, store, &core};
  uint64_t (*a_hash)(const EntryKey&) noexcept;  // A's table hash (null: keyed)
  FakeWorker a{dir, "A", 4096, 7, a_hash}, b{dir, "B", 4096, 8};
  uint64_t now = kMs;

  static AgentCoreConfig config(std::vector<std::string>* log, uint32_t punts_per_round) {
    AgentCoreConfig c;
    c.channel.agent_instance = 99;
    c.channel.pipeline = true;
    c.punts_per_round = punts_per_round;
    c.log = [log](const std::string& s) { log->push_back(s); };
    return c;
  }
  explicit Harness(uint32_t punts_per_round = 64, uint64_t (*a_table_hash)(const EntryKey&) noexcept = nullptr)
      : core(state, store, config(&log, punts_per_round), dir), a_hash(a_table_hash) {
    ok({{"cmd", "rnic.add"}, {"name", "A"}, {"underlay_ip", "10.0.0.1"}, {"mac", "02:00:00:00:00:01"}});
    ok({{"cmd", "rnic.add"}, {"name", "B"}, {"underlay_ip", "10.0.0.2"}, {"mac", "02:00:00:00:00:02"}});
    ok({{"cmd", "tenant.add"}, {"vni", 100}, {"name", "red"}});
    ok({{"cmd", "tenant.add"}, {"vni", 200}, {"name", "blue"}});
    vnic(1, 100, "A", "192.168.7.1");
    vnic(2, 100, "B", "192.168.7.2");
    vnic(3, 200, "A", "192.168.8.1");
    vnic(4, 200, "B", "192.168.8.2");
    REQUIRE(run_until([&] { return active("A") && active("B"); }));
  }
  json ok(const json& req) {
    json r = api.handle(req);
    INFO(req.dump() << " -> " << r.dump());
    REQUIRE(r["ok"] == true);
    return r;
  }
  void vnic(uint32_t id, uint32_t vni, const char* rnic, const char* addr) {
    ok({{"cmd", "vnic.add"}, {"id", id}, {"vni", vni}, {"rnic", rnic}, {"overlay_ip", addr},
        {"overlay_mac", "02:aa:00:00:00:0" + std::to_string(id)}});
  }
  void mapping(uint32_t vni, const char* overlay, const char* underlay, const char* rnic) {
    ok({{"cmd", "mapping.add"}, {"vni", vni}, {"overlay_ip", overlay}, {"underlay_ip", underlay},
        {"next_hop_mac", "02:00:00:00:00:09"}, {"rnic", rnic}});
  }
  void step() {
    now += kMs;
    a.step(now);
    b.step(now);
    core.service(now);
  }
  template <class F>
  bool run_until(F done, int max_steps = 5000) {
    for (int i = 0; i < max_steps; ++i) {
      if (done()) return true;
      step();
    }
    return done();
  }
  void run(int steps) {
    for (int i = 0; i < steps; ++i) step();
  }
  bool active(const char* n) const {
    const AgentLink* l = core.link(n);
    return l && l->ch->state() == ChannelState::kActive;
  }
  const AgentLink& link(const char* n) const { return *core.link(n); }
  bool idle(const char* n) const {
    const AgentLink& l = link(n);
    return l.ch->state() == ChannelState::kActive && !l.ch->txn_in_flight() && l.ch->queued_change_sets() == 0 &&
           l.fair.empty();
  }
  // The worker's committed table is the agent's shadow.
  bool in_sync(const char* n, const FakeWorker& w) const {
    const AgentLink& l = link(n);
    return w.table.version() == l.ch->shadow().version() && w.table.digest() == l.ch->shadow().digest();
  }
};

}  // namespace

TEST_CASE("agent core: a punted miss is resolved from level 1, installed on the worker and stored") {
  Harness h;
  h.mapping(100, "192.168.7.9", "10.0.0.9", "B");
  const EntryKey k = egress_key(1, ip("192.168.7.9"));
  CHECK_FALSE(h.a.has(k));
  h.a.punt(k);
  REQUIRE(h.run_until([&] { return h.a.has(k) && h.idle("A"); }));
  CHECK(h.link("A").punts.resolved == 1);
  CHECK(h.in_sync("A", h.a));
  // Durable: a restarted agent loads the same shadow.
  Level2Snapshot saved = h.store.load_level2("A");
  CHECK(saved.version == h.a.table.version());
}

TEST_CASE("agent core: a punt toward another tenant is denied by isolation and counted") {
  Harness h;
  const EntryKey k = egress_key(1, ip("192.168.8.2"));  // red's vNIC toward blue's address
  h.a.punt(k);
  h.run(20);
  CHECK_FALSE(h.a.has(k));
  CHECK(h.link("A").punts.denied == 1);
  CHECK(h.link("A").punts.refused == 1);
}

TEST_CASE("agent core: a tenant over its flow quota is refused and counted, another tenant is served") {
  Harness h;
  h.ok({{"cmd", "tenant.quota"}, {"vni", 100}, {"flows", 3}});
  for (int i = 0; i < 6; ++i) {
    const std::string addr = "192.168.7." + std::to_string(20 + i);
    h.mapping(100, addr.c_str(), ("10.0.1." + std::to_string(20 + i)).c_str(), "B");
  }
  h.mapping(200, "192.168.8.20", "10.0.2.20", "B");
  for (int i = 0; i < 6; ++i) h.a.punt(egress_key(1, ip(("192.168.7." + std::to_string(20 + i)).c_str())));
  const EntryKey blue = egress_key(3, ip("192.168.8.20"));
  h.a.punt(blue);
  REQUIRE(h.run_until([&] { return h.a.has(blue) && h.idle("A"); }));
  int red = 0;
  for (int i = 0; i < 6; ++i) red += h.a.has(egress_key(1, ip(("192.168.7." + std::to_string(20 + i)).c_str())));
  CHECK(red == 3);
  CHECK(h.link("A").punts.over_quota == 3);
  CHECK(h.link("A").fair.stats().at(100).over_quota == 3);
}

TEST_CASE("agent core: punts are served one per tenant per round, so a storm waits behind itself") {
  Harness h(/*punts_per_round=*/2);
  for (int i = 0; i < 40; ++i)
    h.mapping(100, ("192.168.7." + std::to_string(100 + i)).c_str(), ("10.0.1." + std::to_string(100 + i)).c_str(), "B");
  h.mapping(200, "192.168.8.30", "10.0.2.30", "B");
  for (int i = 0; i < 40; ++i) h.a.punt(egress_key(1, ip(("192.168.7." + std::to_string(100 + i)).c_str())));
  const EntryKey blue = egress_key(3, ip("192.168.8.30"));
  h.a.punt(blue);  // last in the ring
  // The worker's step delivers all 41 punts; two service steps serve red, blue, red, ...
  h.now += kMs;
  h.a.step(h.now);
  h.core.service(h.now);
  const AgentLink& l = h.link("A");
  CHECK(l.punts.received == 2);
  CHECK(l.pending.contains(blue));
  CHECK(l.fair.size() == 39);
  REQUIRE(h.run_until([&] { return h.idle("A"); }));
  CHECK(l.punts.resolved == 41);
}

namespace {

// A's table as a hostile tenant would make it with a leaked secret: every
// egress entry of red's vNIC 1 hashes to the same two buckets (16 slots);
// everything else scatters.
uint64_t red_collides(const EntryKey& k) noexcept {
  if (k.kind == tandem::common::EntryKind::kEgress && k.word0 == 1) return 0x0123'4567'89AB'CDEFull;
  return tandem::rnic::unkeyed_hash(k);
}

std::string addr(const char* net, int i) { return std::string(net) + std::to_string(i); }

}  // namespace

TEST_CASE("agent core: one tenant's entries that overflow a bucket do not abort another tenant's resolutions merged with them") {
  Harness h(64, red_collides);
  constexpr int kRed = 24, kBlue = 20;  // red: 8 more than its two buckets hold
  for (int i = 0; i < kRed; ++i)
    h.mapping(100, addr("192.168.7.", 100 + i).c_str(), addr("10.0.1.", 100 + i).c_str(), "B");
  for (int i = 0; i < kBlue; ++i)
    h.mapping(200, addr("192.168.8.", 100 + i).c_str(), addr("10.0.2.", 100 + i).c_str(), "B");
  auto red = [](int i) { return egress_key(1, ip(addr("192.168.7.", 100 + i).c_str())); };
  auto blue = [](int i) { return egress_key(3, ip(addr("192.168.8.", 100 + i).c_str())); };
  // Both tenants miss at once: the agent takes all 44 punts in one step and
  // merges their resolutions into one transaction, which the table refuses.
  for (int i = 0; i < kRed; ++i) {
    h.a.punt(red(i));
    if (i < kBlue) h.a.punt(blue(i));
  }
  const uint64_t committed0 = h.link("A").ch->stats().txns_committed;
  REQUIRE(h.run_until([&] {
    const AgentLink& l = h.link("A");
    return l.punts.received == kRed + kBlue && h.idle("A") && l.pending.size() == 0;
  }));
  int blue_in = 0, red_in = 0;
  for (int i = 0; i < kBlue; ++i) blue_in += h.a.has(blue(i));
  for (int i = 0; i < kRed; ++i) red_in += h.a.has(red(i));
  // Every one of blue's resolutions is installed, once, on the first punt.
  CHECK(blue_in == kBlue);
  CHECK(h.link("A").punts.resolved == kRed + kBlue);
  // Red's that fit are installed too; the rest fail, charged to red alone.
  CHECK(red_in <= 16);
  CHECK(red_in >= 8);
  const AgentLink& l = h.link("A");
  CHECK(l.fair.stats().at(100).install_refused == static_cast<uint64_t>(kRed - red_in));
  CHECK(l.fair.stats().at(200).install_refused == 0);
  CHECK(l.punts.install_refused == static_cast<uint64_t>(kRed - red_in));
  // The refused merge was split (per tenant, then halves), within its bound.
  const AgentChannelStats s = l.ch->stats();
  CHECK(s.refusals_split >= 1);
  CHECK(s.change_sets_refused == static_cast<uint64_t>(kRed - red_in));
  CHECK(s.split_txns <= 2 * (kRed + kBlue) - 2);
  CHECK(s.txns_committed - committed0 <= s.split_txns);
  CHECK(h.in_sync("A", h.a));
  // tandemctl rnic show and telemetry carry the per-tenant counter.
  json r = h.api.handle({{"cmd", "rnic.show"}, {"name", "A"}});
  CHECK(r["rnic"]["channel"]["punts"]["tenants"]["100"]["install_refused"] == kRed - red_in);
  CHECK(r["rnic"]["channel"]["punts"]["tenants"]["200"]["install_refused"] == 0);
  CHECK(h.core.snapshot()["A"].tenants.at(100).install_refused == static_cast<uint64_t>(kRed - red_in));
  // Merging is untouched when nothing is refused: blue's next 20 flows go in one txn.
  for (int i = 0; i < kBlue; ++i) {
    const std::string a = addr("192.168.8.", 150 + i);
    h.mapping(200, a.c_str(), addr("10.0.2.", 150 + i).c_str(), "B");
  }
  const uint64_t before = l.ch->stats().txns_committed;
  auto more = [](int i) { return egress_key(3, ip(addr("192.168.8.", 150 + i).c_str())); };
  for (int i = 0; i < kBlue; ++i) h.a.punt(more(i));
  REQUIRE(h.run_until([&] {
    for (int i = 0; i < kBlue; ++i)
      if (!h.a.has(more(i))) return false;
    return h.idle("A");
  }));
  CHECK(l.ch->stats().txns_committed - before == 1);
  CHECK(l.ch->stats().refusals_split == s.refusals_split);
}

TEST_CASE("agent core: a resolution committed after its mapping was withdrawn is undone") {
  Harness h;
  h.mapping(100, "192.168.7.50", "10.0.0.50", "B");
  const EntryKey k = egress_key(1, ip("192.168.7.50"));
  h.a.punt(k);
  // One step: the punt reaches the agent and is resolved, the txn not yet answered.
  h.now += kMs;
  h.a.step(h.now);
  h.core.service(h.now);
  REQUIRE(h.link("A").pending.contains(k));
  h.ok({{"cmd", "mapping.del"}, {"vni", 100}, {"overlay_ip", "192.168.7.50"}});
  REQUIRE(h.run_until([&] { return h.idle("A") && !h.link("A").pending.contains(k); }));
  h.run(10);
  CHECK_FALSE(h.a.has(k));
  CHECK(h.in_sync("A", h.a));
}

TEST_CASE("agent core: a worker that scribbles on its channel gets its link reset; it re-attaches, the other is untouched") {
  Harness h;
  h.mapping(100, "192.168.7.60", "10.0.0.60", "B");
  const EntryKey k = egress_key(1, ip("192.168.7.60"));
  h.a.punt(k);
  REQUIRE(h.run_until([&] { return h.a.has(k) && h.idle("A"); }));
  const uint64_t b_resets = h.link("B").ch->stats().resets;
  // The worker writes an impossible producer index into its event ring.
  auto& f = *h.dir.files["A"];
  const uint32_t bad = 0x40000000;
  std::memcpy(f.mem + f.l.evt_ring_offset + f.rl.prod_tail, &bad, 4);
  h.step();
  CHECK(h.link("A").violations == 1);
  CHECK(h.link("A").last_violation == "event ring: producer index impossible");
  CHECK(f.retired());
  CHECK(h.link("A").file == nullptr);
  // After the back-off a new file; the worker maps it and the channel comes back by digest.
  REQUIRE(h.run_until([&] { return h.active("A") && h.idle("A"); }));
  CHECK(h.link("A").files_replaced == 1);
  CHECK(h.a.reattached == 1);
  CHECK(h.a.has(k));
  CHECK(h.in_sync("A", h.a));
  CHECK(h.link("A").ch->stats().transport_resets == 1);
  CHECK(h.link("A").ch->stats().replays == 0);
  CHECK(h.link("B").ch->stats().resets == b_resets);
  CHECK(h.link("B").violations == 0);
  // It goes on: the back-off doubles.
  auto& f2 = *h.dir.files["A"];
  f2.mem[100] ^= 0xFF;  // the header
  h.step();
  CHECK(h.link("A").violations == 2);
  CHECK(h.link("A").backoff_ns == 2 * AgentCore::kFirstBackoffNs);
  // Nothing it wrote moved the agent: new flows still install after it behaves.
  REQUIRE(h.run_until([&] { return h.active("A") && h.idle("A"); }));
  h.mapping(100, "192.168.7.61", "10.0.0.61", "B");
  const EntryKey k2 = egress_key(1, ip("192.168.7.61"));
  h.a.punt(k2);
  REQUIRE(h.run_until([&] { return h.a.has(k2) && h.idle("A"); }));
}

TEST_CASE("agent core: rnic show reports the channel, its violations and the punts per tenant") {
  Harness h;
  h.mapping(200, "192.168.8.70", "10.0.0.70", "B");
  h.a.punt(egress_key(3, ip("192.168.8.70")));
  REQUIRE(h.run_until([&] { return h.idle("A") && h.link("A").punts.resolved == 1; }));
  json r = h.api.handle({{"cmd", "rnic.show"}, {"name", "A"}});
  REQUIRE(r["ok"] == true);
  const json& c = r["rnic"]["channel"];
  CHECK(c["state"] == "ACTIVE");
  CHECK(c["file"] == "/fake/tandem-A.chan");
  CHECK(c["channel"]["violations"] == 0);
  CHECK(c["punts"]["tenants"]["200"]["served"] == 1);
  CHECK(c["bar"]["state"] == "active");
  auto snap = h.core.snapshot();
  CHECK(snap["A"].state == "ACTIVE");
  CHECK(snap["A"].punts == 1);
}

TEST_CASE("agent core: a punt naming another RNIC's vNIC is refused and counted; neither table gets an entry") {
  Harness h;
  h.mapping(100, "192.168.7.80", "10.0.0.80", "B");
  const EntryKey foreign = egress_key(2, ip("192.168.7.80"));  // vNIC 2 lives on B; A punts it
  for (int i = 0; i < 3; ++i) h.a.punt(foreign);  // repeats while the first would be pending
  REQUIRE(h.run_until([&] { return h.idle("A") && h.idle("B"); }));
  CHECK(h.link("A").punts.foreign == 3);
  CHECK(h.link("A").punts.refused == 3);
  CHECK(h.link("A").punts.resolved == 0);
  CHECK_FALSE(h.a.has(foreign));
  CHECK_FALSE(h.b.has(foreign));
  // Nothing is charged to the tenant on B, nor left pending there.
  CHECK(h.link("B").pending.empty());
  for (const auto& [vni, n] : h.link("B").inflight) CHECK(n == 0);
  // B's own punt of the same key is B's to resolve.
  h.b.punt(foreign);
  REQUIRE(h.run_until([&] { return h.b.has(foreign) && h.idle("B"); }));
  CHECK(h.link("B").punts.resolved == 1);
}

namespace {
// One step with `w` as RNIC A's worker (a restarted one) while the agent runs or not.
void step_with(Harness& h, FakeWorker& w, bool agent = true) {
  h.now += kMs;
  w.step(h.now);
  h.b.step(h.now);
  if (agent) h.core.service(h.now);
}
}  // namespace

TEST_CASE("agent core: a punt pending when its worker restarts is installed for the new worker; its repeats wait for it") {
  Harness h;
  h.mapping(100, "192.168.7.90", "10.0.0.90", "B");
  const EntryKey k = egress_key(1, ip("192.168.7.90"));
  h.a.punt(k);
  h.now += kMs;
  h.a.step(h.now);
  h.core.service(h.now);  // resolved, its txn sent, not answered
  REQUIRE(h.link("A").pending.contains(k));
  h.a.alive = false;  // the worker dies; another starts on the same channel file (empty table)
  FakeWorker a2{h.dir, "A", 4096, 77};
  step_with(h, a2);
  a2.punt(k);  // its QP misses again at once
  REQUIRE(h.run_until([&] { step_with(h, a2); return a2.has(k) && h.idle("A"); }));
  CHECK(h.link("A").pending.empty());
  CHECK(h.link("A").punts.resolved == 1);  // the repeat found the first resolution pending
  CHECK(h.link("A").punts.duplicate == 1);
  CHECK(h.in_sync("A", a2));
}

TEST_CASE("agent core: a punt pending across a silent agent (the worker goes HEADLESS) and a COMMITTED the worker holds "
          "for its other lcores is installed after the reset") {
  Harness h;
  h.mapping(100, "192.168.7.91", "10.0.0.91", "B");
  const EntryKey k = egress_key(1, ip("192.168.7.91"));
  // The worker's other lcores have not seen anything newer than now: COMMITTED
  // and HELLO_ACK naming a newer version wait (rnic/port/commit_fanout.h).
  h.a.visible = h.a.table.version();
  h.a.punt(k);
  h.now += kMs;
  h.a.step(h.now);
  h.core.service(h.now);
  REQUIRE(h.link("A").pending.contains(k));
  // The agent's loop is starved for 4 s: past the worker's 3 s, which goes HEADLESS.
  for (int i = 0; i < 4000; ++i) step_with(h, h.a, false);
  CHECK(h.a.ch.state() == tandem::common::RnicChannelState::kHeadless);
  // The agent is back; the lagging lcore catches up a second later.
  for (int i = 0; i < 1000; ++i) {
    step_with(h, h.a);
    if (i % 100 == 0) h.a.punt(k);
  }
  h.a.visible = ~uint64_t{0};
  REQUIRE(h.run_until([&] { return h.a.has(k) && h.idle("A") && h.link("A").pending.empty(); }));
  CHECK(h.link("A").ch->stats().resets >= 1);
  CHECK(h.link("A").punts.resolved == 1);
  CHECK(h.in_sync("A", h.a));
}

TEST_CASE("agent core: from a punt to its entry installed and stored, the loop waits for no fsync") {
  // Each COMMITTED is stored in the loop. Synced, a disk busy with other
  // processes' writes held it for seconds (1.8 s measured with 400 MB written
  // beside it), and the punts of every RNIC waited that long: the second
  // application's QPs (on lcore 1 of both workers in dpu_lcores) missed their
  // 3 s route deadline.
  tandem::test::SyncCountingVfs& vfs = tandem::test::SyncCountingVfs::install();
  Harness h;
  h.mapping(100, "192.168.7.95", "10.0.0.95", "B");
  const EntryKey k = egress_key(1, ip("192.168.7.95"));
  const uint64_t before = vfs.syncs();
  h.a.punt(k);
  REQUIRE(h.run_until([&] { return h.a.has(k) && h.idle("A"); }));
  CHECK(vfs.syncs() == before);
  CHECK(h.store.load_level2("A").version == h.a.table.version());
}
