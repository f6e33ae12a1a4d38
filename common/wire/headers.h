// Header layouts of a RoCEv2 packet: Ethernet (optional 802.1Q), IPv4, UDP,
// VXLAN, and the InfiniBand transport headers BTH, RETH, AETH, ImmDt,
// AtomicETH, AtomicAckETH. Plain structs with host-order fields, plus
// read/write functions that go through bytes, so nothing depends on struct
// packing or alignment.
#pragma once

#include <array>
#include <cstdint>

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
  uint32_t psn = 0;  // 24 bits
};

struct Reth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t len = 0;
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
EthHeader read_eth(const uint8_t* p, std::size_t avail, bool* ok) noexcept;
Ipv4Header read_ipv4(const uint8_t* p) noexcept;
UdpHeader read_udp(const uint8_t* p) noexcept;
VxlanHeader read_vxlan(const uint8_t* p) noexcept;
Bth read_bth(const uint8_t* p) noexcept;
Reth read_reth(const uint8_t* p) noexcept;
Aeth read_aeth(const uint8_t* p) noexcept;
AtomicEth read_atomic_eth(const uint8_t* p) noexcept;

// --- writers: return the number of bytes written ---
std::size_t write_eth(uint8_t* p, const EthHeader& h) noexcept;
std::size_t write_ipv4(uint8_t* p, const Ipv4Header& h) noexcept;  // checksum computed
std::size_t write_udp(uint8_t* p, const UdpHeader& h) noexcept;
std::size_t write_vxlan(uint8_t* p, const VxlanHeader& h) noexcept;
std::size_t write_bth(uint8_t* p, const Bth& h) noexcept;
std::size_t write_reth(uint8_t* p, const Reth& h) noexcept;
std::size_t write_aeth(uint8_t* p, const Aeth& h) noexcept;
std::size_t write_atomic_eth(uint8_t* p, const AtomicEth& h) noexcept;

// RFC 1071 checksum over an IPv4 header (checksum field included as is).
uint16_t ipv4_checksum(const uint8_t* hdr, std::size_t len) noexcept;

}  // namespace tandem::common
