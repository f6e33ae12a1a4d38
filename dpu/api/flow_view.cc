#include "dpu/api/flow_view.h"

#include <string>

#include "dpu/model/address.h"

namespace tandem::dpu {
namespace {

using nlohmann::json;

const Vnic* vnic_at(const Level1State& state, uint32_t vni, uint32_t ip) {
  for (uint32_t id : state.vnics_of(vni))
    if (const Vnic* v = state.vnic(id); v && v->overlay_ip == ip) return v;
  return nullptr;
}

// The installed entry with the same key as `want` (kind and key words), or null.
json installed(const json& shadow, const json& want) {
  for (const json& e : shadow["entries"]) {
    if (e.value("kind", "") != want.value("kind", "")) continue;
    const bool same = want["kind"] == "egress"
                          ? e["vnic"] == want["vnic"] && e["dst_overlay_ip"] == want["dst_overlay_ip"]
                          : e["underlay_src_ip"] == want["underlay_src_ip"] && e["key"] == want["key"];
    if (same) return e;
  }
  return nullptr;
}

json entry_row(const char* role, const json& want, const json& shadow) {
  json have = shadow.is_null() ? json(nullptr) : installed(shadow, want);
  // An egress entry is installed when a QP first needs it (the RNIC punts), so
  // "absent" before any traffic is normal; a different one is not.
  const char* status = have.is_null() ? "absent" : (have == want ? "installed" : "differs");
  return {{"role", role}, {"status", status}, {"expected", want}, {"installed", have}};
}

// One end of the flow: the vNIC `from` sending to `to_ip`, on its RNIC.
json end_view(const Level1State& state, const AgentHooks* hooks, const Vnic& from, uint32_t to_ip) {
  json end = {{"vnic", vnic_json(from)}, {"rnic", from.rnic}};
  json shadow = hooks ? hooks->level2(from.rnic) : json(nullptr);
  json link = nullptr;
  if (hooks)
    for (const json& l : hooks->rnics())
      if (l.value("name", "") == from.rnic) link = l;
  if (!link.is_null()) {
    const json committed = link["bar"].value("table", json(nullptr));
    end["channel"] = {{"state", link["state"]},
                      {"rnic_state", link["bar"]["state"]},
                      {"protocol_version", link["protocol_version"]},
                      {"rnic_pid", link["bar"]["rnic_pid"]},
                      {"txn_in_flight", link["txn_in_flight"]},
                      {"queued_change_sets", link["queued_change_sets"]}};
    end["table"] = {{"shadow_version", link["table_version"]},
                    {"shadow_digest", link["table_digest"]},
                    {"shadow_entries", link["table_entries"]},
                    {"committed", committed},
                    {"in_sync", !committed.is_null() && committed.value("version", uint64_t{0}) == link["table_version"] &&
                                    committed.value("digest", uint64_t{0}) == link["table_digest"]}};
    const json& tp = link["punts"].value("tenants", json::object());
    if (auto it = tp.find(std::to_string(from.vni)); it != tp.end()) end["tenant_punts"] = *it;
  } else {
    end["channel"] = {{"state", "no_channel"}};
  }
  json entries = json::array();
  const Resolution r = state.resolve(from.id, to_ip);
  end["resolve"] = resolve_status_name(r.status);
  if (r.status == ResolveStatus::kOk) {
    entries.push_back(entry_row("egress", level2_entry_json(r.egress), shadow));
    entries.push_back(entry_row("ingress", level2_entry_json(r.ingress), shadow));
  }
  for (const json& e : shadow.is_null() ? json::array() : shadow["entries"])
    if (e.value("kind", "") == "vnic" && e.value("vnic", 0u) == from.id)
      entries.push_back({{"role", "vnic"}, {"status", "installed"}, {"installed", e}});
  end["entries"] = entries;
  return end;
}

}  // namespace

json flow_view(const Level1State& state, const Store& store, const AgentHooks* hooks, uint32_t vni, uint32_t src_ip,
               uint32_t dst_ip) {
  const Tenant* t = state.tenant(vni);
  if (!t) throw RequestError("no tenant with VNI " + std::to_string(vni));
  const Vnic* src = vnic_at(state, vni, src_ip);
  const Vnic* dst = vnic_at(state, vni, dst_ip);
  if (!src && !dst)
    throw RequestError("neither " + format_ipv4(src_ip) + " nor " + format_ipv4(dst_ip) + " is a vNIC of tenant " +
                       std::to_string(vni) + " (vnic list shows them)");
  json l1 = {{"tenant", tenant_json(*t)}, {"store_version", store.level1_version()}};
  json maps = json::array();
  for (uint32_t ip : {src_ip, dst_ip}) {
    json m = {{"overlay_ip", format_ipv4(ip)}};
    if (auto hit = state.mappings().find({vni, ip})) {
      m.update({{"underlay_ip", format_ipv4(hit->underlay_ip)}, {"next_hop_mac", format_mac(hit->next_hop_mac)},
                {"rnic", state.rnic_name(hit->rnic)}});
    } else {
      m["missing"] = true;  // a peered tenant's address, or none: resolve says which
    }
    maps.push_back(m);
  }
  l1["mappings"] = maps;
  json ends = json::array();
  if (src) ends.push_back(end_view(state, hooks, *src, dst_ip));
  if (dst) ends.push_back(end_view(state, hooks, *dst, src_ip));
  return {{"vni", vni}, {"src", format_ipv4(src_ip)}, {"dst", format_ipv4(dst_ip)}, {"level1", l1}, {"ends", ends}};
}

}  // namespace tandem::dpu
