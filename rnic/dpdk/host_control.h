// The worker's control thread: owns the host socket side of HostServer
// (accept, recvmsg, memfd mmap, DMA registration of MRs, unmapping after the
// grace period) so the data lcore never makes a control system call. Made
// with rte_ctrl_thread_create: it runs on the EAL's control CPU set, off the
// lcore's core.
#pragma once

#include <pthread.h>

#include <atomic>

#include "common/dpdk/tsc_clock.h"
#include "rnic/host/host_server.h"

namespace tandem::rnic::dpdk {

class HostControl {
 public:
  // Puts `server` in threaded mode and starts serving it. Throws on failure.
  // clock: the lcore's (apply_control's `now`), so grace periods compare.
  HostControl(host::HostServer& server, const char* name, const common::dpdk::TscClock& clock);
  ~HostControl() { stop(); }
  HostControl(const HostControl&) = delete;
  HostControl& operator=(const HostControl&) = delete;

  // Stops serving (a request waiting for the lcore is abandoned) and joins.
  void stop() noexcept;

 private:
  static void* run(void* self) noexcept;

  host::HostServer& server_;
  const common::dpdk::TscClock& clock_;
  std::atomic<bool> stop_{false};
  pthread_t thread_{};
  bool running_ = false;
};

}  // namespace tandem::rnic::dpdk
