// Turns a TxDesc into bytes: the transport headers alone (for an I/O layer
// that writes L2-L4 itself and chains payload segments), or a whole RoCEv2
// frame with ICRC (for tests, tools and the simulator).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/wire/headers.h"
#include "rnic/core/tx_desc.h"

namespace tandem::rnic {

// Largest transport header block: BTH + RETH + ImmDt + XETH (or BTH + AETH
// + AtomicAckETH).
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
// written (<= kMaxTransportHdrLen).
std::size_t write_transport_headers(const TxDesc& d, uint8_t* out) noexcept;

// Complete Ethernet/IPv4/UDP/BTH.../payload/pad/ICRC frame; returns its
// length, or 0 if `cap` is too small. Parses with common::parse_roce.
std::size_t build_frame(const TxDesc& d, const FrameAddrs& a, uint8_t* out,
                        std::size_t cap) noexcept;

}  // namespace tandem::rnic
