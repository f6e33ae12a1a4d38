#include "rnic/core/frame.h"

#include <cstring>

#include "common/wire/icrc.h"
#include "common/wire/opcode.h"
#include "common/wire/roce_packet.h"

namespace tandem::rnic {

std::size_t write_transport_headers(const TxDesc& d, uint8_t* out) noexcept {
  // The BTH as three 32-bit big-endian words (the same bytes as
  // common::write_bth, without twelve byte stores per packet).
  const common::Bth& b = d.bth;
  const uint32_t pad = common::roce_pad(d.wire_payload_len());
  const uint32_t b1 = (b.se ? 0x80u : 0u) | (b.mig ? 0x40u : 0u) | (pad << 4) | (b.tver & 0x0Fu);
  common::store_be32(out, uint32_t{b.opcode} << 24 | b1 << 16 | b.pkey);
  common::store_be32(out + 4, (b.fecn ? 0x80000000u : 0u) | (b.becn ? 0x40000000u : 0u) |
                                  (b.dqpn & 0xFFFFFFu));
  common::store_be32(out + 8, (b.ack_req ? 0x80000000u : 0u) | (b.psn & 0xFFFFFFu));
  uint8_t* p = out + common::kBthLen;
  const uint16_t f = common::opcode_info(b.opcode).flags;
  if (f & common::kOpReth) p += common::write_reth(p, d.reth);
  if (f & common::kOpAeth) p += common::write_aeth(p, d.aeth);
  if (f & common::kOpAtomicAck) { common::store_be64(p, d.atomic_ack); p += common::kAtomicAckLen; }
  if (f & common::kOpImm) { common::store_be32(p, d.imm); p += common::kImmLen; }
  if (f & common::kOpCnp) { std::memset(p, 0, common::kCnpPadLen); p += common::kCnpPadLen; }
  if (d.has_xeth) { write_xeth(p, d.xeth); p += kXethLen; }
  return static_cast<std::size_t>(p - out);
}

std::size_t build_frame(const TxDesc& d, const FrameAddrs& a, uint8_t* out,
                        std::size_t cap) noexcept {
  common::RocePacket pkt;
  pkt.eth.src = a.src_mac;
  pkt.eth.dst = a.dst_mac;
  pkt.ip.src = a.src_ip;
  pkt.ip.dst = a.dst_ip;
  pkt.ip.tos = a.tos;
  pkt.ip.ttl = a.ttl;
  pkt.udp.sport = d.udp_sport;
  pkt.bth = d.bth;
  pkt.reth = d.reth;
  pkt.aeth = d.aeth;
  pkt.imm = d.imm;
  pkt.atomic_ack = d.atomic_ack;
  const uint32_t wire_len = d.wire_payload_len();
  const std::size_t hdr = common::roce_header_len(pkt);
  const uint8_t pad = common::roce_pad(wire_len);
  const std::size_t total = hdr + wire_len + pad + common::kIcrcLen;
  const std::size_t ip_off = common::roce_ip_offset(pkt);
  if (cap < total || total - ip_off > 0xFFFF) return 0;
  if (common::write_roce_headers(pkt, wire_len, out, cap) != hdr) return 0;
  uint8_t* p = out + hdr;
  if (d.has_xeth) { write_xeth(p, d.xeth); p += kXethLen; }
  for (uint32_t i = 0; i < d.num_segs; ++i) {
    if (d.segs[i].len) std::memcpy(p, d.segs[i].data, d.segs[i].len);
    p += d.segs[i].len;
  }
  std::memset(p, 0, pad);
  p += pad;
  common::store_le32(p, common::roce_icrc(out + ip_off, total - common::kIcrcLen - ip_off));
  return total;
}

}  // namespace tandem::rnic
