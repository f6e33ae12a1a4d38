#include <catch2/catch.hpp>

#include <memory>
#include <random>
#include <unordered_map>

#include "dpu/model/address.h"
#include "dpu/model/level1_state.h"
#include "dpu/model/mapping_table.h"

using namespace tandem::dpu;
using tandem::common::EntryKind;

namespace {
uint32_t ip(const char* s) { return *parse_ipv4(s); }
MacAddr mac(const char* s) { return *parse_mac(s); }

// Two tenants on one RNIC: tenant 100 (vNICs 1, 2), tenant 200 (vNIC 3), and
// a remote address of tenant 100 behind another server.
Level1State two_tenants() {
  Level1State s;
  REQUIRE(s.apply(AddTenant{100, "blue"}).ok());
  REQUIRE(s.apply(AddTenant{200, "red"}).ok());
  REQUIRE(s.apply(AddRnic{"rnic0", ip("10.0.0.1"), mac("02:00:00:00:00:01"), 0xC000, 4}).ok());
  REQUIRE(s.apply(AddVnic{1, 100, "rnic0", ip("192.168.0.1"), mac("02:aa:00:00:00:01")}).ok());
  REQUIRE(s.apply(AddVnic{2, 100, "rnic0", ip("192.168.0.2"), mac("02:aa:00:00:00:02")}).ok());
  REQUIRE(s.apply(AddVnic{3, 200, "rnic0", ip("192.168.0.1"), mac("02:bb:00:00:00:01")}).ok());
  REQUIRE(s.apply(AddMapping{100, ip("192.168.1.9"), ip("10.0.1.7"), mac("02:00:00:00:01:00"), "far0"}).ok());
  return s;
}
}  // namespace

TEST_CASE("addresses parse strictly and format back") {
  CHECK(parse_ipv4("10.1.2.3") == 0x0A010203u);
  CHECK_FALSE(parse_ipv4("10.1.2").has_value());
  CHECK_FALSE(parse_ipv4("10.1.2.256").has_value());
  CHECK_FALSE(parse_ipv4("10.1.2.3 ").has_value());
  CHECK_FALSE(parse_ipv4("1..2.3").has_value());
  CHECK(format_ipv4(0xC0A80001) == "192.168.0.1");
  CHECK(format_mac(mac("02:AB:cd:00:00:ff")) == "02:ab:cd:00:00:ff");
  CHECK_FALSE(parse_mac("02:ab:cd:00:00").has_value());
  CHECK_FALSE(parse_mac("02-ab-cd-00-00-ff").has_value());
}

TEST_CASE("mapping table agrees with a reference map through inserts and deletes") {
  MappingTable t;
  std::unordered_map<uint64_t, uint32_t> ref;
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) {
    uint32_t vni = 1 + rng() % 4, oip = rng() % 5000;
    uint64_t k = (uint64_t{vni} << 32) | oip;
    if (rng() % 3 == 0) {
      CHECK(t.erase({vni, oip}) == (ref.erase(k) == 1));
    } else {
      uint32_t u = rng();
      CHECK(t.upsert({vni, oip}, Mapping{u, {}, 0}) == (ref.count(k) == 0));
      ref[k] = u;
    }
  }
  REQUIRE(t.size() == ref.size());
  for (auto& [k, u] : ref) {
    auto m = t.find({static_cast<uint32_t>(k >> 32), static_cast<uint32_t>(k)});
    REQUIRE(m.has_value());
    CHECK(m->underlay_ip == u);
  }
  // Bulk lookup agrees with single lookups, hits and misses alike.
  std::vector<MappingKey> keys;
  for (uint32_t i = 0; i < 100; ++i) keys.push_back({1 + i % 5, i * 37 % 5000});
  std::vector<Mapping> out(keys.size());
  std::unique_ptr<bool[]> hit(new bool[keys.size()]);
  std::size_t hits = t.find_bulk(keys.data(), keys.size(), out.data(), hit.get());
  std::size_t expect = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto m = t.find(keys[i]);
    REQUIRE(hit[i] == m.has_value());
    if (m) CHECK(out[i] == *m);
    expect += m.has_value();
  }
  CHECK(hits == expect);
  std::size_t seen = 0;
  t.for_each([&](const MappingKey&, const Mapping&) { ++seen; });
  CHECK(seen == ref.size());
}

TEST_CASE("mapping table stays under 96 bytes per entry at any size") {
  MappingTable t;
  for (uint32_t i = 0; i < (1u << 20); ++i) {
    t.upsert({1 + (i & 7), i}, Mapping{i, {}, 0});
    if (i >= 4096 && ((i & (i + 1)) == 0 || i + 1 == (1u << 20)))  // worst points: just after growth
      CHECK(double(t.memory_bytes()) / t.size() <= 96.0);
  }
  CHECK(t.size() == (1u << 20));
}

TEST_CASE("invalid changes are refused with a clear error and change nothing") {
  Level1State s = two_tenants();
  auto r = s.apply(AddVnic{9, 300, "rnic0", ip("192.168.0.9"), mac("02:00:00:00:09:09")});
  CHECK(r.code == ModelErrc::kUnknownTenant);
  CHECK(r.message == "tenant 300 does not exist");
  CHECK(s.apply(AddVnic{1, 100, "rnic0", ip("192.168.0.9"), mac("02:00:00:00:09:09")}).code == ModelErrc::kDuplicate);
  CHECK(s.apply(AddVnic{9, 100, "rnic0", ip("192.168.0.2"), mac("02:00:00:00:09:09")}).code == ModelErrc::kDuplicate);
  CHECK(s.apply(AddVnic{9, 100, "rnic7", ip("192.168.0.9"), mac("02:00:00:00:09:09")}).code == ModelErrc::kUnknownRnic);
  CHECK(s.apply(AddVnic{9, 100, "rnic0", ip("224.0.0.1"), mac("02:00:00:00:09:09")}).code == ModelErrc::kBadAddress);
  CHECK(s.apply(AddVnic{9, 100, "rnic0", ip("192.168.0.9"), mac("01:00:5e:00:00:01")}).code == ModelErrc::kBadAddress);
  CHECK(s.apply(AddMapping{100, ip("192.168.1.9"), ip("10.0.1.8"), mac("02:00:00:00:01:00"), "far0"}).code == ModelErrc::kDuplicate);
  CHECK(s.apply(AddTenant{0x1000000, "big"}).code == ModelErrc::kBadValue);
  CHECK(s.apply(RemoveTenant{100}).code == ModelErrc::kInUse);
  CHECK(s.apply(RemoveMapping{100, ip("192.168.0.1")}).code == ModelErrc::kInUse);
  CHECK(s.apply(RemoveMapping{100, ip("192.168.7.7")}).code == ModelErrc::kUnknownMapping);
  CHECK(s.vnics().size() == 3);
  CHECK(s.mappings().size() == 4);
}

TEST_CASE("a punted miss resolves to an egress entry inside the tenant") {
  Level1State s = two_tenants();
  Resolution r = s.resolve(1, ip("192.168.1.9"));
  REQUIRE(r.status == ResolveStatus::kOk);
  CHECK(r.rnic == "rnic0");
  CHECK(r.egress.key.kind == EntryKind::kEgress);
  CHECK(r.egress.key.word0 == 1);
  CHECK(r.egress.key.word1 == ip("192.168.1.9"));
  CHECK(r.egress.egress.underlay_src_ip == ip("10.0.0.1"));
  CHECK(r.egress.egress.underlay_dst_ip == ip("10.0.1.7"));
  CHECK(r.egress.egress.dst_mac == mac("02:00:00:00:01:00"));
  CHECK(r.egress.egress.vni == 100);
  CHECK(r.egress.egress.path_count == 4);
  CHECK(r.ingress.key.kind == EntryKind::kIngressVni);
  CHECK(r.ingress.ingress.local_vnic_id == 1);
  CHECK(r.ingress.ingress.overlay_src_ip == ip("192.168.1.9"));

  // Overlapping overlay IPs: vNIC 1 reaching 192.168.0.1 is itself (tenant 100), not tenant 200's.
  Resolution same = s.resolve(2, ip("192.168.0.1"));
  REQUIRE(same.status == ResolveStatus::kOk);
  CHECK(same.ingress.ingress.overlay_src_mac == mac("02:aa:00:00:00:01"));
}

TEST_CASE("isolation denies another tenant's address until peering allows it") {
  Level1State s = two_tenants();
  REQUIRE(s.apply(AddMapping{200, ip("172.16.0.5"), ip("10.0.2.2"), mac("02:00:00:00:02:00"), "far1"}).ok());
  CHECK(s.resolve(1, ip("172.16.0.5")).status == ResolveStatus::kDeniedByIsolation);
  CHECK(s.resolve(1, ip("8.8.8.8")).status == ResolveStatus::kNoMapping);
  CHECK(s.resolve(42, ip("172.16.0.5")).status == ResolveStatus::kUnknownVnic);
  REQUIRE(s.apply(AllowPeering{100, 200}).ok());
  Resolution r = s.resolve(1, ip("172.16.0.5"));
  REQUIRE(r.status == ResolveStatus::kOk);
  CHECK(r.egress.egress.vni == 200);
}

TEST_CASE("removing a vNIC frees its address and QPs") {
  Level1State s = two_tenants();
  REQUIRE(s.apply(BindQp{1, 17}).ok());
  CHECK(s.apply(BindQp{2, 17}).code == ModelErrc::kDuplicate);
  REQUIRE(s.apply(RemoveVnic{1}).ok());
  CHECK_FALSE(s.mapping(100, ip("192.168.0.1")).has_value());
  CHECK(s.apply(BindQp{2, 17}).ok());
  // Only tenant 200's vNIC 3 still has that address now.
  CHECK(s.resolve(2, ip("192.168.0.1")).status == ResolveStatus::kDeniedByIsolation);
}

TEST_CASE("a mapping is replaced only when the change says so, in place, and resolves to the new underlay") {
  Level1State s = two_tenants();
  AddMapping moved{100, ip("192.168.1.9"), ip("10.0.3.3"), mac("02:00:00:00:03:00"), "far3"};
  ModelResult dup = s.apply(moved);
  CHECK(dup.code == ModelErrc::kDuplicate);
  CHECK(dup.message == "192.168.1.9 is already mapped in tenant 100 (a replace must say so)");
  CHECK(s.mapping(100, ip("192.168.1.9"))->underlay_ip == ip("10.0.1.7"));  // unchanged

  moved.replace = true;
  REQUIRE(s.apply(moved).ok());
  CHECK(s.mappings().size() == 4);
  auto m = s.mapping(100, ip("192.168.1.9"));
  REQUIRE(m.has_value());
  CHECK(m->underlay_ip == ip("10.0.3.3"));
  CHECK(m->next_hop_mac == mac("02:00:00:00:03:00"));
  CHECK(s.rnic_name(m->rnic) == "far3");
  Resolution r = s.resolve(1, ip("192.168.1.9"));
  REQUIRE(r.status == ResolveStatus::kOk);
  CHECK(r.egress.egress.underlay_dst_ip == ip("10.0.3.3"));
  CHECK(r.egress.egress.dst_mac == mac("02:00:00:00:03:00"));
  CHECK(r.ingress.key.word0 == ip("10.0.3.3"));  // the ingress key moves with the underlay IP

  // A replace still validates everything else.
  AddMapping bad = moved;
  bad.underlay_ip = ip("224.0.0.1");
  CHECK(s.apply(bad).code == ModelErrc::kBadAddress);
  CHECK(s.mapping(100, ip("192.168.1.9"))->underlay_ip == ip("10.0.3.3"));
}

TEST_CASE("replace adds a missing mapping, refuses a vNIC's own address, and counts the tenant's references once") {
  Level1State s;
  REQUIRE(s.apply(AddTenant{100, "blue"}).ok());
  REQUIRE(s.apply(AddRnic{"rnic0", ip("10.0.0.1"), mac("02:00:00:00:00:01"), 0xC000, 4}).ok());
  REQUIRE(s.apply(AddVnic{1, 100, "rnic0", ip("192.168.0.1"), mac("02:aa:00:00:00:01")}).ok());
  AddMapping m{100, ip("192.168.1.9"), ip("10.0.1.7"), mac("02:00:00:00:01:00"), "far0", true};
  REQUIRE(s.apply(m).ok());  // not mapped yet: added
  m.underlay_ip = ip("10.0.1.8");
  REQUIRE(s.apply(m).ok());
  m.underlay_ip = ip("10.0.1.9");
  REQUIRE(s.apply(m).ok());
  CHECK(s.mappings().size() == 2);
  AddMapping own{100, ip("192.168.0.1"), ip("10.0.9.9"), mac("02:00:00:00:09:00"), "far0", true};
  CHECK(s.apply(own).code == ModelErrc::kInUse);
  CHECK(s.mapping(100, ip("192.168.0.1"))->underlay_ip == ip("10.0.0.1"));
  // One mapping and one vNIC reference the tenant, however often it was replaced.
  REQUIRE(s.apply(RemoveMapping{100, ip("192.168.1.9")}).ok());
  REQUIRE(s.apply(RemoveVnic{1}).ok());
  CHECK(s.apply(RemoveTenant{100}).ok());
}

TEST_CASE("each tenant's partition is its own: duplicates and out-of-range ones are refused, removal frees it") {
  Level1State s;
  CHECK(s.free_partition() == 1);
  REQUIRE(s.apply(AddTenant{100, "blue", 1}).ok());
  REQUIRE(s.apply(AddTenant{200, "red", 3}).ok());
  CHECK(s.free_partition() == 2);
  CHECK(s.tenant(200)->entry_pkey() == 0x8003);
  ModelResult r = s.apply(AddTenant{300, "green", 3});
  CHECK(r.code == ModelErrc::kDuplicate);
  CHECK(r.message.find("tenant 200") != std::string::npos);
  CHECK(s.apply(AddTenant{300, "green", kMaxPartition + 1}).code == ModelErrc::kBadValue);
  REQUIRE(s.apply(AddTenant{300, "green", 2}).ok());
  CHECK(s.free_partition() == 4);
  REQUIRE(s.apply(RemoveTenant{100}).ok());
  CHECK(s.free_partition() == 1);
  REQUIRE(s.apply(AddTenant{400, "yellow", 1}).ok());  // a removed tenant's partition is reusable
  CHECK(s.apply(AddTenant{500, "none"}).ok());       // applied directly with 0: unpartitioned
  CHECK(s.tenant(500)->entry_pkey() == 0);
  // Shared on purpose: both keep it until the last one goes.
  REQUIRE(s.apply(AddTenant{600, "shares red's", 3, true}).ok());
  REQUIRE(s.apply(RemoveTenant{200}).ok());
  CHECK(s.free_partition() == 4);  // 3 still has tenant 600
  REQUIRE(s.apply(RemoveTenant{600}).ok());
  CHECK(s.free_partition() == 3);
}
