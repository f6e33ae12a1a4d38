// ControlApi: requests are validated before anything changes, accepted changes
// are on disk when "ok" comes back, refusals carry a one-line reason.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <fcntl.h>
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

namespace {
// Records what the API tells the agent.
struct RecordingHooks : tandem::dpu::AgentHooks {
  std::vector<tandem::dpu::Change> changes;
  std::vector<std::vector<tandem::dpu::MappingKey>> replaced;
  void changed(const tandem::dpu::Change& c, const std::optional<tandem::dpu::Vnic>&) override { changes.push_back(c); }
  void mappings_replaced(const std::vector<tandem::dpu::MappingKey>& keys) override { replaced.push_back(keys); }
  json rnics() const override { return json::array(); }
  json level2(const std::string&) const override { return nullptr; }
};
json mapping_add(const char* oip, const char* uip, bool replace) {
  json j = {{"cmd", "mapping.add"}, {"vni", 7}, {"overlay_ip", oip}, {"underlay_ip", uip},
            {"next_hop_mac", "02:00:00:00:00:07"}, {"rnic", "far"}};
  if (replace) j["replace"] = true;
  return j;
}
}  // namespace

TEST_CASE("mapping.add of an existing key is refused unless it asks to replace; a replace is on disk and reaches the agent") {
  TempDb db;
  Level1State st;
  Store store(db.path);
  RecordingHooks hooks;
  ControlApi api(st, store, &hooks);
  REQUIRE(api.handle({{"cmd", "tenant.add"}, {"vni", 7}, {"name", "t"}})["ok"] == true);
  json first = api.handle(mapping_add("10.1.0.1", "10.0.0.1", false));
  REQUIRE(first["ok"] == true);
  CHECK(first["replaced"] == false);
  json before = api.handle({{"cmd", "table.dump"}, {"level", 1}});
  std::size_t calls = hooks.changes.size();

  json dup = api.handle(mapping_add("10.1.0.1", "10.0.0.2", false));
  CHECK(dup["ok"] == false);
  CHECK(dup["code"] == "duplicate");
  CHECK(api.handle({{"cmd", "table.dump"}, {"level", 1}}) == before);
  CHECK(hooks.changes.size() == calls);
  json bad_flag = mapping_add("10.1.0.1", "10.0.0.2", false);
  bad_flag["replace"] = "yes";
  CHECK(api.handle(bad_flag)["ok"] == false);

  json rep = api.handle(mapping_add("10.1.0.1", "10.0.0.2", true));
  REQUIRE(rep["ok"] == true);
  CHECK(rep["replaced"] == true);
  REQUIRE(hooks.changes.size() == calls + 1);
  auto* m = std::get_if<tandem::dpu::AddMapping>(&hooks.changes.back());
  REQUIRE(m != nullptr);
  CHECK(m->replace);
  json list = api.handle({{"cmd", "mapping.list"}});
  REQUIRE(list["total"] == 1);
  CHECK(list["mappings"][0]["underlay_ip"] == "10.0.0.2");
  Level1State reloaded;
  store.load(reloaded);
  CHECK(reloaded.mapping(7, 0x0A010001)->underlay_ip == 0x0A000002);
}

TEST_CASE("an import runs as a job in steps: reads are answered, changes wait, the reply comes when it is durable") {
  TempDb db;
  Level1State st;
  Store store(db.path);
  RecordingHooks hooks;
  ControlApi api(st, store, &hooks);
  REQUIRE(api.handle({{"cmd", "tenant.add"}, {"vni", 7}, {"name", "t"}})["ok"] == true);
  REQUIRE(api.handle(mapping_add("10.1.0.1", "10.0.0.1", false))["ok"] == true);
  std::string csv = db.path + ".csv";
  {
    std::ofstream f(csv);
    for (int i = 0; i < 20000; ++i)
      f << "7,10.1." << i / 250 << '.' << 1 + i % 250 << ",10.0.1." << 1 + i % 200 << ",02:00:00:00:00:01,far\n";
  }
  using Kind = tandem::dpu::ControlReply::Kind;
  // Without replace the existing 10.1.0.1 (line 1) refuses the whole file.
  REQUIRE(api.begin_line(json({{"cmd", "mapping.import"}, {"path", csv}}).dump()).kind == Kind::kStarted);
  std::optional<std::string> refused;
  while (!(refused = api.step())) {
  }
  CHECK(json::parse(*refused)["code"] == "duplicate");
  CHECK_FALSE(api.busy());
  CHECK(st.mappings().size() == 1);
  CHECK(api.begin_line(R"({"cmd":"mapping.import","path":"/nonexistent.csv"})").kind == Kind::kDone);

  tandem::dpu::ControlReply r = api.begin_line(json({{"cmd", "mapping.import"}, {"path", csv}, {"replace", true}}).dump());
  REQUIRE(r.kind == Kind::kStarted);
  CHECK(api.busy());
  CHECK(api.begin_line(R"({"cmd":"tenant.add","vni":8,"name":"x"})").kind == Kind::kBusy);
  CHECK(api.begin_line(R"({"cmd":"mapping.import","path":"/x.csv"})").kind == Kind::kBusy);
  CHECK(api.handle({{"cmd", "tenant.add"}, {"vni", 8}, {"name", "x"}})["code"] == "busy");
  tandem::dpu::ControlReply list = api.begin_line(R"({"cmd":"tenant.list"})");
  CHECK(list.kind == Kind::kDone);
  CHECK(json::parse(list.text)["tenants"].size() == 1);
  std::optional<std::string> done;
  std::size_t steps = 0;
  while (!(done = api.step())) ++steps;
  CHECK(steps >= 20000 / ControlApi::kStepRows);
  json reply = json::parse(*done);
  REQUIRE(reply["ok"] == true);
  CHECK(reply["imported"] == 20000);
  CHECK(reply["replaced"] == 1);
  CHECK_FALSE(api.busy());
  REQUIRE(hooks.replaced.size() == 1);
  REQUIRE(hooks.replaced[0].size() == 1);
  CHECK(hooks.replaced[0][0].overlay_ip == 0x0A010001);
  CHECK(st.mappings().size() == 20000);
  CHECK(api.begin_line(R"({"cmd":"tenant.add","vni":8,"name":"x"})").kind == Kind::kDone);
  Level1State reloaded;
  store.load(reloaded);
  CHECK(reloaded.mappings().size() == 20000);
  std::remove(csv.c_str());
}

TEST_CASE("a level-2 table dump shows vNIC entries readably") {
  tandem::common::VnicAction a;
  a.vnic_id = 5;
  a.overlay_ip = 0xC0A80705;
  a.vni = 100;
  a.overlay_mac = {2, 0, 0, 0, 1, 5};
  json j = tandem::dpu::level2_entry_json(tandem::common::make_vnic_entry(a));
  CHECK(j == json{{"kind", "vnic"}, {"vnic", 5}, {"overlay_ip", "192.168.7.5"},
                  {"overlay_mac", "02:00:00:00:01:05"}, {"vni", 100}, {"pkey", "0xffff"}});
  a.pkey = 0x8003;
  CHECK(tandem::dpu::level2_entry_json(tandem::common::make_vnic_entry(a))["pkey"] == "0x8003");
}

namespace {
// Hooks with one RNIC whose shadow holds `entries` and whose BAR says it committed `committed`.
struct FakeHooks : tandem::dpu::AgentHooks {
  json entries = json::array();
  uint64_t shadow_version = 7, committed = 7;
  void changed(const tandem::dpu::Change&, const std::optional<tandem::dpu::Vnic>&) override {}
  void mappings_replaced(const std::vector<tandem::dpu::MappingKey>&) override {}
  json rnics() const override {
    return json::array({{{"name", "h0"}, {"state", "ACTIVE"}, {"protocol_version", 4}, {"table_version", shadow_version},
                         {"table_digest", 42}, {"table_entries", entries.size()}, {"txn_in_flight", false},
                         {"queued_change_sets", 0}, {"punts", {{"tenants", json::object()}}},
                         {"bar", {{"state", "RUNNING"}, {"rnic_pid", 1234},
                                  {"table", {{"version", committed}, {"digest", 42}}}}}}});
  }
  json level2(const std::string& rnic) const override {
    return rnic == "h0" ? json{{"version", shadow_version}, {"entries", entries}} : json(nullptr);
  }
};
}  // namespace

TEST_CASE("flow.show: level 1, the entries each end needs against the shadow, and the versions") {
  TempDb db;
  Level1State st;
  Store store(db.path);
  FakeHooks hooks;
  ControlApi api(st, store, &hooks);
  REQUIRE(api.handle({{"cmd", "tenant.add"}, {"vni", 100}, {"name", "red"}})["ok"] == true);
  REQUIRE(api.handle(rnic_add("h0", "10.0.0.1"))["ok"] == true);
  REQUIRE(api.handle(rnic_add("h1", "10.0.0.2"))["ok"] == true);
  for (int i : {1, 2})
    REQUIRE(api.handle({{"cmd", "vnic.add"}, {"id", i}, {"vni", 100}, {"rnic", i == 1 ? "h0" : "h1"},
                        {"overlay_ip", "192.168.0." + std::to_string(i)},
                        {"overlay_mac", "02:aa:00:00:00:0" + std::to_string(i)}})["ok"] == true);
  json req = {{"cmd", "flow.show"}, {"vni", 100}, {"src", "192.168.0.1"}, {"dst", "192.168.0.2"}};
  json f = api.handle(req)["flow"];
  CHECK(f["level1"]["store_version"] == 5);  // five accepted changes
  REQUIRE(f["ends"].size() == 2);
  json a = f["ends"][0];
  CHECK(a["rnic"] == "h0");
  CHECK(a["resolve"] == "ok");
  CHECK(a["table"]["in_sync"] == true);
  REQUIRE(a["entries"].size() == 2);
  CHECK(a["entries"][0]["status"] == "absent");  // no QP asked for it yet
  CHECK(f["ends"][1]["channel"]["state"] == "no_channel");  // h1: the fake has no channel for it

  // The RNIC holds the egress entry as level 1 derives it, then a stale one.
  hooks.entries.push_back(a["entries"][0]["expected"]);
  hooks.committed = 6;
  a = api.handle(req)["flow"]["ends"][0];
  CHECK(a["entries"][0]["status"] == "installed");
  CHECK(a["table"]["in_sync"] == false);  // the RNIC has not committed the shadow's version
  hooks.entries[0]["underlay_dst_ip"] = "10.9.9.9";
  CHECK(api.handle(req)["flow"]["ends"][0]["entries"][0]["status"] == "differs");

  CHECK(api.handle({{"cmd", "flow.show"}, {"vni", 100}, {"src", "10.1.1.1"}, {"dst", "10.1.1.2"}})["ok"] == false);
  CHECK(api.handle({{"cmd", "flow.show"}, {"vni", 7}, {"src", "192.168.0.1"}, {"dst", "192.168.0.2"}})["ok"] == false);
}

namespace {
struct TracingHooks : FakeHooks {
  std::vector<std::string> rules;
  json trace(const std::string& rule) override {
    if (rule == "bad") throw std::invalid_argument("bad field");
    rules.push_back(rule);
    return {{"requested", rule.empty() ? "off" : rule}, {"ring", "/run/x/tandem-trace.ring"}};
  }
};
}  // namespace

TEST_CASE("trace: the rule goes to the agent's ring; a bad rule or an agent without one is refused") {
  TempDb db;
  Level1State st;
  Store store(db.path);
  TracingHooks hooks;
  ControlApi api(st, store, &hooks);
  json r = api.handle({{"cmd", "trace"}, {"rule", "a=10.0.0.1,b=10.0.0.2"}});
  CHECK(r["ok"] == true);
  CHECK(r["trace"]["ring"] == "/run/x/tandem-trace.ring");
  CHECK(api.handle({{"cmd", "trace"}})["ok"] == true);  // status only
  CHECK(hooks.rules == std::vector<std::string>{"a=10.0.0.1,b=10.0.0.2", ""});
  r = api.handle({{"cmd", "trace"}, {"rule", "bad"}});
  CHECK(r["ok"] == false);
  CHECK(r["error"].get<std::string>().find("bad field") != std::string::npos);
  FakeHooks plain;  // an agent without a ring
  ControlApi api2(st, store, &plain);
  r = api2.handle({{"cmd", "trace"}, {"rule", "off"}});
  CHECK(r["ok"] == false);
  CHECK(r["error"] == "this agent has no trace ring");
}

TEST_CASE("an import reads only what its caller could: a passed descriptor, or a path for root and the agent's user") {
  TempDb db;
  Level1State st;
  Store store(db.path);
  ControlApi api(st, store);
  REQUIRE(api.handle({{"cmd", "tenant.add"}, {"vni", 7}, {"name", "t"}})["ok"] == true);
  std::string csv = db.path + ".csv";
  {
    std::ofstream f(csv);
    f << "7,10.1.0.1,10.0.1.1,02:00:00:00:00:01,far\n7,10.1.0.2,10.0.1.2,02:00:00:00:00:01,far\n";
  }
  using Kind = tandem::dpu::ControlReply::Kind;
  auto run = [&](const std::string& line, tandem::dpu::Caller& c) {
    tandem::dpu::ControlReply r = api.begin_line(line, c);
    if (r.kind != Kind::kStarted) return json::parse(r.text);
    std::optional<std::string> done;
    while (!(done = api.step())) {
    }
    return json::parse(*done);
  };
  // Another user's request naming a path: refused, whatever the file's mode.
  tandem::dpu::Caller other{false, -1};
  json r = run(json({{"cmd", "mapping.import"}, {"path", csv}}).dump(), other);
  CHECK(r["ok"] == false);
  CHECK(r["error"].get<std::string>().find("forbidden") != std::string::npos);
  // "fd" without a descriptor.
  r = run(json({{"cmd", "mapping.import"}, {"path", csv}, {"fd", true}}).dump(), other);
  CHECK(r["ok"] == false);
  // A descriptor that is not a regular file (would block the loop): refused and closed.
  int pfd[2];
  REQUIRE(::pipe(pfd) == 0);
  tandem::dpu::Caller piped{false, pfd[0]};
  r = run(json({{"cmd", "mapping.import"}, {"path", "x.csv"}, {"fd", true}}).dump(), piped);
  CHECK(r["ok"] == false);
  CHECK(piped.fd == -1);
  ::close(pfd[1]);
  CHECK(st.mappings().size() == 0);
  // The file this user opened, passed along: imported; the API owns and closes it.
  tandem::dpu::Caller passed{false, ::open(csv.c_str(), O_RDONLY)};
  REQUIRE(passed.fd >= 0);
  r = run(json({{"cmd", "mapping.import"}, {"path", csv}, {"fd", true}}).dump(), passed);
  CHECK(r["ok"] == true);
  CHECK(r["imported"] == 2);
  CHECK(passed.fd == -1);
  std::remove(csv.c_str());
}
