#include <catch2/catch.hpp>

#include "dpu/model/address.h"
#include "dpu/txn/derive.h"
#include "dpu/txn/pending_punts.h"

#include <algorithm>
#include <map>
#include <random>
#include <tuple>

using namespace tandem::dpu;
using namespace tandem::common;

namespace {
uint32_t ip(const char* s) { return *parse_ipv4(s); }
MacAddr mac(const char* s) { return *parse_mac(s); }

Level1State state() {
  Level1State s;
  REQUIRE(s.apply(AddTenant{100, "blue"}).ok());
  REQUIRE(s.apply(AddTenant{200, "red"}).ok());
  REQUIRE(s.apply(AddRnic{"rnic0", ip("10.0.0.1"), mac("02:00:00:00:00:01"), 0xC000, 4}).ok());
  REQUIRE(s.apply(AddVnic{1, 100, "rnic0", ip("192.168.0.1"), mac("02:aa:00:00:00:01")}).ok());
  REQUIRE(s.apply(AddVnic{2, 100, "rnic0", ip("192.168.0.2"), mac("02:aa:00:00:00:02")}).ok());
  // Two remote addresses of tenant 100 behind the same server 10.0.1.7.
  REQUIRE(s.apply(AddMapping{100, ip("192.168.1.9"), ip("10.0.1.7"), mac("02:00:00:00:01:00"), "far0"}).ok());
  REQUIRE(s.apply(AddMapping{100, ip("192.168.1.10"), ip("10.0.1.7"), mac("02:00:00:00:01:00"), "far0"}).ok());
  REQUIRE(s.apply(AddMapping{200, ip("172.16.0.5"), ip("10.0.2.2"), mac("02:00:00:00:02:00"), "far1"}).ok());
  return s;
}
}  // namespace

TEST_CASE("a punted egress miss becomes an egress and an ingress PUT for the vNIC's RNIC") {
  Level1State s = state();
  std::string rnic;
  ResolveStatus why;
  auto cs = change_set_for_miss(s, egress_key(1, ip("192.168.1.9")), 42, &rnic, &why);
  REQUIRE(cs);
  CHECK(why == ResolveStatus::kOk);
  CHECK(rnic == "rnic0");
  CHECK(cs->tag == 42);
  REQUIRE(cs->ops.size() == 2);
  CHECK(cs->ops[0].entry.key == egress_key(1, ip("192.168.1.9")));
  CHECK(cs->ops[1].entry.key == ingress_key_vni(ip("10.0.1.7"), 100));
}

TEST_CASE("two misses on one ingress key resolved before either commits: the second withdraws it") {
  Level1State s = state();
  Level2Shadow installed;  // nothing committed yet
  PendingPunts pending;
  auto first = change_set_for_miss(s, egress_key(1, ip("192.168.1.9")), 1, nullptr, nullptr, &installed, &pending);
  REQUIRE(first);
  REQUIRE(pending.add(egress_key(1, ip("192.168.1.9")), *first));
  const EntryKey shared = ingress_key_vni(ip("10.0.1.7"), 100);
  REQUIRE(pending.ingress_put(shared));
  CHECK(*pending.ingress_put(shared) == first->ops[1].entry);
  // Another remote address behind the same server: same ingress key, another sender.
  auto second = change_set_for_miss(s, egress_key(1, ip("192.168.1.10")), 2, nullptr, nullptr, &installed, &pending);
  REQUIRE(second);
  REQUIRE(second->ops.size() == 2);
  CHECK_FALSE(second->ops[0].del);
  CHECK(second->ops[1].del);  // against the committed shadow alone it would overwrite
  auto blind = change_set_for_miss(s, egress_key(1, ip("192.168.1.10")), 3, nullptr, nullptr, &installed);
  REQUIRE(blind);
  CHECK_FALSE(blind->ops[1].del);
  // Both commit in the order submitted: the key ends withdrawn, as if resolved one after the other.
  installed.apply(first->ops, 1);
  installed.apply(second->ops, 2);
  CHECK(installed.find(shared) == nullptr);
  CHECK(installed.find(egress_key(1, ip("192.168.1.10"))) != nullptr);
  // The same pair again while its own put is pending is not ambiguous.
  PendingPunts p2;
  REQUIRE(p2.add(egress_key(1, ip("192.168.1.9")), *first));
  auto again = change_set_for_miss(s, egress_key(1, ip("192.168.1.9")), 4, nullptr, nullptr, nullptr, &p2);
  REQUIRE(again);
  CHECK_FALSE(again->ops[1].del);
  REQUIRE(p2.erase(1));
  CHECK(p2.ingress_put(shared) == nullptr);
}

TEST_CASE("a miss that isolation forbids installs nothing and says why") {
  Level1State s = state();
  ResolveStatus why;
  CHECK_FALSE(change_set_for_miss(s, egress_key(1, ip("172.16.0.5")), 1, nullptr, &why));
  CHECK(why == ResolveStatus::kDeniedByIsolation);
  CHECK_FALSE(change_set_for_miss(s, ingress_key_vni(ip("10.0.1.7"), 100), 1, nullptr, &why));
  CHECK(why == ResolveStatus::kNoMapping);
}

TEST_CASE("an ingress key shared by two senders is withdrawn, never overwritten") {
  Level1State s = state();
  Level2Shadow installed;
  auto first = change_set_for_miss(s, egress_key(1, ip("192.168.1.9")), 1, nullptr, nullptr, &installed);
  REQUIRE(first);
  installed.apply(first->ops, 1);
  auto second = change_set_for_miss(s, egress_key(1, ip("192.168.1.10")), 2, nullptr, nullptr, &installed);
  REQUIRE(second);
  REQUIRE(second->ops.size() == 2);
  CHECK_FALSE(second->ops[0].del);
  CHECK(second->ops[1].del);
  installed.apply(second->ops, 2);
  CHECK(installed.find(ingress_key_vni(ip("10.0.1.7"), 100)) == nullptr);
  CHECK(installed.find(egress_key(1, ip("192.168.1.10"))) != nullptr);
}

TEST_CASE("warming the caches for a batch of punts changes no resolution and no shadow") {
  Level1State s = state();
  Level2Shadow installed;
  auto first = change_set_for_miss(s, egress_key(1, ip("192.168.1.9")), 1, nullptr, nullptr, &installed);
  REQUIRE(first);
  installed.apply(first->ops, 1);
  // More than one chunk of 32, mixing resolvable, isolated, unmapped,
  // unknown-vNIC and ingress-side misses.
  const EntryKey kinds[] = {egress_key(1, ip("192.168.1.9")), egress_key(2, ip("192.168.1.10")),
                            egress_key(1, ip("172.16.0.5")), egress_key(1, ip("192.168.9.9")),
                            egress_key(7, ip("192.168.1.9")), ingress_key_vni(ip("10.0.1.7"), 100)};
  std::vector<PuntMsg> punts;
  for (int i = 0; i < 70; ++i) {
    PuntMsg p;
    p.missed = kinds[i % 6];
    punts.push_back(p);
  }
  auto resolve_all = [&] {
    std::vector<std::tuple<bool, int, std::vector<std::tuple<EntryKey, bool>>>> out;
    for (const PuntMsg& p : punts) {
      ResolveStatus why = ResolveStatus::kOk;
      auto cs = change_set_for_miss(s, p.missed, 9, nullptr, &why, &installed);
      std::vector<std::tuple<EntryKey, bool>> ops;
      if (cs)
        for (const Level2Op& op : cs->ops) ops.emplace_back(op.entry.key, op.del);
      out.emplace_back(cs.has_value(), static_cast<int>(why), ops);
    }
    return out;
  };
  auto before = resolve_all();
  const TableDigest digest = installed.digest();
  const std::size_t size = installed.entries().size(), mappings = s.mappings().size();
  warm_for_punts(s, &installed, punts);
  warm_for_punts(s, nullptr, punts);
  warm_for_punts(s, &installed, {});
  CHECK(resolve_all() == before);
  CHECK(installed.digest() == digest);
  CHECK(installed.entries().size() == size);
  CHECK(s.mappings().size() == mappings);
}

TEST_CASE("removing a mapping or a vNIC withdraws exactly the entries derived from it") {
  Level1State s = state();
  Level2Shadow installed;
  for (auto [vnic, dst] : {std::pair{1u, "192.168.1.9"}, {2u, "192.168.1.9"}, {2u, "192.168.0.1"}}) {
    auto cs = change_set_for_miss(s, egress_key(vnic, ip(dst)), 0, nullptr, nullptr, &installed);
    REQUIRE(cs);
    installed.apply(cs->ops, installed.version() + 1);
  }
  // Installed: egress (1,.9), (2,.9), (2,.0.1); ingress (10.0.0.1,100) -> from .0.1 to vNIC 2.
  // The ingress (10.0.1.7,100) was withdrawn: vNICs 1 and 2 both talk to .9.
  CHECK(installed.find(ingress_key_vni(ip("10.0.1.7"), 100)) == nullptr);
  ChangeSet m = deletions_for_mapping(installed, MappingKey{100, ip("192.168.1.9")});
  CHECK(m.ops.size() == 2);
  for (auto& op : m.ops) CHECK(op.del);
  // vNIC 1: its own egress entry, plus what others derived from its address.
  ChangeSet v = deletions_for_vnic(installed, 1, 100, ip("192.168.0.1"));
  CHECK(v.ops.size() == 3);  // egress (1,.9), egress (2,.0.1), ingress from .0.1
  CHECK(deletions_for_mapping(installed, MappingKey{200, ip("192.168.1.9")}).ops.empty());
  // Many mappings in one pass: the union of what each one withdraws.
  ChangeSet both = deletions_for_mappings(
      installed, {MappingKey{100, ip("192.168.1.9")}, MappingKey{100, ip("192.168.0.1")}, MappingKey{200, ip("192.168.1.9")}});
  std::size_t apart = m.ops.size() + deletions_for_mapping(installed, MappingKey{100, ip("192.168.0.1")}).ops.size();
  CHECK(both.ops.size() == apart);
  CHECK(both.ops.size() == 4);  // egress (1,.9), (2,.9), (2,.0.1), ingress from .0.1
}

TEST_CASE("a resolution that commits after its mapping was deleted or replaced is undone") {
  Level1State s = state();
  Level2Shadow installed;
  const EntryKey missed = egress_key(1, ip("192.168.1.9"));
  auto cs = change_set_for_miss(s, missed, 7, nullptr, nullptr, &installed);
  REQUIRE(cs);
  std::vector<Level2Entry> puts;
  for (const Level2Op& op : cs->ops) puts.push_back(op.entry);

  // Level 1 unchanged: the committed resolution stands.
  installed.apply(cs->ops, 1);
  CHECK(revalidate_resolution(s, installed, "rnic0", missed, puts).ops.empty());

  // The mapping was replaced while the resolution was in flight (the
  // withdrawal then saw nothing to withdraw): both entries go.
  REQUIRE(s.apply(RemoveMapping{100, ip("192.168.1.9")}).ok());
  REQUIRE(s.apply(AddMapping{100, ip("192.168.1.9"), ip("10.0.1.8"), mac("02:00:00:00:01:01"), "far0"}).ok());
  ChangeSet undo = revalidate_resolution(s, installed, "rnic0", missed, puts);
  REQUIRE(undo.ops.size() == 2);
  CHECK(undo.ops[0].del);
  CHECK(undo.ops[0].entry.key == missed);
  CHECK(undo.ops[1].entry.key == ingress_key_vni(ip("10.0.1.7"), 100));

  // Deleted outright: the same. An entry already rewritten by a later
  // resolution is left alone.
  REQUIRE(s.apply(RemoveMapping{100, ip("192.168.1.9")}).ok());
  Level2Entry newer = puts[0];
  newer.egress.underlay_dst_ip = ip("10.0.1.8");
  installed.apply({Level2Op{false, newer}}, 2);
  undo = revalidate_resolution(s, installed, "rnic0", missed, puts);
  REQUIRE(undo.ops.size() == 1);
  CHECK(undo.ops[0].entry.key == ingress_key_vni(ip("10.0.1.7"), 100));
}

TEST_CASE("pending punts are found by missed key and by tag until erased, against a reference model") {
  PendingPunts p;
  std::map<uint64_t, EntryKey> by_tag;
  std::map<std::tuple<int, uint32_t, uint32_t>, uint64_t> by_key;
  auto kt = [](const EntryKey& k) { return std::tuple<int, uint32_t, uint32_t>(int(k.kind), k.word0, k.word1); };
  std::map<uint64_t, EntryKey> ingress_of;  // tag -> ingress key it puts
  std::mt19937 rng(5);
  uint64_t next_tag = 1;
  for (int i = 0; i < 20000; ++i) {
    if (rng() % 3 != 0 || by_tag.empty()) {
      // Few distinct keys, so duplicates are common.
      EntryKey k = egress_key(1 + rng() % 3, rng() % 700);
      ChangeSet cs;
      cs.tag = next_tag++;
      EgressAction a;
      a.underlay_dst_ip = static_cast<uint32_t>(cs.tag);
      cs.put(make_egress_entry(k, a));
      if (rng() % 2) cs.put(make_ingress_entry(ingress_key_vni(k.word1, 100), IngressAction{}));
      else cs.del(ingress_key_vni(k.word1, 100));
      bool dup = by_key.count(kt(k)) != 0;
      REQUIRE(p.add(k, cs) == !dup);
      if (!dup) {
        by_tag[cs.tag] = k;
        by_key[kt(k)] = cs.tag;
        if (!cs.ops[1].del) ingress_of[cs.tag] = cs.ops[1].entry.key;
        const PendingPunts::Entry* e = p.find(cs.tag);
        REQUIRE(e);
        CHECK(e->missed == k);
        REQUIRE(e->installs().size() == 1 + (cs.ops[1].del ? 0 : 1));
        CHECK(e->installs()[0] == cs.ops[0].entry);
      }
    } else {
      auto it = by_tag.begin();
      std::advance(it, rng() % by_tag.size());
      REQUIRE(p.erase(it->first));
      CHECK_FALSE(p.erase(it->first));
      by_key.erase(kt(it->second));
      ingress_of.erase(it->first);
      by_tag.erase(it);
    }
    REQUIRE(p.size() == by_tag.size());
    if (i % 97 == 0)
      for (const auto& [tag, k] : by_tag) {
        REQUIRE(p.contains(k));
        REQUIRE(p.find(tag));
        REQUIRE(p.find(tag)->missed == k);
      }
    if (i % 89 == 0)  // several pending resolutions may put one ingress key
      for (uint32_t w = 0; w < 700; w += 7) {
        const EntryKey ik = ingress_key_vni(w, 100);
        bool want = std::any_of(ingress_of.begin(), ingress_of.end(), [&](const auto& t) { return t.second == ik; });
        const Level2Entry* got = p.ingress_put(ik);
        REQUIRE((got != nullptr) == want);
        if (got) CHECK(got->key == ik);
      }
  }
  CHECK_FALSE(p.find(next_tag));
  CHECK_FALSE(p.contains(egress_key(9, 9)));
}

TEST_CASE("a pending punt refuses a tag in use and more PUTs than a resolution makes") {
  PendingPunts p;
  ChangeSet cs;
  cs.tag = 7;
  cs.put(make_egress_entry(egress_key(1, 1), EgressAction{}));
  REQUIRE(p.add(egress_key(1, 1), cs));
  CHECK_FALSE(p.add(egress_key(1, 2), cs));  // tag 7 is pending
  ChangeSet big;
  big.tag = 8;
  for (uint32_t i = 0; i < 3; ++i) big.put(make_egress_entry(egress_key(2, i), EgressAction{}));
  CHECK_FALSE(p.add(egress_key(2, 0), big));
  CHECK(p.size() == 1);
  CHECK_FALSE(p.contains(egress_key(2, 0)));
}

TEST_CASE("the shadow's flat map agrees with a reference map through inserts, erases, growth and clear") {
  EntryMap m;
  std::map<std::tuple<int, uint32_t, uint32_t>, uint32_t> ref;  // key -> underlay dst of its entry
  auto kt = [](const EntryKey& k) { return std::tuple<int, uint32_t, uint32_t>(int(k.kind), k.word0, k.word1); };
  std::mt19937 rng(17);
  for (int i = 0; i < 60000; ++i) {
    // Keys of all three kinds over a space a few times the live size: long
    // probe runs, wrap-around at the array's end, erases inside runs.
    uint32_t w = rng() % 3000;
    EntryKey k = w % 3 == 0 ? egress_key(w % 7, w) : w % 3 == 1 ? ingress_key_vni(w, w % 5) : ingress_key_qpn(w, 9);
    switch (rng() % 4) {
      case 0:
      case 1: {
        auto [e, fresh] = m.find_or_insert(k);
        REQUIRE(fresh == (ref.count(kt(k)) == 0));
        REQUIRE(e->key == k);
        e->egress.underlay_dst_ip = static_cast<uint32_t>(i);
        ref[kt(k)] = static_cast<uint32_t>(i);
        break;
      }
      case 2:
        REQUIRE(m.erase(k) == (ref.erase(kt(k)) == 1));
        break;
      default: {
        const Level2Entry* e = m.find(k);
        auto it = ref.find(kt(k));
        REQUIRE((e != nullptr) == (it != ref.end()));
        if (e) REQUIRE(e->egress.underlay_dst_ip == it->second);
      }
    }
    REQUIRE(m.size() == ref.size());
    if (i == 30000) {
      m.clear();
      ref.clear();
      CHECK(m.find(k) == nullptr);
    }
    if (i % 5000 == 0) {
      std::size_t n = 0;
      for (const auto& [key, e] : m) {
        auto it = ref.find(kt(key));
        REQUIRE(it != ref.end());
        REQUIRE(e.egress.underlay_dst_ip == it->second);
        ++n;
      }
      REQUIRE(n == ref.size());
      for (const auto& [t, dst] : ref) {
        EntryKey k2;
        k2.kind = static_cast<EntryKind>(std::get<0>(t));
        k2.word0 = std::get<1>(t);
        k2.word1 = std::get<2>(t);
        REQUIRE(m.find(k2));
      }
    }
  }
  CHECK(m.find(EntryKey{}) == nullptr);  // kind kInvalid is never stored
}

TEST_CASE("a presized shadow keeps its entries, never grows up to the capacity, and copies deeply") {
  Level2Shadow sh;
  std::vector<Level2Entry> start;
  for (uint32_t i = 0; i < 100; ++i) start.push_back(make_egress_entry(egress_key(1, i), EgressAction{}));
  sh.reset(7, start);
  const auto digest = sh.digest();
  sh.presize(100000);  // 2^17 slots of 48 bytes: a huge-page mapping, faulted in now
  const std::size_t slots = sh.entries().slot_count();
  CHECK(slots >= 100000 * 4 / 3);
  CHECK(sh.digest() == digest);
  CHECK(sh.version() == 7);
  REQUIRE(sh.entries().size() == 100);
  for (uint32_t i = 0; i < 100; ++i) REQUIRE(sh.find(egress_key(1, i)));
  std::vector<Level2Op> ops;
  for (uint32_t i = 100; i < 100000; ++i) ops.push_back({false, make_egress_entry(egress_key(1, i), EgressAction{})});
  ops.push_back({true, make_egress_entry(egress_key(1, 5), EgressAction{})});
  sh.apply(ops, 8);
  CHECK(sh.entries().slot_count() == slots);  // no growth up to the capacity
  CHECK(sh.entries().size() == 99999);
  CHECK_FALSE(sh.find(egress_key(1, 5)));
  Level2Shadow copy = sh;
  sh.apply({{true, make_egress_entry(egress_key(1, 6), EgressAction{})}}, 9);
  CHECK(copy.find(egress_key(1, 6)));  // the copy has its own slots
  CHECK_FALSE(sh.find(egress_key(1, 6)));
  CHECK(copy.entries().size() == 99999);
  sh.presize(0);  // smaller than what it holds: no effect
  CHECK(sh.entries().slot_count() == slots);
  CHECK(sh.entries().size() == 99998);
}

TEST_CASE("a resolution that withdrew an ambiguous ingress key stands when it commits") {
  Level1State s = state();
  Level2Shadow installed;
  auto first = change_set_for_miss(s, egress_key(1, ip("192.168.1.9")), 1, nullptr, nullptr, &installed);
  REQUIRE(first);
  installed.apply(first->ops, 1);
  const EntryKey missed = egress_key(1, ip("192.168.1.10"));
  auto second = change_set_for_miss(s, missed, 2, nullptr, nullptr, &installed);
  REQUIRE(second);
  REQUIRE(second->ops[1].del);  // same underlay host and VNI as the first: ambiguous
  std::vector<Level2Entry> puts;  // what agent.cc records: the PUTs only
  for (const Level2Op& op : second->ops)
    if (!op.del) puts.push_back(op.entry);
  installed.apply(second->ops, 2);
  // Level 1 unchanged: nothing to undo, the egress entry stays.
  CHECK(revalidate_resolution(s, installed, "rnic0", missed, puts).ops.empty());
  // Its mapping replaced meanwhile: the egress entry goes.
  REQUIRE(s.apply(RemoveMapping{100, ip("192.168.1.10")}).ok());
  REQUIRE(s.apply(AddMapping{100, ip("192.168.1.10"), ip("10.0.1.8"), mac("02:00:00:00:01:01"), "far0"}).ok());
  ChangeSet undo = revalidate_resolution(s, installed, "rnic0", missed, puts);
  REQUIRE(undo.ops.size() == 1);
  CHECK(undo.ops[0].entry.key == missed);
}

TEST_CASE("level 1's generation moves with every applied change, never with a refused one") {
  Level1State s = state();
  const uint64_t g = s.generation();
  CHECK(g != 0);
  CHECK_FALSE(needs_revalidation(s, g));
  CHECK(needs_revalidation(s, 0));  // unknown basis: always revalidated
  // Refused changes modify nothing, so the resolution basis holds.
  REQUIRE_FALSE(s.apply(AddMapping{100, ip("192.168.1.9"), ip("10.0.9.9"), mac("02:00:00:00:09:09"), "far0"}).ok());
  REQUIRE_FALSE(s.apply(RemoveVnic{77}).ok());
  CHECK(s.generation() == g);
  // Any applied change moves it, even one unrelated to a given resolution.
  REQUIRE(s.apply(AddTenant{300, "green"}).ok());
  CHECK(s.generation() != g);
  CHECK(needs_revalidation(s, g));
  // A copy holds the same level 1 and shares the generation; a moved-from
  // state lost its content and gets a new one; another state never shares it.
  Level1State copy = s;
  CHECK(copy.generation() == s.generation());
  const uint64_t before_move = s.generation();
  Level1State moved = std::move(s);
  CHECK(moved.generation() == before_move);
  CHECK(s.generation() != before_move);
  Level1State other = state();
  CHECK(other.generation() != copy.generation());
}

TEST_CASE("a committed resolution skips revalidation only if level 1 did not change; a change in between still undoes it") {
  Level1State s = state();
  Level2Shadow installed;
  PendingPunts pending;
  const EntryKey missed = egress_key(1, ip("192.168.1.9"));
  auto cs = change_set_for_miss(s, missed, 7, nullptr, nullptr, &installed);
  REQUIRE(cs);
  REQUIRE(pending.add(missed, *cs, s.generation()));
  const PendingPunts::Entry* pp = pending.find(7);
  REQUIRE(pp);
  CHECK(pp->level1_generation == s.generation());
  std::vector<Level2Entry> puts(pp->installs().begin(), pp->installs().end());
  installed.apply(cs->ops, 1);

  // Nothing changed: skipped, and revalidating would have let it stand.
  CHECK_FALSE(needs_revalidation(s, pp->level1_generation));
  CHECK(revalidate_resolution(s, installed, "rnic0", missed, puts).ops.empty());

  // The mapping is replaced between resolve and commit: revalidated, undone.
  REQUIRE(s.apply(RemoveMapping{100, ip("192.168.1.9")}).ok());
  REQUIRE(s.apply(AddMapping{100, ip("192.168.1.9"), ip("10.0.1.8"), mac("02:00:00:00:01:01"), "far0"}).ok());
  REQUIRE(needs_revalidation(s, pp->level1_generation));
  CHECK(revalidate_resolution(s, installed, "rnic0", missed, puts).ops.size() == 2);

  // The same for a removed source vNIC (its vNIC gone: nothing resolves).
  Level1State s2 = state();
  Level2Shadow inst2;
  auto cs2 = change_set_for_miss(s2, egress_key(2, ip("192.168.1.9")), 8, nullptr, nullptr, &inst2);
  REQUIRE(cs2);
  const uint64_t g2 = s2.generation();
  inst2.apply(cs2->ops, 1);
  REQUIRE(s2.apply(RemoveVnic{2}).ok());
  REQUIRE(needs_revalidation(s2, g2));
  std::vector<Level2Entry> puts2;
  for (const Level2Op& op : cs2->ops) puts2.push_back(op.entry);
  CHECK(revalidate_resolution(s2, inst2, "rnic0", egress_key(2, ip("192.168.1.9")), puts2).ops.size() == 2);
}

TEST_CASE("skipping revalidation never skips an undo: random level-1 changes between resolve and commit") {
  std::mt19937 rng(11);
  const uint32_t far[] = {ip("192.168.1.9"), ip("192.168.1.10"), ip("172.16.0.5"), ip("192.168.1.11")};
  int skipped = 0, undone = 0;
  for (int round = 0; round < 400; ++round) {
    Level1State s = state();
    Level2Shadow installed;
    const EntryKey missed = egress_key(1 + rng() % 2, far[rng() % 4]);
    auto cs = change_set_for_miss(s, missed, 1, nullptr, nullptr, &installed);
    if (!cs) continue;
    const uint64_t g = s.generation();
    std::vector<Level2Entry> puts;
    for (const Level2Op& op : cs->ops)
      if (!op.del) puts.push_back(op.entry);
    installed.apply(cs->ops, 1);
    // 0-3 changes, some refused, some irrelevant to this resolution.
    for (int k = rng() % 4; k > 0; --k) {
      uint32_t a = far[rng() % 4];
      switch (rng() % 6) {
        case 0: (void)s.apply(RemoveMapping{100, a}); break;
        case 1: (void)s.apply(AddMapping{100, a, ip("10.0.1.7") + static_cast<uint32_t>(rng() % 2), mac("02:00:00:00:01:00"), "far0", true}); break;
        case 2: (void)s.apply(RemoveVnic{1 + static_cast<uint32_t>(rng() % 3)}); break;
        case 3: (void)s.apply(AllowPeering{100, 200}); break;
        case 4: (void)s.apply(AddTenant{300 + static_cast<uint32_t>(rng() % 2), "x"}); break;
        default: (void)s.apply(AddMapping{100, a, ip("10.0.3.3"), mac("02:00:00:00:03:03"), "far0"}); break;
      }
    }
    ChangeSet undo = revalidate_resolution(s, installed, "rnic0", missed, puts);
    if (!needs_revalidation(s, g)) {
      ++skipped;
      REQUIRE(undo.ops.empty());  // the shortcut only ever skips a no-op
      auto again = change_set_for_miss(s, missed, 1, nullptr, nullptr, nullptr);
      REQUIRE(again);
      for (std::size_t i = 0; i < puts.size(); ++i) CHECK(again->ops[i].entry == puts[i]);
    }
    if (!undo.ops.empty()) {
      ++undone;
      REQUIRE(needs_revalidation(s, g));
    }
  }
  CHECK(skipped > 20);
  CHECK(undone > 20);
}

// --- vNIC entries (protocol v3) ----------------------------------------------

TEST_CASE("a vNIC's entry carries its tenant's partition key, withheld from an RNIC below v4") {
  Level1State s = state();  // tenants applied without a partition: unpartitioned
  CHECK(vnic_entry(s, *s.vnic(1)).vnic.pkey == 0);
  Level1State p;
  REQUIRE(p.apply(AddTenant{100, "blue", 5}).ok());
  REQUIRE(p.apply(AddRnic{"rnic0", ip("10.0.0.1"), mac("02:00:00:00:00:01"), 0xC000, 4}).ok());
  REQUIRE(p.apply(AddVnic{1, 100, "rnic0", ip("192.168.0.1"), mac("02:aa:00:00:00:01")}).ok());
  CHECK(vnic_entry(p, *p.vnic(1)).vnic.pkey == 0x8005);
  CHECK(vnic_entry(p, *p.vnic(1), false).vnic.pkey == 0);
  Level2Shadow installed;
  ChangeSet cs = changes_for_vnics(p, installed, "rnic0", [](const Vnic&) { return false; });
  REQUIRE(cs.ops.size() == 1);
  CHECK(cs.ops[0].entry.vnic.pkey == 0);
}

TEST_CASE("a vNIC's entry carries its id, overlay address, MAC and tenant") {
  Level1State s = state();
  Level2Entry e = vnic_entry(s, *s.vnic(1));
  CHECK(e.key == vnic_key(1));
  CHECK(e.vnic.vnic_id == 1);
  CHECK(e.vnic.overlay_ip == ip("192.168.0.1"));
  CHECK(e.vnic.overlay_mac == mac("02:aa:00:00:00:01"));
  CHECK(e.vnic.vni == 100);
}

TEST_CASE("removing a vNIC withdraws its own entry in the same change set as its flows") {
  Level1State s = state();
  Level2Shadow installed;
  ChangeSet setup;
  setup.put(vnic_entry(s, *s.vnic(1)));
  setup.put(vnic_entry(s, *s.vnic(2)));
  installed.apply(setup.ops, 1);
  auto flow = change_set_for_miss(s, egress_key(1, ip("192.168.1.9")), 1, nullptr, nullptr, &installed);
  REQUIRE(flow);
  installed.apply(flow->ops, 2);
  ChangeSet cs = deletions_for_vnic(installed, 1, 100, ip("192.168.0.1"));
  std::vector<EntryKey> dels;
  for (const Level2Op& op : cs.ops) {
    CHECK(op.del);
    dels.push_back(op.entry.key);
  }
  CHECK(std::count(dels.begin(), dels.end(), vnic_key(1)) == 1);
  CHECK(std::count(dels.begin(), dels.end(), egress_key(1, ip("192.168.1.9"))) == 1);
  CHECK(std::count(dels.begin(), dels.end(), ingress_key_vni(ip("10.0.1.7"), 100)) == 1);
  CHECK(std::count(dels.begin(), dels.end(), vnic_key(2)) == 0);  // the other vNIC stays
  installed.apply(cs.ops, 3);
  CHECK(installed.find(vnic_key(2)) != nullptr);
  CHECK(installed.entries().size() == 1);
}

TEST_CASE("withdrawing or replacing a mapping never touches vNIC entries") {
  Level1State s = state();
  Level2Shadow installed;
  ChangeSet setup;
  setup.put(vnic_entry(s, *s.vnic(1)));
  installed.apply(setup.ops, 1);
  auto flow = change_set_for_miss(s, egress_key(1, ip("192.168.1.9")), 1, nullptr, nullptr, &installed);
  REQUIRE(flow);
  installed.apply(flow->ops, 2);
  // vNIC 1's own address is a mapping too; its withdrawal is not the vNIC's.
  for (const MappingKey& m : {MappingKey{100, ip("192.168.0.1")}, MappingKey{100, ip("192.168.1.9")}})
    for (const Level2Op& op : deletions_for_mapping(installed, m).ops) CHECK_FALSE(op.entry.key.kind == EntryKind::kVnic);
  REQUIRE(s.apply(AddMapping{100, ip("192.168.1.9"), ip("10.0.3.3"), mac("02:00:00:00:03:00"), "far3", true}).ok());
  ChangeSet cs = changes_for_replaced_mappings(s, installed, "rnic0", {MappingKey{100, ip("192.168.1.9")}});
  CHECK_FALSE(cs.ops.empty());
  for (const Level2Op& op : cs.ops) CHECK_FALSE(op.entry.key.kind == EntryKind::kVnic);
}

TEST_CASE("reconciling vNIC entries puts the missing, fixes the stale and deletes the unknown") {
  Level1State s = state();
  REQUIRE(s.apply(AddRnic{"rnic1", ip("10.0.0.2"), mac("02:00:00:00:00:02"), 0xC000, 4}).ok());
  REQUIRE(s.apply(AddVnic{3, 200, "rnic1", ip("172.16.0.3"), mac("02:aa:00:00:00:03")}).ok());
  Level2Shadow installed;
  CHECK(changes_for_vnics(s, installed, "rnic0").ops.size() == 2);  // vNICs 1 and 2, not rnic1's 3
  Level2Entry stale = vnic_entry(s, *s.vnic(2));
  stale.vnic.overlay_mac = mac("02:bb:00:00:00:02");
  VnicAction gone;
  gone.vnic_id = 9;
  gone.overlay_ip = ip("192.168.0.9");
  gone.vni = 100;
  ChangeSet setup;
  setup.put(vnic_entry(s, *s.vnic(1)));
  setup.put(stale);
  setup.put(make_vnic_entry(gone));
  setup.put(vnic_entry(s, *s.vnic(3)));  // installed on the wrong RNIC
  installed.apply(setup.ops, 1);
  ChangeSet cs = changes_for_vnics(s, installed, "rnic0");
  REQUIRE(cs.ops.size() == 3);
  installed.apply(cs.ops, 2);
  CHECK(*installed.find(vnic_key(1)) == vnic_entry(s, *s.vnic(1)));
  CHECK(*installed.find(vnic_key(2)) == vnic_entry(s, *s.vnic(2)));
  CHECK(installed.find(vnic_key(9)) == nullptr);
  CHECK(installed.find(vnic_key(3)) == nullptr);
  CHECK(changes_for_vnics(s, installed, "rnic0").ops.empty());  // in agreement: nothing to send
}

TEST_CASE("a shadow forgets the vNIC entries an older RNIC cannot hold, digest included") {
  Level1State s = state();
  Level2Shadow with, without;
  auto flow = change_set_for_miss(s, egress_key(1, ip("192.168.1.9")), 1, nullptr, nullptr, &with);
  REQUIRE(flow);
  with.apply(flow->ops, 1);
  without.apply(flow->ops, 1);
  ChangeSet v;
  v.put(vnic_entry(s, *s.vnic(1)));
  v.put(vnic_entry(s, *s.vnic(2)));
  with.apply(v.ops, 2);
  CHECK(with.forget(EntryKind::kVnic) == 2);
  CHECK(with.digest() == without.digest());
  CHECK(with.version() == 2);
  CHECK(with.find(egress_key(1, ip("192.168.1.9"))) != nullptr);
}

TEST_CASE("entries level 1 no longer gives are found stale; the rest are not") {
  Level1State s = state();
  Level2Shadow installed;
  for (auto [vnic, dst] : {std::pair{1u, "192.168.1.9"}, {1u, "192.168.1.10"}, {2u, "192.168.0.1"}}) {
    auto cs = change_set_for_miss(s, egress_key(vnic, ip(dst)), 0, nullptr, nullptr, &installed);
    REQUIRE(cs);
    installed.apply(cs->ops, installed.version() + 1);
  }
  CHECK(stale_entries(s, installed).ops.empty());  // level 1 gives exactly what is installed
  // Level 1 changes behind the RNIC's back: .9 moves, .10 goes.
  REQUIRE(s.apply(AddMapping{100, ip("192.168.1.9"), ip("10.0.1.8"), mac("02:00:00:00:01:00"), "far2", true}).ok());
  REQUIRE(s.apply(RemoveMapping{100, ip("192.168.1.10")}).ok());
  ChangeSet st = stale_entries(s, installed);
  std::set<std::pair<uint32_t, uint32_t>> egress_gone;
  for (const Level2Op& op : st.ops) {
    CHECK(op.del);
    if (op.entry.key.kind == EntryKind::kEgress) egress_gone.insert({op.entry.key.word0, op.entry.key.word1});
  }
  CHECK(egress_gone == std::set<std::pair<uint32_t, uint32_t>>{{1, ip("192.168.1.9")}, {1, ip("192.168.1.10")}});
  // The vNIC-to-vNIC flow (2 -> .0.1) and its ingress entry stay.
  for (const Level2Op& op : st.ops) CHECK_FALSE(op.entry.key == egress_key(2, ip("192.168.0.1")));
  // A vNIC removed behind the RNIC's back: its flow entries are stale too.
  REQUIRE(s.apply(RemoveVnic{2}).ok());
  bool vnic2 = false;
  for (const Level2Op& op : stale_entries(s, installed).ops) vnic2 |= op.entry.key == egress_key(2, ip("192.168.0.1"));
  CHECK(vnic2);
}
