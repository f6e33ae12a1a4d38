#include "common/dpdk/stop_signal.h"

#include <atomic>
#include <csignal>

namespace tandem::common::dpdk {

namespace {
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);  // safe in a signal handler
void on_signal(int) { g_stop.store(true, std::memory_order_relaxed); }
}  // namespace

void install_stop_handlers() noexcept {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() noexcept { return g_stop.load(std::memory_order_relaxed); }
void request_stop() noexcept { g_stop.store(true, std::memory_order_relaxed); }

}  // namespace tandem::common::dpdk
