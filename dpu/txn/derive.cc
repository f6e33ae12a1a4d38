// Level-1 -> level-2 derivations.
#include "dpu/txn/derive.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

namespace tandem::dpu {

using common::EntryKind;
using common::Level2Entry;

std::optional<ChangeSet> change_set_for_miss(const Level1State& state, const common::EntryKey& missed,
                                             uint64_t tag, std::string* rnic, ResolveStatus* why,
                                             const Level2Shadow* installed, const PendingPunts* pending) {
  if (missed.kind != EntryKind::kEgress) {
    if (why) *why = ResolveStatus::kNoMapping;
    return std::nullopt;
  }
  // The egress entry's shadow slot is read again when the txn's digest is
  // computed; on a large shadow it is a cache (and TLB) miss, so start it now,
  // overlapping the level-1 lookup's own miss.
  if (installed) installed->prefetch(missed);
  Resolution r = state.resolve(missed.word0, missed.word1);
  if (why) *why = r.status;
  if (r.status != ResolveStatus::kOk) return std::nullopt;
  if (rnic) *rnic = r.rnic;
  ChangeSet cs;
  cs.tag = tag;
  cs.owner = r.mapping.vni;
  cs.ops.reserve(2);  // one allocation per resolution, not two and a copy
  cs.put(r.egress);
  const Level2Entry* have = pending ? pending->ingress_put(r.ingress.key) : nullptr;
  if (!have && installed) have = installed->find(r.ingress.key);
  if (have && !(have->ingress == r.ingress.ingress))
    cs.del(r.ingress.key);  // ambiguous: two (sender, receiver) pairs share the key
  else
    cs.put(r.ingress);
  return cs;
}

void warm_for_punts(const Level1State& state, const Level2Shadow* installed,
                    const std::vector<common::PuntMsg>& punts) noexcept {
  constexpr std::size_t kChunk = 32;
  MappingKey keys[kChunk];
  Mapping out[kChunk];
  bool hit[kChunk];
  // Per punt its egress key and, once its mapping is known, its ingress key
  // (the mapping's underlay IP, the tenant), which change_set_for_miss reads
  // to see whether the key is ambiguous: both shadow slots are loaded in one
  // loop per chunk.
  common::EntryKey shadow_keys[2 * kChunk];
  std::size_t n = 0, ns = 0;
  auto chunk = [&] {
    state.mappings().find_bulk(keys, n, out, hit);  // prefetches the chunk, then reads it
    if (installed) {
      for (std::size_t i = 0; i < n; ++i)
        if (hit[i]) shadow_keys[ns++] = common::ingress_key_vni(out[i].underlay_ip, keys[i].vni);
      installed->touch(shadow_keys, ns);
    }
    n = ns = 0;
  };
  for (const common::PuntMsg& p : punts) {
    if (p.missed.kind != EntryKind::kEgress) continue;
    const Vnic* v = state.vnic(p.missed.word0);
    if (!v) continue;
    shadow_keys[ns++] = p.missed;
    keys[n++] = MappingKey{v->vni, p.missed.word1};
    if (n == kChunk) chunk();
  }
  if (n) chunk();
}

namespace {
// A flow entry (egress or ingress) whose remote end is mapping m. vNIC
// entries derive from no mapping.
bool derived_from(const Level2Entry& e, const MappingKey& m) {
  if (e.key.kind == EntryKind::kVnic) return false;
  if (e.key.kind == EntryKind::kEgress) return e.egress.vni == m.vni && e.key.word1 == m.overlay_ip;
  return e.ingress.vni == m.vni && e.ingress.overlay_src_ip == m.overlay_ip;
}
bool belongs_to(const Level2Entry& e, uint32_t vnic) {
  if (e.key.kind == EntryKind::kEgress || e.key.kind == EntryKind::kVnic) return e.key.word0 == vnic;
  return e.ingress.local_vnic_id == vnic;
}
}  // namespace

ChangeSet deletions_for_mapping(const Level2Shadow& installed, const MappingKey& m) {
  ChangeSet cs;
  for (const auto& [k, e] : installed.entries())
    if (derived_from(e, m)) cs.del(k);
  return cs;
}

ChangeSet stale_entries(const Level1State& state, const Level2Shadow& installed) {
  ChangeSet cs;
  for (const auto& [k, e] : installed.entries()) {
    if (k.kind == EntryKind::kEgress) {
      Resolution r = state.resolve(k.word0, k.word1);
      if (r.status != ResolveStatus::kOk || !(r.egress.egress == e.egress)) cs.del(k);
    } else if (k.kind == EntryKind::kIngressVni || k.kind == EntryKind::kIngressQpn) {
      const Vnic* local = state.vnic(e.ingress.local_vnic_id);
      std::optional<Mapping> m = state.mapping(e.ingress.vni, e.ingress.overlay_src_ip);
      if (!local || local->overlay_ip != e.ingress.overlay_dst_ip || !m || m->underlay_ip != k.word0) cs.del(k);
    }
  }
  return cs;
}

ChangeSet deletions_for_mappings(const Level2Shadow& installed, const std::vector<MappingKey>& keys) {
  ChangeSet cs;
  if (keys.empty()) return cs;
  std::unordered_set<uint64_t> gone;
  for (const MappingKey& k : keys) gone.insert(uint64_t{k.vni} << 32 | k.overlay_ip);
  for (const auto& [k, e] : installed.entries()) {
    if (k.kind == EntryKind::kVnic) continue;
    const bool eg = k.kind == EntryKind::kEgress;
    const uint64_t from = eg ? uint64_t{e.egress.vni} << 32 | k.word1 : uint64_t{e.ingress.vni} << 32 | e.ingress.overlay_src_ip;
    if (gone.count(from)) cs.del(k);
  }
  return cs;
}

ChangeSet changes_for_replaced_mappings(const Level1State& state, const Level2Shadow& installed,
                                        const std::string& rnic, const std::vector<MappingKey>& keys) {
  auto packed = [](uint32_t vni, uint32_t ip) { return uint64_t{vni} << 32 | ip; };
  std::unordered_set<uint64_t> replaced;
  for (const MappingKey& k : keys) replaced.insert(packed(k.vni, k.overlay_ip));
  // What the RNIC should hold at each touched key once the change set commits.
  struct Want {
    bool present = false;
    bool ambiguous = false;  // two (sender, receiver) pairs want it: deleted, whatever comes later
    Level2Entry e;
  };
  std::unordered_map<common::EntryKey, Want, EntryKeyHash> want;
  std::vector<common::EntryKey> order;  // deterministic op order
  auto touch = [&](const common::EntryKey& k) -> Want& {
    auto [it, fresh] = want.try_emplace(k);
    if (fresh) order.push_back(k);
    return it->second;
  };
  std::set<std::pair<uint32_t, uint32_t>> pairs;  // (local vNIC, remote overlay IP)
  for (const auto& [k, e] : installed.entries()) {
    if (k.kind == EntryKind::kVnic) continue;  // a vNIC entry follows its vNIC, not mappings
    bool eg = k.kind == EntryKind::kEgress;
    uint32_t vni = eg ? e.egress.vni : e.ingress.vni;
    uint32_t ip = eg ? k.word1 : e.ingress.overlay_src_ip;
    if (!replaced.count(packed(vni, ip))) continue;
    touch(k);  // absent unless re-derived below
    pairs.insert({eg ? k.word0 : e.ingress.local_vnic_id, ip});
  }
  for (const auto& [vnic, ip] : pairs) {
    Resolution r = state.resolve(vnic, ip);
    if (r.status != ResolveStatus::kOk || r.rnic != rnic) continue;
    Want& eg = touch(r.egress.key);
    eg.present = true;
    eg.e = r.egress;
    auto it = want.find(r.ingress.key);
    const Level2Entry* have = it != want.end() ? (it->second.present ? &it->second.e : nullptr)
                                               : installed.find(r.ingress.key);
    Want& in = touch(r.ingress.key);
    if (in.ambiguous || (have && !(have->ingress == r.ingress.ingress))) {
      in.ambiguous = true;
      in.present = false;
    } else {
      in.present = true;
      in.e = r.ingress;
    }
  }
  ChangeSet cs;
  for (const common::EntryKey& k : order) {
    const Want& w = want[k];
    const Level2Entry* cur = installed.find(k);
    if (w.present && !(cur && *cur == w.e)) cs.put(w.e);
    if (!w.present && cur) cs.del(k);
  }
  return cs;
}

ChangeSet deletions_for_vnic(const Level2Shadow& installed, uint32_t vnic, uint32_t vni, uint32_t overlay_ip) {
  ChangeSet cs;
  MappingKey own{vni, overlay_ip};
  for (const auto& [k, e] : installed.entries())
    if (belongs_to(e, vnic) || derived_from(e, own)) cs.del(k);
  return cs;
}

common::Level2Entry vnic_entry(const Level1State& state, const Vnic& v, bool with_pkey) noexcept {
  common::VnicAction a;
  a.vnic_id = v.id;
  a.overlay_ip = v.overlay_ip;
  a.vni = v.vni;
  a.overlay_mac = v.overlay_mac;
  const Tenant* t = state.tenant(v.vni);
  a.pkey = with_pkey && t ? t->entry_pkey() : 0;
  return common::make_vnic_entry(a);
}

ChangeSet changes_for_vnics(const Level1State& state, const Level2Shadow& installed, const std::string& rnic,
                            const std::function<bool(const Vnic&)>& with_pkey) {
  ChangeSet cs;
  for (const auto& [id, v] : state.vnics()) {
    if (v.rnic != rnic) continue;
    Level2Entry want = vnic_entry(state, v, !with_pkey || with_pkey(v));
    const Level2Entry* have = installed.find(want.key);
    if (!have || !(*have == want)) cs.put(want);
  }
  for (const auto& [k, e] : installed.entries()) {
    if (k.kind != EntryKind::kVnic) continue;
    const Vnic* v = state.vnic(k.word0);
    if (!v || v->rnic != rnic) cs.del(k);
  }
  return cs;
}

ChangeSet revalidate_resolution(const Level1State& state, const Level2Shadow& installed, const std::string& rnic,
                                const common::EntryKey& missed, const std::vector<common::Level2Entry>& puts) {
  std::string target;
  ResolveStatus why = ResolveStatus::kOk;
  std::vector<common::Level2Entry> now;
  if (auto cs = change_set_for_miss(state, missed, 0, &target, &why, nullptr); cs && target == rnic)
    for (const Level2Op& op : cs->ops)
      if (!op.del) now.push_back(op.entry);
  ChangeSet undo;
  // It stands if resolving now would still put each entry it put. Not
  // `now == puts`: a resolution that found its ingress key ambiguous deleted
  // that key instead, so it put the egress entry alone (that comparison undid
  // every such resolution right after it committed; the next packet punted,
  // was resolved, and undone again).
  bool stands = true;
  for (const common::Level2Entry& e : puts) {
    bool same = false;
    for (const common::Level2Entry& n : now) same = same || n == e;
    stands = stands && same;
  }
  if (stands) return undo;
  for (const common::Level2Entry& e : puts) {
    const common::Level2Entry* cur = installed.find(e.key);
    if (cur != nullptr && *cur == e) undo.del(e.key);
  }
  return undo;
}

}  // namespace tandem::dpu
