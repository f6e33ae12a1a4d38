// One QP's way out of the port, resolved from its level-2 egress entry once
// per table version instead of by a hash lookup per packet: the frame
// template TxEncap starts every frame from (Ethernet/IPv4/UDP/BTH with the
// QP's destination QPN), the path set that turns the core's path choice
// into a UDP source port, and the remote's underlay address, which the
// receive side checks packets against. A commit bumps the table version, so
// the next packet after any change resolves again and rebuilds the template;
// a new destination QPN (the QP was modified) re-points it (tmpl_for).
#pragma once

#include <cstdint>
#include <vector>

#include "common/channel/messages.h"
#include "common/wire/entropy.h"
#include "rnic/port/encap_template.h"

namespace tandem::rnic::port {

struct EgressRoute {
  static constexpr uint64_t kUnresolved = ~uint64_t{0};

  uint64_t version = kUnresolved;  // table version it was resolved at
  uint32_t peer = 0;               // remote overlay address it was resolved for
  uint32_t underlay = 0;           // the remote's underlay address: where its packets must come from
  uint32_t local_underlay = 0;     // this port's (traces name packets by both)
  uint32_t count = 1;              // paths
  uint32_t mask = 0;               // count - 1 (used when count is a power of two)
  bool pow2 = true;
  uint16_t base_port = 0;
  const uint16_t* ports = nullptr;  // explicit path set, or nullptr: base_port + index
  EncapTemplate tmpl;

  bool fresh(uint64_t table_version, uint32_t remote) const noexcept {
    return version == table_version && peer == remote;
  }
  void invalidate() noexcept { version = kUnresolved; }

  // `path_sets`: explicit sets, indexed by EgressAction::path_set_id - 1;
  // `pkey`: the BTH P_Key of the QP's tenant.
  void resolve(const common::EgressAction& a, const common::MacAddr& src_mac,
               const std::vector<std::vector<uint16_t>>& path_sets, uint64_t table_version,
               uint32_t remote, uint16_t pkey = 0xFFFF) noexcept {
    EncapAddrs addrs;
    addrs.pkey = pkey;
    addrs.src_mac = src_mac;
    addrs.dst_mac = a.dst_mac;
    addrs.src_ip = a.underlay_src_ip;
    addrs.dst_ip = a.underlay_dst_ip;
    tmpl = make_encap_template(addrs, tmpl.dqpn);
    count = a.path_count ? a.path_count : 1;
    mask = count - 1;
    pow2 = (count & mask) == 0;
    base_port = a.path_base_port;
    ports = (a.path_set_id != 0 && a.path_set_id <= path_sets.size()) ? path_sets[a.path_set_id - 1].data()
                                                                       : nullptr;
    underlay = a.underlay_dst_ip;
    local_underlay = a.underlay_src_ip;
    version = table_version;
    peer = remote;
  }

  // The template for a frame to destination QP `dqpn` (its BTH holds it).
  const EncapTemplate& tmpl_for(uint32_t dqpn) noexcept {
    if (tmpl.dqpn != (dqpn & 0xFFFFFFu)) [[unlikely]]
      set_template_dqpn(tmpl, dqpn);
    return tmpl;
  }

  // The UDP source port for the core's path choice (an entropy port).
  uint16_t sport(uint16_t core_port) const noexcept {
    const uint32_t x = static_cast<uint32_t>(core_port - common::kEntropyPortBase);
    const uint32_t idx = pow2 ? (x & mask) : x % count;
    return ports ? ports[idx] : static_cast<uint16_t>(base_port + idx);
  }
};

}  // namespace tandem::rnic::port
