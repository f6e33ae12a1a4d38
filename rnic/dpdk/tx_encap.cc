#include "rnic/dpdk/tx_encap.h"

#include <rte_eal.h>
#include <rte_memcpy.h>

#include <algorithm>
#include <cstring>

#include "common/wire/byte_order.h"
#include "common/wire/entropy.h"
#include "common/wire/icrc.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/frame.h"

namespace tandem::rnic::dpdk {

namespace {

// Offsets inside the Ethernet/IPv4/UDP block.
constexpr uint32_t kIp = common::kEthHdrLen;
constexpr uint32_t kUdp = kIp + common::kIpv4HdrLen;

void no_free(void*, void*) noexcept {}

// The frame's Ethernet/IPv4/UDP header: the template with the per-packet
// fields and the IPv4 checksum finished from the template's partial sum.
inline void write_l2l4(uint8_t* hdr, const EncapTemplate& t, uint32_t ip_len, uint16_t id,
                       uint16_t sport) noexcept {
  std::memcpy(hdr, t.hdr, kL2L4Len);
  uint8_t* ip = hdr + kIp;
  common::store_be16(ip + 2, static_cast<uint16_t>(ip_len));
  common::store_be16(ip + 4, id);
  common::store_be16(ip + common::kIpv4HdrLen, sport);
  common::store_be16(ip + common::kIpv4HdrLen + 4, static_cast<uint16_t>(ip_len - common::kIpv4HdrLen));
  uint32_t sum = t.ip_sum + ip_len + id;
  sum = (sum & 0xFFFF) + (sum >> 16);
  sum = (sum & 0xFFFF) + (sum >> 16);
  common::store_be16(ip + 10, static_cast<uint16_t>(~sum));
}

}  // namespace

EncapTemplate make_encap_template(const EncapAddrs& a) noexcept {
  EncapTemplate t;
  common::EthHeader eth;
  eth.dst = a.dst_mac;
  eth.src = a.src_mac;
  common::write_eth(t.hdr, eth);
  common::Ipv4Header ip;  // 0x45, DF, TTL 64, UDP
  ip.tos = a.tos;
  ip.src = a.src_ip;
  ip.dst = a.dst_ip;
  common::write_ipv4(t.hdr + kIp, ip);
  common::store_be16(t.hdr + kIp + 10, 0);  // finished per packet
  common::UdpHeader udp;
  udp.dport = common::kRoceUdpPort;
  common::write_udp(t.hdr + kUdp, udp);
  // Constant IPv4 words (length, id and checksum are zero here).
  for (uint32_t i = 0; i < common::kIpv4HdrLen; i += 2) t.ip_sum += common::load_be16(t.hdr + kIp + i);
  return t;
}

TxEncap::TxEncap(rte_mempool* hdr_pool, rte_mempool* ext_pool, bool copy) noexcept
    : hdr_pool_(hdr_pool),
      pinned_ext_((rte_pktmbuf_priv_flags(hdr_pool) & RTE_PKTMBUF_POOL_F_PINNED_EXT_BUF) != 0),
      data_off_(static_cast<uint16_t>(
          std::min<uint32_t>(RTE_PKTMBUF_HEADROOM, rte_pktmbuf_data_room_size(hdr_pool)))),
      data_at_(static_cast<uint32_t>(sizeof(rte_mbuf)) + rte_pktmbuf_priv_size(hdr_pool) + data_off_),
      ext_pool_(ext_pool), copy_(copy || ext_pool == nullptr),
      iova_is_va_(rte_eal_iova_mode() == RTE_IOVA_VA) {
  shinfo_.free_cb = no_free;
  shinfo_.fcb_opaque = nullptr;
  rte_mbuf_ext_refcnt_set(&shinfo_, 1);
}

void TxEncap::release() noexcept {
  finish();
  if (stash_n_) rte_pktmbuf_free_bulk(stash_, stash_n_);
  stash_n_ = 0;
}

uint32_t TxEncap::ext_in_flight() const noexcept {
  return rte_mbuf_ext_refcnt_read(&shinfo_) - 1u;
}

void TxEncap::finish_pending() noexcept {
  const uint8_t* ip[kMaxPending];
  std::size_t len[kMaxPending];
  uint32_t icrc[kMaxPending];
  for (uint16_t i = 0; i < pending_n_; ++i) {
    ip[i] = pending_[i].ip;
    len[i] = static_cast<std::size_t>(pending_[i].icrc - pending_[i].ip);
  }
  common::roce_icrc_burst(ip, len, icrc, pending_n_);
  for (uint16_t i = 0; i < pending_n_; ++i) common::store_le32(pending_[i].icrc, icrc[i]);
  pending_n_ = 0;
}

rte_mbuf* TxEncap::build(const TxDesc& d, const EncapTemplate& t, uint16_t sport, bool defer) noexcept {
  rte_mbuf* h = alloc_hdr();
  if (h == nullptr) {
    ++c_.alloc_fail;
    return nullptr;
  }
  const uint32_t wire_payload = d.wire_payload_len();
  const uint8_t pad = common::roce_pad(wire_payload);
  const bool copy = copy_ || d.payload_len <= kCopyBelow;

  // Transport headers first (their length decides the IP length).
  auto* base = rte_pktmbuf_mtod(h, uint8_t*);
  const uint32_t room = rte_pktmbuf_tailroom(h);
  const std::size_t th = write_transport_headers(d, base + kL2L4Len);
  // th includes the XETH (if any); the data follows it.
  const uint32_t ip_len = static_cast<uint32_t>(common::kIpv4HdrLen + common::kUdpHdrLen + th) + d.payload_len +
                          pad + common::kIcrcLen;
  const uint32_t hdr_len = kL2L4Len + static_cast<uint32_t>(th);
  const uint32_t frame_len = common::kEthHdrLen + ip_len;
  if (copy && frame_len > room) {
    ++c_.too_big;
    rte_pktmbuf_free(h);
    return nullptr;
  }
  // The frame is written once, as sent; the ICRC masks its variant fields
  // in registers (common::icrc_headers), not in a copy.
  write_l2l4(base, t, ip_len, ip_id_++, sport);
  uint8_t* ip = base + kIp;

  uint8_t* p = base + hdr_len;
  if (copy) {
    for (uint32_t i = 0; i < d.num_segs; ++i) {
      if (d.segs[i].len == 0) continue;
      rte_memcpy(p, d.segs[i].data, d.segs[i].len);  // inlined for small copies, unlike memcpy
      p += d.segs[i].len;
    }
    c_.copied_bytes += d.payload_len;
    std::memset(p, 0, pad);
    p += pad;
    h->data_len = static_cast<uint16_t>(frame_len);
    h->pkt_len = frame_len;
    if (pending_n_ == kMaxPending) finish_pending();
    pending_[pending_n_++] = Pending{ip, p};
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
    rte_mbuf_ext_refcnt_update(&shinfo_, 1);
    rte_pktmbuf_attach_extbuf(m, ptr, iova, static_cast<uint16_t>(s.len), &shinfo_);
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
