// Several lcores per port (tandem-rnic --lcores N): which lcore owns a QP,
// and which lcore a received frame belongs to.
//
// A QP lives on one lcore, the one its application was placed on; its state
// is never shared. Spraying gives one QP's packets many UDP source ports, so
// RSS on the 5-tuple scatters them over RX queues; and virtio or memif may
// have one queue. So the owner is read from the frame itself: the BTH's
// destination QP, whose number the host interface gives out of the owning
// lcore's slot range (slot = lcore << shift | index: one shift per frame, no
// table). A frame for another lcore goes to it over a ring
// (rnic/dpdk/dpdk_io.h); frames that are not RoCE, or name no lcore's QP, stay
// with lcore 0, whose receive stage counts their drops.
#pragma once

#include <cstdint>

#include "common/wire/byte_order.h"
#include "common/wire/entropy.h"
#include "common/wire/headers.h"

namespace tandem::rnic::port {

inline constexpr uint32_t kMaxLcores = 8;
inline constexpr uint32_t kQpSlots = 1u << 16;  // host QPN = generation << 16 | slot

class QpShards {
 public:
  explicit QpShards(uint32_t lcores = 1) noexcept : lcores_(lcores == 0 ? 1 : lcores) {
    while ((1u << bits_) < lcores_) ++bits_;
  }
  uint32_t lcores() const noexcept { return lcores_; }
  // Host QP slots of lcore k: [slot_base(k), slot_base(k) + slots_per_lcore()).
  uint32_t slots_per_lcore() const noexcept { return kQpSlots >> bits_; }
  uint32_t slot_base(uint32_t lcore) const noexcept { return lcore << (16 - bits_); }
  // The lcore owning host QPN `qpn` (0 for a slot no lcore has).
  uint32_t owner(uint32_t qpn) const noexcept {
    const uint32_t k = (qpn & (kQpSlots - 1)) >> (16 - bits_);
    return k < lcores_ ? k : 0;
  }

 private:
  uint32_t lcores_;
  uint32_t bits_ = 0;
};

inline constexpr uint32_t kNoQpn = UINT32_MAX;

// The BTH destination QP of a RoCEv2 frame (plain, VLAN-tagged, or in VXLAN),
// or kNoQpn. Reads only the bytes it needs, all within len: a peek before the
// receive stage's full parse, not a check of the frame.
inline uint32_t peek_dest_qpn(const uint8_t* f, uint32_t len) noexcept {
  using namespace common;
  uint32_t off = 0;
  for (int depth = 0; depth < 2; ++depth) {  // the outer frame, then VXLAN's inner one
    if (len < off + kEthHdrLen) return kNoQpn;
    uint16_t type = load_be16(f + off + 12);
    off += kEthHdrLen;
    if (type == kEtherTypeVlan) {
      if (len < off + kVlanTagLen) return kNoQpn;
      type = load_be16(f + off + 2);
      off += kVlanTagLen;
    }
    if (type != kEtherTypeIpv4 || len < off + kIpv4HdrLen) return kNoQpn;
    const uint32_t ihl = (f[off] & 0x0F) * 4u;
    if ((f[off] >> 4) != 4 || ihl < kIpv4HdrLen || f[off + 9] != kIpProtoUdp) return kNoQpn;
    off += ihl;
    if (len < off + kUdpHdrLen) return kNoQpn;
    const uint16_t dport = load_be16(f + off + 2);
    off += kUdpHdrLen;
    if (dport == kRoceUdpPort) {
      if (len < off + kBthLen) return kNoQpn;
      return load_be32(f + off + 4) & 0xFFFFFF;
    }
    if (dport != kVxlanUdpPort) return kNoQpn;
    off += kVxlanHdrLen;
  }
  return kNoQpn;
}

}  // namespace tandem::rnic::port
