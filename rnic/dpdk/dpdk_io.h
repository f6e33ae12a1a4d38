// The port layer's I/O (rnic/port/port_io.h) on DPDK: one lcore's queues of
// the data port (receive-only ports after it: lcore 0's), mbufs built by
// TxEncap (headers from the QP's template, payload attached or copied, ICRCs
// at finish()), and the TSC clock. Everything inlines into PortWorker<DpdkIo>.
//
// Several lcores (steer_rings.h): each has its own TX queue; what an lcore's
// RX queue brings for another lcore's QP goes to it over a ring, and its
// burst starts with what the other lcores handed it.
#pragma once

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <cstdint>
#include <algorithm>
#include <cstring>

#include "common/dpdk/tsc_clock.h"
#include "rnic/dpdk/rx_stage.h"
#include "rnic/dpdk/steer_rings.h"
#include "rnic/dpdk/tx_encap.h"
#include "rnic/port/port_io.h"

namespace tandem::rnic::dpdk {

class DpdkIo : public MbufFrames {
 public:
  static constexpr uint16_t kRxMax = 32;  // frames a steered rx_burst takes from its queue

  explicit DpdkIo(uint16_t port_id) noexcept : port_id_(port_id) {}

  // Counters of the hand-over between lcores (zero with one lcore).
  struct SteerCounters {
    uint64_t handed_out = 0;  // frames this lcore's RX queue took for another lcore's QP
    uint64_t handed_in = 0;   // frames other lcores handed this one
    uint64_t ring_full = 0;   // of handed_out, dropped: the owner's ring was full
  };

  // Lcore `lcore` of a port with several (before the first burst).
  void steer(SteerRings* rings, uint32_t lcore) noexcept {
    steer_ = rings;
    lcore_ = lcore;
    txq_ = static_cast<uint16_t>(lcore);
  }
  uint32_t lcore() const noexcept { return lcore_; }
  const SteerCounters& steer_counters() const noexcept { return sc_; }

  // Before the first burst: the encapsulation (its pools) and how many ports receive.
  void attach(TxEncap* encap, uint16_t n_ports) noexcept {
    encap_ = encap;
    n_ports_ = n_ports;
  }

  uint64_t now_ns() const noexcept { return clock_.now_ns(); }
  const common::dpdk::TscClock& clock() const noexcept { return clock_; }
  // Receive-only ports are lcore 0's.
  uint16_t rx_ports() const noexcept { return lcore_ == 0 ? n_ports_ : 1; }
  uint16_t rx_burst(uint16_t port, rte_mbuf** out, uint16_t n) noexcept {
    if (steer_ == nullptr || port != port_id_) [[likely]] return rte_eth_rx_burst(port, 0, out, n);
    return steered_rx(out, n);
  }
  uint16_t tx_burst(rte_mbuf** b, uint16_t n) noexcept { return rte_eth_tx_burst(port_id_, txq_, b, n); }
  rte_mbuf* build(const TxDesc& d, const port::EncapTemplate& t, uint16_t sport) noexcept {
    return encap_->build(d, t, sport, true);
  }
  void finish() noexcept { encap_->finish(); }
  uint16_t last_ip_id() const noexcept { return encap_->last_ip_id(); }  // of the frame build() made last
  void free_bulk(rte_mbuf** b, uint16_t n) noexcept { rte_pktmbuf_free_bulk(b, n); }

 private:
  // What other lcores handed this one, then this lcore's RX queue (if it has
  // one): its frames for other lcores' QPs are passed on, the rest returned.
  uint16_t steered_rx(rte_mbuf** out, uint16_t n) noexcept {
    uint16_t got = take_handed(out, n);
    if (got == n || lcore_ >= steer_->rx_queues()) return got;
    rte_mbuf* in[kRxMax];
    const uint16_t m = rte_eth_rx_burst(port_id_, static_cast<uint16_t>(lcore_), in,
                                        static_cast<uint16_t>(std::min<uint16_t>(n - got, kRxMax)));
    return steer(in, m, out, got);
  }

 public:
  // The two halves of steered_rx, public for benchmarks/rx-steer. Frames
  // other lcores handed this one, up to n, into out.
  uint16_t take_handed(rte_mbuf** out, uint16_t n) noexcept {
    uint16_t got = 0;
    for (uint32_t from = 0; from < steer_->lcores() && got < n; ++from)
      if (from != lcore_)
        got = static_cast<uint16_t>(got + rte_ring_dequeue_burst(steer_->ring(from, lcore_),
                                                                 reinterpret_cast<void**>(out + got), n - got,
                                                                 nullptr));
    sc_.handed_in += got;
    return got;
  }
  // Frames in[0..m) this lcore's queue took (m <= kRxMax): its own appended
  // to out from `got` on, the others' handed to their lcores. Returns the new count.
  uint16_t steer(rte_mbuf** in, uint16_t m, rte_mbuf** out, uint16_t got) noexcept {
    rte_mbuf* away[port::kMaxLcores][kRxMax];
    uint16_t n_away[port::kMaxLcores] = {};
    const port::QpShards& sh = steer_->shards();
    for (uint16_t i = 0; i < m; ++i) {
      const uint32_t qpn = port::peek_dest_qpn(rte_pktmbuf_mtod(in[i], const uint8_t*), in[i]->data_len);
      const uint32_t owner = qpn == port::kNoQpn ? 0 : sh.owner(qpn);
      if (owner == lcore_) out[got++] = in[i];
      else away[owner][n_away[owner]++] = in[i];
    }
    for (uint32_t k = 0; k < steer_->lcores(); ++k) {
      if (n_away[k] == 0) continue;
      const unsigned sent = rte_ring_enqueue_burst(steer_->ring(lcore_, k), reinterpret_cast<void**>(away[k]),
                                                   n_away[k], nullptr);
      sc_.handed_out += n_away[k];
      if (sent < n_away[k]) {
        sc_.ring_full += n_away[k] - sent;
        rte_pktmbuf_free_bulk(away[k] + sent, n_away[k] - sent);
      }
    }
    return got;
  }

 private:
  common::dpdk::TscClock clock_;
  uint16_t port_id_;
  uint16_t n_ports_ = 1;
  uint16_t txq_ = 0;
  uint32_t lcore_ = 0;
  SteerRings* steer_ = nullptr;  // several lcores only
  SteerCounters sc_;
  TxEncap* encap_ = nullptr;
};

static_assert(port::PortIo<DpdkIo>);

}  // namespace tandem::rnic::dpdk
