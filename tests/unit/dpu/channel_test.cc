#include <catch2/catch.hpp>

#include <memory>
#include <vector>

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
