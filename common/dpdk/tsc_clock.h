// Nanoseconds from the TSC, the `now` every sans-I/O core is fed with: one
// rdtsc and a multiply-shift per call, no division, no system call.
#pragma once

#include <rte_cycles.h>

#include <cstdint>

namespace tandem::common::dpdk {

class TscClock {
 public:
  // Must run after rte_eal_init (which measures the TSC frequency).
  TscClock() noexcept : hz_(rte_get_tsc_hz()), base_(rte_rdtsc()) {
    mult_ = static_cast<uint64_t>((static_cast<unsigned __int128>(1'000'000'000u) << 32) / hz_);
  }

  // ns since this clock was made.
  uint64_t now_ns() const noexcept { return to_ns(rte_rdtsc() - base_); }
  uint64_t to_ns(uint64_t cycles) const noexcept {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(cycles) * mult_) >> 32);
  }
  uint64_t hz() const noexcept { return hz_; }
  // ns = (tsc - base) * mult >> 32 (what a trace reader inverts: trace_ring.h)
  uint64_t base() const noexcept { return base_; }
  uint64_t mult() const noexcept { return mult_; }

 private:
  uint64_t hz_;
  uint64_t base_;
  uint64_t mult_ = 0;
};

}  // namespace tandem::common::dpdk
