#include "dpu/fleet/fleet_admin.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "dpu/fleet/desired_state.h"
#include "dpu/model/address.h"

namespace tandem::dpu::fleet {
namespace {

using nlohmann::json;

struct Refused : std::runtime_error {
  std::string code;
  Refused(const std::string& m, std::string c = "bad_request") : std::runtime_error(m), code(std::move(c)) {}
};

const json& field(const json& r, const char* f) {
  auto it = r.find(f);
  if (it == r.end()) throw Refused(std::string("missing field \"") + f + "\"");
  return *it;
}
uint64_t u64(const json& r, const char* f) {
  const json& v = field(r, f);
  if (!v.is_number_unsigned()) throw Refused(std::string("field \"") + f + "\" must be a non-negative integer");
  return v.get<uint64_t>();
}
std::string str(const json& r, const char* f) {
  const json& v = field(r, f);
  if (!v.is_string()) throw Refused(std::string("field \"") + f + "\" must be a string");
  return v.get<std::string>();
}
uint32_t ip_of(const json& r, const char* f) {
  auto ip = parse_ipv4(str(r, f));
  if (!ip) throw Refused(std::string("field \"") + f + "\" is not an IPv4 address");
  return *ip;
}

// The agents' parser judges the value: what it refuses is not written.
void validate(const std::string& key, const json& value) {
  DesiredState d;
  Touched t;
  d.put(key, value.dump(), t);
  if (d.malformed()) throw Refused(d.last_error(), "bad_value");
}

std::optional<json> get_json(EtcdClient& c, const std::string& key, int64_t* mod_revision = nullptr) {
  auto kv = c.get(key);
  if (!kv) return std::nullopt;
  if (mod_revision) *mod_revision = kv->mod_revision;
  json j = json::parse(kv->value, nullptr, false);
  if (j.is_discarded()) throw Refused(key + " holds no JSON", "bad_value");
  return j;
}

using Target = TxnCompare::Target;

// Puts key=value if the key does not exist (and every `also` still holds).
json create(EtcdClient& c, const std::string& key, const json& value, std::vector<TxnCompare> also = {},
            const char* what = "key") {
  validate(key, value);
  also.push_back(TxnCompare{key, Target::kCreateRevision, 0});
  auto [ok, rev] = c.txn(also, {TxnOp{key, value.dump(), 0}});
  if (!ok) throw Refused(std::string(what) + " exists already, or what it refers to changed meanwhile: " + key, "duplicate");
  return json{{"ok", true}, {"revision", rev}, {"key", key}};
}

json remove(EtcdClient& c, const std::string& key, const char* what) {
  auto kv = c.get(key);
  if (!kv) throw Refused(std::string(what) + " does not exist: " + key, "unknown");
  auto [ok, rev] = c.txn({TxnCompare{key, Target::kModRevision, kv->mod_revision}}, {TxnOp{key, std::nullopt, 0}});
  if (!ok) throw Refused(key + " changed meanwhile; try again", "conflict");
  return json{{"ok", true}, {"revision", rev}, {"key", key}};
}

json tenant_add(EtcdClient& c, const json& r) {
  uint32_t vni = static_cast<uint32_t>(u64(r, "vni"));
  uint64_t partition = r.contains("partition") ? u64(r, "partition") : 0;
  if (partition == 0) {  // the lowest partition no tenant in etcd has
    std::set<uint64_t> used;
    for (const KeyValue& kv : c.range_prefix(std::string(kDesiredPrefix) + "tenants/").kvs) {
      json j = json::parse(kv.value, nullptr, false);
      if (j.is_object() && j.contains("partition") && j["partition"].is_number_unsigned())
        used.insert(j["partition"].get<uint64_t>());
    }
    partition = 1;
    while (used.count(partition)) ++partition;
    if (partition > kMaxPartition) throw Refused("every partition is taken", "bad_value");
  }
  json v{{"name", str(r, "name")}, {"partition", partition}};
  if (r.contains("flow_quota")) v["flow_quota"] = u64(r, "flow_quota");
  json out = create(c, tenant_key(vni), v, {}, "tenant");
  out["partition"] = partition;
  return out;
}

json tenant_del(EtcdClient& c, const json& r) {
  uint32_t vni = static_cast<uint32_t>(u64(r, "vni"));
  std::size_t users = 0;
  for (const char* sub : {"vnics/", "mappings/"})
    for (const KeyValue& kv : c.range_prefix(std::string(kDesiredPrefix) + sub).kvs) {
      json j = json::parse(kv.value, nullptr, false);
      if (sub[0] == 'v' ? (j.is_object() && j.value("vni", 0u) == vni)
                        : kv.key.rfind(std::string(kDesiredPrefix) + "mappings/" + std::to_string(vni) + "/", 0) == 0)
        ++users;
    }
  if (users) throw Refused("tenant " + std::to_string(vni) + " still has " + std::to_string(users) + " vNICs/mappings", "in_use");
  auto t = c.get(tenant_key(vni));
  if (!t) throw Refused("tenant " + std::to_string(vni) + " does not exist", "unknown");
  // Its peerings go with it, in the same transaction.
  std::vector<TxnCompare> cmp{TxnCompare{tenant_key(vni), Target::kModRevision, t->mod_revision}};
  std::vector<TxnOp> ops{TxnOp{tenant_key(vni), std::nullopt, 0}};
  for (const KeyValue& kv : c.range_prefix(std::string(kDesiredPrefix) + "peerings/").kvs) {
    std::string tail = kv.key.substr(kDesiredPrefix.size() + 9);
    std::string a = tail.substr(0, tail.find('/')), b = tail.substr(tail.find('/') + 1);
    if (a == std::to_string(vni) || b == std::to_string(vni)) {
      cmp.push_back(TxnCompare{kv.key, Target::kModRevision, kv.mod_revision});
      ops.push_back(TxnOp{kv.key, std::nullopt, 0});
    }
  }
  auto [ok, rev] = c.txn(cmp, ops);
  if (!ok) throw Refused("tenant " + std::to_string(vni) + " or its peerings changed meanwhile; try again", "conflict");
  return json{{"ok", true}, {"revision", rev}, {"key", tenant_key(vni)}, {"peerings_removed", ops.size() - 1}};
}

json rnic_value(const json& r) {
  return {{"underlay_ip", str(r, "underlay_ip")}, {"mac", str(r, "mac")},
          {"path_base_port", r.contains("path_base_port") ? u64(r, "path_base_port") : 0},
          {"path_count", r.contains("path_count") ? u64(r, "path_count") : 1}};
}

// RNIC names are fleet-wide: the same name under another server is refused.
void rnic_name_free(EtcdClient& c, const std::string& server, const std::string& name) {
  for (const KeyValue& kv : c.range_prefix(std::string(kDesiredPrefix) + "servers/").kvs)
    if (kv.key.size() > name.size() && kv.key.ends_with("/rnics/" + name) && kv.key != rnic_key(server, name))
      throw Refused("RNIC " + name + " is registered already: " + kv.key, "duplicate");
}

json vnic_add(EtcdClient& c, const json& r) {
  uint32_t id = static_cast<uint32_t>(u64(r, "id")), vni = static_cast<uint32_t>(u64(r, "vni"));
  std::string server = str(r, "server"), rnic = str(r, "rnic");
  json v{{"vni", vni}, {"server", server}, {"rnic", rnic}, {"overlay_ip", str(r, "overlay_ip")},
         {"overlay_mac", str(r, "overlay_mac")}};
  int64_t trev = 0, rrev = 0;
  if (!get_json(c, tenant_key(vni), &trev)) throw Refused("tenant " + std::to_string(vni) + " does not exist", "unknown_tenant");
  if (!get_json(c, rnic_key(server, rnic), &rrev))
    throw Refused("server " + server + " has no RNIC " + rnic, "unknown_rnic");
  uint32_t ip = ip_of(r, "overlay_ip");
  for (const KeyValue& kv : c.range_prefix(std::string(kDesiredPrefix) + "vnics/").kvs) {
    json o = json::parse(kv.value, nullptr, false);
    if (o.is_object() && o.value("vni", 0u) == vni && parse_ipv4(o.value("overlay_ip", "")) == ip)
      throw Refused(format_ipv4(ip) + " in tenant " + std::to_string(vni) + " belongs to " + kv.key, "duplicate");
  }
  return create(c, vnic_key(id), v,
                {TxnCompare{tenant_key(vni), Target::kModRevision, trev},
                 TxnCompare{rnic_key(server, rnic), Target::kModRevision, rrev}},
                "vNIC");
}

// A vNIC placed on another server's RNIC, in one transaction: every agent
// sees the old placement or the new one, never neither.
json vnic_move(EtcdClient& c, const json& r) {
  uint32_t id = static_cast<uint32_t>(u64(r, "id"));
  std::string server = str(r, "server"), rnic = str(r, "rnic");
  int64_t vrev = 0, rrev = 0;
  auto v = get_json(c, vnic_key(id), &vrev);
  if (!v) throw Refused("vNIC " + std::to_string(id) + " does not exist", "unknown_vnic");
  if (!get_json(c, rnic_key(server, rnic), &rrev)) throw Refused("server " + server + " has no RNIC " + rnic, "unknown_rnic");
  json from = {{"server", (*v)["server"]}, {"rnic", (*v)["rnic"]}};
  (*v)["server"] = server;
  (*v)["rnic"] = rnic;
  validate(vnic_key(id), *v);
  auto [ok, rev] = c.txn({TxnCompare{vnic_key(id), Target::kModRevision, vrev},
                          TxnCompare{rnic_key(server, rnic), Target::kModRevision, rrev}},
                         {TxnOp{vnic_key(id), v->dump(), 0}});
  if (!ok) throw Refused("vNIC " + std::to_string(id) + " changed meanwhile; try again", "conflict");
  return json{{"ok", true}, {"revision", rev}, {"from", from}, {"to", {{"server", server}, {"rnic", rnic}}}};
}

json mapping_value(const json& r) {
  return {{"underlay_ip", str(r, "underlay_ip")}, {"next_hop_mac", str(r, "next_hop_mac")}, {"rnic", str(r, "rnic")}};
}

json mapping_add(EtcdClient& c, const json& r) {
  uint32_t vni = static_cast<uint32_t>(u64(r, "vni")), ip = ip_of(r, "overlay_ip");
  std::string key = mapping_key(vni, ip);
  json v = mapping_value(r);
  if (r.value("replace", false)) {
    validate(key, v);
    return json{{"ok", true}, {"revision", c.put(key, v.dump())}, {"key", key}};
  }
  int64_t trev = 0;
  if (!get_json(c, tenant_key(vni), &trev)) throw Refused("tenant " + std::to_string(vni) + " does not exist", "unknown_tenant");
  return create(c, key, v, {TxnCompare{tenant_key(vni), Target::kModRevision, trev}}, "mapping");
}

// CSV rows vni,overlay_ip,underlay_ip,next_hop_mac,rnic (the agent's import
// format), written `per_txn` rows per etcd transaction (etcd allows 128).
json mapping_import(EtcdClient& c, const json& r) {
  std::string path = str(r, "path");
  uint64_t per_txn = r.contains("per_txn") ? u64(r, "per_txn") : 100;
  if (per_txn == 0 || per_txn > 128) throw Refused("per_txn must be 1..128 (etcd's --max-txn-ops)");
  std::ifstream in(path);
  if (!in) throw Refused("cannot open " + path);
  std::vector<std::pair<std::string, std::string>> rows;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line.rfind("vni", 0) == 0) continue;
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    if (f.size() != 5) throw Refused(path + ":" + std::to_string(n) + ": expected 5 fields");
    uint64_t v = 0;
    try {
      v = std::stoull(f[0]);
    } catch (...) {
      throw Refused(path + ":" + std::to_string(n) + ": bad VNI");
    }
    auto ip = parse_ipv4(f[1]);
    if (!ip) throw Refused(path + ":" + std::to_string(n) + ": bad overlay IP");
    std::string key = mapping_key(static_cast<uint32_t>(v), *ip);
    json val{{"underlay_ip", f[2]}, {"next_hop_mac", f[3]}, {"rnic", f[4]}};
    try {
      validate(key, val);
    } catch (const Refused& e) {
      throw Refused(path + ":" + std::to_string(n) + ": " + e.what(), e.code);
    }
    rows.emplace_back(std::move(key), val.dump());
  }
  int64_t rev = 0;
  for (std::size_t i = 0; i < rows.size(); i += per_txn) {
    std::vector<TxnOp> ops;
    for (std::size_t k = i; k < rows.size() && k < i + per_txn; ++k) ops.push_back(TxnOp{rows[k].first, rows[k].second, 0});
    rev = c.txn({}, ops).second;
  }
  return json{{"ok", true}, {"imported", rows.size()}, {"revision", rev}};
}

json show(EtcdClient& c) {
  RangeResult all = c.range_prefix(std::string(kDesiredPrefix));
  DesiredState d;
  Touched t;
  for (const KeyValue& kv : all.kvs) d.put(kv.key, kv.value, t);
  json tenants = json::array(), rnics = json::array(), vnics = json::array(), peerings = json::array();
  for (const auto& [vni, x] : d.tenants())
    tenants.push_back({{"vni", vni}, {"name", x.name}, {"partition", x.partition}, {"flow_quota", x.flow_quota}});
  for (const auto& [n, x] : d.rnics())
    rnics.push_back({{"server", x.server}, {"name", n}, {"underlay_ip", format_ipv4(x.rnic.underlay_ip)},
                     {"mac", format_mac(x.rnic.mac)}, {"path_base_port", x.rnic.path_base_port},
                     {"path_count", x.rnic.path_count}});
  for (const auto& [id, x] : d.vnics())
    vnics.push_back({{"id", id}, {"vni", x.vnic.vni}, {"server", x.server}, {"rnic", x.vnic.rnic},
                     {"overlay_ip", format_ipv4(x.vnic.overlay_ip)}, {"overlay_mac", format_mac(x.vnic.overlay_mac)}});
  for (const auto& [a, b] : d.peerings()) peerings.push_back({{"a", a}, {"b", b}});
  return json{{"ok", true},         {"revision", all.revision}, {"tenants", tenants},
              {"rnics", rnics},     {"vnics", vnics},           {"mappings", d.mappings().size()},
              {"peerings", peerings}, {"malformed", d.malformed()}, {"last_error", d.last_error()}};
}

// Which servers have brought their level 1 to the newest desired revision.
json status(EtcdClient& c) {
  auto [newest, store_rev] = c.newest_mod_revision(std::string(kDesiredPrefix));
  std::set<std::string> servers;
  for (const KeyValue& kv : c.range_prefix(std::string(kDesiredPrefix) + "servers/").kvs) {
    std::string tail = kv.key.substr(kDesiredPrefix.size() + 8);
    servers.insert(tail.substr(0, tail.find('/')));
  }
  std::map<std::string, json> st;
  for (const KeyValue& kv : c.range_prefix(std::string(kStatusPrefix)).kvs) {
    std::string server = kv.key.substr(kStatusPrefix.size());
    json j = json::parse(kv.value, nullptr, false);
    st[server] = j.is_discarded() ? json::object() : j;
    servers.insert(server);
  }
  json rows = json::array();
  std::size_t converged = 0;
  for (const std::string& s : servers) {
    json row{{"server", s}};
    auto it = st.find(s);
    if (it == st.end()) {
      row.update({{"health", "no status (agent down or never started)"}, {"applied_revision", 0}, {"converged", false}});
    } else {
      const json& j = it->second;
      int64_t applied = j.value("applied_revision", int64_t{0});
      bool ok = applied >= newest;
      converged += ok;
      row.update({{"health", j.value("health", "?")}, {"applied_revision", applied}, {"converged", ok},
                  {"rejected", j.value("changes_rejected", 0)}, {"etcd_connected", j.value("/etcd/connected"_json_pointer, false)},
                  {"rnics", j.value("rnics", json::object())}});
    }
    rows.push_back(row);
  }
  return json{{"ok", true}, {"desired_revision", newest}, {"etcd_revision", store_rev}, {"servers", rows},
              {"converged", converged}, {"all_converged", converged == servers.size()}};
}

json dispatch(EtcdClient& c, const std::string& cmd, const json& r) {
  if (cmd == "fleet.tenant.add") return tenant_add(c, r);
  if (cmd == "fleet.tenant.del") return tenant_del(c, r);
  if (cmd == "fleet.rnic.add") {
    std::string server = str(r, "server"), name = str(r, "name");
    rnic_name_free(c, server, name);
    return create(c, rnic_key(server, name), rnic_value(r), {}, "RNIC");
  }
  if (cmd == "fleet.rnic.del") return remove(c, rnic_key(str(r, "server"), str(r, "name")), "RNIC");
  if (cmd == "fleet.vnic.add") return vnic_add(c, r);
  if (cmd == "fleet.vnic.del") return remove(c, vnic_key(static_cast<uint32_t>(u64(r, "id"))), "vNIC");
  if (cmd == "fleet.vnic.move") return vnic_move(c, r);
  if (cmd == "fleet.mapping.add") return mapping_add(c, r);
  if (cmd == "fleet.mapping.del")
    return remove(c, mapping_key(static_cast<uint32_t>(u64(r, "vni")), ip_of(r, "overlay_ip")), "mapping");
  if (cmd == "fleet.mapping.import") return mapping_import(c, r);
  if (cmd == "fleet.peering.add") {
    uint32_t a = static_cast<uint32_t>(u64(r, "a")), b = static_cast<uint32_t>(u64(r, "b"));
    int64_t ra = 0, rb = 0;
    if (!get_json(c, tenant_key(a), &ra) || !get_json(c, tenant_key(b), &rb))
      throw Refused("both tenants must exist", "unknown_tenant");
    return create(c, peering_key(a, b), json::object(),
                  {TxnCompare{tenant_key(a), Target::kModRevision, ra}, TxnCompare{tenant_key(b), Target::kModRevision, rb}},
                  "peering");
  }
  if (cmd == "fleet.show") return show(c);
  if (cmd == "fleet.status") return status(c);
  throw Refused("unknown command \"" + cmd + "\"");
}

}  // namespace

json fleet_command(const EtcdOptions& etcd, const json& request) {
  try {
    EtcdClient c(etcd);
    return dispatch(c, str(request, "cmd"), request);
  } catch (const Refused& e) {
    return json{{"ok", false}, {"error", e.what()}, {"code", e.code}};
  } catch (const EtcdError& e) {
    return json{{"ok", false}, {"error", e.what()}, {"code", "etcd"}};
  } catch (const std::exception& e) {
    return json{{"ok", false}, {"error", e.what()}, {"code", "internal"}};
  }
}

}  // namespace tandem::dpu::fleet
