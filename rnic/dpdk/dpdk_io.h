// The port layer's I/O (rnic/port/port_io.h) on DPDK: the data port's queue 0
// (receive-only ports after it), mbufs built by TxEncap (headers from the
// QP's template, payload attached or copied, ICRCs at finish()), and the TSC
// clock. Everything inlines into PortWorker<DpdkIo>.
#pragma once

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <cstdint>

#include "common/dpdk/tsc_clock.h"
#include "rnic/dpdk/rx_stage.h"
#include "rnic/dpdk/tx_encap.h"
#include "rnic/port/port_io.h"

namespace tandem::rnic::dpdk {

class DpdkIo : public MbufFrames {
 public:
  explicit DpdkIo(uint16_t port_id) noexcept : port_id_(port_id) {}

  // Before the first burst: the encapsulation (its pools) and how many ports receive.
  void attach(TxEncap* encap, uint16_t n_ports) noexcept {
    encap_ = encap;
    n_ports_ = n_ports;
  }

  uint64_t now_ns() const noexcept { return clock_.now_ns(); }
  const common::dpdk::TscClock& clock() const noexcept { return clock_; }
  uint16_t rx_ports() const noexcept { return n_ports_; }
  uint16_t rx_burst(uint16_t port, rte_mbuf** out, uint16_t n) noexcept { return rte_eth_rx_burst(port, 0, out, n); }
  uint16_t tx_burst(rte_mbuf** b, uint16_t n) noexcept { return rte_eth_tx_burst(port_id_, 0, b, n); }
  rte_mbuf* build(const TxDesc& d, const port::EncapTemplate& t, uint16_t sport) noexcept {
    return encap_->build(d, t, sport, true);
  }
  void finish() noexcept { encap_->finish(); }
  uint16_t last_ip_id() const noexcept { return encap_->last_ip_id(); }  // of the frame build() made last
  void free_bulk(rte_mbuf** b, uint16_t n) noexcept { rte_pktmbuf_free_bulk(b, n); }

 private:
  common::dpdk::TscClock clock_;
  uint16_t port_id_;
  uint16_t n_ports_ = 1;
  TxEncap* encap_ = nullptr;
};

static_assert(port::PortIo<DpdkIo>);

}  // namespace tandem::rnic::dpdk
