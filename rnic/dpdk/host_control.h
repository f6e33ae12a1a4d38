// The worker's control thread: runs the host servers' control halves
// (host::ControlServer: accept, recvmsg, memfd mmap, DMA registration of MRs,
// unmapping what the lcore let go of) so the data lcore never makes a control system call; it
// also writes out the lcores' log lines. Made
// with rte_ctrl_thread_create: it runs on the EAL's control CPU set, off the
// lcore's core. With several lcores per port (--lcores), one thread serves
// every lcore's server: the port's fair shares and DMA mappings then have
// one writer, and a slow registration holds up control, never packets.
#pragma once

#include <pthread.h>

#include <atomic>
#include <vector>

#include "common/dpdk/tsc_clock.h"
#include "common/log/log_ring.h"
#include "common/log/rate_limiter.h"
#include "rnic/host/control_server.h"

namespace tandem::rnic::dpdk {

class HostControl {
 public:
  // Puts the servers in threaded mode and starts serving them. Throws on failure.
  // `logs`: the lcores' log rings (port::PortLogic::log), written out each round.
  HostControl(std::vector<host::ControlServer*> servers, const char* name, const common::dpdk::TscClock& clock,
              std::vector<common::LogRing*> logs = {});
  ~HostControl();
  HostControl(const HostControl&) = delete;
  HostControl& operator=(const HostControl&) = delete;

  // Stops serving (a request waiting for the lcore is abandoned) and joins.
  void stop() noexcept;

 private:
  static void* run(void* self) noexcept;

  std::vector<host::ControlServer*> servers_;
  std::vector<common::LogRing*> logs_;
  common::log::RateLimiter limit_;  // per tenant and kind of line: 5 a second (common/log/rate_limiter.h)
  int epoll_fd_ = -1;  // several servers: their epoll fds, to wait on all at once
  const common::dpdk::TscClock& clock_;
  std::atomic<bool> stop_{false};
  pthread_t thread_{};
  bool running_ = false;
};

}  // namespace tandem::rnic::dpdk
