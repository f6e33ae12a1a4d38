// Running a benchmark's per-lcore pipeline on N EAL lcores at once, as a
// sharded worker runs its lcores: each lcore gets its own port queue and
// builds its own state; they start together (a start line) so that their
// rates cover one common interval. Header-only, for the benches' mains.
#pragma once

#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_debug.h>
#include <rte_pause.h>

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::bench {

// Lcores all wait here until `n` have arrived; one use per phase.
class StartLine {
 public:
  explicit StartLine(uint32_t n) noexcept : n_(n) {}
  void wait() noexcept {
    arrived_.fetch_add(1, std::memory_order_acq_rel);
    while (arrived_.load(std::memory_order_acquire) < n_) rte_pause();
  }

 private:
  const uint32_t n_;
  alignas(64) std::atomic<uint32_t> arrived_{0};
};

// Configures and starts `port` with `queues` RX and TX queues (queue i for
// lcore i; net_null takes several), no link wait (net_null's is always up).
inline void port_setup_queues(uint16_t port, rte_mempool* pool, uint16_t queues, uint16_t desc = 512) {
  auto fail = [&](const char* what, int rc) {
    throw std::runtime_error(std::string("bench port set-up: ") + what + ": " + rte_strerror(rc < 0 ? -rc : rc));
  };
  rte_eth_conf conf{};
  if (int rc = rte_eth_dev_configure(port, queues, queues, &conf); rc != 0) fail("configure", rc);
  uint16_t rxd = desc, txd = desc;
  if (int rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, &rxd, &txd); rc != 0) fail("adjust descriptors", rc);
  for (uint16_t q = 0; q < queues; ++q) {
    if (int rc = rte_eth_rx_queue_setup(port, q, rxd, rte_socket_id(), nullptr, pool); rc != 0) fail("rx queue", rc);
    if (int rc = rte_eth_tx_queue_setup(port, q, txd, rte_socket_id(), nullptr); rc != 0) fail("tx queue", rc);
  }
  if (int rc = rte_eth_dev_start(port); rc != 0) fail("start", rc);
}

// CPUs this process may run on: the EAL's "-l 0..n-1" needs n of them
// (checked before rte_eal_init, which would only fail).
inline uint32_t usable_cpus() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<uint32_t>(CPU_COUNT(&set)) : 1;
}

// "-l" argument for n lcores: 0..n-1.
inline std::string lcore_list(uint32_t n) {
  std::string s = "0";
  for (uint32_t i = 1; i < n; ++i) s += "," + std::to_string(i);
  return s;
}

// Runs body(i) on the first n EAL lcores (i = 0 on the main lcore) and waits
// for all; false, running nothing, if the EAL has fewer than n lcores.
inline bool run_on_lcores(uint32_t n, const std::function<void(uint32_t)>& body) {
  if (n == 0 || rte_lcore_count() < n) return false;
  struct Job {
    const std::function<void(uint32_t)>* body;
    uint32_t index;
  };
  std::vector<Job> jobs(n);
  std::vector<unsigned> launched;
  uint32_t i = 1;
  unsigned lc;
  RTE_LCORE_FOREACH_WORKER(lc) {
    if (i == n) break;
    jobs[i] = Job{&body, i};
    // A worker in WAIT (all are, after rte_eal_init) takes the launch; if one
    // did not, the others would wait at their start line for ever: stop.
    if (rte_eal_remote_launch([](void* a) {
          auto* j = static_cast<Job*>(a);
          (*j->body)(j->index);
          return 0;
        }, &jobs[i], lc) != 0)
      rte_panic("bench: cannot launch on lcore %u\n", lc);
    launched.push_back(lc);
    ++i;
  }
  body(0);
  for (unsigned w : launched) rte_eal_wait_lcore(w);
  return true;
}

}  // namespace tandem::bench
