// The DPU agent's authoritative level-1 state: tenants, managed RNICs, vNICs
// with their QPs, overlay->underlay mappings (the 16M-scale part) and the
// isolation policy. Changes are validated first (clear errors, nothing
// modified) and applied second; resolve() turns a punted level-2 miss into the
// entries to install, or a refusal.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/channel/messages.h"
#include "dpu/model/change.h"
#include "dpu/model/mapping_table.h"

namespace tandem::dpu {

enum class ModelErrc : uint8_t {
  kOk = 0,
  kUnknownTenant,
  kUnknownRnic,
  kUnknownVnic,
  kUnknownMapping,
  kDuplicate,
  kBadAddress,
  kBadValue,
  kInUse,
};
const char* model_errc_name(ModelErrc e) noexcept;

struct ModelResult {
  ModelErrc code = ModelErrc::kOk;
  std::string message;  // one line for the operator, empty when ok
  bool ok() const noexcept { return code == ModelErrc::kOk; }
};

struct Tenant {
  uint32_t vni = 0;
  std::string name;
  uint16_t partition = 0;  // 0: none (wire P_Key 0xFFFF); else P_Key 0x8000 | partition
  uint32_t flow_quota = 0;  // flows per RNIC; 0: the agent's default

  uint16_t entry_pkey() const noexcept { return partition ? static_cast<uint16_t>(0x8000 | partition) : 0; }
};

struct Rnic {
  std::string name;
  uint32_t underlay_ip = 0;
  MacAddr mac{};
  uint16_t path_base_port = 0;
  uint8_t path_count = 1;
};

struct Vnic {
  uint32_t id = 0;
  uint32_t vni = 0;
  std::string rnic;
  uint32_t overlay_ip = 0;
  MacAddr overlay_mac{};
  std::vector<uint32_t> qpns;
};

enum class ResolveStatus : uint8_t {
  kOk = 0,
  kUnknownVnic,         // the punt names a vNIC the agent does not know (stale RNIC state)
  kNoMapping,           // no tenant the source may reach has this overlay address
  kDeniedByIsolation,   // the address exists, but only in a tenant the source may not reach
};
const char* resolve_status_name(ResolveStatus s) noexcept;

struct Resolution {
  ResolveStatus status = ResolveStatus::kNoMapping;
  std::string rnic;              // the source vNIC's RNIC: where to install
  common::Level2Entry egress;    // (src vNIC, dst overlay IP) -> underlay
  common::Level2Entry ingress;   // the return direction on the same RNIC
  MappingKey mapping;            // the level-1 mapping the entries derive from
};

class Level1State {
 public:
  ModelResult check(const Change& c) const;
  // Applies a change that check() accepted (re-checks and refuses otherwise).
  ModelResult apply(const Change& c);

  Resolution resolve(uint32_t src_vnic, uint32_t dst_overlay_ip) const;

  // Changes with every change apply() makes (never on a refused one). Values
  // come from one process-wide counter and are never 0, so two states (or a
  // state and a copy of it) share a generation only if they hold the same
  // level 1: a resolution computed at generation g is still exactly what
  // resolve() gives while generation() == g (it reads level 1 alone).
  uint64_t generation() const noexcept { return generation_.value; }

  const Tenant* tenant(uint32_t vni) const;
  // The tenant's vNIC ids (on every RNIC), in the order they were added.
  const std::vector<uint32_t>& vnics_of(uint32_t vni) const;
  // The lowest partition no tenant has, 0 if all kMaxPartition are taken.
  uint16_t free_partition() const;
  const Rnic* rnic(const std::string& name) const;
  const Vnic* vnic(uint32_t id) const;
  std::optional<Mapping> mapping(uint32_t vni, uint32_t overlay_ip) const {
    return mappings_.find({vni, overlay_ip});
  }
  bool may_reach(uint32_t from_vni, uint32_t to_vni) const;
  const std::string& rnic_name(uint16_t id) const { return rnic_names_.at(id); }

  const std::map<uint32_t, Tenant>& tenants() const { return tenants_; }
  const std::map<std::string, Rnic>& rnics() const { return rnics_; }
  const std::map<uint32_t, Vnic>& vnics() const { return vnics_; }
  const std::set<std::pair<uint32_t, uint32_t>>& peerings() const { return peerings_; }
  const MappingTable& mappings() const { return mappings_; }
  void reserve_mappings(std::size_t n) { mappings_.reserve(n); }
  // Takes a table equal to mappings() (from mappings().grown()): same
  // entries, so the generation stays. False, and nothing changed, if the
  // sizes differ (level 1 changed while it was built).
  bool adopt_grown_mappings(MappingTable& t) noexcept {
    if (t.size() != mappings_.size() || t.slots() < mappings_.slots()) return false;
    mappings_.swap(t);
    return true;
  }

 private:
  ModelResult check_one(const AddTenant&) const;
  ModelResult check_one(const RemoveTenant&) const;
  ModelResult check_one(const AddRnic&) const;
  ModelResult check_one(const AddVnic&) const;
  ModelResult check_one(const RemoveVnic&) const;
  ModelResult check_one(const BindQp&) const;
  ModelResult check_one(const AddMapping&) const;
  ModelResult check_one(const RemoveMapping&) const;
  ModelResult check_one(const AllowPeering&) const;
  ModelResult check_one(const SetTenantQuota&) const;
  void apply_one(const AddTenant&);
  void apply_one(const RemoveTenant&);
  void apply_one(const AddRnic&);
  void apply_one(const AddVnic&);
  void apply_one(const RemoveVnic&);
  void apply_one(const BindQp&);
  void apply_one(const AddMapping&);
  void apply_one(const RemoveMapping&);
  void apply_one(const AllowPeering&);
  void apply_one(const SetTenantQuota&);
  uint16_t intern_rnic(const std::string& name);
  const Vnic* vnic_at(uint32_t vni, uint32_t overlay_ip) const;
  common::Level2Entry ingress_for(const Vnic& v, uint32_t remote_vni, uint32_t remote_ip,
                                  const Mapping& m) const;

  std::map<uint32_t, Tenant> tenants_;
  std::map<uint32_t, uint32_t> tenant_refs_;  // vni -> vNICs + mappings referencing it
  std::map<uint16_t, uint32_t> partition_users_;
  std::unordered_map<uint32_t, std::vector<uint32_t>> vnics_by_tenant_;  // vni -> vNIC ids  // partition -> tenants that have it
  std::map<std::string, Rnic> rnics_;
  std::map<uint32_t, Vnic> vnics_;
  std::unordered_map<uint64_t, uint32_t> vnic_by_addr_;  // (vni << 32 | overlay IP) -> vNIC id
  std::map<std::pair<std::string, uint32_t>, uint32_t> qp_owner_;  // (rnic, qpn) -> vNIC
  std::set<std::pair<uint32_t, uint32_t>> peerings_;               // both orders stored
  std::unordered_map<uint32_t, std::vector<uint32_t>> peers_;      // vni -> peered vnis
  MappingTable mappings_;
  static uint64_t next_generation() noexcept;
  // Copies share the value (same content); a moved-from state gets a new one
  // (its content is gone).
  struct Generation {
    uint64_t value = next_generation();
    Generation() = default;
    Generation(const Generation&) = default;
    Generation& operator=(const Generation&) = default;
    Generation(Generation&& o) noexcept : value(o.value) { o.value = next_generation(); }
    Generation& operator=(Generation&& o) noexcept {
      value = o.value;
      o.value = next_generation();
      return *this;
    }
  };
  Generation generation_;
  std::vector<std::string> rnic_names_;
  std::unordered_map<std::string, uint16_t> rnic_ids_;
};

}  // namespace tandem::dpu
