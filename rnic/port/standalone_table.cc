#include "rnic/port/standalone_table.h"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "common/wire/entropy.h"

namespace tandem::rnic::port {

uint32_t parse_ipv4(const std::string& s) {
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) throw std::invalid_argument("bad IPv4 address '" + s + "'");
  return ntohl(a.s_addr);
}

common::MacAddr parse_mac(const std::string& s) {
  common::MacAddr m{};
  unsigned b[6];
  char tail;
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &tail) != 6)
    throw std::invalid_argument("bad MAC address '" + s + "'");
  for (int i = 0; i < 6; ++i) {
    if (b[i] > 0xFF) throw std::invalid_argument("bad MAC address '" + s + "'");
    m[i] = static_cast<uint8_t>(b[i]);
  }
  return m;
}

std::string format_ipv4(uint32_t ip) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 0xFF, (ip >> 8) & 0xFF, ip & 0xFF);
  return buf;
}

namespace {

YAML::Node need(const YAML::Node& n, const char* key, const std::string& where) {
  YAML::Node v = n[key];
  if (!v) throw std::invalid_argument(where + ": missing '" + key + "'");
  return v;
}

// A vNIC reaches its own address and the other vNICs of its tenant on this port
// as an RNIC's loopback does (UCX's UD transport sends to its own interface):
// through this port's underlay address, back from the gateway, unless the file
// routes them itself.
void derive_local_routes(StandaloneTable& t) {
  std::set<std::pair<uint32_t, uint32_t>> routed;
  for (const Level2Entry& e : t.entries)
    if (e.key.kind == common::EntryKind::kEgress) routed.insert({e.key.word0, e.key.word1});
  for (const Vnic& v : t.vnics)
    for (const Vnic& w : t.vnics) {
      if (w.vni != v.vni || routed.count({v.id, w.overlay_ip}) != 0) continue;
      common::EgressAction a;
      a.underlay_src_ip = t.underlay_ip;
      a.underlay_dst_ip = t.underlay_ip;
      a.dst_mac = t.gateway_mac;
      a.vni = v.vni;
      a.path_base_port = common::kEntropyPortBase;
      a.path_count = 1;
      t.entries.push_back(common::make_egress_entry(common::egress_key(v.id, w.overlay_ip), a));
    }
}

// Egress entries imply ingress ones, as the agent installs one with each flow:
// arrivals from a peer's underlay, in its tenant, are from that peer's overlay
// address (a UD datagram's GRH source, rnic/port/port_ud.cc). The file's own
// ingress entries win; a key two peers share (one underlay, one tenant) gets none.
void derive_ingress(StandaloneTable& t) {
  std::map<std::pair<uint32_t, uint32_t>, std::optional<common::IngressAction>> want;  // (underlay, vni)
  std::set<std::pair<uint32_t, uint32_t>> given;
  for (const Level2Entry& e : t.entries)
    if (e.key.kind == common::EntryKind::kIngressVni) given.insert({e.key.word0, e.key.word1});
  for (const Level2Entry& e : t.entries) {
    if (e.key.kind != common::EntryKind::kEgress) continue;
    const Vnic* v = t.vnic(e.key.word0);
    const std::pair<uint32_t, uint32_t> key{e.egress.underlay_dst_ip, e.egress.vni & 0xFFFFFF};
    if (v == nullptr || given.count(key) != 0) continue;
    common::IngressAction a;
    a.overlay_src_ip = e.key.word1;
    a.overlay_dst_ip = v->overlay_ip;
    a.vni = v->vni;
    a.local_vnic_id = v->id;
    auto [it, fresh] = want.try_emplace(key, a);
    if (!fresh && it->second && !(*it->second == a)) it->second.reset();  // ambiguous
  }
  for (const auto& [key, a] : want)
    if (a) t.entries.push_back(common::make_ingress_entry(common::ingress_key_vni(key.first, key.second), *a));
}

}  // namespace

StandaloneTable load_standalone_table(const std::string& path, bool vnics_optional) {
  StandaloneTable t;
  try {
    YAML::Node root = YAML::LoadFile(path);
    YAML::Node u = need(root, "underlay", "top level");
    t.underlay_ip = parse_ipv4(need(u, "ip", "underlay").as<std::string>());
    t.underlay_mac = parse_mac(need(u, "mac", "underlay").as<std::string>());
    t.gateway_mac = parse_mac(need(u, "gateway_mac", "underlay").as<std::string>());

    YAML::Node vnics = vnics_optional ? root["vnics"] : need(root, "vnics", "top level");
    if (vnics && !vnics.IsNull() && !vnics.IsSequence()) throw std::invalid_argument("'vnics' must be a list");
    if (!vnics_optional && vnics.size() == 0) throw std::invalid_argument("'vnics' must be a non-empty list");
    for (std::size_t i = 0; vnics && vnics.IsSequence() && i < vnics.size(); ++i) {
      const std::string where = "vnics[" + std::to_string(i) + "]";
      Vnic v;
      v.id = need(vnics[i], "id", where).as<uint32_t>();
      v.overlay_ip = parse_ipv4(need(vnics[i], "ip", where).as<std::string>());
      v.overlay_mac = vnics[i]["mac"] ? parse_mac(vnics[i]["mac"].as<std::string>()) : common::MacAddr{};
      v.vni = need(vnics[i], "vni", where).as<uint32_t>();
      if (vnics[i]["partition"]) {
        const uint32_t part = vnics[i]["partition"].as<uint32_t>();
        if (part == 0 || part > 0x7FFE) throw std::invalid_argument(where + ": partition must be 1..32766");
        v.pkey = static_cast<uint16_t>(0x8000 | part);
      }
      if (v.vni > 0xFFFFFF) throw std::invalid_argument(where + ": vni must fit 24 bits");
      if (t.vnic(v.id) != nullptr) throw std::invalid_argument(where + ": duplicate vNIC id");
      t.vnics.push_back(v);
    }

    if (YAML::Node eg = root["egress"]) {
      for (std::size_t i = 0; i < eg.size(); ++i) {
        const std::string where = "egress[" + std::to_string(i) + "]";
        const YAML::Node& e = eg[i];
        const uint32_t vnic_id = need(e, "vnic", where).as<uint32_t>();
        const Vnic* v = t.vnic(vnic_id);
        if (v == nullptr) throw std::invalid_argument(where + ": unknown vnic " + std::to_string(vnic_id));
        common::EgressAction a;
        a.underlay_src_ip = t.underlay_ip;
        a.underlay_dst_ip = parse_ipv4(need(e, "underlay_ip", where).as<std::string>());
        a.dst_mac = e["mac"] ? parse_mac(e["mac"].as<std::string>()) : t.gateway_mac;
        a.vni = v->vni;
        YAML::Node p = e["paths"];
        if (!p) {
          a.path_base_port = common::kEntropyPortBase;
          a.path_count = 1;
        } else if (p.IsSequence()) {
          if (p.size() == 0 || p.size() > 255) throw std::invalid_argument(where + ": 'paths' list needs 1-255 ports");
          std::vector<uint16_t> ports;
          for (const auto& x : p) ports.push_back(x.as<uint16_t>());
          t.path_sets.push_back(std::move(ports));
          a.path_set_id = static_cast<uint16_t>(t.path_sets.size());
          a.path_base_port = t.path_sets.back()[0];
          a.path_count = static_cast<uint8_t>(p.size());
        } else {
          const uint32_t n = p.as<uint32_t>();
          if (n == 0 || n > 255) throw std::invalid_argument(where + ": 'paths' count must be 1-255");
          a.path_base_port = e["path_base"] ? e["path_base"].as<uint16_t>() : common::kEntropyPortBase;
          a.path_count = static_cast<uint8_t>(n);
        }
        // peer: tandem (default; IRN, credits as the worker's flags say) or roce (a standard RoCEv2 RNIC).
        if (YAML::Node peer = e["peer"]) {
          const std::string k = peer.as<std::string>();
          if (k == "roce") a.flags |= common::kEgressPeerRoce;
          else if (k != "tandem") throw std::invalid_argument(where + ": 'peer' must be tandem or roce, not '" + k + "'");
        }
        const uint32_t remote = parse_ipv4(need(e, "remote_ip", where).as<std::string>());
        t.entries.push_back(common::make_egress_entry(common::egress_key(vnic_id, remote), a));
      }
    }
    if (YAML::Node in = root["ingress"]) {
      for (std::size_t i = 0; i < in.size(); ++i) {
        const std::string where = "ingress[" + std::to_string(i) + "]";
        const YAML::Node& e = in[i];
        const uint32_t vnic_id = need(e, "vnic", where).as<uint32_t>();
        const Vnic* v = t.vnic(vnic_id);
        if (v == nullptr) throw std::invalid_argument(where + ": unknown vnic " + std::to_string(vnic_id));
        common::IngressAction a;
        a.overlay_src_ip = parse_ipv4(need(e, "remote_ip", where).as<std::string>());
        a.overlay_dst_ip = v->overlay_ip;
        a.vni = v->vni;
        a.local_vnic_id = vnic_id;
        if (e["remote_mac"]) a.overlay_src_mac = parse_mac(e["remote_mac"].as<std::string>());
        const uint32_t src = parse_ipv4(need(e, "underlay_src", where).as<std::string>());
        t.entries.push_back(common::make_ingress_entry(common::ingress_key_vni(src, v->vni), a));
      }
    }
    derive_local_routes(t);
    derive_ingress(t);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  return t;
}

void commit_standalone_table(const StandaloneTable& t, Level2Table& table) {
  if (table.begin(true) != TableStatus::kOk) throw std::runtime_error("table: cannot open a transaction");
  for (const Level2Entry& e : t.entries)
    if (table.put(e) != TableStatus::kOk) {
      table.abort();
      throw std::runtime_error("table: entry refused (table full or bad entry)");
    }
  if (table.commit() != TableStatus::kOk) throw std::runtime_error("table: commit failed");
}

}  // namespace tandem::rnic::port
