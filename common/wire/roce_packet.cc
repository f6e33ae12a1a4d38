#include "common/wire/roce_packet.h"

#include <cstring>

#include "common/wire/entropy.h"
#include "common/wire/icrc.h"

namespace tandem::common {

namespace {

// Whether an IPv4 header of `ihl` bytes has a good checksum: its 16-bit words
// sum to 0xFFFF in ones' complement. Without options (the usual case) that is
// five native 32-bit words folded; the all-ones result does not depend on
// byte order, so nothing is byte-swapped.
inline bool ipv4_checksum_ok(const uint8_t* p, std::size_t ihl) noexcept {
  if (ihl != kIpv4HdrLen) return ipv4_checksum(p, ihl) == 0;
  uint32_t w[5];
  std::memcpy(w, p, sizeof w);
  uint64_t s = uint64_t{w[0]} + w[1] + w[2] + w[3] + w[4];
  s = (s & 0xFFFFFFFF) + (s >> 32);
  s = (s & 0xFFFFFFFF) + (s >> 32);
  s = (s & 0xFFFF) + (s >> 16);
  s = (s & 0xFFFF) + (s >> 16);
  return s == 0xFFFF;
}

// Parses Eth/IPv4/UDP at data[off..len); on success `off` is past the UDP
// header and `end` is where the IP datagram ends (Ethernet padding excluded).
DropReason parse_l2_l4(const uint8_t* data, std::size_t len, std::size_t& off, std::size_t& end,
                       EthHeader& eth, Ipv4Header& ip, UdpHeader& udp, uint32_t& ip_off,
                       const ParseOptions& opts) noexcept {
  if (!read_eth_into(data + off, len - off, eth)) return DropReason::kTruncated;
  if (eth.ethertype != kEtherTypeIpv4) return DropReason::kNotIpv4;
  off += eth.size();
  if (len - off < kIpv4HdrLen) return DropReason::kTruncated;
  ip_off = static_cast<uint32_t>(off);
  read_ipv4_into(data + off, ip);
  const std::size_t ihl = std::size_t{ip.ihl} * 4;
  if ((data[off] >> 4) != 4 || ihl < kIpv4HdrLen) return DropReason::kBadIpHeader;
  if (len - off < ihl) return DropReason::kTruncated;
  if (ip.total_len < ihl + kUdpHdrLen) return DropReason::kBadIpHeader;
  if (len - off < ip.total_len) return DropReason::kTruncated;
  if (opts.check_ip_checksum && !ipv4_checksum_ok(data + off, ihl)) return DropReason::kBadIpChecksum;
  if ((ip.frag & 0x3FFF) != 0) return DropReason::kIpFragment;
  if (ip.proto != kIpProtoUdp) return DropReason::kNotUdp;
  end = off + ip.total_len;
  off += ihl;
  read_udp_into(data + off, udp);
  if (udp.len < kUdpHdrLen || udp.len != end - off) return DropReason::kBadUdpLength;
  off += kUdpHdrLen;
  return DropReason::kNone;
}

}  // namespace

namespace detail {

bool parse_roce_common_layout(const uint8_t* d, std::size_t len, RocePacket& out,
                              const ParseOptions& opts, DropReason& verdict) noexcept {
  constexpr std::size_t kIp = kEthHdrLen, kUdp = kIp + kIpv4HdrLen, kBthOff = kUdp + kUdpHdrLen,
                        kExtOff = kBthOff + kBthLen;
  if (len < kExtOff + kIcrcLen) return false;
  // Everything the general parser checks, for this one layout, before any
  // store to `out`: any miss leaves the whole decision to parse_roce_general.
  const uint16_t ethertype = load_be16(d + 12);
  const uint16_t total_len = load_be16(d + kIp + 2);
  const uint16_t frag = load_be16(d + kIp + 6);
  const uint16_t udp_len = load_be16(d + kUdp + 4);
  const uint16_t dport = load_be16(d + kUdp + 2);
  const uint8_t op = d[kBthOff];
  const uint8_t bth1 = d[kBthOff + 1];
  const std::size_t ext = transport_ext_len(op);
  const uint8_t pad = (bth1 >> 4) & 0x3;
  // total_len >= 20 + 8 + 12 + ext + 4 + pad; udp_len == total_len - 20
  // (so the UDP datagram ends where the IP one does); the frame holds it all.
  const bool layout = ethertype == kEtherTypeIpv4 && d[kIp] == 0x45 && (frag & 0x3FFF) == 0 &&
                      d[kIp + 9] == kIpProtoUdp && dport == kRoceUdpPort && (bth1 & 0x0F) == 0 &&
                      opcode_known(op) &&
                      std::size_t{total_len} >= kIpv4HdrLen + kUdpHdrLen + kBthLen + ext + kIcrcLen + pad &&
                      std::size_t{udp_len} + kIpv4HdrLen == total_len && len - kIp >= total_len;
  if (!layout) return false;
  if (opts.check_ip_checksum && !ipv4_checksum_ok(d + kIp, kIpv4HdrLen)) return false;
  const uint32_t f = opcode_info(op).flags;
  const std::size_t end = kIp + std::size_t{total_len};
  const std::size_t payload_len = end - kExtOff - ext - kIcrcLen - pad;
  if (payload_len != 0 && !(f & kOpPayload)) return false;

  // Accepted up to the ICRC: every field once, as reset() + the general
  // parser would leave it.
  out.has_outer = false;
  out.outer = {};
  std::memcpy(out.eth.dst.data(), d, 6);
  std::memcpy(out.eth.src.data(), d + 6, 6);
  out.eth.has_vlan = false;
  out.eth.vlan_tci = 0;
  out.eth.ethertype = kEtherTypeIpv4;
  read_ipv4_into(d + kIp, out.ip);
  read_udp_into(d + kUdp, out.udp);
  read_bth_into(d + kBthOff, out.bth);
  const uint8_t* x = d + kExtOff;
  if (f & kOpDeth) {
    read_deth_into(x, out.deth);
    x += kDethLen;
  } else {
    out.deth = {};
  }
  if (f & kOpReth) {
    read_reth_into(x, out.reth);
    x += kRethLen;
  } else {
    out.reth = {};
  }
  if (f & kOpAtomicEth) {
    read_atomic_eth_into(x, out.atomic);
    x += kAtomicEthLen;
  } else {
    out.atomic = {};
  }
  if (f & kOpAeth) {
    read_aeth_into(x, out.aeth);
    x += kAethLen;
  } else {
    out.aeth = {};
  }
  if (f & kOpAtomicAck) {
    out.atomic_ack = load_be64(x);
    x += kAtomicAckLen;
  } else {
    out.atomic_ack = 0;
  }
  out.imm = (f & kOpImm) ? load_be32(x) : 0;
  out.ip_offset = static_cast<uint32_t>(kIp);
  out.payload_offset = static_cast<uint32_t>(kExtOff + ext);
  out.payload_len = static_cast<uint32_t>(payload_len);
  out.icrc = load_le32(d + end - kIcrcLen);
  out.icrc_checked = false;
  out.icrc_computed = 0;
  verdict = DropReason::kNone;
  if (opts.check_icrc) {
    out.icrc_checked = true;
    out.icrc_computed = roce_icrc(d + kIp, end - kIcrcLen - kIp);
    if (out.icrc_computed != out.icrc) verdict = DropReason::kBadIcrc;
  }
  return true;
}

DropReason parse_roce_general(const uint8_t* data, std::size_t len, RocePacket& out,
                              const ParseOptions& opts) noexcept {
  out.reset();
  std::size_t off = 0, end = 0;
  DropReason r = parse_l2_l4(data, len, off, end, out.eth, out.ip, out.udp, out.ip_offset, opts);
  if (r != DropReason::kNone) return r;

  if (out.udp.dport == kVxlanUdpPort) {
    out.has_outer = true;
    out.outer.eth = out.eth;
    out.outer.ip = out.ip;
    out.outer.udp = out.udp;
    if (end - off < kVxlanHdrLen) return DropReason::kTruncated;
    out.outer.vxlan = read_vxlan(data + off);
    if ((out.outer.vxlan.flags & 0x08) == 0) return DropReason::kBadVxlan;
    off += kVxlanHdrLen;
    // The inner frame must lie within the outer datagram.
    r = parse_l2_l4(data, end, off, end, out.eth, out.ip, out.udp, out.ip_offset, opts);
    if (r != DropReason::kNone) return r;
  }
  if (out.udp.dport != kRoceUdpPort) return DropReason::kNotRoce;

  if (end - off < kBthLen) return DropReason::kTruncated;
  read_bth_into(data + off, out.bth);
  if (out.bth.tver != 0) return DropReason::kBadBthVersion;
  const uint8_t op = out.bth.opcode;
  if (!opcode_known(op)) return DropReason::kUnknownOpcode;
  off += kBthLen;

  const uint32_t f = opcode_info(op).flags;
  const std::size_t ext = transport_ext_len(op);
  if (end - off < ext + kIcrcLen) return DropReason::kTruncated;
  if (f & kOpDeth) { read_deth_into(data + off, out.deth); off += kDethLen; }
  if (f & kOpReth) { read_reth_into(data + off, out.reth); off += kRethLen; }
  if (f & kOpAtomicEth) { read_atomic_eth_into(data + off, out.atomic); off += kAtomicEthLen; }
  if (f & kOpAeth) { read_aeth_into(data + off, out.aeth); off += kAethLen; }
  if (f & kOpAtomicAck) { out.atomic_ack = load_be64(data + off); off += kAtomicAckLen; }
  if (f & kOpImm) { out.imm = load_be32(data + off); off += kImmLen; }
  if (f & kOpCnp) off += kCnpPadLen;

  const std::size_t rest = end - off - kIcrcLen;  // payload + pad
  out.payload_offset = static_cast<uint32_t>(off);
  out.icrc = load_le32(data + end - kIcrcLen);
  if (rest < out.bth.pad) return DropReason::kBadPad;
  out.payload_len = static_cast<uint32_t>(rest - out.bth.pad);
  if (out.payload_len != 0 && !(f & kOpPayload)) return DropReason::kBadPad;

  if (opts.check_icrc) {
    out.icrc_checked = true;
    out.icrc_computed = roce_icrc(data + out.ip_offset, end - kIcrcLen - out.ip_offset);
    if (out.icrc_computed != out.icrc) return DropReason::kBadIcrc;
  }
  return DropReason::kNone;
}

}  // namespace detail

DropReason parse_roce(const uint8_t* data, std::size_t len, RocePacket& out,
                      const ParseOptions& opts) noexcept {
  DropReason verdict;
  if (detail::parse_roce_common_layout(data, len, out, opts, verdict)) [[likely]] return verdict;
  return detail::parse_roce_general(data, len, out, opts);
}

std::size_t roce_ip_offset(const RocePacket& pkt) noexcept {
  std::size_t n = 0;
  if (pkt.has_outer) n += pkt.outer.eth.size() + kIpv4HdrLen + kUdpHdrLen + kVxlanHdrLen;
  return n + pkt.eth.size();
}

std::size_t roce_header_len(const RocePacket& pkt) noexcept {
  return roce_ip_offset(pkt) + kIpv4HdrLen + kUdpHdrLen + kBthLen +
         transport_ext_len(pkt.bth.opcode);
}

std::size_t write_roce_headers(const RocePacket& pkt, std::size_t payload_len, uint8_t* out,
                               std::size_t cap) noexcept {
  const std::size_t hdr = roce_header_len(pkt);
  if (cap < hdr) return 0;
  const uint8_t pad = roce_pad(payload_len);
  const std::size_t inner_ip_len = hdr - roce_ip_offset(pkt) + payload_len + pad + kIcrcLen;
  uint8_t* p = out;

  if (pkt.has_outer) {
    EthHeader oeth = pkt.outer.eth;
    oeth.ethertype = kEtherTypeIpv4;
    p += write_eth(p, oeth);
    const std::size_t inner_frame = pkt.eth.size() + inner_ip_len;
    Ipv4Header oip = pkt.outer.ip;
    oip.ihl = 5;
    oip.proto = kIpProtoUdp;
    oip.total_len = static_cast<uint16_t>(kIpv4HdrLen + kUdpHdrLen + kVxlanHdrLen + inner_frame);
    p += write_ipv4(p, oip);
    UdpHeader oudp = pkt.outer.udp;
    oudp.dport = kVxlanUdpPort;
    oudp.len = static_cast<uint16_t>(kUdpHdrLen + kVxlanHdrLen + inner_frame);
    oudp.checksum = 0;
    p += write_udp(p, oudp);
    p += write_vxlan(p, pkt.outer.vxlan);
  }

  EthHeader eth = pkt.eth;
  eth.ethertype = kEtherTypeIpv4;
  p += write_eth(p, eth);
  Ipv4Header ip = pkt.ip;
  ip.ihl = 5;
  ip.proto = kIpProtoUdp;
  ip.total_len = static_cast<uint16_t>(inner_ip_len);
  p += write_ipv4(p, ip);
  UdpHeader udp = pkt.udp;
  udp.dport = kRoceUdpPort;
  udp.len = static_cast<uint16_t>(inner_ip_len - kIpv4HdrLen);
  udp.checksum = 0;  // RoCEv2 senders put zero; the ICRC protects the data
  p += write_udp(p, udp);
  Bth bth = pkt.bth;
  bth.pad = pad;
  p += write_bth(p, bth);

  const uint32_t f = opcode_info(pkt.bth.opcode).flags;
  if (f & kOpDeth) p += write_deth(p, pkt.deth);
  if (f & kOpReth) p += write_reth(p, pkt.reth);
  if (f & kOpAtomicEth) p += write_atomic_eth(p, pkt.atomic);
  if (f & kOpAeth) p += write_aeth(p, pkt.aeth);
  if (f & kOpAtomicAck) { store_be64(p, pkt.atomic_ack); p += kAtomicAckLen; }
  if (f & kOpImm) { store_be32(p, pkt.imm); p += kImmLen; }
  if (f & kOpCnp) { std::memset(p, 0, kCnpPadLen); p += kCnpPadLen; }
  return static_cast<std::size_t>(p - out);
}

std::size_t build_roce(const RocePacket& pkt, std::span<const uint8_t> payload, uint8_t* out,
                       std::size_t cap) noexcept {
  const std::size_t hdr = roce_header_len(pkt);
  const uint8_t pad = roce_pad(payload.size());
  const std::size_t total = hdr + payload.size() + pad + kIcrcLen;
  // The outermost IPv4 datagram (the VXLAN underlay's, if any) must fit its
  // 16-bit total length; it is the longest of the two.
  const std::size_t outer_ip_off = pkt.has_outer ? pkt.outer.eth.size() : roce_ip_offset(pkt);
  if (cap < total || total - outer_ip_off > 0xFFFF) return 0;
  write_roce_headers(pkt, payload.size(), out, cap);
  if (!payload.empty()) std::memcpy(out + hdr, payload.data(), payload.size());
  std::memset(out + hdr + payload.size(), 0, pad);
  const std::size_t ip_off = roce_ip_offset(pkt);
  const uint32_t icrc = roce_icrc(out + ip_off, total - kIcrcLen - ip_off);
  store_le32(out + total - kIcrcLen, icrc);
  return total;
}

}  // namespace tandem::common
