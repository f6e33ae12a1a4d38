#include "dpu/fleet/desired_state.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "dpu/model/address.h"

namespace tandem::dpu::fleet {
namespace {

using nlohmann::json;

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> out;
  while (true) {
    auto p = s.find('/');
    out.push_back(s.substr(0, p));
    if (p == std::string_view::npos) return out;
    s.remove_prefix(p + 1);
  }
}

std::optional<uint32_t> number(std::string_view s, uint64_t max) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v > max) return std::nullopt;
  return static_cast<uint32_t>(v);
}

// Field readers: a bad field throws (the caller turns it into malformed()).
struct Fields {
  const json& j;
  const json& at(const char* f) const {
    auto it = j.find(f);
    if (it == j.end()) throw std::invalid_argument(std::string("missing \"") + f + "\"");
    return *it;
  }
  uint64_t u(const char* f, uint64_t max, std::optional<uint64_t> dflt = std::nullopt) const {
    if (dflt && !j.contains(f)) return *dflt;
    const json& v = at(f);
    if (!v.is_number_unsigned() || v.get<uint64_t>() > max)
      throw std::invalid_argument(std::string("\"") + f + "\" must be an integer 0.." + std::to_string(max));
    return v.get<uint64_t>();
  }
  std::string s(const char* f) const {
    const json& v = at(f);
    if (!v.is_string()) throw std::invalid_argument(std::string("\"") + f + "\" must be a string");
    return v.get<std::string>();
  }
  uint32_t ip(const char* f) const {
    auto v = parse_ipv4(s(f));
    if (!v) throw std::invalid_argument(std::string("\"") + f + "\" is not an IPv4 address");
    return *v;
  }
  MacAddr mac(const char* f) const {
    auto v = parse_mac(s(f));
    if (!v) throw std::invalid_argument(std::string("\"") + f + "\" is not a MAC address");
    return *v;
  }
};

constexpr uint64_t kVniMax = 0xFFFFFF;

}  // namespace

std::string tenant_key(uint32_t vni) { return std::string(kDesiredPrefix) + "tenants/" + std::to_string(vni); }
std::string rnic_key(const std::string& server, const std::string& rnic) {
  return std::string(kDesiredPrefix) + "servers/" + server + "/rnics/" + rnic;
}
std::string vnic_key(uint32_t id) { return std::string(kDesiredPrefix) + "vnics/" + std::to_string(id); }
std::string mapping_key(uint32_t vni, uint32_t ip) {
  return std::string(kDesiredPrefix) + "mappings/" + std::to_string(vni) + "/" + format_ipv4(ip);
}
std::string peering_key(uint32_t a, uint32_t b) {
  if (a > b) std::swap(a, b);
  return std::string(kDesiredPrefix) + "peerings/" + std::to_string(a) + "/" + std::to_string(b);
}
std::string status_key(const std::string& server) { return std::string(kStatusPrefix) + server; }

void DesiredState::bad(std::string_view key, const std::string& why) {
  ++malformed_;
  last_error_ = std::string(key) + ": " + why;
}

const FleetVnic* DesiredState::vnic_at(uint32_t vni, uint32_t ip) const {
  auto it = vnic_by_addr_.find(addr_key(vni, ip));
  return it == vnic_by_addr_.end() ? nullptr : &vnics_.at(it->second);
}

void DesiredState::drop_vnic(uint32_t id, Touched& t) {
  auto it = vnics_.find(id);
  if (it == vnics_.end()) return;
  const AddVnic& v = it->second.vnic;
  t.mappings.insert(addr_key(v.vni, v.overlay_ip));
  if (auto a = vnic_by_addr_.find(addr_key(v.vni, v.overlay_ip)); a != vnic_by_addr_.end() && a->second == id)
    vnic_by_addr_.erase(a);
  vnics_.erase(it);
}

void DesiredState::put(std::string_view key, std::string_view value, Touched& t) {
  if (!key.starts_with(kDesiredPrefix)) return bad(key, "not under " + std::string(kDesiredPrefix));
  std::vector<std::string_view> p = split(key.substr(kDesiredPrefix.size()));
  json j = json::parse(value, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad(key, "value is not a JSON object");
  Fields f{j};
  try {
    if (p.size() == 2 && p[0] == "tenants") {
      auto vni = number(p[1], kVniMax);
      if (!vni || *vni == 0) return bad(key, "tenant key must end in a VNI 1..16777215");
      // Partitions are fleet-wide (the RNICs check them on the wire), so they
      // come from etcd and are applied as given (shared: etcd is the judge).
      tenants_[*vni] = AddTenant{*vni, f.s("name"), static_cast<uint16_t>(f.u("partition", kMaxPartition, 0)), true,
                                 static_cast<uint32_t>(f.u("flow_quota", 0xFFFFFFFF, 0))};
      t.tenants.insert(*vni);
    } else if (p.size() == 4 && p[0] == "servers" && p[2] == "rnics" && !p[1].empty() && !p[3].empty()) {
      std::string name(p[3]), server(p[1]);
      if (auto it = rnics_.find(name); it != rnics_.end() && it->second.server != server)
        return bad(key, "RNIC " + name + " already belongs to server " + it->second.server);
      AddRnic r{name, f.ip("underlay_ip"), f.mac("mac"), static_cast<uint16_t>(f.u("path_base_port", 0xFFFF, 0)),
                static_cast<uint8_t>(f.u("path_count", 255, 1))};
      rnics_[name] = FleetRnic{server, r};
      t.rnics.insert(name);
    } else if (p.size() == 2 && p[0] == "vnics") {
      auto id = number(p[1], 0xFFFFFFFF);
      if (!id) return bad(key, "vNIC key must end in a vNIC id");
      FleetVnic v{f.s("server"),
                  AddVnic{*id, static_cast<uint32_t>(f.u("vni", kVniMax)), f.s("rnic"), f.ip("overlay_ip"),
                          f.mac("overlay_mac")}};
      if (const FleetVnic* other = vnic_at(v.vnic.vni, v.vnic.overlay_ip); other && other->vnic.id != *id)
        return bad(key, "its address belongs to vNIC " + std::to_string(other->vnic.id));
      drop_vnic(*id, t);
      vnic_by_addr_[addr_key(v.vnic.vni, v.vnic.overlay_ip)] = *id;
      t.mappings.insert(addr_key(v.vnic.vni, v.vnic.overlay_ip));
      vnics_[*id] = std::move(v);
      t.vnics.insert(*id);
    } else if (p.size() == 3 && p[0] == "mappings") {
      auto vni = number(p[1], kVniMax);
      auto ip = parse_ipv4(p[2]);
      if (!vni || !ip) return bad(key, "mapping key must end in <vni>/<overlay ip>");
      mappings_[addr_key(*vni, *ip)] = AddMapping{*vni, *ip, f.ip("underlay_ip"), f.mac("next_hop_mac"), f.s("rnic")};
      t.mappings.insert(addr_key(*vni, *ip));
    } else if (p.size() == 3 && p[0] == "peerings") {
      auto a = number(p[1], kVniMax), b = number(p[2], kVniMax);
      if (!a || !b || *a >= *b) return bad(key, "peering key must end in <low vni>/<high vni>");
      peerings_.insert({*a, *b});
      t.peerings.insert({*a, *b});
    } else {
      return bad(key, "unknown key");
    }
  } catch (const std::exception& e) {
    // The previous value of the key stays out too: the key now says something unusable.
    del(key, t);
    return bad(key, e.what());
  }
}

void DesiredState::del(std::string_view key, Touched& t) {
  if (!key.starts_with(kDesiredPrefix)) return;
  std::vector<std::string_view> p = split(key.substr(kDesiredPrefix.size()));
  if (p.size() == 2 && p[0] == "tenants") {
    if (auto vni = number(p[1], kVniMax)) {
      tenants_.erase(*vni);
      t.tenants.insert(*vni);
    }
  } else if (p.size() == 4 && p[0] == "servers" && p[2] == "rnics") {
    std::string name(p[3]);
    if (auto it = rnics_.find(name); it != rnics_.end() && it->second.server == p[1]) {
      rnics_.erase(it);
      t.rnics.insert(name);
    }
  } else if (p.size() == 2 && p[0] == "vnics") {
    if (auto id = number(p[1], 0xFFFFFFFF)) {
      drop_vnic(*id, t);
      t.vnics.insert(*id);
    }
  } else if (p.size() == 3 && p[0] == "mappings") {
    auto vni = number(p[1], kVniMax);
    auto ip = parse_ipv4(p[2]);
    if (vni && ip) {
      mappings_.erase(addr_key(*vni, *ip));
      t.mappings.insert(addr_key(*vni, *ip));
    }
  } else if (p.size() == 3 && p[0] == "peerings") {
    auto a = number(p[1], kVniMax), b = number(p[2], kVniMax);
    if (a && b) {
      peerings_.erase({*a, *b});
      t.peerings.insert({*a, *b});
    }
  }
}

void DesiredState::clear() { *this = DesiredState{}; }

}  // namespace tandem::dpu::fleet
