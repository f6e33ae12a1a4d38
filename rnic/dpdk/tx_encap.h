// Turns one TxDesc of the transport core into an mbuf chain ready for
// rte_eth_tx_burst: Ethernet/IPv4/UDP and the transport headers written into
// a header mbuf, the payload either attached zero-copy (registered memory as
// an external buffer, one mbuf per segment, plus a small tail mbuf for pad
// and ICRC) or copied behind the headers, and the ICRC chained over header
// and payload pieces without ever making them contiguous.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>

#include "common/wire/drop_reason.h"
#include "common/wire/headers.h"
#include "rnic/core/tx_desc.h"

namespace tandem::rnic::dpdk {

// Payloads up to this many bytes are copied even in zero-copy mode: three
// mbufs cost more than a memcpy this small (as NICs inline small sends).
inline constexpr uint32_t kCopyBelow = 128;

// Underlay addressing of one frame, from the egress table entry.
struct EncapAddrs {
  common::MacAddr src_mac{};
  common::MacAddr dst_mac{};
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint16_t sport = 0;
  uint8_t tos = 0x02;  // ECT(0)
};

struct EncapCounters {
  uint64_t zero_copy_segs = 0;  // payload segments attached, not copied
  uint64_t copied_bytes = 0;    // payload bytes copied into mbufs
  uint64_t alloc_fail = 0;      // no mbuf (header, segment or tail)
  uint64_t too_big = 0;         // copy mode: frame larger than an mbuf
};

class TxEncap {
 public:
  // `hdr_pool`: ordinary pktmbufs (headers, copies, tails). `ext_pool`:
  // mbufs without data room for attaching external buffers (nullptr =
  // always copy).
  TxEncap(rte_mempool* hdr_pool, rte_mempool* ext_pool, bool copy) noexcept;

  // The chain, or nullptr (counted) if mbufs ran out or the frame does not fit.
  rte_mbuf* build(const TxDesc& d, const EncapAddrs& a) noexcept;

  const EncapCounters& counters() const noexcept { return c_; }
  // External-buffer attachments not yet released by the PMD.
  uint32_t ext_in_flight() const noexcept;
  bool zero_copy() const noexcept { return !copy_; }

 private:
  rte_mempool* hdr_pool_;
  rte_mempool* ext_pool_;
  bool copy_;
  bool iova_is_va_;
  uint16_t ip_id_ = 0;
  // One shared-info for every attachment: its refcount counts segments in
  // flight (+1 held by us, so the no-op free callback never runs: the memory
  // belongs to the application and is kept mapped by HostServer's grace).
  rte_mbuf_ext_shared_info shinfo_{};
  EncapCounters c_;
};

}  // namespace tandem::rnic::dpdk
