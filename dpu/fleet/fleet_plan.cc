#include "dpu/fleet/fleet_plan.h"

#include <map>
#include <optional>
#include <unordered_map>

namespace tandem::dpu::fleet {
namespace {

struct Planner {
  const DesiredState& d;
  const std::string& me;
  const Level1State& s;
  Plan out;
  std::set<uint32_t> vnics_removed;

  std::optional<AddVnic> want_vnic(uint32_t id) const {
    auto it = d.vnics().find(id);
    if (it == d.vnics().end() || it->second.server != me) return std::nullopt;
    return it->second.vnic;
  }

  std::optional<AddMapping> want_mapping(uint64_t k) const {
    const uint32_t vni = static_cast<uint32_t>(k >> 32), ip = static_cast<uint32_t>(k);
    if (const FleetVnic* v = d.vnic_at(vni, ip)) {
      if (v->server == me) return std::nullopt;  // the local vNIC carries it
      auto r = d.rnics().find(v->vnic.rnic);
      if (r == d.rnics().end() || r->second.server != v->server) return std::nullopt;  // placed on an unknown RNIC
      return AddMapping{vni, ip, r->second.rnic.underlay_ip, r->second.rnic.mac, r->first};
    }
    auto it = d.mappings().find(k);
    if (it == d.mappings().end()) return std::nullopt;
    return it->second;
  }

  // The vNIC level 1 has at an address (before this plan's removals); an
  // index built on first use, as a batch asks for thousands of addresses.
  mutable std::unordered_map<uint64_t, const Vnic*> by_addr;
  mutable bool indexed = false;
  const Vnic* state_vnic_at(uint32_t vni, uint32_t ip) const {
    if (!indexed) {
      for (const auto& [id, v] : s.vnics()) by_addr.emplace(addr_key(v.vni, v.overlay_ip), &v);
      indexed = true;
    }
    auto it = by_addr.find(addr_key(vni, ip));
    return it == by_addr.end() ? nullptr : it->second;
  }

  static bool same(const AddVnic& a, const Vnic& b) {
    return a.vni == b.vni && a.rnic == b.rnic && a.overlay_ip == b.overlay_ip && a.overlay_mac == b.overlay_mac;
  }
};

}  // namespace

Plan plan_changes(const DesiredState& d, const std::string& server, const Level1State& s, const Touched& t0) {
  Planner p{d, server, s, {}, {}, {}, false};
  Touched t = t0;
  if (t.all) {
    for (const auto& [vni, x] : d.tenants()) t.tenants.insert(vni);
    for (const auto& [vni, x] : s.tenants()) t.tenants.insert(vni);
    for (const auto& [n, x] : d.rnics()) t.rnics.insert(n);
    for (const auto& [id, x] : d.vnics()) t.vnics.insert(id);
    for (const auto& [id, x] : s.vnics()) t.vnics.insert(id);
    for (const auto& [k, x] : d.mappings()) t.mappings.insert(k);
    for (const auto& [id, x] : d.vnics()) t.mappings.insert(addr_key(x.vnic.vni, x.vnic.overlay_ip));
    s.mappings().for_each([&](const MappingKey& k, const Mapping&) { t.mappings.insert(addr_key(k.vni, k.overlay_ip)); });
    for (const auto& pr : d.peerings()) t.peerings.insert(pr);
    for (const auto& [a, b] : s.peerings())
      if (a < b) t.peerings.insert({a, b});
  }
  // An RNIC that changed moves the derived mappings of every vNIC on it.
  for (const std::string& r : t.rnics)
    for (const auto& [id, v] : d.vnics())
      if (v.vnic.rnic == r) t.mappings.insert(addr_key(v.vnic.vni, v.vnic.overlay_ip));
  // A vNIC that changed may free or take its old and new addresses.
  for (uint32_t id : t.vnics) {
    if (const Vnic* v = s.vnic(id)) t.mappings.insert(addr_key(v->vni, v->overlay_ip));
    if (auto it = d.vnics().find(id); it != d.vnics().end())
      t.mappings.insert(addr_key(it->second.vnic.vni, it->second.vnic.overlay_ip));
  }

  std::vector<Change>& out = p.out.changes;
  // 1. vNICs leaving (or changing: removed, then added again below).
  for (uint32_t id : t.vnics) {
    const Vnic* have = s.vnic(id);
    if (!have) continue;
    auto want = p.want_vnic(id);
    if (!want || !Planner::same(*want, *have)) {
      out.push_back(RemoveVnic{id});
      p.vnics_removed.insert(id);
    }
  }
  // 2. Mappings leaving (a kept local vNIC's own mapping is not ours to remove).
  std::map<uint64_t, AddMapping> mapping_puts;
  for (uint64_t k : t.mappings) {
    const uint32_t vni = static_cast<uint32_t>(k >> 32), ip = static_cast<uint32_t>(k);
    const Vnic* owner = p.state_vnic_at(vni, ip);
    const bool owned = owner && !p.vnics_removed.count(owner->id);
    if (owned) continue;
    std::optional<Mapping> have = owner ? std::nullopt : s.mapping(vni, ip);
    auto want = p.want_mapping(k);
    if (!want) {
      if (have) out.push_back(RemoveMapping{vni, ip});
      continue;
    }
    if (have && have->underlay_ip == want->underlay_ip && have->next_hop_mac == want->next_hop_mac &&
        s.rnic_name(have->rnic) == want->rnic)
      continue;
    want->replace = have.has_value();  // in place: never a moment without it
    mapping_puts[k] = *want;
  }
  // 3. Tenants added or changed.
  for (uint32_t vni : t.tenants) {
    auto w = d.tenants().find(vni);
    if (w == d.tenants().end()) continue;
    const Tenant* have = s.tenant(vni);
    if (!have) {
      out.push_back(w->second);
    } else {
      if (have->name != w->second.name || have->partition != w->second.partition)
        p.out.unsupported.push_back("tenant " + std::to_string(vni) +
                                    ": name and partition are fixed once created (delete and add it again)");
      if (have->flow_quota != w->second.flow_quota) out.push_back(SetTenantQuota{vni, w->second.flow_quota});
    }
  }
  // 4. This server's RNICs.
  for (const std::string& n : t.rnics) {
    auto w = d.rnics().find(n);
    const Rnic* have = s.rnic(n);
    if (w == d.rnics().end() || w->second.server != server) {
      if (have) p.out.unsupported.push_back("RNIC " + n + ": level 1 cannot remove an RNIC (it stays)");
      continue;
    }
    const AddRnic& r = w->second.rnic;
    if (!have) {
      out.push_back(r);
    } else if (have->underlay_ip != r.underlay_ip || have->mac != r.mac || have->path_base_port != r.path_base_port ||
               have->path_count != r.path_count) {
      p.out.unsupported.push_back("RNIC " + n + ": its addresses and paths are fixed once added");
    }
  }
  // 5. vNICs arriving.
  for (uint32_t id : t.vnics)
    if (auto want = p.want_vnic(id); want && (!s.vnic(id) || p.vnics_removed.count(id)))
      out.push_back(*want);  // a mapping its address had (it lived elsewhere) went in step 2
  // 6. Mappings added or replaced.
  for (auto& [k, m] : mapping_puts) {
    // A replace of a key a vNIC removed above is a plain add now.
    const uint32_t vni = static_cast<uint32_t>(k >> 32), ip = static_cast<uint32_t>(k);
    if (const Vnic* o = p.state_vnic_at(vni, ip); o && p.vnics_removed.count(o->id)) m.replace = false;
    out.push_back(m);
  }
  // 7. Peerings.
  for (const auto& [a, b] : t.peerings) {
    const bool want = d.peerings().count({a, b}) > 0, have = s.peerings().count({a, b}) > 0;
    if (want && !have) out.push_back(AllowPeering{a, b});
    if (!want && have && d.tenants().count(a) && d.tenants().count(b))
      p.out.unsupported.push_back("peering " + std::to_string(a) + "/" + std::to_string(b) +
                                  ": level 1 cannot remove a peering (it goes with either tenant)");
  }
  // 8. Tenants leaving (their vNICs and mappings went above).
  for (uint32_t vni : t.tenants)
    if (!d.tenants().count(vni) && s.tenant(vni)) out.push_back(RemoveTenant{vni});
  return std::move(p.out);
}

}  // namespace tandem::dpu::fleet
