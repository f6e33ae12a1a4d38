// The bytes every frame of one QP toward one destination shares, built once
// per QP, table version and destination QPN (egress_route.h) and copied by the
// I/O layer's encapsulation (rnic/dpdk/tx_encap.h, or a test's fake) per frame.
// No DPDK here: the template is plain bytes.
#pragma once

#include <cstdint>

#include "common/wire/headers.h"

namespace tandem::rnic::port {

// Ethernet + IPv4 (no options) + UDP.
inline constexpr uint32_t kL2L4Len = common::kEthHdrLen + common::kIpv4HdrLen + common::kUdpHdrLen;
// What a template holds: L2-L4 and the BTH (54 bytes), copied as 64.
inline constexpr uint32_t kTemplateLen = 64;
static_assert(kL2L4Len + common::kBthLen <= kTemplateLen);

// Underlay addressing of one frame, from the egress table entry.
struct EncapAddrs {
  common::MacAddr src_mac{};
  common::MacAddr dst_mac{};
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint16_t sport = 0;
  uint8_t tos = 0x02;     // ECT(0)
  uint16_t pkey = 0xFFFF; // BTH P_Key: the QP's tenant's, stamped by the RNIC (never the application's)
};

// What every frame of one QP toward one destination shares: the Ethernet/
// IPv4/UDP/BTH bytes with the per-packet fields (IPv4 length, id, checksum;
// UDP source port and length; BTH opcode, flags, pad, PSN) left zero, the BTH
// destination QP filled in, and the ones'-complement sum of the IPv4 header's
// constant words. A frame whose descriptor names another destination QP (or
// sets FECN/BECN) gets its BTH word written from the descriptor instead, so a
// stale template costs speed, never wrong bytes.
struct alignas(64) EncapTemplate {
  uint8_t hdr[kTemplateLen] = {};
  uint32_t ip_sum = 0;
  uint32_t dqpn = 0;       // the BTH destination QP in hdr
  uint16_t pkey = 0xFFFF;  // the BTH P_Key every frame gets, whatever the descriptor says
};

EncapTemplate make_encap_template(const EncapAddrs& a, uint32_t dqpn = 0) noexcept;
// Points the template's BTH at another destination QP.
void set_template_dqpn(EncapTemplate& t, uint32_t dqpn) noexcept;

}  // namespace tandem::rnic::port
