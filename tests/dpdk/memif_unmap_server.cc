// A memif server that polls its port as hard as it can, for
// memif_unmap_guard_test.py: a client killed mid-stream makes DPDK 22.11's
// memif unmap the shared regions on the interrupt thread while this loop is
// inside rx_burst (common/dpdk/unmap_guard.h). With --no-guard the loop does
// not announce its bursts, which reopens the race. Prints the packets it
// received and the guard's counters as one JSON line when stopped (SIGTERM).
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/dpdk/eal.h"
#include "common/dpdk/port.h"
#include "common/dpdk/stop_signal.h"
#include "common/dpdk/unmap_guard.h"

namespace cd = tandem::common::dpdk;

int main(int argc, char** argv) {
  bool guard = true;
  std::vector<std::string> eal;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-guard") == 0) guard = false;
    else if (std::strcmp(argv[i], "--") != 0) eal.push_back(argv[i]);
  }
  try {
    cd::eal_init("memif_unmap_server", eal);
    rte_mempool* pool = cd::create_pktmbuf_pool("srv", 4095);
    cd::PortSetup ps;
    ps.link_wait_ms = 0;
    cd::port_setup(0, pool, ps);
    cd::install_stop_handlers();
    cd::unmap_guard_init();
    std::printf("ready guard=%d active=%d\n", guard, cd::unmap_guard_active());
    std::fflush(stdout);
    rte_mbuf* burst[32];
    uint64_t rx = 0;
    while (!cd::stop_requested()) {
      uint16_t n;
      if (guard) {
        cd::PortSection in_ports;
        n = rte_eth_rx_burst(0, 0, burst, 32);
      } else {
        n = rte_eth_rx_burst(0, 0, burst, 32);
      }
      rx += n;
      if (n) rte_pktmbuf_free_bulk(burst, n);
    }
    const cd::UnmapGuardStats g = cd::unmap_guard_stats();
    std::printf("{\"rx\": %lu, \"guard\": %s, \"active\": %s, \"unmaps\": %lu, \"waited\": %lu, "
                "\"wait_ns_max\": %lu, \"timeouts\": %lu}\n",
                static_cast<unsigned long>(rx), guard ? "true" : "false", cd::unmap_guard_active() ? "true" : "false",
                static_cast<unsigned long>(g.unmaps), static_cast<unsigned long>(g.waited),
                static_cast<unsigned long>(g.wait_ns_max), static_cast<unsigned long>(g.timeouts));
    std::fflush(stdout);
    cd::port_close(0);
    cd::eal_cleanup();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memif_unmap_server: %s\n", e.what());
    return 2;
  }
  return 0;
}
