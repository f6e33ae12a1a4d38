// Level-1 validation, application and miss resolution.
#include "dpu/model/level1_state.h"

#include <algorithm>
#include <atomic>

#include "dpu/model/address.h"

namespace tandem::dpu {

namespace {

ModelResult fail(ModelErrc code, std::string msg) { return {code, std::move(msg)}; }

bool valid_vni(uint32_t vni) { return vni != 0 && vni <= 0xFFFFFF; }

// Unicast, routable-looking: not 0.0.0.0, broadcast, multicast/reserved or loopback.
bool valid_ip(uint32_t ip) {
  return ip != 0 && ip < 0xE0000000u && (ip >> 24) != 127;
}

bool valid_mac(const MacAddr& m) {
  bool zero = std::all_of(m.begin(), m.end(), [](uint8_t b) { return b == 0; });
  return !zero && (m[0] & 1) == 0;
}

std::string vni_str(uint32_t vni) { return "tenant " + std::to_string(vni); }

}  // namespace

const char* model_errc_name(ModelErrc e) noexcept {
  switch (e) {
    case ModelErrc::kOk: return "ok";
    case ModelErrc::kUnknownTenant: return "unknown_tenant";
    case ModelErrc::kUnknownRnic: return "unknown_rnic";
    case ModelErrc::kUnknownVnic: return "unknown_vnic";
    case ModelErrc::kUnknownMapping: return "unknown_mapping";
    case ModelErrc::kDuplicate: return "duplicate";
    case ModelErrc::kBadAddress: return "bad_address";
    case ModelErrc::kBadValue: return "bad_value";
    case ModelErrc::kInUse: return "in_use";
  }
  return "invalid";
}

const char* resolve_status_name(ResolveStatus s) noexcept {
  switch (s) {
    case ResolveStatus::kOk: return "ok";
    case ResolveStatus::kUnknownVnic: return "unknown_vnic";
    case ResolveStatus::kNoMapping: return "no_mapping";
    case ResolveStatus::kDeniedByIsolation: return "denied_by_isolation";
  }
  return "invalid";
}

const Tenant* Level1State::tenant(uint32_t vni) const {
  auto it = tenants_.find(vni);
  return it == tenants_.end() ? nullptr : &it->second;
}
const Rnic* Level1State::rnic(const std::string& name) const {
  auto it = rnics_.find(name);
  return it == rnics_.end() ? nullptr : &it->second;
}
const Vnic* Level1State::vnic_at(uint32_t vni, uint32_t overlay_ip) const {
  auto it = vnic_by_addr_.find(uint64_t{vni} << 32 | overlay_ip);
  return it == vnic_by_addr_.end() ? nullptr : vnic(it->second);
}

const Vnic* Level1State::vnic(uint32_t id) const {
  auto it = vnics_.find(id);
  return it == vnics_.end() ? nullptr : &it->second;
}

bool Level1State::may_reach(uint32_t from, uint32_t to) const {
  return from == to || peerings_.count({from, to}) != 0;
}

// --- validation -------------------------------------------------------------

ModelResult Level1State::check(const Change& c) const {
  return std::visit([this](const auto& x) { return check_one(x); }, c);
}

ModelResult Level1State::check_one(const AddTenant& c) const {
  if (!valid_vni(c.vni)) return fail(ModelErrc::kBadValue, "VNI " + std::to_string(c.vni) + " is outside 1..16777215");
  if (tenants_.count(c.vni)) return fail(ModelErrc::kDuplicate, vni_str(c.vni) + " already exists");
  if (c.partition > kMaxPartition)
    return fail(ModelErrc::kBadValue, "partition " + std::to_string(c.partition) + " is outside 1.." +
                                          std::to_string(kMaxPartition));
  if (c.partition != 0 && !c.shared && partition_users_.count(c.partition))
    for (const auto& [vni, t] : tenants_)
      if (t.partition == c.partition)
        return fail(ModelErrc::kDuplicate, "partition " + std::to_string(c.partition) + " already belongs to " +
                                               vni_str(vni) + " (share it on purpose with --share-partition-with)");
  return {};
}

ModelResult Level1State::check_one(const SetTenantQuota& c) const {
  if (!tenants_.count(c.vni)) return fail(ModelErrc::kUnknownTenant, vni_str(c.vni) + " does not exist");
  return {};
}

void Level1State::apply_one(const SetTenantQuota& c) { tenants_[c.vni].flow_quota = c.flow_quota; }

uint16_t Level1State::free_partition() const {
  uint16_t p = 1;
  for (const auto& [used, n] : partition_users_) {  // ascending
    if (used != p) break;
    ++p;
  }
  return p <= kMaxPartition ? p : 0;
}

ModelResult Level1State::check_one(const RemoveTenant& c) const {
  if (!tenants_.count(c.vni)) return fail(ModelErrc::kUnknownTenant, vni_str(c.vni) + " does not exist");
  auto it = tenant_refs_.find(c.vni);
  if (it != tenant_refs_.end() && it->second > 0)
    return fail(ModelErrc::kInUse, vni_str(c.vni) + " still has " + std::to_string(it->second) +
                                       " vNICs/mappings");
  return {};
}

ModelResult Level1State::check_one(const AddRnic& c) const {
  if (c.name.empty() || c.name.size() > 31) return fail(ModelErrc::kBadValue, "RNIC name must be 1-31 characters");
  if (rnics_.count(c.name)) return fail(ModelErrc::kDuplicate, "RNIC " + c.name + " already exists");
  if (!valid_ip(c.underlay_ip)) return fail(ModelErrc::kBadAddress, "RNIC underlay IP " + format_ipv4(c.underlay_ip) + " is not a unicast address");
  if (!valid_mac(c.mac)) return fail(ModelErrc::kBadAddress, "RNIC MAC " + format_mac(c.mac) + " is not a unicast address");
  if (c.path_count == 0) return fail(ModelErrc::kBadValue, "RNIC path count must be at least 1");
  return {};
}

ModelResult Level1State::check_one(const AddVnic& c) const {
  if (vnics_.count(c.id)) return fail(ModelErrc::kDuplicate, "vNIC " + std::to_string(c.id) + " already exists");
  if (!tenants_.count(c.vni)) return fail(ModelErrc::kUnknownTenant, vni_str(c.vni) + " does not exist");
  if (!rnics_.count(c.rnic)) return fail(ModelErrc::kUnknownRnic, "RNIC " + c.rnic + " is not managed by this agent");
  if (!valid_ip(c.overlay_ip)) return fail(ModelErrc::kBadAddress, "overlay IP " + format_ipv4(c.overlay_ip) + " is not a unicast address");
  if (!valid_mac(c.overlay_mac)) return fail(ModelErrc::kBadAddress, "overlay MAC " + format_mac(c.overlay_mac) + " is not a unicast address");
  if (mappings_.find({c.vni, c.overlay_ip}))
    return fail(ModelErrc::kDuplicate, format_ipv4(c.overlay_ip) + " is already mapped in " + vni_str(c.vni));
  return {};
}

ModelResult Level1State::check_one(const RemoveVnic& c) const {
  if (!vnics_.count(c.id)) return fail(ModelErrc::kUnknownVnic, "vNIC " + std::to_string(c.id) + " does not exist");
  return {};
}

ModelResult Level1State::check_one(const BindQp& c) const {
  const Vnic* v = vnic(c.vnic);
  if (!v) return fail(ModelErrc::kUnknownVnic, "vNIC " + std::to_string(c.vnic) + " does not exist");
  if (c.qpn == 0 || c.qpn > 0xFFFFFF) return fail(ModelErrc::kBadValue, "QPN " + std::to_string(c.qpn) + " is outside 1..16777215");
  auto it = qp_owner_.find({v->rnic, c.qpn});
  if (it != qp_owner_.end())
    return fail(ModelErrc::kDuplicate, "QPN " + std::to_string(c.qpn) + " on " + v->rnic + " is owned by vNIC " + std::to_string(it->second));
  return {};
}

ModelResult Level1State::check_one(const AddMapping& c) const {
  if (!tenants_.count(c.vni)) return fail(ModelErrc::kUnknownTenant, vni_str(c.vni) + " does not exist");
  if (!valid_ip(c.overlay_ip)) return fail(ModelErrc::kBadAddress, "overlay IP " + format_ipv4(c.overlay_ip) + " is not a unicast address");
  if (!valid_ip(c.underlay_ip)) return fail(ModelErrc::kBadAddress, "underlay IP " + format_ipv4(c.underlay_ip) + " is not a unicast address");
  if (!valid_mac(c.next_hop_mac)) return fail(ModelErrc::kBadAddress, "next-hop MAC " + format_mac(c.next_hop_mac) + " is not a unicast address");
  if (c.rnic.empty() || c.rnic.size() > 31) return fail(ModelErrc::kBadValue, "RNIC name must be 1-31 characters");
  if (mappings_.find({c.vni, c.overlay_ip})) {
    if (!c.replace)
      return fail(ModelErrc::kDuplicate, format_ipv4(c.overlay_ip) + " is already mapped in " + vni_str(c.vni) +
                                             " (a replace must say so)");
    if (const Vnic* v = vnic_at(c.vni, c.overlay_ip))
      return fail(ModelErrc::kInUse, format_ipv4(c.overlay_ip) + " belongs to vNIC " + std::to_string(v->id) +
                                         "; its mapping follows the vNIC");
  }
  if (rnic_ids_.size() >= 0xFFFF && !rnic_ids_.count(c.rnic))
    return fail(ModelErrc::kBadValue, "too many distinct RNIC names (65535)");
  return {};
}

ModelResult Level1State::check_one(const RemoveMapping& c) const {
  if (!mappings_.find({c.vni, c.overlay_ip}))
    return fail(ModelErrc::kUnknownMapping, format_ipv4(c.overlay_ip) + " is not mapped in " + vni_str(c.vni));
  if (const Vnic* v = vnic_at(c.vni, c.overlay_ip))
    return fail(ModelErrc::kInUse, format_ipv4(c.overlay_ip) + " belongs to vNIC " + std::to_string(v->id) + "; remove the vNIC");
  return {};
}

ModelResult Level1State::check_one(const AllowPeering& c) const {
  if (!tenants_.count(c.vni_a)) return fail(ModelErrc::kUnknownTenant, vni_str(c.vni_a) + " does not exist");
  if (!tenants_.count(c.vni_b)) return fail(ModelErrc::kUnknownTenant, vni_str(c.vni_b) + " does not exist");
  if (c.vni_a == c.vni_b) return fail(ModelErrc::kBadValue, "a tenant always reaches itself");
  if (peerings_.count({c.vni_a, c.vni_b})) return fail(ModelErrc::kDuplicate, "peering already exists");
  return {};
}

// --- application --------------------------------------------------------------

ModelResult Level1State::apply(const Change& c) {
  ModelResult r = check(c);
  if (!r.ok()) return r;
  std::visit([this](const auto& x) { apply_one(x); }, c);
  generation_.value = next_generation();
  return r;
}

uint64_t Level1State::next_generation() noexcept {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

uint16_t Level1State::intern_rnic(const std::string& name) {
  auto [it, fresh] = rnic_ids_.try_emplace(name, static_cast<uint16_t>(rnic_names_.size()));
  if (fresh) rnic_names_.push_back(name);
  return it->second;
}

void Level1State::apply_one(const AddTenant& c) {
  tenants_[c.vni] = Tenant{c.vni, c.name, c.partition, c.flow_quota};
  if (c.partition) ++partition_users_[c.partition];
}

void Level1State::apply_one(const RemoveTenant& c) {
  if (auto it = tenants_.find(c.vni); it != tenants_.end() && it->second.partition)
    if (--partition_users_[it->second.partition] == 0) partition_users_.erase(it->second.partition);
  tenants_.erase(c.vni);
  tenant_refs_.erase(c.vni);
  for (uint32_t peer : peers_[c.vni]) {
    peerings_.erase({c.vni, peer});
    peerings_.erase({peer, c.vni});
    auto& back = peers_[peer];
    back.erase(std::remove(back.begin(), back.end(), c.vni), back.end());
  }
  peers_.erase(c.vni);
}

void Level1State::apply_one(const AddRnic& c) {
  rnics_[c.name] = Rnic{c.name, c.underlay_ip, c.mac, c.path_base_port, c.path_count};
  intern_rnic(c.name);
}

void Level1State::apply_one(const AddVnic& c) {
  const Rnic& r = rnics_.at(c.rnic);
  vnics_[c.id] = Vnic{c.id, c.vni, c.rnic, c.overlay_ip, c.overlay_mac, {}};
  vnic_by_addr_[uint64_t{c.vni} << 32 | c.overlay_ip] = c.id;
  // A vNIC's own address is a mapping too: peers resolve it like any other.
  mappings_.upsert({c.vni, c.overlay_ip}, Mapping{r.underlay_ip, r.mac, intern_rnic(c.rnic)});
  ++tenant_refs_[c.vni];
  vnics_by_tenant_[c.vni].push_back(c.id);
}

const std::vector<uint32_t>& Level1State::vnics_of(uint32_t vni) const {
  static const std::vector<uint32_t> kNone;
  auto it = vnics_by_tenant_.find(vni);
  return it == vnics_by_tenant_.end() ? kNone : it->second;
}

void Level1State::apply_one(const RemoveVnic& c) {
  Vnic& v = vnics_.at(c.id);
  for (uint32_t q : v.qpns) qp_owner_.erase({v.rnic, q});
  mappings_.erase({v.vni, v.overlay_ip});
  vnic_by_addr_.erase(uint64_t{v.vni} << 32 | v.overlay_ip);
  --tenant_refs_[v.vni];
  std::vector<uint32_t>& mine = vnics_by_tenant_[v.vni];
  mine.erase(std::remove(mine.begin(), mine.end(), c.id), mine.end());
  if (mine.empty()) vnics_by_tenant_.erase(v.vni);
  vnics_.erase(c.id);
}

void Level1State::apply_one(const BindQp& c) {
  Vnic& v = vnics_.at(c.vnic);
  v.qpns.push_back(c.qpn);
  qp_owner_[{v.rnic, c.qpn}] = c.vnic;
}

void Level1State::apply_one(const AddMapping& c) {
  if (mappings_.upsert({c.vni, c.overlay_ip}, Mapping{c.underlay_ip, c.next_hop_mac, intern_rnic(c.rnic)}))
    ++tenant_refs_[c.vni];  // a replaced mapping was counted when it was added
}

void Level1State::apply_one(const RemoveMapping& c) {
  mappings_.erase({c.vni, c.overlay_ip});
  --tenant_refs_[c.vni];
}

void Level1State::apply_one(const AllowPeering& c) {
  peerings_.insert({c.vni_a, c.vni_b});
  peerings_.insert({c.vni_b, c.vni_a});
  peers_[c.vni_a].push_back(c.vni_b);
  peers_[c.vni_b].push_back(c.vni_a);
}

// --- miss resolution ------------------------------------------------------------

common::Level2Entry Level1State::ingress_for(const Vnic& v, uint32_t remote_vni, uint32_t remote_ip,
                                             const Mapping& m) const {
  common::IngressAction in;
  in.overlay_src_ip = remote_ip;
  in.overlay_dst_ip = v.overlay_ip;
  in.vni = remote_vni;
  in.local_vnic_id = v.id;
  // The remote's overlay MAC is known when it is one of our vNICs.
  if (const Vnic* other = vnic_at(remote_vni, remote_ip)) in.overlay_src_mac = other->overlay_mac;
  return common::make_ingress_entry(common::ingress_key_vni(m.underlay_ip, remote_vni), in);
}

Resolution Level1State::resolve(uint32_t src_vnic, uint32_t dst_ip) const {
  Resolution res;
  const Vnic* v = vnic(src_vnic);
  if (!v) {
    res.status = ResolveStatus::kUnknownVnic;
    return res;
  }
  res.rnic = v->rnic;
  // Own tenant first, then peered tenants in the order the peerings were made.
  std::optional<Mapping> m;
  uint32_t dst_vni = v->vni;
  if ((m = mappings_.find({v->vni, dst_ip}))) {
    dst_vni = v->vni;
  } else if (auto it = peers_.find(v->vni); it != peers_.end()) {
    for (uint32_t p : it->second)
      if ((m = mappings_.find({p, dst_ip}))) {
        dst_vni = p;
        break;
      }
  }
  if (!m) {
    res.status = ResolveStatus::kNoMapping;
    for (const auto& [vni, t] : tenants_)
      if (!may_reach(v->vni, vni) && mappings_.find({vni, dst_ip})) {
        res.status = ResolveStatus::kDeniedByIsolation;
        break;
      }
    return res;
  }
  const Rnic& local = rnics_.at(v->rnic);
  common::EgressAction a;
  a.underlay_src_ip = local.underlay_ip;
  a.underlay_dst_ip = m->underlay_ip;
  a.dst_mac = m->next_hop_mac;
  a.vni = dst_vni;
  a.path_set_id = 0;  // the local RNIC's default path set
  a.path_base_port = local.path_base_port;
  a.path_count = local.path_count;
  res.egress = common::make_egress_entry(common::egress_key(v->id, dst_ip), a);
  res.ingress = ingress_for(*v, dst_vni, dst_ip, *m);
  res.mapping = MappingKey{dst_vni, dst_ip};
  res.status = ResolveStatus::kOk;
  return res;
}

}  // namespace tandem::dpu
