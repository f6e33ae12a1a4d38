#include "common/dpdk/port.h"

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "common/log/log.h"

namespace tandem::common::dpdk {

namespace {
[[noreturn]] void fail(uint16_t port, const char* what, int rc) {
  throw std::runtime_error("port " + std::to_string(port) + " (" + port_name(port) + "): " + what +
                           " failed: " + rte_strerror(rc < 0 ? -rc : rc));
}
}  // namespace

uint32_t mempool_size(uint32_t n_ports, const PortSetup& s, uint32_t burst, uint32_t held,
                      uint32_t lcores, uint32_t cache) noexcept {
  const uint64_t n = uint64_t{n_ports} * (s.rx_desc + s.tx_desc + 2u * burst * lcores) + held +
                     uint64_t{lcores} * cache * 2 + 64;
  return static_cast<uint32_t>(n);
}

rte_mempool* create_pktmbuf_pool(const std::string& name, uint32_t n_mbufs, uint32_t cache) {
  rte_mempool* p = rte_pktmbuf_pool_create(name.c_str(), n_mbufs, cache, 0,
                                           RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
  if (p == nullptr)
    throw std::runtime_error("cannot create mbuf pool '" + name + "' of " +
                             std::to_string(n_mbufs) + " mbufs: " + rte_strerror(rte_errno) +
                             " (are hugepages reserved? see scripts/setup.sh)");
  return p;
}

std::string port_name(uint16_t port) {
  char name[RTE_ETH_NAME_MAX_LEN] = {};
  if (rte_eth_dev_get_name_by_port(port, name) != 0) return "?";
  return name;
}

bool port_setup(uint16_t port, rte_mempool* pool, const PortSetup& s) {
  if (!rte_eth_dev_is_valid_port(port)) fail(port, "lookup", ENODEV);
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(port, &info); rc != 0) fail(port, "dev_info_get", rc);

  if (s.rx_queues == 0 || s.rx_queues > info.max_rx_queues || s.tx_queues == 0 || s.tx_queues > info.max_tx_queues)
    throw std::runtime_error("port " + std::to_string(port) + " (" + port_name(port) + "): " +
                             std::to_string(s.rx_queues) + " RX / " + std::to_string(s.tx_queues) +
                             " TX queues asked, the device has at most " + std::to_string(info.max_rx_queues) +
                             " / " + std::to_string(info.max_tx_queues));
  rte_eth_conf conf{};
  if (int rc = rte_eth_dev_configure(port, s.rx_queues, s.tx_queues, &conf); rc != 0) fail(port, "configure", rc);
  uint16_t rxd = s.rx_desc, txd = s.tx_desc;
  if (int rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, &rxd, &txd); rc != 0)
    fail(port, "adjust descriptors", rc);
  const int socket = rte_eth_dev_socket_id(port);
  const unsigned sock = socket < 0 ? rte_socket_id() : static_cast<unsigned>(socket);
  for (uint16_t q = 0; q < s.rx_queues; ++q)
    if (int rc = rte_eth_rx_queue_setup(port, q, rxd, sock, nullptr, pool); rc != 0) fail(port, "rx queue setup", rc);
  for (uint16_t q = 0; q < s.tx_queues; ++q)
    if (int rc = rte_eth_tx_queue_setup(port, q, txd, sock, nullptr); rc != 0) fail(port, "tx queue setup", rc);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(s.link_wait_ms);
  int rc = rte_eth_dev_start(port);
  while (rc != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rc = rte_eth_dev_start(port);
  }
  if (rc != 0) fail(port, "start", rc);
  if (s.promiscuous) {
    // Some vdevs (net_null, net_pcap) have no promiscuous switch; that is fine.
    const int prc = rte_eth_promiscuous_enable(port);
    if (prc != 0 && prc != -ENOTSUP)
      common::log::warn("port {}: promiscuous mode not enabled: {}", port, rte_strerror(-prc));
  }

  rte_eth_link link{};
  do {
    if (rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

void port_close(uint16_t port) noexcept {
  rte_eth_dev_stop(port);
  rte_eth_dev_close(port);
}

}  // namespace tandem::common::dpdk
