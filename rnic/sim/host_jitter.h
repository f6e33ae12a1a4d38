// Host jitter of a software RNIC (the scenario's `hosts:` entries): its
// transport loop stops for a while (a descheduled worker, a busy core, an
// interrupt storm: stalls of tens of microseconds to milliseconds at some
// rate), its application polls completions late, and its ACKs leave late.
// While a host's loop is stalled, frames wait in its RX ring (tail drop at
// `rx_ring` frames), its timers do not run and nothing new is queued for
// the wire; when it resumes, it works the backlog off a burst at a time, as
// the DPDK worker's loop does (rx burst, on_packets, poll, tx).
#pragma once

#include <algorithm>
#include <cstdint>

#include "rnic/sim/rng.h"

namespace tandem::rnic::sim {

struct StallSpec {
  enum class Dist { kExponential, kPareto } dist = Dist::kExponential;
  double rate_per_ms = 0;    // stalls per millisecond of running time (0: none)
  uint64_t mean_ns = 100'000;  // exponential: mean length
  uint64_t min_ns = 20'000;    // shortest stall (pareto: its scale)
  uint64_t max_ns = 3'000'000; // longest stall (both: lengths are clamped)
  double alpha = 1.5;          // pareto: tail index (smaller: heavier tail)
};

struct HostJitterSpec {
  int host = -1;  // -1: every host
  StallSpec stall;
  uint64_t app_late_ns = 0;   // the application reaps completions up to this late (uniform)
  uint64_t ack_delay_ns = 0;  // each ACK/SACK leaves up to this late (uniform)
  uint32_t rx_ring = 1024;    // frames a stalled host buffers (more are dropped)
  bool any() const noexcept { return stall.rate_per_ms > 0 || app_late_ns || ack_delay_ns; }
};

// Draws a host's stalls: the running time until the next one and its length.
class StallClock {
 public:
  StallClock(const StallSpec& s, uint64_t seed) noexcept : s_(s), rng_(seed) {}
  bool enabled() const noexcept { return s_.rate_per_ms > 0; }
  uint64_t next_gap_ns() noexcept {
    return 1 + static_cast<uint64_t>(rng_.exponential(1e6 / s_.rate_per_ms));
  }
  uint64_t next_length_ns() noexcept {
    double len;
    if (s_.dist == StallSpec::Dist::kPareto) {
      // Inverse CDF: x_min / U^(1/alpha), U in (0, 1].
      len = static_cast<double>(s_.min_ns) / std::pow(1.0 - rng_.unit(), 1.0 / s_.alpha);
    } else {
      len = rng_.exponential(static_cast<double>(s_.mean_ns));
    }
    return std::clamp<uint64_t>(static_cast<uint64_t>(len), s_.min_ns, std::max(s_.min_ns, s_.max_ns));
  }
  uint64_t uniform(uint64_t hi) noexcept { return rng_.between(0, hi); }

 private:
  StallSpec s_;
  Rng rng_;
};

}  // namespace tandem::rnic::sim
