// Header layouts of a RoCEv2 packet: Ethernet (optional 802.1Q), IPv4, UDP,
// VXLAN, and the InfiniBand transport headers BTH, RETH, AETH, ImmDt,
// AtomicETH, AtomicAckETH. Plain structs with host-order fields, plus
// read/write functions that go through bytes, so nothing depends on struct
// packing or alignment.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "common/wire/byte_order.h"

namespace tandem::common {

using MacAddr = std::array<uint8_t, 6>;

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint16_t kVxlanUdpPort = 4789;

inline constexpr std::size_t kEthHdrLen = 14;
inline constexpr std::size_t kVlanTagLen = 4;
inline constexpr std::size_t kIpv4HdrLen = 20;
inline constexpr std::size_t kUdpHdrLen = 8;
inline constexpr std::size_t kVxlanHdrLen = 8;
inline constexpr std::size_t kBthLen = 12;
inline constexpr std::size_t kRethLen = 16;
inline constexpr std::size_t kAethLen = 4;
inline constexpr std::size_t kImmLen = 4;
inline constexpr std::size_t kDethLen = 8;
inline constexpr std::size_t kAtomicEthLen = 28;
inline constexpr std::size_t kAtomicAckLen = 8;
inline constexpr std::size_t kCnpPadLen = 16;
inline constexpr std::size_t kIcrcLen = 4;

struct EthHeader {
  MacAddr dst{};
  MacAddr src{};
  bool has_vlan = false;
  uint16_t vlan_tci = 0;
  uint16_t ethertype = kEtherTypeIpv4;

  std::size_t size() const noexcept { return kEthHdrLen + (has_vlan ? kVlanTagLen : 0); }
};

struct Ipv4Header {
  uint8_t ihl = 5;  // in 32-bit words
  uint8_t tos = 0;
  uint16_t total_len = 0;
  uint16_t id = 0;
  uint16_t frag = 0x4000;  // DF
  uint8_t ttl = 64;
  uint8_t proto = kIpProtoUdp;
  uint16_t checksum = 0;
  uint32_t src = 0;
  uint32_t dst = 0;
};

struct UdpHeader {
  uint16_t sport = 0;
  uint16_t dport = 0;
  uint16_t len = 0;
  uint16_t checksum = 0;
};

struct VxlanHeader {
  uint8_t flags = 0x08;  // I bit: VNI valid
  uint32_t vni = 0;
};

struct Bth {
  uint8_t opcode = 0;
  bool se = false;
  bool mig = false;
  uint8_t pad = 0;   // 0-3 pad bytes before the ICRC
  uint8_t tver = 0;
  uint16_t pkey = 0xFFFF;
  bool fecn = false;
  bool becn = false;
  uint32_t dqpn = 0;  // 24 bits
  bool ack_req = false;
  uint8_t resv7 = 0;  // the 7 reserved bits after AckReq (0 in standard RoCE; rnic/core/irn_wire.h)
  uint32_t psn = 0;  // 24 bits
};

struct Reth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t len = 0;
};

// Datagram extended transport header (UD): the Q_Key the receiving QP must
// hold and the sending QP's number. Trivial (no initialisers) so that it can
// share bytes with the RETH in rnic's TxDesc; `Deth{}` is zeros.
struct Deth {
  uint32_t qkey;
  uint32_t src_qp;  // 24 bits
};

struct Aeth {
  uint8_t syndrome = 0;
  uint32_t msn = 0;  // 24 bits
};

struct AtomicEth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;
};

// AETH syndrome: top 3 bits select ACK / RNR NAK / NAK (IBA 9.7.5.1).
inline constexpr uint8_t kAethAck = 0x00;     // low 5 bits: credit count
inline constexpr uint8_t kAethRnrNak = 0x20;  // low 5 bits: RNR timer
inline constexpr uint8_t kAethNak = 0x60;     // low 5 bits: NAK code
inline constexpr uint8_t kNakPsnSeqError = 0;
inline constexpr uint8_t kNakInvalidRequest = 1;
inline constexpr uint8_t kNakRemoteAccess = 2;
inline constexpr uint8_t kNakRemoteOp = 3;
inline constexpr uint8_t kNakInvalidRd = 4;

constexpr uint8_t aeth_kind(uint8_t syndrome) noexcept { return syndrome & 0x60; }
constexpr uint8_t aeth_value(uint8_t syndrome) noexcept { return syndrome & 0x1F; }

// --- readers: `p` must have at least the header's length ---
// The *_into forms store each field straight into `h`. With the returning
// forms a caller's `x.bth = read_bth(p)` goes through a temporary (the
// compiler must assume `x` may alias the packet bytes), written with narrow
// stores and copied with wide loads: a failed store-to-load forward per
// header, the largest cost of a parse on the receive path.
// read_eth_into: false if `avail` is too short (h then holds what was there).
inline bool read_eth_into(const uint8_t* p, std::size_t avail, EthHeader& h) noexcept {
  h = EthHeader{};
  if (avail < kEthHdrLen) return false;
  std::memcpy(h.dst.data(), p, 6);
  std::memcpy(h.src.data(), p + 6, 6);
  h.ethertype = load_be16(p + 12);
  if (h.ethertype == kEtherTypeVlan) {
    if (avail < kEthHdrLen + kVlanTagLen) return false;
    h.has_vlan = true;
    h.vlan_tci = load_be16(p + 14);
    h.ethertype = load_be16(p + 16);
  }
  return true;
}

inline void read_ipv4_into(const uint8_t* p, Ipv4Header& h) noexcept {
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
}

inline void read_udp_into(const uint8_t* p, UdpHeader& h) noexcept {
  h.sport = load_be16(p);
  h.dport = load_be16(p + 2);
  h.len = load_be16(p + 4);
  h.checksum = load_be16(p + 6);
}

inline void read_bth_into(const uint8_t* p, Bth& h) noexcept {
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
  h.resv7 = p[8] & 0x7F;
  h.psn = load_be24(p + 9);
}

inline void read_reth_into(const uint8_t* p, Reth& h) noexcept {
  h.va = load_be64(p);
  h.rkey = load_be32(p + 8);
  h.len = load_be32(p + 12);
}

inline void read_deth_into(const uint8_t* p, Deth& h) noexcept {
  h.qkey = load_be32(p);
  h.src_qp = load_be24(p + 5);
}

inline void read_aeth_into(const uint8_t* p, Aeth& h) noexcept {
  h.syndrome = p[0];
  h.msn = load_be24(p + 1);
}

inline void read_atomic_eth_into(const uint8_t* p, AtomicEth& h) noexcept {
  h.va = load_be64(p);
  h.rkey = load_be32(p + 8);
  h.swap_add = load_be64(p + 12);
  h.compare = load_be64(p + 20);
}

inline EthHeader read_eth(const uint8_t* p, std::size_t avail, bool* ok) noexcept {
  EthHeader h;
  *ok = read_eth_into(p, avail, h);
  return h;
}
inline Ipv4Header read_ipv4(const uint8_t* p) noexcept {
  Ipv4Header h;
  read_ipv4_into(p, h);
  return h;
}

inline UdpHeader read_udp(const uint8_t* p) noexcept {
  UdpHeader h;
  read_udp_into(p, h);
  return h;
}

inline Bth read_bth(const uint8_t* p) noexcept {
  Bth h;
  read_bth_into(p, h);
  return h;
}

inline Reth read_reth(const uint8_t* p) noexcept {
  Reth h;
  read_reth_into(p, h);
  return h;
}

inline Aeth read_aeth(const uint8_t* p) noexcept {
  Aeth h;
  read_aeth_into(p, h);
  return h;
}

inline AtomicEth read_atomic_eth(const uint8_t* p) noexcept {
  AtomicEth h;
  read_atomic_eth_into(p, h);
  return h;
}
inline VxlanHeader read_vxlan(const uint8_t* p) noexcept { return VxlanHeader{p[0], load_be24(p + 4)}; }

// --- writers: return the number of bytes written ---
std::size_t write_eth(uint8_t* p, const EthHeader& h) noexcept;
std::size_t write_ipv4(uint8_t* p, const Ipv4Header& h) noexcept;  // checksum computed
std::size_t write_udp(uint8_t* p, const UdpHeader& h) noexcept;
std::size_t write_vxlan(uint8_t* p, const VxlanHeader& h) noexcept;
std::size_t write_bth(uint8_t* p, const Bth& h) noexcept;
std::size_t write_reth(uint8_t* p, const Reth& h) noexcept;
std::size_t write_aeth(uint8_t* p, const Aeth& h) noexcept;
std::size_t write_deth(uint8_t* p, const Deth& h) noexcept;
std::size_t write_atomic_eth(uint8_t* p, const AtomicEth& h) noexcept;

// RFC 1071 checksum over an IPv4 header (checksum field included as is).
uint16_t ipv4_checksum(const uint8_t* hdr, std::size_t len) noexcept;

}  // namespace tandem::common
