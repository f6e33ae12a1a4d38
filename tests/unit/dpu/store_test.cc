#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "dpu/model/address.h"
#include "dpu/store/store.h"

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

TEST_CASE("opening a path that cannot be created is a clear error") {
  CHECK_THROWS_AS(Store("/nonexistent-dir/agent.db"), StoreError);
}
