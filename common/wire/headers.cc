#include "common/wire/headers.h"

#include <cstring>

namespace tandem::common {

EthHeader read_eth(const uint8_t* p, std::size_t avail, bool* ok) noexcept {
  EthHeader h;
  *ok = false;
  if (avail < kEthHdrLen) return h;
  std::memcpy(h.dst.data(), p, 6);
  std::memcpy(h.src.data(), p + 6, 6);
  h.ethertype = load_be16(p + 12);
  if (h.ethertype == kEtherTypeVlan) {
    if (avail < kEthHdrLen + kVlanTagLen) return h;
    h.has_vlan = true;
    h.vlan_tci = load_be16(p + 14);
    h.ethertype = load_be16(p + 16);
  }
  *ok = true;
  return h;
}

Ipv4Header read_ipv4(const uint8_t* p) noexcept {
  Ipv4Header h;
  h.ihl = p[0] & 0x0F;
  h.tos = p[1];
  h.total_len = load_be16(p + 2);
  h.id = load_be16(p + 4);
  h.frag = load_be16(p + 6);
  h.ttl = p[8];
  h.proto = p[9];
  h.checksum = load_be16(p + 10);
  h.src = load_be32(p + 12);
  h.dst = load_be32(p + 16);
  return h;
}

UdpHeader read_udp(const uint8_t* p) noexcept {
  return UdpHeader{load_be16(p), load_be16(p + 2), load_be16(p + 4), load_be16(p + 6)};
}

VxlanHeader read_vxlan(const uint8_t* p) noexcept { return VxlanHeader{p[0], load_be24(p + 4)}; }

Bth read_bth(const uint8_t* p) noexcept {
  Bth h;
  h.opcode = p[0];
  h.se = (p[1] & 0x80) != 0;
  h.mig = (p[1] & 0x40) != 0;
  h.pad = (p[1] >> 4) & 0x3;
  h.tver = p[1] & 0x0F;
  h.pkey = load_be16(p + 2);
  h.fecn = (p[4] & 0x80) != 0;
  h.becn = (p[4] & 0x40) != 0;
  h.dqpn = load_be24(p + 5);
  h.ack_req = (p[8] & 0x80) != 0;
  h.psn = load_be24(p + 9);
  return h;
}

Reth read_reth(const uint8_t* p) noexcept {
  return Reth{load_be64(p), load_be32(p + 8), load_be32(p + 12)};
}

Aeth read_aeth(const uint8_t* p) noexcept { return Aeth{p[0], load_be24(p + 1)}; }

AtomicEth read_atomic_eth(const uint8_t* p) noexcept {
  return AtomicEth{load_be64(p), load_be32(p + 8), load_be64(p + 12), load_be64(p + 20)};
}

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
  uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < len; i += 2) sum += load_be16(hdr + i);
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
  p[8] = h.ack_req ? 0x80 : 0;
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

std::size_t write_atomic_eth(uint8_t* p, const AtomicEth& h) noexcept {
  store_be64(p, h.va);
  store_be32(p + 8, h.rkey);
  store_be64(p + 12, h.swap_add);
  store_be64(p + 20, h.compare);
  return kAtomicEthLen;
}

}  // namespace tandem::common
