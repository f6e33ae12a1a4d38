// Turns a TxDesc into bytes: the transport headers alone (for an I/O layer
// that writes L2-L4 itself and chains payload segments), or a whole RoCEv2
// frame with ICRC (for tests, tools and the simulator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/wire/byte_order.h"
#include "common/wire/headers.h"
#include "common/wire/opcode.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/tx_desc.h"

namespace tandem::rnic {

// Largest transport header block: BTH + RETH + ImmDt + XETH (or BTH + AETH
// + AtomicAckETH; UD: BTH + DETH + ImmDt).
inline constexpr std::size_t kMaxTransportHdrLen = 12 + 16 + 4 + kXethLen;

// L2/L3 addressing for build_frame.
struct FrameAddrs {
  common::MacAddr src_mac{};
  common::MacAddr dst_mac{};
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint8_t tos = 0x02;  // ECT(0)
  uint8_t ttl = 64;
};

// Writes BTH (pad computed), the opcode's headers and the XETH; returns bytes
// written (<= kMaxTransportHdrLen). Inline: once per packet on the TX path.
inline std::size_t write_transport_headers(const TxDesc& d, uint8_t* out) noexcept {
  // The BTH as three 32-bit big-endian words (the same bytes as
  // common::write_bth, without twelve byte stores per packet).
  const common::Bth& b = d.bth;
  const uint32_t pad = common::roce_pad(d.wire_payload_len());
  const uint32_t b1 = (b.se ? 0x80u : 0u) | (b.mig ? 0x40u : 0u) | (pad << 4) | (b.tver & 0x0Fu);
  common::store_be32(out, uint32_t{b.opcode} << 24 | b1 << 16 | b.pkey);
  common::store_be32(out + 4, (b.fecn ? 0x80000000u : 0u) | (b.becn ? 0x40000000u : 0u) |
                                  (b.dqpn & 0xFFFFFFu));
  common::store_be32(out + 8, (b.ack_req ? 0x80000000u : 0u) | uint32_t{b.resv7 & 0x7Fu} << 24 | (b.psn & 0xFFFFFFu));
  uint8_t* p = out + common::kBthLen;
  const uint32_t f = common::opcode_info(b.opcode).flags;
  if (f & common::kOpDeth) {  // common::write_deth's bytes
    common::store_be32(p, d.deth.qkey);
    common::store_be32(p + 4, d.deth.src_qp & 0xFFFFFFu);
    p += common::kDethLen;
  }
  if (f & common::kOpReth) {  // common::write_reth's bytes
    common::store_be64(p, d.reth.va);
    common::store_be32(p + 8, d.reth.rkey);
    common::store_be32(p + 12, d.reth.len);
    p += common::kRethLen;
  }
  if (f & common::kOpAtomicEth) {  // common::write_atomic_eth's bytes
    common::store_be64(p, d.reth.va);
    common::store_be32(p + 8, d.reth.rkey);
    common::store_be64(p + 12, d.atomic.swap_add);
    common::store_be64(p + 20, d.atomic.compare);
    p += common::kAtomicEthLen;
  }
  if (f & common::kOpAeth) {  // common::write_aeth's bytes
    common::store_be32(p, uint32_t{d.aeth.syndrome} << 24 | (d.aeth.msn & 0xFFFFFFu));
    p += common::kAethLen;
  }
  if (f & common::kOpAtomicAck) { common::store_be64(p, d.atomic_ack); p += common::kAtomicAckLen; }
  if (f & common::kOpImm) { common::store_be32(p, d.imm); p += common::kImmLen; }
  if (f & common::kOpCnp) { std::memset(p, 0, common::kCnpPadLen); p += common::kCnpPadLen; }
  if (d.has_xeth) { write_xeth(p, d.xeth); p += kXethLen; }
  return static_cast<std::size_t>(p - out);
}

// Complete Ethernet/IPv4/UDP/BTH.../payload/pad/ICRC frame; returns its
// length, or 0 if `cap` is too small. Parses with common::parse_roce.
std::size_t build_frame(const TxDesc& d, const FrameAddrs& a, uint8_t* out,
                        std::size_t cap) noexcept;

}  // namespace tandem::rnic
