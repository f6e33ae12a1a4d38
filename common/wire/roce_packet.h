// A whole RoCEv2 frame: parse one from bytes (never reading past the buffer,
// returning a drop reason), or write one from a spec. Optional VXLAN overlay:
// Eth/IPv4/UDP(4789)/VXLAN/Eth/IPv4/UDP(4791)/BTH..., where the ICRC covers the
// inner (RoCE) packet only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/wire/drop_reason.h"
#include "common/wire/headers.h"
#include "common/wire/opcode.h"

namespace tandem::common {

struct OuterHeaders {  // the underlay of a VXLAN-encapsulated packet
  EthHeader eth;
  Ipv4Header ip;
  UdpHeader udp;
  VxlanHeader vxlan;
};

struct RocePacket {
  bool has_outer = false;
  OuterHeaders outer;
  EthHeader eth;
  Ipv4Header ip;
  UdpHeader udp;
  Bth bth;
  Deth deth{};        // kOpDeth (UD)
  Reth reth;          // valid if opcode_has(bth.opcode, kOpReth)
  Aeth aeth;          // kOpAeth
  uint32_t imm = 0;   // kOpImm, host order
  AtomicEth atomic;   // kOpAtomicEth
  uint64_t atomic_ack = 0;  // kOpAtomicAck

  // Offsets into the parsed buffer (filled by parse_roce).
  uint32_t ip_offset = 0;       // RoCE (inner) IPv4 header
  uint32_t payload_offset = 0;  // first payload byte
  uint32_t payload_len = 0;     // without pad and ICRC
  uint32_t icrc = 0;            // as carried (CRC value, stored LSB first)
  uint32_t icrc_computed = 0;   // 0 when not checked
  bool icrc_checked = false;

  // Back to the defaults, member by member: `*this = RocePacket{}` builds a
  // temporary with narrow stores and copies it with wide loads, a failed
  // store-to-load forward per field (the slowest part of a parse).
  void reset() noexcept {
    has_outer = false;
    outer = {};
    eth = {};
    ip = {};
    udp = {};
    bth = {};
    deth = {};
    reth = {};
    aeth = {};
    imm = 0;
    atomic = {};
    atomic_ack = 0;
    ip_offset = payload_offset = payload_len = icrc = icrc_computed = 0;
    icrc_checked = false;
  }
};

struct ParseOptions {
  bool check_icrc = true;
  bool check_ip_checksum = true;
};

// Fills `out` as far as the bytes allow (so a tool can show what was there)
// and returns why the packet is not an acceptable RoCEv2 RC packet, or kNone.
DropReason parse_roce(const uint8_t* data, std::size_t len, RocePacket& out,
                      const ParseOptions& opts = {}) noexcept;

namespace detail {
// parse_roce's two halves, apart for the tests that compare them. The fast
// one takes only Eth (no VLAN) / IPv4 (IHL 5, unfragmented) / UDP 4791 / BTH
// with a known opcode that passes every header check: it then fills `out`
// exactly as the general parser would, sets `verdict` (kNone or kBadIcrc) and
// returns true. Otherwise it returns false without touching `out`.
bool parse_roce_common_layout(const uint8_t* data, std::size_t len, RocePacket& out,
                              const ParseOptions& opts, DropReason& verdict) noexcept;
DropReason parse_roce_general(const uint8_t* data, std::size_t len, RocePacket& out,
                              const ParseOptions& opts = {}) noexcept;

constexpr std::size_t ext_len_of(uint32_t f) noexcept {
  return ((f & kOpDeth) ? kDethLen : 0) + ((f & kOpReth) ? kRethLen : 0) + ((f & kOpAtomicEth) ? kAtomicEthLen : 0) +
         ((f & kOpAeth) ? kAethLen : 0) + ((f & kOpAtomicAck) ? kAtomicAckLen : 0) +
         ((f & kOpImm) ? kImmLen : 0) + ((f & kOpCnp) ? kCnpPadLen : 0);
}
inline constexpr auto kExtLenTable = [] {
  std::array<uint8_t, 256> t{};
  for (std::size_t op = 0; op < t.size(); ++op) t[op] = static_cast<uint8_t>(ext_len_of(kOpcodeTable[op].flags));
  return t;
}();
}  // namespace detail

// Transport headers after the BTH for this opcode (RETH, AETH, ImmDt, ...):
// a table lookup, it is asked once per packet.
constexpr std::size_t transport_ext_len(uint8_t opcode) noexcept { return detail::kExtLenTable[opcode]; }

// Bytes of headers write_roce_headers produces for `pkt` (Ethernet through
// the last transport header).
std::size_t roce_header_len(const RocePacket& pkt) noexcept;

// Bytes of pad needed after `payload_len` bytes (to a multiple of 4).
constexpr uint8_t roce_pad(std::size_t payload_len) noexcept {
  return static_cast<uint8_t>((4 - (payload_len & 3)) & 3);
}

// Writes all headers for a packet carrying `payload_len` bytes: fills in IP
// and UDP lengths, IPv4 checksums, BTH pad count and (for VXLAN) the outer
// lengths. Returns roce_header_len(pkt), or 0 if `cap` is too small. The
// caller places the payload, then pad and ICRC (finish_roce does both for a
// contiguous frame).
std::size_t write_roce_headers(const RocePacket& pkt, std::size_t payload_len, uint8_t* out,
                               std::size_t cap) noexcept;

// Builds a complete contiguous frame: headers, payload, pad, ICRC. Returns
// the frame length or 0 if `cap` is too small. `payload` may be empty.
std::size_t build_roce(const RocePacket& pkt, std::span<const uint8_t> payload, uint8_t* out,
                       std::size_t cap) noexcept;

// Offset of the RoCE IPv4 header in a frame written for `pkt`.
std::size_t roce_ip_offset(const RocePacket& pkt) noexcept;

}  // namespace tandem::common
