#include "rnic/port/encap_template.h"

#include "common/wire/byte_order.h"
#include "common/wire/entropy.h"

namespace tandem::rnic::port {

namespace {
// Offsets inside the Ethernet/IPv4/UDP block.
constexpr uint32_t kIp = common::kEthHdrLen;
constexpr uint32_t kUdp = kIp + common::kIpv4HdrLen;
}  // namespace

EncapTemplate make_encap_template(const EncapAddrs& a, uint32_t dqpn) noexcept {
  EncapTemplate t;
  common::EthHeader eth;
  eth.dst = a.dst_mac;
  eth.src = a.src_mac;
  common::write_eth(t.hdr, eth);
  common::Ipv4Header ip;  // 0x45, DF, TTL 64, UDP
  ip.tos = a.tos;
  ip.src = a.src_ip;
  ip.dst = a.dst_ip;
  common::write_ipv4(t.hdr + kIp, ip);
  common::store_be16(t.hdr + kIp + 10, 0);  // finished per packet
  common::UdpHeader udp;
  udp.dport = common::kRoceUdpPort;
  common::write_udp(t.hdr + kUdp, udp);
  // Constant IPv4 words (length, id and checksum are zero here).
  for (uint32_t i = 0; i < common::kIpv4HdrLen; i += 2) t.ip_sum += common::load_be16(t.hdr + kIp + i);
  // BTH: everything but the P_Key and destination QP is per packet.
  t.pkey = a.pkey;
  common::store_be16(t.hdr + kL2L4Len + 2, a.pkey);
  set_template_dqpn(t, dqpn);
  return t;
}

void set_template_dqpn(EncapTemplate& t, uint32_t dqpn) noexcept {
  t.dqpn = dqpn & 0xFFFFFFu;
  common::store_be32(t.hdr + kL2L4Len + 4, t.dqpn);
}

}  // namespace tandem::rnic::port
