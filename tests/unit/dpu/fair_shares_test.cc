// The agent's fair shares (dpu/txn/fair_punts.h, Level2Shadow's flows per
// vNIC): a punt storm from one tenant does not delay another's first punt,
// overflow is dropped and counted per tenant, and a tenant's flows on an RNIC
// are counted as its egress entries come and go.
#include <catch2/catch.hpp>

#include <vector>

#include "dpu/txn/fair_punts.h"
#include "dpu/txn/level2_shadow.h"

using namespace tandem::dpu;
using namespace tandem::common;

namespace {
PuntMsg punt(uint32_t vnic, uint32_t ip) {
  PuntMsg p;
  p.missed = egress_key(vnic, ip);
  return p;
}
}  // namespace

TEST_CASE("a storm from one tenant waits behind itself: another tenant's punt is served in the next round") {
  FairPunts f(1000);
  for (uint32_t i = 0; i < 1000; ++i) REQUIRE(f.push(200, punt(5, 0x0A000000 + i)));  // blue's storm
  CHECK_FALSE(f.push(200, punt(5, 0x0B000000)));                                    // over its queue
  REQUIRE(f.push(100, punt(2, 0xC0A80703)));                                        // red's one new flow
  std::vector<uint32_t> order;
  f.serve(3, [&](uint32_t vni, const PuntMsg&) { order.push_back(vni); });
  CHECK(order == std::vector<uint32_t>{200, 100, 200});  // red second, not 1001st
  f.serve(10000, [&](uint32_t vni, const PuntMsg&) { order.push_back(vni); });
  CHECK(order.size() == 1001);
  CHECK(f.empty());
  const auto& s = f.stats();
  CHECK(s.at(200).queued == 1000);
  CHECK(s.at(200).dropped == 1);
  CHECK(s.at(200).served == 1000);
  CHECK(s.at(100).served == 1);
  f.note_over_quota(200);
  CHECK(f.stats().at(200).over_quota == 1);
}

TEST_CASE("punts of one tenant keep their order; tenants take turns") {
  FairPunts f;
  for (uint32_t i = 0; i < 3; ++i) f.push(1, punt(1, i));
  for (uint32_t i = 0; i < 2; ++i) f.push(2, punt(2, i));
  std::vector<std::pair<uint32_t, uint32_t>> got;
  f.serve(100, [&](uint32_t vni, const PuntMsg& p) { got.push_back({vni, p.missed.word1}); });
  CHECK(got == std::vector<std::pair<uint32_t, uint32_t>>{{1, 0}, {2, 0}, {1, 1}, {2, 1}, {1, 2}});
}

TEST_CASE("the shadow counts each vNIC's flows (egress entries) through puts, deletes, replays and forgets") {
  Level2Shadow s;
  auto put = [](const EntryKey& k) { return Level2Op{false, make_egress_entry(k, EgressAction{})}; };
  auto del = [](const EntryKey& k) {
    Level2Op op;
    op.entry.key = k;
    op.del = true;
    return op;
  };
  s.apply({put(egress_key(5, 1)), put(egress_key(5, 2)), put(egress_key(2, 1)),
           Level2Op{false, make_ingress_entry(ingress_key_vni(0x0A000001, 100), IngressAction{})}},
          1);
  CHECK(s.egress_of_vnic(5) == 2);
  CHECK(s.egress_of_vnic(2) == 1);
  s.apply({put(egress_key(5, 2)), del(egress_key(5, 1)), del(egress_key(5, 9))}, 2);  // re-put, del, absent del
  CHECK(s.egress_of_vnic(5) == 1);
  s.reset(3, {make_egress_entry(egress_key(7, 1), EgressAction{}), make_egress_entry(egress_key(7, 2), EgressAction{})});
  CHECK(s.egress_of_vnic(5) == 0);
  CHECK(s.egress_of_vnic(7) == 2);
  s.forget(EntryKind::kEgress);
  CHECK(s.egress_of_vnic(7) == 0);
}
