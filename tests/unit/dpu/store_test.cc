#include <catch2/catch.hpp>
#include <sqlite3.h>

#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "dpu/model/address.h"
#include "dpu/store/mapping_import.h"
#include "dpu/store/store.h"
#include "tests/unit/dpu/sync_counting_vfs.h"

using namespace tandem::dpu;
namespace fs = std::filesystem;

namespace {

uint32_t ip(const char* s) { return *parse_ipv4(s); }
MacAddr mac(const char* s) { return *parse_mac(s); }

// A fresh database path per test, removed (with its WAL files) afterwards.
struct TempDb {
  fs::path dir;
  TempDb() {
    dir = fs::temp_directory_path() / ("tandem-store-test-" + std::to_string(::getpid()) + "-" +
                                       std::to_string(counter()++));
    fs::create_directories(dir);
  }
  ~TempDb() { fs::remove_all(dir); }
  std::string path() const { return (dir / "agent.db").string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

std::vector<Change> sample_changes() {
  return {
      AddTenant{100, "blue"},
      AddTenant{200, "red"},
      AddRnic{"rnic0", ip("10.0.0.1"), mac("02:00:00:00:00:01"), 0xC000, 4},
      AddVnic{1, 100, "rnic0", ip("192.168.0.1"), mac("02:aa:00:00:00:01")},
      AddVnic{3, 200, "rnic0", ip("192.168.0.1"), mac("02:bb:00:00:00:01")},
      BindQp{1, 17},
      AddMapping{100, ip("192.168.1.9"), ip("10.0.1.7"), mac("02:00:00:00:01:00"), "far0"},
      AddMapping{200, ip("172.16.0.5"), ip("10.0.2.2"), mac("02:00:00:00:02:00"), "far1"},
      AllowPeering{100, 200},
  };
}

// Everything observable about a state, as text, so two states compare whole.
std::string dump(const Level1State& s) {
  std::ostringstream o;
  for (auto& [v, t] : s.tenants()) o << "T " << v << ' ' << t.name << '\n';
  for (auto& [n, r] : s.rnics()) o << "R " << n << ' ' << r.underlay_ip << ' ' << format_mac(r.mac) << ' ' << r.path_base_port << ' ' << int(r.path_count) << '\n';
  for (auto& [id, v] : s.vnics()) {
    o << "V " << id << ' ' << v.vni << ' ' << v.rnic << ' ' << v.overlay_ip << ' ' << format_mac(v.overlay_mac);
    for (auto q : v.qpns) o << " q" << q;
    o << '\n';
  }
  std::vector<std::string> ms;
  s.mappings().for_each([&](const MappingKey& k, const Mapping& m) {
    ms.push_back("M " + std::to_string(k.vni) + ' ' + format_ipv4(k.overlay_ip) + ' ' + format_ipv4(m.underlay_ip) +
                 ' ' + format_mac(m.next_hop_mac) + ' ' + s.rnic_name(m.rnic));
  });
  std::sort(ms.begin(), ms.end());
  for (auto& m : ms) o << m << '\n';
  for (auto& [a, b] : s.peerings()) o << "P " << a << ' ' << b << '\n';
  return o.str();
}

}  // namespace

TEST_CASE("reopening the store reproduces exactly the acknowledged state") {
  TempDb db;
  Level1State live;
  {
    Store store(db.path());
    for (const Change& c : sample_changes()) REQUIRE(accept_change(live, store, c).ok());
    // A refused change is neither applied nor stored.
    CHECK(accept_change(live, store, AddTenant{100, "again"}).code == ModelErrc::kDuplicate);
    REQUIRE(accept_change(live, store, RemoveMapping{200, ip("172.16.0.5")}).ok());
    REQUIRE(accept_change(live, store, RemoveVnic{3}).ok());
  }
  Level1State reloaded;
  Store store(db.path());
  store.load(reloaded);
  CHECK(dump(reloaded) == dump(live));
  CHECK(reloaded.resolve(1, ip("192.168.1.9")).status == ResolveStatus::kOk);
}

TEST_CASE("a change batch is stored in one transaction") {
  TempDb db;
  {
    Store store(db.path());
    store.persist(sample_changes());
  }
  Level1State s;
  Store(db.path()).load(s);
  CHECK(s.vnics().size() == 2);
  CHECK(s.mappings().size() == 4);
  CHECK(s.may_reach(200, 100));
}

TEST_CASE("bulk CSV import is all or nothing and survives reopen") {
  TempDb db;
  Level1State live;
  Store store(db.path());
  for (const Change& c : sample_changes()) REQUIRE(accept_change(live, store, c).ok());

  std::ostringstream csv;
  csv << "vni,overlay_ip,underlay_ip,next_hop_mac,rnic\n";
  for (int i = 0; i < 5000; ++i)
    csv << "100,10.8." << i / 250 << '.' << 1 + i % 250 << ",10.1.0." << 1 + i % 200 << ",02:00:00:00:10:01,far" << i % 3 << '\n';
  std::string good = csv.str();

  SECTION("a bad row rejects the whole file") {
    std::istringstream in(good + "100,10.9.0.1,10.1.0.1,not-a-mac,far0\n");
    ImportResult r = store.import_mappings(in, ImportFormat::kCsv, live);
    CHECK(r.result.code == ModelErrc::kBadAddress);
    CHECK(r.result.message.rfind("line 5002:", 0) == 0);
    CHECK(live.mappings().size() == 4);
  }
  SECTION("a duplicate inside the file rejects it") {
    std::istringstream in(good + "100,10.8.0.1,10.1.0.9,02:00:00:00:10:01,far0\n");
    CHECK(store.import_mappings(in, ImportFormat::kCsv, live).result.code == ModelErrc::kDuplicate);
    CHECK(live.mappings().size() == 4);
  }
  SECTION("an unknown tenant rejects it") {
    std::istringstream in("999,10.9.0.1,10.1.0.1,02:00:00:00:10:01,far0\n");
    CHECK(store.import_mappings(in, ImportFormat::kCsv, live).result.code == ModelErrc::kUnknownTenant);
  }
  SECTION("a good file is imported and reloads") {
    std::istringstream in(good);
    ImportResult r = store.import_mappings(in, ImportFormat::kCsv, live);
    REQUIRE(r.result.ok());
    CHECK(r.imported == 5000);
    Level1State reloaded;
    Store(db.path()).load(reloaded);
    CHECK(reloaded.mappings().size() == 5004);
    CHECK(dump(reloaded) == dump(live));
  }
  // Whatever the section did, disk and memory agree.
  Level1State reloaded;
  Store(db.path()).load(reloaded);
  CHECK(dump(reloaded) == dump(live));
}

TEST_CASE("bulk JSONL import parses each line as an object") {
  TempDb db;
  Level1State live;
  Store store(db.path());
  REQUIRE(accept_change(live, store, AddTenant{7, "t"}).ok());
  std::istringstream in(
      R"({"vni":7,"overlay_ip":"10.0.0.5","underlay_ip":"10.1.1.1","next_hop_mac":"02:00:00:00:00:09","rnic":"r9"})" "\n"
      R"({"vni":7,"overlay_ip":"10.0.0.6","underlay_ip":"10.1.1.2","next_hop_mac":"02:00:00:00:00:09","rnic":"r9"})" "\n");
  ImportResult r = store.import_mappings(in, ImportFormat::kJsonl, live);
  REQUIRE(r.result.ok());
  CHECK(r.imported == 2);
  auto m = live.mapping(7, ip("10.0.0.6"));
  REQUIRE(m);
  CHECK(m->underlay_ip == ip("10.1.1.2"));
  std::istringstream bad(R"({"vni":7,"overlay_ip":10})" "\n");
  CHECK(store.import_mappings(bad, ImportFormat::kJsonl, live).result.code == ModelErrc::kBadValue);
}

TEST_CASE("the last committed level-2 table per RNIC is kept across reopen") {
  TempDb db;
  using namespace tandem::common;
  EgressAction a;
  a.underlay_dst_ip = 5;
  auto e1 = make_egress_entry(egress_key(1, 10), a);
  a.underlay_dst_ip = 6;
  auto e2 = make_egress_entry(egress_key(1, 11), a);
  {
    Store store(db.path());
    store.save_level2("rnic0", 1, 111, {e1, e2}, {}, true);
    store.save_level2("rnic0", 2, 222, {}, {egress_key(1, 10)}, false);
  }
  Store store(db.path());
  Level2Snapshot s = store.load_level2("rnic0");
  CHECK(s.version == 2);
  CHECK(s.digest == 222);
  REQUIRE(s.entries.size() == 1);
  CHECK(s.entries[0] == e2);
  CHECK(store.load_level2("rnic1").version == 0);
}

TEST_CASE("a replaced mapping is on disk before it is applied, and a plain add of its key changes nothing") {
  TempDb db;
  Level1State live;
  {
    Store store(db.path());
    for (const Change& c : sample_changes()) REQUIRE(accept_change(live, store, c).ok());
    AddMapping moved{100, ip("192.168.1.9"), ip("10.0.3.3"), mac("02:00:00:00:03:00"), "far3"};
    CHECK(accept_change(live, store, moved).code == ModelErrc::kDuplicate);
    moved.replace = true;
    REQUIRE(accept_change(live, store, moved).ok());
  }
  Level1State reloaded;
  Store(db.path()).load(reloaded);
  CHECK(dump(reloaded) == dump(live));
  CHECK(reloaded.mappings().size() == 4);
  CHECK(reloaded.mapping(100, ip("192.168.1.9"))->underlay_ip == ip("10.0.3.3"));
}

namespace {
std::string csv_rows(int first, int n, const char* underlay_prefix) {
  std::ostringstream csv;
  for (int i = first; i < first + n; ++i)
    csv << "100,10.8." << i / 250 << '.' << 1 + i % 250 << ',' << underlay_prefix << 1 + i % 200
        << ",02:00:00:00:10:01,far" << i % 3 << '\n';
  return csv.str();
}
}  // namespace

TEST_CASE("import with replace updates existing keys and adds new ones; without it they are refused") {
  TempDb db;
  Level1State live;
  Store store(db.path());
  for (const Change& c : sample_changes()) REQUIRE(accept_change(live, store, c).ok());
  std::istringstream first(csv_rows(0, 1000, "10.1.0."));
  REQUIRE(store.import_mappings(first, ImportFormat::kCsv, live).result.ok());
  std::string again = csv_rows(500, 1000, "10.2.0.");  // 500 existing keys, 500 new

  std::istringstream plain(again);
  ImportResult refused = store.import_mappings(plain, ImportFormat::kCsv, live);
  CHECK(refused.result.code == ModelErrc::kDuplicate);
  CHECK(refused.result.message.rfind("line 1:", 0) == 0);
  CHECK(live.mappings().size() == 1004);
  CHECK(live.mapping(100, ip("10.8.2.1"))->underlay_ip == ip("10.1.0.101"));

  std::istringstream rep(again);
  ImportResult r = store.import_mappings(rep, ImportFormat::kCsv, live, true);
  REQUIRE(r.result.ok());
  CHECK(r.imported == 1000);
  CHECK(r.replaced.size() == 500);
  CHECK(live.mappings().size() == 1504);
  CHECK(live.mapping(100, ip("10.8.2.1"))->underlay_ip == ip("10.2.0.101"));  // key 500: replaced
  CHECK(live.mapping(100, ip("10.8.0.1"))->underlay_ip == ip("10.1.0.1"));    // key 0: untouched
  Level1State reloaded;
  Store(db.path()).load(reloaded);
  CHECK(dump(reloaded) == dump(live));

  // A key twice in one file is refused even with replace: which row would win?
  std::istringstream twice(csv_rows(2000, 10, "10.3.0.") + csv_rows(2005, 1, "10.4.0."));
  ImportResult t = store.import_mappings(twice, ImportFormat::kCsv, live, true);
  CHECK(t.result.code == ModelErrc::kDuplicate);
  CHECK(t.result.message == "line 11: 10.8.8.6 in tenant 100 is in the file twice (also line 6)");
  CHECK(live.mappings().size() == 1504);
}

TEST_CASE("an import done in small steps gives the same state as one done at once") {
  TempDb a, b;
  Level1State sa, sb;
  Store store_a(a.path()), store_b(b.path());
  for (const Change& c : sample_changes()) {
    REQUIRE(accept_change(sa, store_a, c).ok());
    REQUIRE(accept_change(sb, store_b, c).ok());
  }
  // Keys out of order so the merge sort has work across many steps.
  std::string rows;
  for (int blk = 19; blk >= 0; --blk) rows += csv_rows(blk * 1000, 1000, "10.1.0.");
  std::istringstream in_a(rows), in_b(rows);
  REQUIRE(store_a.import_mappings(in_a, ImportFormat::kCsv, sa).result.ok());
  MappingImport job(store_b, sb, in_b, ImportFormat::kCsv, false);
  std::size_t steps = 0;
  while (!job.step(7)) {
    ++steps;
    std::string phase = job.phase_name();
    if (phase != "apply" && phase != "done") REQUIRE(sb.mappings().size() == 4);  // nothing applied before the commit
  }
  CHECK(steps > 20000 / 7);
  REQUIRE(job.result().result.ok());
  CHECK(job.result().imported == 20000);
  CHECK(dump(sb) == dump(sa));
  Level1State reloaded;
  Store(b.path()).load(reloaded);
  CHECK(dump(reloaded) == dump(sa));
}

TEST_CASE("an import grows level 1's table beside it, and in place if level 1 changed meanwhile") {
  for (bool change_meanwhile : {false, true}) {
    TempDb db;
    Level1State live;
    Store store(db.path());
    for (const Change& c : sample_changes()) REQUIRE(accept_change(live, store, c).ok());
    std::istringstream in(csv_rows(0, 20000, "10.1.0."));
    MappingImport job(store, live, in, ImportFormat::kCsv, false);
    bool saw_reserve = false;
    while (!job.step(64)) {
      if (std::string(job.phase_name()) != "reserve" || saw_reserve) continue;
      saw_reserve = true;  // the grown table is being built from `live` now
      CHECK(live.mappings().size() == 4);
      if (change_meanwhile) REQUIRE(live.apply(AddTenant{300, "green"}).ok());  // as no control change could
    }
    CHECK(saw_reserve);
    REQUIRE(job.result().result.ok());
    CHECK(live.mappings().size() == 20004);
    CHECK(live.mappings().slots() >= MappingTable::grown_slots(20004));
    CHECK(live.mappings().find({100, ip("10.8.79.250")}).has_value());  // the last row
    CHECK((live.tenant(300) != nullptr) == change_meanwhile);
  }
  // grown() copies without touching the original.
  MappingTable t;
  for (uint32_t i = 0; i < 1000; ++i) t.upsert({7, i}, Mapping{i, {}, 1});
  const MappingTable g = t.grown(100000);
  CHECK(t.slots() < g.slots());
  CHECK(g.slots() == MappingTable::grown_slots(100000));
  CHECK(g.size() == 1000);
  for (uint32_t i = 0; i < 1000; ++i) CHECK(g.find({7, i}) == t.find({7, i}));
}

TEST_CASE("an import abandoned before its commit leaves disk and memory untouched") {
  TempDb db;
  Level1State live;
  Store store(db.path());
  for (const Change& c : sample_changes()) REQUIRE(accept_change(live, store, c).ok());
  std::string before = dump(live);
  std::istringstream in(csv_rows(0, 5000, "10.1.0."));
  {
    MappingImport job(store, live, in, ImportFormat::kCsv, false);
    while (!store.bulk_open()) REQUIRE_FALSE(job.step(100));
    for (int i = 0; i < 5; ++i) REQUIRE_FALSE(job.step(100));  // some rows written, not committed
  }
  CHECK_FALSE(store.bulk_open());
  CHECK(dump(live) == before);
  Level1State reloaded;
  Store(db.path()).load(reloaded);
  CHECK(dump(reloaded) == before);
  // The store is usable again.
  REQUIRE(accept_change(live, store, AddTenant{300, "green"}).ok());
}

TEST_CASE("level-2 saves during an import's open transaction wait and are written when it ends") {
  TempDb db;
  using namespace tandem::common;
  EgressAction a;
  a.underlay_dst_ip = 5;
  auto e1 = make_egress_entry(egress_key(1, 10), a);
  Level1State live;
  {
    Store store(db.path());
    for (const Change& c : sample_changes()) REQUIRE(accept_change(live, store, c).ok());
    std::istringstream in(csv_rows(0, 3000, "10.1.0."));
    MappingImport job(store, live, in, ImportFormat::kCsv, false);
    while (!store.bulk_open()) REQUIRE_FALSE(job.step(100));
    store.save_level2("rnic0", 3, 333, {e1}, {}, true);
    CHECK_THROWS_AS(store.persist(AddTenant{300, "green"}), StoreError);  // changes wait for the import
    while (!job.step(100)) {
    }
    REQUIRE(job.result().result.ok());
  }
  Store store(db.path());
  Level2Snapshot s = store.load_level2("rnic0");
  CHECK(s.version == 3);
  REQUIRE(s.entries.size() == 1);
  Level1State reloaded;
  store.load(reloaded);
  CHECK(reloaded.mappings().size() == 3004);
}

TEST_CASE("opening a path that cannot be created is a clear error") {
  CHECK_THROWS_AS(Store("/nonexistent-dir/agent.db"), StoreError);
}

TEST_CASE("accept_change gives a tenant the lowest free partition, stored so a reload gives it the same") {
  TempDb db;
  Level1State live;
  {
    Store store(db.path());
    REQUIRE(accept_change(live, store, AddTenant{300, "c"}).ok());
    REQUIRE(accept_change(live, store, AddTenant{100, "a", 7}).ok());
    REQUIRE(accept_change(live, store, AddTenant{200, "b"}).ok());
    CHECK(accept_change(live, store, AddTenant{400, "d", 7}).code == ModelErrc::kDuplicate);
  }
  CHECK(live.tenant(300)->partition == 1);
  CHECK(live.tenant(100)->partition == 7);
  CHECK(live.tenant(200)->partition == 2);
  Level1State reloaded;
  Store(db.path()).load(reloaded);  // replayed in VNI order: the stored partitions, not a new choice
  CHECK(reloaded.tenant(300)->partition == 1);
  CHECK(reloaded.tenant(100)->partition == 7);
  CHECK(reloaded.tenant(200)->partition == 2);
  // A flow quota is a change of its own, stored with the tenant.
  {
    Store store(db.path());
    REQUIRE(accept_change(reloaded, store, SetTenantQuota{200, 500}).ok());
    CHECK(accept_change(reloaded, store, SetTenantQuota{999, 5}).code == ModelErrc::kUnknownTenant);
  }
  Level1State again;
  Store(db.path()).load(again);
  CHECK(again.tenant(200)->flow_quota == 500);
  CHECK(again.tenant(100)->flow_quota == 0);
}

TEST_CASE("a schema-1 store (no partitions) is migrated on open: tenants get partitions in VNI order") {
  TempDb db;
  {
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(db.path().c_str(), &raw) == SQLITE_OK);
    REQUIRE(sqlite3_exec(raw,
                         "CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
                         "INSERT INTO meta VALUES('schema_version', 1);"
                         "CREATE TABLE tenants(vni INTEGER PRIMARY KEY, name TEXT NOT NULL);"
                         "INSERT INTO tenants VALUES(200, 'red'), (100, 'blue');",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(raw);
  }
  Level1State s;
  {
    Store store(db.path());
    store.load(s);
    REQUIRE(accept_change(s, store, AddTenant{300, "green"}).ok());
  }
  CHECK(s.tenant(100)->partition == 1);
  CHECK(s.tenant(200)->partition == 2);
  CHECK(s.tenant(300)->partition == 3);
  Level1State again;
  Store(db.path()).load(again);  // version 2 now: opened without migrating twice
  CHECK(again.tenant(200)->partition == 2);
}

TEST_CASE("a schema-2 store is migrated to 3; a fleet revision is written with its changes, atomically") {
  TempDb db;
  {
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(db.path().c_str(), &raw) == SQLITE_OK);
    REQUIRE(sqlite3_exec(raw,
                         "CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
                         "INSERT INTO meta VALUES('schema_version', 2);"
                         "CREATE TABLE tenants(vni INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                         " partition_key INTEGER NOT NULL DEFAULT 0, flow_quota INTEGER NOT NULL DEFAULT 0);"
                         "INSERT INTO tenants VALUES(100, 'blue', 1, 0);",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(raw);
  }
  {
    Store store(db.path());
    CHECK(store.fleet_revision().revision == 0);
    store.persist({Change{AddTenant{200, "red", 2, false, 0}}}, FleetRevision{"s1", 42});
    // A change that cannot be written (duplicate key) leaves the revision where it was.
    CHECK_THROWS_AS(store.persist({Change{AddTenant{300, "x", 3}}, Change{AddTenant{200, "dup", 4}}},
                                  FleetRevision{"s1", 43}),
                    StoreError);
  }
  Store again(db.path());
  CHECK(again.fleet_revision().server == "s1");
  CHECK(again.fleet_revision().revision == 42);
  Level1State s;
  again.load(s);
  CHECK(s.tenant(100) != nullptr);
  CHECK(s.tenant(200) != nullptr);
  CHECK(s.tenant(300) == nullptr);
}

TEST_CASE("level-2 bookkeeping is committed without an fsync; a level-1 change is synced, and carries it to disk") {
  // The agent saves level 2 in its loop on every COMMITTED: an fsync there
  // stalled every RNIC's punts for seconds while other processes wrote.
  tandem::test::SyncCountingVfs& vfs = tandem::test::SyncCountingVfs::install();
  TempDb db;
  tandem::common::Level2Entry e{};
  e.key = tandem::common::egress_key(1, ip("192.168.1.9"));
  {
    Store s(db.path());
    s.persist(AddTenant{100, "blue"});
    uint64_t before = vfs.syncs();
    for (uint64_t v = 1; v <= 3; ++v) s.save_level2("rnic0", v, 40 + v, {e}, {}, false);
    CHECK(vfs.syncs() == before);
    before = vfs.syncs();
    s.persist(AddTenant{200, "red"});  // "ok" means on disk, and the WAL before it with it
    CHECK(vfs.syncs() > before);
    before = vfs.syncs();
    s.save_level2("rnic0", 4, 44, {}, {e.key}, false);
    CHECK(vfs.syncs() == before);
  }
  Store again(db.path());
  const Level2Snapshot snap = again.load_level2("rnic0");
  CHECK(snap.version == 4);
  CHECK(snap.digest == 44);
  CHECK(snap.entries.empty());
}
