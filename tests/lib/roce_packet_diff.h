// Field-by-field comparison of two parsed RocePackets, for the tests and the
// fuzzer that hold parse_roce's fast path to the general parser.
#pragma once

#include <string>

#include "common/wire/roce_packet.h"

namespace tandem::common {

inline bool same_eth(const EthHeader& a, const EthHeader& b) {
  return a.dst == b.dst && a.src == b.src && a.has_vlan == b.has_vlan && a.vlan_tci == b.vlan_tci &&
         a.ethertype == b.ethertype;
}
inline bool same_ip(const Ipv4Header& a, const Ipv4Header& b) {
  return a.ihl == b.ihl && a.tos == b.tos && a.total_len == b.total_len && a.id == b.id &&
         a.frag == b.frag && a.ttl == b.ttl && a.proto == b.proto && a.checksum == b.checksum &&
         a.src == b.src && a.dst == b.dst;
}
inline bool same_udp(const UdpHeader& a, const UdpHeader& b) {
  return a.sport == b.sport && a.dport == b.dport && a.len == b.len && a.checksum == b.checksum;
}

// Every field of the two packets, by name, so a difference says where.
inline std::string diff(const RocePacket& a, const RocePacket& b) {
  std::string d;
  auto chk = [&](bool eq, const char* name) {
    if (!eq) d += std::string(name) + " ";
  };
  chk(a.has_outer == b.has_outer, "has_outer");
  chk(same_eth(a.outer.eth, b.outer.eth), "outer.eth");
  chk(same_ip(a.outer.ip, b.outer.ip), "outer.ip");
  chk(same_udp(a.outer.udp, b.outer.udp), "outer.udp");
  chk(a.outer.vxlan.flags == b.outer.vxlan.flags && a.outer.vxlan.vni == b.outer.vxlan.vni, "outer.vxlan");
  chk(same_eth(a.eth, b.eth), "eth");
  chk(same_ip(a.ip, b.ip), "ip");
  chk(same_udp(a.udp, b.udp), "udp");
  const Bth &x = a.bth, &y = b.bth;
  chk(x.opcode == y.opcode && x.se == y.se && x.mig == y.mig && x.pad == y.pad && x.tver == y.tver &&
          x.pkey == y.pkey && x.fecn == y.fecn && x.becn == y.becn && x.dqpn == y.dqpn &&
          x.ack_req == y.ack_req && x.resv7 == y.resv7 && x.psn == y.psn,
      "bth");
  chk(a.reth.va == b.reth.va && a.reth.rkey == b.reth.rkey && a.reth.len == b.reth.len, "reth");
  chk(a.aeth.syndrome == b.aeth.syndrome && a.aeth.msn == b.aeth.msn, "aeth");
  chk(a.imm == b.imm, "imm");
  chk(a.atomic.va == b.atomic.va && a.atomic.rkey == b.atomic.rkey && a.atomic.swap_add == b.atomic.swap_add &&
          a.atomic.compare == b.atomic.compare,
      "atomic");
  chk(a.atomic_ack == b.atomic_ack, "atomic_ack");
  chk(a.ip_offset == b.ip_offset, "ip_offset");
  chk(a.payload_offset == b.payload_offset, "payload_offset");
  chk(a.payload_len == b.payload_len, "payload_len");
  chk(a.icrc == b.icrc, "icrc");
  chk(a.icrc_computed == b.icrc_computed, "icrc_computed");
  chk(a.icrc_checked == b.icrc_checked, "icrc_checked");
  return d;
}

}  // namespace tandem::common
