#include "rnic/dpdk/tx_encap.h"

#include <rte_eal.h>

#include <cstring>

#include "common/wire/byte_order.h"
#include "common/wire/entropy.h"
#include "common/wire/icrc.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/frame.h"

namespace tandem::rnic::dpdk {

namespace {

constexpr uint32_t kL2L4Len = common::kEthHdrLen + 20 + 8;

void no_free(void*, void*) noexcept {}

}  // namespace

TxEncap::TxEncap(rte_mempool* hdr_pool, rte_mempool* ext_pool, bool copy) noexcept
    : hdr_pool_(hdr_pool), ext_pool_(ext_pool), copy_(copy || ext_pool == nullptr),
      iova_is_va_(rte_eal_iova_mode() == RTE_IOVA_VA) {
  shinfo_.free_cb = no_free;
  shinfo_.fcb_opaque = nullptr;
  rte_mbuf_ext_refcnt_set(&shinfo_, 1);
}

uint32_t TxEncap::ext_in_flight() const noexcept {
  return rte_mbuf_ext_refcnt_read(&shinfo_) - 1u;
}

rte_mbuf* TxEncap::build(const TxDesc& d, const EncapAddrs& a) noexcept {
  rte_mbuf* h = rte_pktmbuf_alloc(hdr_pool_);
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
  const uint32_t ip_len = static_cast<uint32_t>(20 + 8 + th) + d.payload_len + pad + common::kIcrcLen;
  const uint32_t hdr_len = kL2L4Len + static_cast<uint32_t>(th);
  const uint32_t frame_len = common::kEthHdrLen + ip_len;
  if (copy && frame_len > room) {
    ++c_.too_big;
    rte_pktmbuf_free(h);
    return nullptr;
  }

  common::EthHeader eth;
  eth.dst = a.dst_mac;
  eth.src = a.src_mac;
  common::write_eth(base, eth);
  common::Ipv4Header ip;
  ip.tos = a.tos;
  ip.total_len = static_cast<uint16_t>(ip_len);
  ip.id = ip_id_++;
  ip.src = a.src_ip;
  ip.dst = a.dst_ip;
  common::write_ipv4(base + common::kEthHdrLen, ip);
  common::UdpHeader udp;
  udp.sport = a.sport;
  udp.dport = common::kRoceUdpPort;
  udp.len = static_cast<uint16_t>(ip_len - 20);
  common::write_udp(base + common::kEthHdrLen + 20, udp);

  uint32_t crc = common::icrc_headers(base + common::kEthHdrLen, hdr_len - common::kEthHdrLen);
  static constexpr uint8_t kZeros[4] = {0, 0, 0, 0};

  if (copy) {
    uint8_t* p = base + hdr_len;
    for (uint32_t i = 0; i < d.num_segs; ++i) {
      if (d.segs[i].len == 0) continue;
      std::memcpy(p, d.segs[i].data, d.segs[i].len);
      p += d.segs[i].len;
    }
    c_.copied_bytes += d.payload_len;
    std::memset(p, 0, pad);
    p += pad;
    crc = common::crc32_update(crc, base + hdr_len, static_cast<std::size_t>(p - (base + hdr_len)));
    common::store_le32(p, crc);
    h->data_len = static_cast<uint16_t>(frame_len);
    h->pkt_len = frame_len;
    return h;
  }

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
  rte_mbuf* t = rte_pktmbuf_alloc(hdr_pool_);
  if (t == nullptr) {
    ++c_.alloc_fail;
    rte_pktmbuf_free(h);
    return nullptr;
  }
  uint8_t* tp = rte_pktmbuf_mtod(t, uint8_t*);
  std::memset(tp, 0, pad);
  crc = common::crc32_update(crc, kZeros, pad);
  common::store_le32(tp + pad, crc);
  t->data_len = static_cast<uint16_t>(pad + common::kIcrcLen);
  last->next = t;
  h->pkt_len += t->data_len;
  ++h->nb_segs;
  return h;
}

}  // namespace tandem::rnic::dpdk
