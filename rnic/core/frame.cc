#include "rnic/core/frame.h"

#include <cstring>

#include "common/wire/icrc.h"
#include "common/wire/opcode.h"
#include "common/wire/roce_packet.h"

namespace tandem::rnic {

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
  if (common::opcode_has(d.bth.opcode, common::kOpDeth)) pkt.deth = d.deth;
  else pkt.reth = d.reth;
  pkt.aeth = d.aeth;
  pkt.imm = d.imm;
  pkt.atomic_ack = d.atomic_ack;
  if (common::opcode_has(d.bth.opcode, common::kOpAtomicEth))
    pkt.atomic = common::AtomicEth{d.reth.va, d.reth.rkey, d.atomic.swap_add, d.atomic.compare};
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
