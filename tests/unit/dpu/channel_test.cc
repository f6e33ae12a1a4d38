#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/channel/channel_region.h"
#include "common/channel/entry_digest.h"
#include "common/channel/layout.h"
#include "common/channel/messages.h"
#include "common/channel/negotiate.h"

using namespace tandem::common;

TEST_CASE("negotiation picks the highest version both sides speak") {
  CHECK(negotiate_version({1, 2}, {1, 2}) == 2);
  CHECK(negotiate_version({1, 3}, {2, 5}) == 3);
  CHECK(negotiate_version({4, 7}, {1, 5}) == 5);
}

TEST_CASE("an agent and an RNIC one release apart still agree") {
  // New agent (speaks 1..2) with an old RNIC firmware (speaks only 1), and the reverse.
  CHECK(negotiate_version({1, 2}, {1, 1}) == 1);
  CHECK(negotiate_version({1, 1}, {1, 2}) == 1);
  // After a release that drops v1: 2..3 still meets 1..2 at 2.
  CHECK(negotiate_version({2, 3}, {1, 2}) == 2);
  CHECK_FALSE(has_digest_reconcile(1));
  CHECK(has_digest_reconcile(2));
}

TEST_CASE("negotiation fails on disjoint or malformed ranges") {
  CHECK_FALSE(negotiate_version({3, 4}, {1, 2}).has_value());
  CHECK_FALSE(negotiate_version({0, 2}, {1, 2}).has_value());
  CHECK_FALSE(negotiate_version({2, 1}, {1, 2}).has_value());
}

TEST_CASE("messages survive a trip through raw ring bytes") {
  PutMsg put;
  put.hdr.seq = 41;
  put.txn = 7;
  EgressAction a;
  a.underlay_src_ip = 0x0A000001;
  a.underlay_dst_ip = 0x0A000002;
  a.dst_mac = {2, 0, 0, 0, 0, 9};
  a.vni = 0x123456;
  a.path_base_port = 0xC100;
  a.path_count = 8;
  put.entry = make_egress_entry(egress_key(3, 0xC0A80005), a);

  RawMessage raw = to_raw(put);
  REQUIRE(raw.type() == MessageType::kPut);
  CHECK(raw.seq() == 41);
  PutMsg back = as<PutMsg>(raw);
  CHECK(back.txn == 7);
  CHECK(back.entry == put.entry);
  CHECK(is_command(MessageType::kPut));
  CHECK(is_event(MessageType::kCommitted));
  CHECK_FALSE(is_command(MessageType::kPunt));
}

TEST_CASE("entry keys of different kinds never compare equal") {
  CHECK_FALSE(egress_key(1, 2) == ingress_key_vni(1, 2));
  CHECK_FALSE(ingress_key_vni(1, 2) == ingress_key_qpn(1, 2));
  CHECK(ingress_key_vni(1, 0x01FFFFFF) == ingress_key_vni(1, 0xFFFFFF));  // VNI is 24 bits
}

static Level2Entry egress(uint32_t vnic, uint32_t ip, uint32_t dst) {
  EgressAction a;
  a.underlay_dst_ip = dst;
  a.vni = 100;
  return make_egress_entry(egress_key(vnic, ip), a);
}

TEST_CASE("table digest does not depend on insertion order") {
  std::vector<Level2Entry> es;
  for (uint32_t i = 0; i < 50; ++i) es.push_back(egress(i % 5, 0xC0A80000 + i, i * 3));
  TableDigest fwd, rev;
  for (auto& e : es) fwd.add(e);
  for (auto it = es.rbegin(); it != es.rend(); ++it) rev.add(*it);
  CHECK(fwd == rev);
  CHECK(fwd.count == 50);
  fwd.remove(es[10]);
  CHECK_FALSE(fwd == rev);
  fwd.add(es[10]);
  CHECK(fwd == rev);
}

TEST_CASE("digest changes when only an action field changes") {
  auto e1 = egress(1, 2, 3);
  auto e2 = egress(1, 2, 4);
  CHECK(entry_hash(e1) != entry_hash(e2));
}

TEST_CASE("vNIC entries are their own kind: key, equality and digest see every field") {
  CHECK_FALSE(vnic_key(5) == egress_key(5, 0));
  CHECK(vnic_key(5) == vnic_key(5));
  VnicAction a;
  a.vnic_id = 5;
  a.overlay_ip = 0xC0A80705;
  a.vni = 100;
  a.overlay_mac = {2, 0, 0, 0, 1, 5};
  const Level2Entry e = make_vnic_entry(a);
  CHECK(e.key == vnic_key(5));
  CHECK(e.vnic == a);
  // An egress entry whose bytes happen to match is still another entry.
  Level2Entry look_alike = e;
  look_alike.key = egress_key(5, 0);
  CHECK_FALSE(look_alike == e);
  CHECK(entry_hash(look_alike) != entry_hash(e));
  for (int field = 0; field < 4; ++field) {
    VnicAction b = a;
    if (field == 0) b.overlay_ip ^= 1;
    if (field == 1) b.vni ^= 1;
    if (field == 2) b.overlay_mac[5] ^= 1;
    if (field == 3) b.pkey = 0x8005;
    CHECK_FALSE(make_vnic_entry(b) == e);
    CHECK(entry_hash(make_vnic_entry(b)) != entry_hash(e));
  }
}

TEST_CASE("partition keys travel from protocol v4; an entry carries none or a full member's real partition") {
  CHECK(kProtocolVersionCurrent == kProtocolVersionPkey);
  CHECK(has_partition_keys(kProtocolVersionPkey));
  CHECK_FALSE(has_partition_keys(kProtocolVersionPkey - 1));
  CHECK_FALSE(has_partition_keys(*negotiate_version(kOurVersions, {1, 3})));
  CHECK(valid_entry_pkey(0));
  CHECK(valid_entry_pkey(0x8001));
  CHECK(valid_entry_pkey(0xFFFE));
  CHECK_FALSE(valid_entry_pkey(0x0001));  // limited member: the RNIC stamps full members only
  CHECK_FALSE(valid_entry_pkey(0x8000));  // invalid partition
  CHECK_FALSE(valid_entry_pkey(0xFFFF));  // the default partition is "none" (0)
  CHECK(wire_pkey(0) == 0xFFFF);
  CHECK(wire_pkey(0x8005) == 0x8005);
}

TEST_CASE("vNIC entries exist from protocol v3, so an agent and an RNIC one version apart meet at v2 without them") {
  CHECK(kProtocolVersionCurrent >= kProtocolVersionVnic);
  CHECK(has_vnic_entries(kProtocolVersionVnic));
  CHECK_FALSE(has_vnic_entries(kProtocolVersionVnic - 1));
  // New agent (1..3) with an old RNIC (1..2), and an old agent with a new RNIC.
  CHECK(negotiate_version(kOurVersions, {1, 2}) == 2);
  CHECK(negotiate_version({1, 2}, kOurVersions) == 2);
  CHECK_FALSE(has_vnic_entries(*negotiate_version(kOurVersions, {1, 2})));
  CHECK(has_digest_reconcile(*negotiate_version(kOurVersions, {1, 2})));
}

TEST_CASE("default channel layout has page-aligned, non-overlapping areas") {
  ChannelGeometry g;
  REQUIRE(g.valid());
  auto l = compute_layout(g);
  CHECK(l.bar_offset % kPageSize == 0);
  CHECK(l.cmd_ring_offset >= l.bar_offset + sizeof(Bar));
  CHECK(l.evt_ring_offset == l.cmd_ring_offset + l.cmd_ring_bytes);
  CHECK(l.cmd_ring_bytes >= kRingHeaderReserve + g.ring_count * kMessageSize);
  CHECK(l.slot_offset % kPageSize == 0);
  CHECK(l.total_bytes == l.slot_offset + l.slot_bytes);
  CHECK_FALSE(ChannelGeometry{1000, 1, 2048}.valid());  // ring count not a power of two
  CHECK_FALSE(ChannelGeometry{1024, 1, 100}.valid());   // slot not cache-line sized
}

TEST_CASE("BAR table snapshot is consistent and refused mid-update") {
  auto bar = std::make_unique<Bar>();
  CommittedTable t{5, 0xABCD, 12};
  bar_publish_table(*bar, t);
  auto r = bar_read_table(*bar);
  REQUIRE(r.has_value());
  CHECK(*r == t);
  bar->table_seq.value.fetch_add(1);  // writer caught mid-update
  CHECK_FALSE(bar_read_table(*bar).has_value());
}

namespace {
// A page-aligned zeroed buffer standing in for the mapped channel file.
struct Region {
  std::size_t size;
  uint8_t* p;
  explicit Region(std::size_t n) : size(n), p(static_cast<uint8_t*>(std::aligned_alloc(kPageSize, n))) {
    std::memset(p, 0, n);
  }
  ~Region() { std::free(p); }
};
}  // namespace

TEST_CASE("an initialised channel region passes the RNIC's checks") {
  ChannelGeometry g{64, 8, 256};
  Region r(compute_layout(g).total_bytes);
  CHECK(check_channel(r.p, r.size) == "channel not initialised (bad magic)");
  REQUIRE(init_channel(r.p, r.size, g, 3, "rnic3") == "");
  CHECK(check_channel(r.p, r.size) == "");
  auto* h = reinterpret_cast<ChannelHeader*>(r.p);
  CHECK(std::string(h->rnic_name) == "rnic3");
  CHECK(h->port_id == 3);
  CHECK(channel_cmd_ring(r.p) == r.p + h->layout.cmd_ring_offset);
  announce_rnic(*h, VersionRange{1, 2}, 1234);
  CHECK(h->rnic_versions.load() == (1u << 16 | 2u));
  // The BAR is where the header says, and usable.
  bar_publish_table(channel_bar(r.p), CommittedTable{3, 4, 5});
  CHECK(bar_read_table(*reinterpret_cast<Bar*>(r.p + h->layout.bar_offset))->digest == 4);
}

TEST_CASE("a region from another build or too small is refused with a reason") {
  ChannelGeometry g{64, 8, 256};
  Region r(compute_layout(g).total_bytes);
  CHECK(init_channel(r.p, r.size - 1, g, 0, "x").find("layout needs") != std::string::npos);
  CHECK(init_channel(r.p, r.size, ChannelGeometry{100, 8, 256}, 0, "x").find("geometry invalid") != std::string::npos);
  REQUIRE(init_channel(r.p, r.size, g, 0, "x") == "");
  CHECK(check_channel(r.p, r.size - 4096).find("header says") != std::string::npos);
  auto* h = reinterpret_cast<ChannelHeader*>(r.p);
  h->layout_version = 99;
  CHECK(check_channel(r.p, r.size) == "channel layout version 99, expected 1");
  h->layout_version = kLayoutVersion;
  h->layout.slot_offset += 64;
  CHECK(check_channel(r.p, r.size) == "channel layout does not match its geometry");
}

TEST_CASE("a punt slot read back after reuse is reported lost, not torn") {
  ChannelGeometry g{64, 4, 128};
  Region r(compute_layout(g).total_bytes);
  REQUIRE(init_channel(r.p, r.size, g, 0, "x") == "");
  uint8_t hdrs[200];
  for (int i = 0; i < 200; ++i) hdrs[i] = static_cast<uint8_t>(i);
  uint32_t gen = slot_write(r.p, 1, hdrs, 60);
  uint8_t out[256];
  std::size_t len = 0;
  REQUIRE(slot_read(r.p, 1, gen, out, sizeof out, len));
  CHECK(len == 60);
  CHECK(std::memcmp(out, hdrs, 60) == 0);
  uint32_t gen2 = slot_write(r.p, 5, hdrs + 1, 200);  // slot 5 wraps to slot 1, truncated to capacity
  CHECK(gen2 != gen);
  CHECK_FALSE(slot_read(r.p, 1, gen, out, sizeof out, len));
  REQUIRE(slot_read(r.p, 1, gen2, out, sizeof out, len));
  CHECK(len == slot_payload_capacity(g));
  CHECK(out[0] == 1);
}
