#include "rnic/dpdk/host_control.h"

#include <rte_lcore.h>

#include "common/dpdk/unmap_guard.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace tandem::rnic::dpdk {

HostControl::HostControl(host::HostServer& server, const char* name, const common::dpdk::TscClock& clock)
    : server_(server), clock_(clock) {
  server_.set_threaded(true);
  const int rc = rte_ctrl_thread_create(&thread_, name, nullptr, &HostControl::run, this);
  if (rc != 0) throw std::runtime_error(std::string("cannot start the host control thread: ") + std::strerror(-rc));
  running_ = true;
}

void* HostControl::run(void* self) noexcept {
  auto* h = static_cast<HostControl*>(self);
  // Its munmaps are of tenant memory past its grace period (and DPDK's own for
  // extmem), never of memif regions: no need to wait for, or IPI, the lcore.
  common::dpdk::unmap_guard_exempt_this_thread();
  // Blocks in epoll_wait; wakes at least every 5 ms to release retired mappings and see stop().
  while (!h->stop_.load(std::memory_order_acquire)) h->server_.serve_control(h->clock_.now_ns(), 5);
  return nullptr;
}

void HostControl::stop() noexcept {
  if (!running_) return;
  stop_.store(true, std::memory_order_release);
  server_.stop_control();
  pthread_join(thread_, nullptr);
  running_ = false;
}

}  // namespace tandem::rnic::dpdk
