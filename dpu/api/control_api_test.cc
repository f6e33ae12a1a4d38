// ControlApi: requests are validated before anything changes, accepted changes
// are on disk when "ok" comes back, refusals carry a one-line reason.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "dpu/api/control_api.h"

using nlohmann::json;
using tandem::dpu::ControlApi;
using tandem::dpu::Level1State;
using tandem::dpu::Store;

namespace {
struct TempDb {
  std::string path = "/tmp/tandem-api-test-" + std::to_string(getpid()) + ".sqlite";
  ~TempDb() {
    for (const char* s : {"", "-wal", "-shm"}) std::remove((path + s).c_str());
  }
};
json rnic_add(const char* name, const char* ip) {
  return {{"cmd", "rnic.add"}, {"name", name}, {"underlay_ip", ip}, {"mac", "02:00:00:00:00:01"}};
}
}  // namespace

TEST_CASE("accepted changes survive a reopen of the store; list commands show them") {
  TempDb db;
  {
    Level1State st;
    Store store(db.path);
    ControlApi api(st, store);
    REQUIRE(api.handle({{"cmd", "tenant.add"}, {"vni", 100}, {"name", "red"}})["ok"] == true);
    REQUIRE(api.handle(rnic_add("h0", "10.0.0.1"))["ok"] == true);
    REQUIRE(api.handle({{"cmd", "vnic.add"}, {"id", 1}, {"vni", 100}, {"rnic", "h0"}, {"overlay_ip", "192.168.0.1"},
                        {"overlay_mac", "02:aa:00:00:00:01"}})["ok"] == true);
  }
  Level1State st;
  Store store(db.path);
  store.load(st);
  ControlApi api(st, store);
  json t = api.handle({{"cmd", "tenant.list"}});
  REQUIRE(t["tenants"].size() == 1);
  CHECK(t["tenants"][0]["name"] == "red");
  json v = api.handle({{"cmd", "vnic.list"}});
  REQUIRE(v["vnics"].size() == 1);
  CHECK(v["vnics"][0]["overlay_ip"] == "192.168.0.1");
  CHECK(api.handle({{"cmd", "table.dump"}, {"level", 1}})["mappings_total"] == 1);
}

TEST_CASE("malformed requests are refused with a reason and change nothing") {
  TempDb db;
  Level1State st;
  Store store(db.path);
  ControlApi api(st, store);
  REQUIRE(api.handle({{"cmd", "tenant.add"}, {"vni", 100}, {"name", "red"}})["ok"] == true);
  json before = api.handle({{"cmd", "table.dump"}, {"level", 1}});
  for (const std::string line :
       {"not json", "[1,2]", R"({"vni":1})", R"({"cmd":"tenant.fly"})", R"({"cmd":"tenant.add","vni":"7","name":"x"})",
        R"({"cmd":"tenant.add","vni":-1,"name":"x"})", R"({"cmd":"tenant.add","vni":16777216,"name":"x"})",
        R"({"cmd":"tenant.add","vni":100,"name":"dup"})", R"({"cmd":"tenant.del","vni":5})",
        R"({"cmd":"rnic.add","name":"h0","underlay_ip":"10.0.0.256","mac":"02:00:00:00:00:01"})",
        R"({"cmd":"rnic.add","name":"h0","underlay_ip":"10.0.0.1","mac":"02:00:00:00:01"})",
        R"({"cmd":"vnic.add","id":1,"vni":100,"rnic":"nope","overlay_ip":"1.2.3.4","overlay_mac":"02:00:00:00:00:01"})",
        R"({"cmd":"table.dump","level":3})", R"({"cmd":"mapping.import","path":"/nonexistent.csv"})"}) {
    INFO(line);
    json r = json::parse(api.handle_line(line));
    CHECK(r["ok"] == false);
    CHECK(!r["error"].get<std::string>().empty());
  }
  CHECK(api.handle({{"cmd", "table.dump"}, {"level", 1}}) == before);
  Level1State reloaded;
  store.load(reloaded);
  CHECK(reloaded.tenants().size() == 1);
  CHECK(reloaded.rnics().empty());
}

TEST_CASE("mapping import is all or nothing") {
  TempDb db;
  Level1State st;
  Store store(db.path);
  ControlApi api(st, store);
  REQUIRE(api.handle({{"cmd", "tenant.add"}, {"vni", 7}, {"name", "t"}})["ok"] == true);
  std::string csv = db.path + ".csv";
  std::ofstream(csv) << "vni,overlay_ip,underlay_ip,next_hop_mac,rnic\n7,10.1.0.1,10.0.0.1,02:00:00:00:00:01,h0\n"
                        "7,10.1.0.2,10.0.0.1,02:00:00:00:00:01,h0\n";
  json ok = api.handle({{"cmd", "mapping.import"}, {"path", csv}});
  CHECK(ok["imported"] == 2);
  std::ofstream(csv) << "7,10.1.0.3,10.0.0.1,02:00:00:00:00:01,h0\n9,10.1.0.4,10.0.0.1,02:00:00:00:00:01,h0\n";
  CHECK(api.handle({{"cmd", "mapping.import"}, {"path", csv}})["ok"] == false);
  CHECK(api.handle({{"cmd", "mapping.list"}})["total"] == 2);
  std::remove(csv.c_str());
}
