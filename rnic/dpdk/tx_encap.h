// Turns one TxDesc of the transport core into an mbuf chain ready for
// rte_eth_tx_burst: Ethernet/IPv4/UDP and the transport headers written into
// a header mbuf, the payload either attached zero-copy (registered memory as
// an external buffer, one mbuf per segment, plus a small tail mbuf for pad
// and ICRC) or copied behind the headers, and the ICRC chained over header
// and payload pieces without ever making them contiguous.
//
// Per packet it does only what differs between packets: the Ethernet/IPv4/
// UDP/BTH bytes that a QP's frames share come from an EncapTemplate built
// once (per QP, table version and destination QPN, see egress_route.h) and
// copied as one 64-byte block, then PSN, opcode, lengths, IPv4 id, UDP
// source port (the path) are patched in and the IPv4 checksum finished from
// the template's partial sum; header mbufs come from a bulk-allocated stash,
// and the ICRC is one CRC pass over the frame as written (common::icrc_headers
// masks the variant fields in registers), a burst's passes back to back.
#pragma once

#include <rte_mbuf.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "common/wire/drop_reason.h"
#include "common/wire/headers.h"
#include "rnic/core/tx_desc.h"
#include "rnic/port/encap_template.h"

namespace tandem::rnic::dpdk {

// Payloads up to this many bytes are copied even in zero-copy mode: three
// mbufs cost more than a memcpy this small (as NICs inline small sends).
inline constexpr uint32_t kCopyBelow = 128;

using port::EncapAddrs;
using port::EncapTemplate;
using port::kL2L4Len;
using port::kTemplateLen;
using port::make_encap_template;
using port::set_template_dqpn;

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
  // `max_mrs`: the MR slots of the host interface it sends for (rnic/host
  // ServerConfig::max_mrs): one pin count each.
  TxEncap(rte_mempool* hdr_pool, rte_mempool* ext_pool, bool copy, uint32_t max_mrs = 65536);
  TxEncap(const TxEncap&) = delete;
  TxEncap& operator=(const TxEncap&) = delete;

  // The chain, or nullptr (counted) if mbufs ran out or the frame does not
  // fit. `sport` is the frame's UDP source port (the path). With `defer`, a
  // copied frame's ICRC is computed and written by the next finish()
  // (a burst's CRCs then run back to back and overlap in the CPU): the frame
  // must not be sent before that.
  rte_mbuf* build(const TxDesc& d, const EncapTemplate& t, uint16_t sport, bool defer = false) noexcept;
  // Completes every deferred frame.
  void finish() noexcept {
    if (pending_n_) finish_pending();
  }
  // Same bytes, building the template on the spot (tools and tests).
  // Tools build what the descriptor says, its P_Key included.
  rte_mbuf* build(const TxDesc& d, EncapAddrs a) noexcept {
    a.pkey = d.bth.pkey;
    const EncapTemplate t = make_encap_template(a, d.bth.dqpn);
    return build(d, t, a.sport);
  }

  // Gives the stashed (allocated, unused) header mbufs back to their pool;
  // call before the pool goes away. Building afterwards refills the stash.
  void release() noexcept;

  const EncapCounters& counters() const noexcept { return c_; }
  // External-buffer attachments not yet released by the PMD.
  uint32_t ext_in_flight() const noexcept;
  // Whether the port still holds payload of the region in MR slot `index`
  // (any thread: an atomic read; the host control thread asks before it
  // unmaps a deregistered region).
  bool in_flight(uint32_t index) const noexcept {
    return index < n_pins_ && rte_mbuf_ext_refcnt_read(&pins_[index]) > 1;
  }
  bool zero_copy() const noexcept { return !copy_; }

 private:
  static constexpr uint16_t kStash = 32;
  static constexpr uint16_t kMaxPending = 32;
  void finish_pending() noexcept;

  // A header mbuf from the stash, reset as rte_pktmbuf_alloc would but with
  // stores only (no read-modify-write of ol_flags, no load of buf_len: each
  // such load missed the cache and stalled) and nothing written to the
  // mbuf's second cache line: a pool's free mbufs already have next == NULL
  // and nb_segs == 1 (rte_pktmbuf_prefree_seg keeps that true), and
  // tx_offload is read only for offloads ol_flags asks for (none here). The
  // next mbuf and its first data lines are fetched for writing meanwhile,
  // one frame ahead (from the mbuf's address, without loading buf_addr).
  rte_mbuf* alloc_hdr() noexcept {
    if (stash_n_ == 0) refill_stash();
    if (stash_n_ == 0) return rte_pktmbuf_alloc(hdr_pool_);
    rte_mbuf* m = stash_[--stash_n_];
    if (stash_n_) prefetch_mbuf(stash_[stash_n_ - 1]);
    if (pinned_ext_) return m;  // reset by rte_pktmbuf_alloc_bulk
    // data_off, refcnt (1: a free mbuf's already), nb_segs, port in one store.
    std::memcpy(&m->rearm_data, &rearm_, sizeof rearm_);
    m->ol_flags = 0;
    m->packet_type = 0;
    m->pkt_len = 0;
    m->data_len = 0;
    m->vlan_tci = 0;
    m->vlan_tci_outer = 0;
    return m;
  }
  void prefetch_mbuf(const rte_mbuf* m) const noexcept {
    const uint8_t* d = reinterpret_cast<const uint8_t*>(m) + data_at_;
    __builtin_prefetch(m, 1);
    __builtin_prefetch(d, 1);
    __builtin_prefetch(d + 64, 1);
    __builtin_prefetch(d + 128, 1);
  }
  void refill_stash() noexcept {
    if (pinned_ext_ ? rte_pktmbuf_alloc_bulk(hdr_pool_, stash_, kStash) != 0
                    : rte_mempool_get_bulk(hdr_pool_, reinterpret_cast<void**>(stash_), kStash) != 0)
      return;
    stash_n_ = kStash;
    prefetch_mbuf(stash_[kStash - 1]);
  }

  rte_mempool* hdr_pool_;
  bool pinned_ext_;     // hdr_pool_'s mbufs carry pinned external buffers
  uint16_t data_off_;   // a fresh mbuf's headroom (rte_pktmbuf_reset_headroom)
  uint32_t data_at_;    // a fresh mbuf's data, from the mbuf's own address
  uint64_t rearm_ = 0;  // a fresh mbuf's data_off, refcnt, nb_segs, port
  rte_mempool* ext_pool_;
  bool copy_;
  bool iova_is_va_;
  uint16_t ip_id_ = 0;

 public:
  uint16_t last_ip_id() const noexcept { return static_cast<uint16_t>(ip_id_ - 1); }  // of the frame build() made last

 private:
  uint16_t stash_n_ = 0;
  uint16_t pending_n_ = 0;
  rte_mbuf* stash_[kStash];  // allocated header mbufs, used from the top (alloc_hdr resets them)
  // Copied frames complete but for their ICRC, as roce_icrc_burst takes
  // them: the IPv4 header and the length the CRC covers (the ICRC follows).
  const uint8_t* pending_ip_[kMaxPending];
  std::size_t pending_len_[kMaxPending];
  // One shared-info per MR slot (TxSeg::lkey >> 8): its refcount counts that
  // region's segments the port still holds (+1 of ours, so the no-op free
  // callback never runs: the memory is the application's). ControlServer keeps
  // a deregistered region's pages, and its slot, until in_flight() says no.
  std::unique_ptr<rte_mbuf_ext_shared_info[]> pins_;
  uint32_t n_pins_ = 0;
  uint32_t pins_hi_ = 0;  // 1 + the highest slot ever attached (what ext_in_flight sums)
  EncapCounters c_;
};

}  // namespace tandem::rnic::dpdk
