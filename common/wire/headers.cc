#include "common/wire/headers.h"

#include <cstring>

namespace tandem::common {

std::size_t write_eth(uint8_t* p, const EthHeader& h) noexcept {
  std::memcpy(p, h.dst.data(), 6);
  std::memcpy(p + 6, h.src.data(), 6);
  if (h.has_vlan) {
    store_be16(p + 12, kEtherTypeVlan);
    store_be16(p + 14, h.vlan_tci);
    store_be16(p + 16, h.ethertype);
    return kEthHdrLen + kVlanTagLen;
  }
  store_be16(p + 12, h.ethertype);
  return kEthHdrLen;
}

uint16_t ipv4_checksum(const uint8_t* hdr, std::size_t len) noexcept {
  // 32-bit big-endian words into a 64-bit sum fold to the same 16-bit
  // one's-complement sum as 16-bit words (RFC 1071 section 2), in half the adds.
  uint64_t sum = 0;
  std::size_t i = 0;
  for (; i + 3 < len; i += 4) sum += load_be32(hdr + i);
  if (i + 1 < len) sum += load_be16(hdr + i);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

std::size_t write_ipv4(uint8_t* p, const Ipv4Header& h) noexcept {
  p[0] = 0x45;  // options are never written
  p[1] = h.tos;
  store_be16(p + 2, h.total_len);
  store_be16(p + 4, h.id);
  store_be16(p + 6, h.frag);
  p[8] = h.ttl;
  p[9] = h.proto;
  store_be16(p + 10, 0);
  store_be32(p + 12, h.src);
  store_be32(p + 16, h.dst);
  store_be16(p + 10, ipv4_checksum(p, kIpv4HdrLen));
  return kIpv4HdrLen;
}

std::size_t write_udp(uint8_t* p, const UdpHeader& h) noexcept {
  store_be16(p, h.sport);
  store_be16(p + 2, h.dport);
  store_be16(p + 4, h.len);
  store_be16(p + 6, h.checksum);
  return kUdpHdrLen;
}

std::size_t write_vxlan(uint8_t* p, const VxlanHeader& h) noexcept {
  std::memset(p, 0, kVxlanHdrLen);
  p[0] = h.flags;
  store_be24(p + 4, h.vni);
  return kVxlanHdrLen;
}

std::size_t write_bth(uint8_t* p, const Bth& h) noexcept {
  p[0] = h.opcode;
  p[1] = static_cast<uint8_t>((h.se ? 0x80 : 0) | (h.mig ? 0x40 : 0) | ((h.pad & 3) << 4) |
                              (h.tver & 0x0F));
  store_be16(p + 2, h.pkey);
  p[4] = static_cast<uint8_t>((h.fecn ? 0x80 : 0) | (h.becn ? 0x40 : 0));
  store_be24(p + 5, h.dqpn);
  p[8] = static_cast<uint8_t>((h.ack_req ? 0x80 : 0) | (h.resv7 & 0x7F));
  store_be24(p + 9, h.psn);
  return kBthLen;
}

std::size_t write_reth(uint8_t* p, const Reth& h) noexcept {
  store_be64(p, h.va);
  store_be32(p + 8, h.rkey);
  store_be32(p + 12, h.len);
  return kRethLen;
}

std::size_t write_aeth(uint8_t* p, const Aeth& h) noexcept {
  p[0] = h.syndrome;
  store_be24(p + 1, h.msn);
  return kAethLen;
}

std::size_t write_deth(uint8_t* p, const Deth& h) noexcept {
  store_be32(p, h.qkey);
  p[4] = 0;
  store_be24(p + 5, h.src_qp);
  return kDethLen;
}

std::size_t write_atomic_eth(uint8_t* p, const AtomicEth& h) noexcept {
  store_be64(p, h.va);
  store_be32(p + 8, h.rkey);
  store_be64(p + 12, h.swap_add);
  store_be64(p + 20, h.compare);
  return kAtomicEthLen;
}

}  // namespace tandem::common
