// Fleet mode, sans-I/O: etcd's keys -> desired state -> the changes that make
// an agent's level 1 its slice of it, applied with the revision in SQLite.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "dpu/fleet/fleet_apply.h"
#include "dpu/model/address.h"

using namespace tandem::dpu;
using namespace tandem::dpu::fleet;
namespace fs = std::filesystem;

namespace {

struct TempDb {
  fs::path dir;
  TempDb() {
    static int n = 0;
    dir = fs::temp_directory_path() / ("tandem-fleet-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::create_directories(dir);
  }
  ~TempDb() { fs::remove_all(dir); }
  std::string path() const { return (dir / "agent.db").string(); }
};

FleetEvent put(const std::string& key, const std::string& value) { return FleetEvent{key, value}; }
FleetEvent del(const std::string& key) { return FleetEvent{key, std::nullopt}; }
uint32_t ip(const char* s) { return *parse_ipv4(s); }

// Two servers, one RNIC each, tenant 100 with a vNIC on each.
std::vector<FleetEvent> two_servers() {
  return {put(tenant_key(100), R"({"name":"red","partition":3})"),
          put(rnic_key("s1", "A"), R"({"underlay_ip":"10.0.0.1","mac":"02:00:00:00:00:01","path_count":4})"),
          put(rnic_key("s2", "B"), R"({"underlay_ip":"10.0.0.2","mac":"02:00:00:00:00:02","path_count":4})"),
          put(vnic_key(1), R"({"vni":100,"server":"s1","rnic":"A","overlay_ip":"192.168.7.1","overlay_mac":"02:00:00:00:01:01"})"),
          put(vnic_key(2), R"({"vni":100,"server":"s2","rnic":"B","overlay_ip":"192.168.7.2","overlay_mac":"02:00:00:00:01:02"})")};
}

struct Agent {
  TempDb db;
  Store store{db.path()};
  Level1State state;
  FleetApplier fleet;
  explicit Agent(const std::string& server) : fleet(server, 0) {}
  std::vector<Applied> apply(bool snapshot, int64_t rev, std::vector<FleetEvent> evs) {
    return fleet.apply(FleetBatch{snapshot, rev, std::move(evs)}, state, store);
  }
};

}  // namespace

TEST_CASE("a tenant written once reaches every server: its own vNICs as vNICs, the others' as derived mappings") {
  Agent s1("s1"), s2("s2");
  s1.apply(true, 10, two_servers());
  s2.apply(true, 10, two_servers());
  for (Agent* a : {&s1, &s2}) {
    REQUIRE(a->state.tenant(100) != nullptr);
    CHECK(a->state.tenant(100)->partition == 3);  // fleet-wide, as etcd says
    CHECK(a->fleet.stats().changes_rejected == 0);
    CHECK(a->fleet.revision() == 10);
  }
  CHECK(s1.state.rnic("A") != nullptr);
  CHECK(s1.state.rnic("B") == nullptr);  // another server's RNIC is not managed here
  CHECK(s1.state.vnic(1) != nullptr);
  CHECK(s1.state.vnic(2) == nullptr);
  auto m = s1.state.mapping(100, ip("192.168.7.2"));
  REQUIRE(m);
  CHECK(m->underlay_ip == ip("10.0.0.2"));
  CHECK(s1.state.rnic_name(m->rnic) == "B");
  CHECK(s2.state.vnic(2) != nullptr);
  CHECK(s2.state.mapping(100, ip("192.168.7.1"))->underlay_ip == ip("10.0.0.1"));
}

TEST_CASE("a moved vNIC: the old server drops it and maps its address to the new place; the new one takes it") {
  Agent s1("s1"), s2("s2");
  s1.apply(true, 10, two_servers());
  s2.apply(true, 10, two_servers());
  auto moved = put(vnic_key(1), R"({"vni":100,"server":"s2","rnic":"B","overlay_ip":"192.168.7.1","overlay_mac":"02:00:00:00:01:01"})");
  auto a1 = s1.apply(false, 11, {moved});
  auto a2 = s2.apply(false, 11, {moved});
  CHECK(s1.state.vnic(1) == nullptr);
  REQUIRE(a1.size() == 2);
  CHECK(std::holds_alternative<RemoveVnic>(a1[0].change));
  REQUIRE(a1[0].removed);  // the agent needs its address to withdraw level-2 entries
  CHECK(std::get<AddMapping>(a1[1].change).underlay_ip == ip("10.0.0.2"));
  CHECK(s1.state.mapping(100, ip("192.168.7.1"))->underlay_ip == ip("10.0.0.2"));
  REQUIRE(a2.size() == 2);
  CHECK(std::holds_alternative<RemoveMapping>(a2[0].change));
  CHECK(std::holds_alternative<AddVnic>(a2[1].change));
  CHECK(s2.state.vnic(1) != nullptr);
  CHECK(s1.fleet.stats().changes_rejected + s2.fleet.stats().changes_rejected == 0);
}

TEST_CASE("an RNIC's new address moves the derived mappings of its vNICs, replaced in place") {
  Agent s1("s1");
  s1.apply(true, 10, two_servers());
  auto a = s1.apply(false, 12,
                    {put(rnic_key("s2", "B"), R"({"underlay_ip":"10.0.0.22","mac":"02:00:00:00:00:02","path_count":4})")});
  REQUIRE(a.size() == 1);
  CHECK(std::get<AddMapping>(a[0].change).replace);
  CHECK(s1.state.mapping(100, ip("192.168.7.2"))->underlay_ip == ip("10.0.0.22"));
}

TEST_CASE("a batch at or below the applied revision is not applied twice") {
  Agent s1("s1");
  s1.apply(true, 10, two_servers());
  auto m = put(mapping_key(100, ip("192.168.7.50")), R"({"underlay_ip":"10.0.0.9","next_hop_mac":"02:00:00:00:00:09","rnic":"X"})");
  CHECK(s1.apply(false, 11, {m}).size() == 1);
  CHECK(s1.apply(false, 11, {m}).empty());
  CHECK(s1.apply(false, 9, {del(mapping_key(100, ip("192.168.7.50")))}).empty());
  CHECK(s1.state.mapping(100, ip("192.168.7.50")).has_value());
  CHECK(s1.fleet.stats().stale_batches == 2);
  CHECK(s1.fleet.stats().changes_rejected == 0);
}

TEST_CASE("a re-read after a compaction applies only the difference") {
  Agent s1("s1");
  std::vector<FleetEvent> evs = two_servers();
  for (int i = 0; i < 50; ++i)
    evs.push_back(put(mapping_key(100, ip("172.16.0.1") + i), R"({"underlay_ip":"10.0.0.9","next_hop_mac":"02:00:00:00:00:09","rnic":"X"})"));
  s1.apply(true, 10, evs);
  const uint64_t before = s1.fleet.stats().changes_applied;
  // While the agent was away: one mapping deleted, one changed, one added, vNIC 2 gone.
  evs.erase(evs.begin() + 5);  // 172.16.0.1
  evs[5] = put(mapping_key(100, ip("172.16.0.2")), R"({"underlay_ip":"10.0.0.8","next_hop_mac":"02:00:00:00:00:08","rnic":"Y"})");
  evs.push_back(put(mapping_key(100, ip("172.16.1.1")), R"({"underlay_ip":"10.0.0.9","next_hop_mac":"02:00:00:00:00:09","rnic":"X"})"));
  evs.erase(evs.begin() + 4);  // vNIC 2
  auto a = s1.apply(true, 90, evs);
  CHECK(a.size() == 4);  // 2 removals, 1 replace, 1 add: nothing else re-applied
  CHECK(s1.fleet.stats().resync_changes == before + 4);
  CHECK_FALSE(s1.state.mapping(100, ip("172.16.0.1")).has_value());
  CHECK_FALSE(s1.state.mapping(100, ip("192.168.7.2")).has_value());
  CHECK(s1.state.mapping(100, ip("172.16.0.2"))->underlay_ip == ip("10.0.0.8"));
  CHECK(s1.state.mapping(100, ip("172.16.1.1")).has_value());
  CHECK(s1.state.mappings().size() == 1 + 50);  // vNIC 1's own + 50 extra
  CHECK(s1.apply(true, 91, evs).empty());  // the same state again: no change at all
}

TEST_CASE("a change level 1 refuses is counted; the rest of the batch applies and the revision advances") {
  Agent s1("s1");
  s1.apply(true, 10, two_servers());
  auto a = s1.apply(false, 11,
                    {put(vnic_key(7), R"({"vni":999,"server":"s1","rnic":"A","overlay_ip":"192.168.9.7","overlay_mac":"02:00:00:00:09:07"})"),
                     put(vnic_key(8), R"({"vni":100,"server":"s1","rnic":"A","overlay_ip":"192.168.7.8","overlay_mac":"02:00:00:00:01:08"})")});
  CHECK(a.size() == 1);
  CHECK(s1.fleet.stats().changes_rejected == 1);
  CHECK(s1.fleet.stats().last_error.find("999") != std::string::npos);
  CHECK(s1.fleet.revision() == 11);
}

TEST_CASE("malformed keys and values are counted and kept out") {
  Agent s1("s1");
  auto evs = two_servers();
  evs.push_back(put(vnic_key(9), R"({"vni":100,"server":"s1","rnic":"A","overlay_ip":"192.168.7.300","overlay_mac":"02:00:00:00:01:09"})"));
  evs.push_back(put(std::string(kDesiredPrefix) + "bogus/1", "{}"));
  evs.push_back(put(tenant_key(200), "not json"));
  s1.apply(true, 10, evs);
  CHECK(s1.fleet.desired().malformed() == 3);
  CHECK(s1.state.vnic(9) == nullptr);
  CHECK(s1.state.tenant(200) == nullptr);
  CHECK(s1.fleet.stats().changes_rejected == 0);
}

TEST_CASE("changes and their revision are on disk together: a reloaded agent has both") {
  TempDb db;
  {
    Store store(db.path());
    Level1State s;
    FleetApplier f("s1", 0);
    f.apply(FleetBatch{true, 10, two_servers()}, s, store);
    f.apply(FleetBatch{false, 11, {del(vnic_key(2))}}, s, store);
  }
  Store store(db.path());
  CHECK(store.fleet_revision().revision == 11);
  CHECK(store.fleet_revision().server == "s1");
  Level1State s;
  store.load(s);
  CHECK(s.vnic(1) != nullptr);
  CHECK_FALSE(s.mapping(100, ip("192.168.7.2")).has_value());
  // Resumed at the stored revision: the desired state as of then changes nothing.
  FleetApplier f("s1", store.fleet_revision().revision);
  auto evs = two_servers();
  evs.pop_back();
  CHECK(f.apply(FleetBatch{true, 11, evs}, s, store).empty());
}

TEST_CASE("queued watch batches are joined up to a bound; a full read is applied alone") {
  std::deque<FleetBatch> q;
  q.push_back(FleetBatch{false, 5, {put("a", "1")}});
  q.push_back(FleetBatch{false, 6, {put("b", "1"), put("c", "1")}});
  q.push_back(FleetBatch{false, 7, {put("d", "1")}});
  q.push_back(FleetBatch{true, 8, {put("e", "1")}});
  q.push_back(FleetBatch{false, 9, {put("f", "1")}});
  FleetBatch b = next_batch(q, 3);
  CHECK(b.revision == 6);
  CHECK(b.events.size() == 3);
  b = next_batch(q, 3);
  CHECK(b.revision == 7);
  b = next_batch(q, 100);
  CHECK(b.snapshot);
  CHECK(b.revision == 8);
  b = next_batch(q, 100);
  CHECK(b.revision == 9);
  CHECK(q.empty());
}
