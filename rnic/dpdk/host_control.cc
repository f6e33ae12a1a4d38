#include "rnic/dpdk/host_control.h"

#include <rte_lcore.h>

#include "common/dpdk/unmap_guard.h"
#include "common/log/log_drain.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace tandem::rnic::dpdk {

HostControl::HostControl(std::vector<host::ControlServer*> servers, const char* name,
                         const common::dpdk::TscClock& clock, std::vector<common::LogRing*> logs)
    : servers_(std::move(servers)), logs_(std::move(logs)), clock_(clock) {
  if (servers_.size() > 1) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) throw std::runtime_error(std::string("epoll_create1: ") + std::strerror(errno));
    for (host::ControlServer* s : servers_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, s->wait_fd(), &ev) != 0)
        throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
    }
  }
  for (host::ControlServer* s : servers_) s->set_threaded(true);
  const int rc = rte_ctrl_thread_create(&thread_, name, nullptr, &HostControl::run, this);
  if (rc != 0) throw std::runtime_error(std::string("cannot start the host control thread: ") + std::strerror(-rc));
  running_ = true;
}

HostControl::~HostControl() {
  stop();
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void* HostControl::run(void* self) noexcept {
  auto* h = static_cast<HostControl*>(self);
  // Its munmaps are of tenant memory the lcore let go of (and DPDK's own for
  // extmem), never of memif regions: no need to wait for, or IPI, the lcore.
  common::dpdk::unmap_guard_exempt_this_thread();
  // Blocks in epoll_wait; wakes at least every 5 ms to release retired mappings and see stop().
  while (!h->stop_.load(std::memory_order_acquire)) {
    for (common::LogRing* l : h->logs_) common::log::drain_ring(*l, h->limit_, h->clock_.now_ns());
    if (h->servers_.size() == 1) {
      h->servers_[0]->serve_control(h->clock_.now_ns(), 5);
      continue;
    }
    epoll_event evs[8];
    epoll_wait(h->epoll_fd_, evs, 8, 5);
    for (host::ControlServer* s : h->servers_) s->serve_control(h->clock_.now_ns(), 0);
  }
  return nullptr;
}

void HostControl::stop() noexcept {
  if (!running_) return;
  stop_.store(true, std::memory_order_release);
  for (host::ControlServer* s : servers_) s->stop_control();
  pthread_join(thread_, nullptr);
  running_ = false;
  for (common::LogRing* l : logs_) common::log::drain_ring(*l, limit_, clock_.now_ns());
}

}  // namespace tandem::rnic::dpdk
