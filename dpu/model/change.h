// One accepted change to the level-1 state. The agent validates a change
// against the state, persists it (store), then applies it: the same value
// flows through all three, so what is stored is exactly what was applied.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include "common/wire/headers.h"

namespace tandem::dpu {

using common::MacAddr;

struct AddTenant {
  uint32_t vni = 0;  // 1..2^24-1
  std::string name;
  // Partition (1..kMaxPartition, unique among tenants): the RNICs stamp
  // 0x8000 | partition as the BTH P_Key of the tenant's packets and drop
  // others (docs/partitions.md). accept_change turns 0 into the lowest free
  // one; a state that applies 0 directly leaves the tenant unpartitioned.
  uint16_t partition = 0;
  // The partition may already be another tenant's (tandemctl tenant add
  // --share-partition-with): their QPs may then reach each other's, as members
  // of one InfiniBand partition do. Without it a taken partition is refused.
  bool shared = false;
  uint32_t flow_quota = 0;  // flows per RNIC (SetTenantQuota); 0: the agent's default
};
inline constexpr uint16_t kMaxPartition = 0x7FFE;  // 0x7FFF is the default partition
struct RemoveTenant {
  uint32_t vni = 0;  // refused while the tenant still has vNICs or mappings
};
// An RNIC (port) this agent manages.
struct AddRnic {
  std::string name;            // e.g. "rnic0"
  uint32_t underlay_ip = 0;    // its underlay (physical) IPv4
  MacAddr mac{};               // its underlay MAC
  uint16_t path_base_port = 0; // first UDP source-port entropy value it sprays over
  uint8_t path_count = 1;      // number of paths
};
struct AddVnic {
  uint32_t id = 0;             // agent-wide vNIC id, also the level-2 egress key
  uint32_t vni = 0;            // owning tenant
  std::string rnic;            // managed RNIC it is bound to
  uint32_t overlay_ip = 0;
  MacAddr overlay_mac{};
};
struct RemoveVnic {
  uint32_t id = 0;
};
struct BindQp {
  uint32_t vnic = 0;
  uint32_t qpn = 0;            // 24 bits, unique per RNIC
};
// (tenant, overlay IP) -> (underlay IP, next-hop MAC, RNIC); the RNIC may be
// remote (any name), it only identifies where the address lives. An existing
// key is refused unless `replace` (a VM moved: the mapping is updated in place,
// never removed and re-added, so there is no moment without it).
struct AddMapping {
  uint32_t vni = 0;
  uint32_t overlay_ip = 0;
  uint32_t underlay_ip = 0;
  MacAddr next_hop_mac{};
  std::string rnic;
  bool replace = false;  // add, or replace the mapping of this key
};
struct RemoveMapping {
  uint32_t vni = 0;
  uint32_t overlay_ip = 0;
};
// Isolation exception: tenants a and b may reach each other's addresses.
struct AllowPeering {
  uint32_t vni_a = 0;
  uint32_t vni_b = 0;
};

// The tenant's fair share of each RNIC's level-2 table: at most this many
// flows (egress entries; each may bring an ingress entry) per RNIC; 0: the
// agent's default (tandem-dpu --tenant-flow-quota).
struct SetTenantQuota {
  uint32_t vni = 0;
  uint32_t flow_quota = 0;
};

using Change = std::variant<AddTenant, RemoveTenant, AddRnic, AddVnic, RemoveVnic, BindQp,
                            AddMapping, RemoveMapping, AllowPeering, SetTenantQuota>;

}  // namespace tandem::dpu
