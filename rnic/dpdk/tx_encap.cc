#include "rnic/dpdk/tx_encap.h"

#include <rte_eal.h>
#include <rte_memcpy.h>

#include <algorithm>
#include <cstring>

#include "common/wire/byte_order.h"
#include "common/wire/entropy.h"
#include "common/wire/icrc.h"
#include "common/wire/roce_packet.h"
#include "common/wire/small_copy.h"
#include "rnic/core/frame.h"

namespace tandem::rnic::dpdk {

namespace {

// Offsets inside the Ethernet/IPv4/UDP block.
constexpr uint32_t kIp = common::kEthHdrLen;
constexpr uint32_t kUdp = kIp + common::kIpv4HdrLen;

void no_free(void*, void*) noexcept {}

// Writes the frame's headers from the template: the 64 template bytes as one
// block, then the BTH's per-packet words and the opcode's extension headers
// (the bytes common::write_bth/_reth/_aeth/... and write_xeth produce).
// Returns the transport header length (BTH to the end of the XETH).
[[gnu::always_inline]] inline uint32_t write_headers(uint8_t* base, const EncapTemplate& t,
                                                     const TxDesc& d, uint32_t pad) noexcept {
  std::memcpy(base, t.hdr, kTemplateLen);
  const common::Bth& b = d.bth;
  uint8_t* bth = base + kL2L4Len;
  const uint32_t b1 = (uint32_t{b.se} << 7) | (uint32_t{b.mig} << 6) | (pad << 4) | (b.tver & 0x0Fu);
  common::store_be32(bth, uint32_t{b.opcode} << 24 | b1 << 16 | t.pkey);
  if (b.dqpn != t.dqpn || b.fecn || b.becn) [[unlikely]]
    common::store_be32(bth + 4, (uint32_t{b.fecn} << 31) | (uint32_t{b.becn} << 30) | (b.dqpn & 0xFFFFFFu));
  common::store_be32(bth + 8, (uint32_t{b.ack_req} << 31) | uint32_t{b.resv7 & 0x7Fu} << 24 | (b.psn & 0xFFFFFFu));
  uint8_t* p = bth + common::kBthLen;
  const uint32_t f = common::opcode_info(b.opcode).flags;
  if (f & common::kOpDeth) [[unlikely]] {  // UD: Q_Key and source QP
    common::store_be32(p, d.deth.qkey);
    common::store_be32(p + 4, d.deth.src_qp & 0xFFFFFFu);
    p += common::kDethLen;
  }
  if (f & common::kOpReth) {
    common::store_be64(p, d.reth.va);
    common::store_be32(p + 8, d.reth.rkey);
    common::store_be32(p + 12, d.reth.len);
    p += common::kRethLen;
  }
  if (f & (common::kOpAeth | common::kOpAtomicAck | common::kOpImm | common::kOpCnp | common::kOpAtomicEth)) [[unlikely]] {
    if (f & common::kOpAtomicEth) {  // VA and R_Key in the RETH fields (tx_desc.h)
      common::store_be64(p, d.reth.va);
      common::store_be32(p + 8, d.reth.rkey);
      common::store_be64(p + 12, d.atomic.swap_add);
      common::store_be64(p + 20, d.atomic.compare);
      p += common::kAtomicEthLen;
    }
    if (f & common::kOpAeth) {
      common::store_be32(p, uint32_t{d.aeth.syndrome} << 24 | (d.aeth.msn & 0xFFFFFFu));
      p += common::kAethLen;
    }
    if (f & common::kOpAtomicAck) { common::store_be64(p, d.atomic_ack); p += common::kAtomicAckLen; }
    if (f & common::kOpImm) { common::store_be32(p, d.imm); p += common::kImmLen; }
    if (f & common::kOpCnp) { std::memset(p, 0, common::kCnpPadLen); p += common::kCnpPadLen; }
  }
  if (d.has_xeth) {
    const Xeth& x = d.xeth;
    common::store_be32(p, uint32_t{kXethMagic} << 24 | (x.recv_idx & 0xFFFFFF));
    common::store_be32(p + 4, x.msg_offset);
    common::store_be32(p + 8, x.msg_len);
    common::store_be32(p + 12, x.rkey);
    common::store_be64(p + 16, x.va);
    p += kXethLen;
  }
  return static_cast<uint32_t>(p - bth);
}

// A copied payload: small ones inline (common/wire/small_copy.h), the rest rte_memcpy.
[[gnu::always_inline]] inline void copy_payload(uint8_t* dst, const uint8_t* src, uint32_t n) noexcept {
  if (!common::copy_16_to_64(dst, src, n)) rte_memcpy(dst, src, n);
}

// The per-packet Ethernet/IPv4/UDP fields, and the IPv4 checksum finished
// from the template's partial sum.
[[gnu::always_inline]] inline void patch_l2l4(uint8_t* base, const EncapTemplate& t, uint32_t ip_len, uint16_t id,
                                              uint16_t sport) noexcept {
  uint8_t* ip = base + kIp;
  common::store_be32(ip + 2, ip_len << 16 | id);  // total length, id
  // The whole UDP header: source port, RoCEv2 port, length, no checksum.
  common::store_be64(base + kUdp, uint64_t{sport} << 48 | uint64_t{common::kRoceUdpPort} << 32 |
                                      uint64_t{ip_len - common::kIpv4HdrLen} << 16);
  uint32_t sum = t.ip_sum + ip_len + id;
  sum = (sum & 0xFFFF) + (sum >> 16);
  sum = (sum & 0xFFFF) + (sum >> 16);
  common::store_be16(ip + 10, static_cast<uint16_t>(~sum));
}

}  // namespace

TxEncap::TxEncap(rte_mempool* hdr_pool, rte_mempool* ext_pool, bool copy, uint32_t max_mrs)
    : hdr_pool_(hdr_pool),
      pinned_ext_((rte_pktmbuf_priv_flags(hdr_pool) & RTE_PKTMBUF_POOL_F_PINNED_EXT_BUF) != 0),
      data_off_(static_cast<uint16_t>(
          std::min<uint32_t>(RTE_PKTMBUF_HEADROOM, rte_pktmbuf_data_room_size(hdr_pool)))),
      data_at_(static_cast<uint32_t>(sizeof(rte_mbuf)) + rte_pktmbuf_priv_size(hdr_pool) + data_off_),
      ext_pool_(ext_pool), copy_(copy || ext_pool == nullptr),
      iova_is_va_(rte_eal_iova_mode() == RTE_IOVA_VA) {
  rte_mbuf proto{};
  proto.data_off = data_off_;
  rte_mbuf_refcnt_set(&proto, 1);
  proto.nb_segs = 1;
  proto.port = RTE_MBUF_PORT_INVALID;
  std::memcpy(&rearm_, &proto.rearm_data, sizeof rearm_);
  if (!copy_) {
    n_pins_ = max_mrs;
    pins_ = std::make_unique<rte_mbuf_ext_shared_info[]>(n_pins_);
    for (uint32_t i = 0; i < n_pins_; ++i) {
      pins_[i].free_cb = no_free;
      pins_[i].fcb_opaque = nullptr;
      rte_mbuf_ext_refcnt_set(&pins_[i], 1);
    }
  }
}

void TxEncap::release() noexcept {
  finish();
  if (stash_n_) rte_pktmbuf_free_bulk(stash_, stash_n_);
  stash_n_ = 0;
}

uint32_t TxEncap::ext_in_flight() const noexcept {
  uint32_t n = 0;
  for (uint32_t i = 0; i < pins_hi_; ++i) n += rte_mbuf_ext_refcnt_read(&pins_[i]) - 1u;
  return n;
}

void TxEncap::finish_pending() noexcept {
  uint32_t icrc[kMaxPending];
  common::roce_icrc_burst(pending_ip_, pending_len_, icrc, pending_n_);
  for (uint16_t i = 0; i < pending_n_; ++i)
    common::store_le32(const_cast<uint8_t*>(pending_ip_[i]) + pending_len_[i], icrc[i]);
  pending_n_ = 0;
}

rte_mbuf* TxEncap::build(const TxDesc& d, const EncapTemplate& t, uint16_t sport, bool defer) noexcept {
  rte_mbuf* h = alloc_hdr();
  if (h == nullptr) {
    ++c_.alloc_fail;
    return nullptr;
  }
  const uint32_t wire_payload = d.wire_payload_len();
  const uint32_t pad = common::roce_pad(wire_payload);
  // Inline bytes (TxSeg::lkey 0, one segment) live in the core's SQ, not in
  // a region a pin can hold: always copied.
  const bool copy = copy_ || d.payload_len <= kCopyBelow || d.segs[0].lkey == 0;

  // The frame is written once, as sent; the ICRC masks its variant fields
  // in registers (common::icrc_headers), not in a copy. Transport headers
  // first: their length decides the IP length.
  auto* base = rte_pktmbuf_mtod(h, uint8_t*);
  const uint32_t th = write_headers(base, t, d, pad);
  // th includes the XETH (if any); the data follows it.
  const uint32_t ip_len = common::kIpv4HdrLen + common::kUdpHdrLen + th + d.payload_len + pad + common::kIcrcLen;
  const uint32_t hdr_len = kL2L4Len + th;
  const uint32_t frame_len = common::kEthHdrLen + ip_len;
  if (copy && frame_len > rte_pktmbuf_tailroom(h)) [[unlikely]] {
    ++c_.too_big;
    rte_pktmbuf_free(h);
    return nullptr;
  }
  patch_l2l4(base, t, ip_len, ip_id_++, sport);
  uint8_t* ip = base + kIp;

  uint8_t* p = base + hdr_len;
  if (copy) {
    if (d.num_segs == 1) [[likely]] {
      copy_payload(p, d.segs[0].data, d.segs[0].len);
      p += d.segs[0].len;
    } else {
      for (uint32_t i = 0; i < d.num_segs; ++i) {
        if (d.segs[i].len == 0) continue;
        rte_memcpy(p, d.segs[i].data, d.segs[i].len);
        p += d.segs[i].len;
      }
    }
    c_.copied_bytes += d.payload_len;
    // Pad and the ICRC's place zeroed in one store (the ICRC overwrites it).
    std::memset(p, 0, 4);
    p += pad;
    h->data_len = static_cast<uint16_t>(frame_len);
    h->pkt_len = frame_len;
    if (pending_n_ == kMaxPending) finish_pending();
    pending_ip_[pending_n_] = ip;
    pending_len_[pending_n_++] = static_cast<std::size_t>(p - ip);
    if (!defer) finish_pending();
    return h;
  }

  uint32_t crc = common::icrc_headers(ip, static_cast<std::size_t>(p - ip));
  static constexpr uint8_t kZeros[4] = {0, 0, 0, 0};
  h->data_len = static_cast<uint16_t>(hdr_len);
  h->pkt_len = hdr_len;
  rte_mbuf* last = h;
  for (uint32_t i = 0; i < d.num_segs; ++i) {
    const TxSeg& s = d.segs[i];
    if (s.len == 0) continue;
    rte_mbuf* m = rte_pktmbuf_alloc(ext_pool_);
    if (m == nullptr) {
      ++c_.alloc_fail;
      rte_pktmbuf_free(h);
      return nullptr;
    }
    auto* ptr = const_cast<uint8_t*>(s.data);
    const rte_iova_t iova = iova_is_va_ ? reinterpret_cast<rte_iova_t>(ptr) : RTE_BAD_IOVA;
    // The region's pin: its pages stay mapped while the NIC holds this (a
    // key past the table cannot come from the core, whose keys index it).
    const uint32_t pin = std::min(s.lkey >> 8, n_pins_ - 1);
    if (pin >= pins_hi_) pins_hi_ = pin + 1;
    rte_mbuf_ext_refcnt_update(&pins_[pin], 1);
    rte_pktmbuf_attach_extbuf(m, ptr, iova, static_cast<uint16_t>(s.len), &pins_[pin]);
    m->data_len = static_cast<uint16_t>(s.len);
    crc = common::crc32_update(crc, s.data, s.len);
    last->next = m;
    last = m;
    h->pkt_len += s.len;
    ++h->nb_segs;
    ++c_.zero_copy_segs;
  }
  rte_mbuf* tl = alloc_hdr();
  if (tl == nullptr) {
    ++c_.alloc_fail;
    rte_pktmbuf_free(h);
    return nullptr;
  }
  uint8_t* tp = rte_pktmbuf_mtod(tl, uint8_t*);
  std::memset(tp, 0, pad);
  crc = common::crc32_update(crc, kZeros, pad);
  common::store_le32(tp + pad, crc);
  tl->data_len = static_cast<uint16_t>(pad + common::kIcrcLen);
  last->next = tl;
  h->pkt_len += tl->data_len;
  ++h->nb_segs;
  return h;
}

}  // namespace tandem::rnic::dpdk
