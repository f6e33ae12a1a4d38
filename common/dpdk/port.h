// Port and mbuf-pool set-up shared by every Tandem process: RX and TX queues
// (one each unless asked for more), sized rings, promiscuous mode, start, and a bounded
// wait for the link (a memif server's link stays down until its client
// connects, so "no link yet" is reported, not fatal).
#pragma once

#include <cstdint>
#include <string>

struct rte_mempool;

namespace tandem::common::dpdk {

struct PortSetup {
  uint16_t rx_desc = 512;
  uint16_t tx_desc = 512;
  uint16_t rx_queues = 1;  // a worker with several lcores: one TX queue each, RX as the device allows
  uint16_t tx_queues = 1;
  bool promiscuous = true;
  uint32_t link_wait_ms = 2000;
};

// mbufs a pool needs so that no port ever runs dry: every RX ring full,
// every TX ring full, a burst in flight per port per lcore, mbufs held
// elsewhere by the application (`held`), plus the per-lcore caches.
uint32_t mempool_size(uint32_t n_ports, const PortSetup& s, uint32_t burst, uint32_t held,
                      uint32_t lcores = 1, uint32_t cache = 256) noexcept;

// Creates a pktmbuf pool on the caller's socket; throws on failure.
rte_mempool* create_pktmbuf_pool(const std::string& name, uint32_t n_mbufs,
                                 uint32_t cache = 256);

// Configures and starts `port` (rte_eth_dev_start is retried until the
// link wait ends: a memif client fails to start while its server is
// absent). Returns whether the link is up. Throws on configuration errors.
bool port_setup(uint16_t port, rte_mempool* pool, const PortSetup& s);

// rte_eth_dev_stop + rte_eth_dev_close, ignoring errors (shutdown path).
void port_close(uint16_t port) noexcept;

std::string port_name(uint16_t port);

}  // namespace tandem::common::dpdk
