// The fleet's desired state as etcd holds it (docs/fleet.md): the keys under
// /tandem/v1/desired/ parsed into tenants, servers' RNICs, vNIC placements,
// extra mappings and peerings. Sans-I/O: the etcd client hands in keys and
// values, and each put or delete says which entities it touched, so the
// planner (fleet_plan.h) looks only at those.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dpu/model/change.h"

namespace tandem::dpu::fleet {

inline constexpr std::string_view kDesiredPrefix = "/tandem/v1/desired/";
inline constexpr std::string_view kStatusPrefix = "/tandem/v1/status/";

// (vni << 32 | overlay IP): a mapping key that orders.
inline uint64_t addr_key(uint32_t vni, uint32_t ip) { return uint64_t{vni} << 32 | ip; }

struct FleetRnic {
  std::string server;
  AddRnic rnic;
};
struct FleetVnic {
  std::string server;
  AddVnic vnic;  // vnic.rnic: the RNIC it is placed on (RNIC names are fleet-wide)
};

// What a batch of puts and deletes may have changed, by entity.
struct Touched {
  bool all = false;  // a full re-read: every entity
  std::set<uint32_t> tenants;
  std::set<std::string> rnics;
  std::set<uint32_t> vnics;
  std::set<uint64_t> mappings;  // addr_key
  std::set<std::pair<uint32_t, uint32_t>> peerings;  // (low, high)
  bool empty() const {
    return !all && tenants.empty() && rnics.empty() && vnics.empty() && mappings.empty() && peerings.empty();
  }
};

class DesiredState {
 public:
  // A key under kDesiredPrefix and its JSON value. A malformed key or value
  // is kept out (as if absent) and counted with its reason in errors().
  void put(std::string_view key, std::string_view value, Touched& t);
  void del(std::string_view key, Touched& t);
  void clear();

  const std::map<uint32_t, AddTenant>& tenants() const { return tenants_; }
  const std::map<std::string, FleetRnic>& rnics() const { return rnics_; }
  const std::map<uint32_t, FleetVnic>& vnics() const { return vnics_; }
  const std::map<uint64_t, AddMapping>& mappings() const { return mappings_; }
  const std::set<std::pair<uint32_t, uint32_t>>& peerings() const { return peerings_; }
  // The vNIC placed at (vni, overlay IP), if any.
  const FleetVnic* vnic_at(uint32_t vni, uint32_t ip) const;

  uint64_t malformed() const { return malformed_; }
  const std::string& last_error() const { return last_error_; }

 private:
  void bad(std::string_view key, const std::string& why);
  void drop_vnic(uint32_t id, Touched& t);
  std::map<uint32_t, AddTenant> tenants_;
  std::map<std::string, FleetRnic> rnics_;  // by RNIC name
  std::map<uint32_t, FleetVnic> vnics_;
  std::map<uint64_t, uint32_t> vnic_by_addr_;
  std::map<uint64_t, AddMapping> mappings_;
  std::set<std::pair<uint32_t, uint32_t>> peerings_;
  uint64_t malformed_ = 0;
  std::string last_error_;
};

// Key forms (tandemctl fleet writes them, docs/fleet.md lists them).
std::string tenant_key(uint32_t vni);
std::string rnic_key(const std::string& server, const std::string& rnic);
std::string vnic_key(uint32_t id);
std::string mapping_key(uint32_t vni, uint32_t overlay_ip);
std::string peering_key(uint32_t a, uint32_t b);
std::string status_key(const std::string& server);

}  // namespace tandem::dpu::fleet
