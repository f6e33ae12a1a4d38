// How a polling loop waits when it has nothing to do. Busy-polling is right
// on a server with a core per worker; the adaptive mode lets many Tandem
// processes share two cores in tests and demos: rte_pause while idle for a
// short while, then short sleeps, back to full speed on the first packet.
#pragma once

#include <rte_pause.h>

#include <cstdint>
#include <time.h>

namespace tandem::common::dpdk {

enum class IdleMode : uint8_t { kBusy, kAdaptive };

struct IdleConfig {
  IdleMode mode = IdleMode::kBusy;
  uint32_t spin_iterations = 1024;  // idle iterations before sleeping
  uint32_t sleep_us = 50;           // each sleep; bounds the added latency
};

class IdleLoop {
 public:
  explicit IdleLoop(const IdleConfig& c = {}) noexcept : c_(c) {}

  // Call once per loop iteration with whether the iteration did any work.
  void after_iteration(bool did_work) noexcept {
    if (c_.mode == IdleMode::kBusy) return;
    if (did_work) {
      idle_ = 0;
      return;
    }
    if (++idle_ < c_.spin_iterations) {
      rte_pause();
      return;
    }
    ++sleeps_;
    timespec ts{0, static_cast<long>(c_.sleep_us) * 1000};
    nanosleep(&ts, nullptr);
  }

  uint64_t sleeps() const noexcept { return sleeps_; }
  IdleMode mode() const noexcept { return c_.mode; }

 private:
  IdleConfig c_;
  uint32_t idle_ = 0;
  uint64_t sleeps_ = 0;
};

}  // namespace tandem::common::dpdk
