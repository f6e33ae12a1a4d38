// One fabric path (a route through the leaf-spine) as an impairment model:
// propagation delay, jitter, random loss, a serialising link of a given
// rate in front of a byte-limited tail-drop queue with an ECN threshold, and
// fail/heal. Sans-I/O: given (packet length, now, rng) it says drop (and
// why) or deliver at time T (and whether to mark CE). Shared by tandem-sim
// and tandem-fabric so a path behaves the same in both.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "common/fabric/rng.h"

namespace tandem::common {

struct PathConfig {
  uint64_t delay_ns = 0;             // one-way propagation delay
  uint64_t jitter_ns = 0;            // extra delay, uniform in [0, jitter_ns]
  double loss = 0.0;                 // random loss probability, 0..1
  uint64_t rate_bps = 0;             // link rate; 0 = no serialisation, no queue
  uint64_t queue_limit_bytes = 0;    // tail drop above this backlog; 0 = unlimited
  uint64_t ecn_threshold_bytes = 0;  // mark CE at or above this backlog; 0 = never
  bool up = true;
};

enum class PathDrop : uint8_t { kNone, kDown, kLoss, kQueueFull, kHoldFull, kCount };
inline constexpr std::size_t kPathDropCount = static_cast<std::size_t>(PathDrop::kCount);

constexpr std::string_view path_drop_name(PathDrop d) noexcept {
  switch (d) {
    case PathDrop::kNone: return "none";
    case PathDrop::kDown: return "path_down";
    case PathDrop::kLoss: return "random_loss";
    case PathDrop::kQueueFull: return "queue_full";
    case PathDrop::kHoldFull: return "hold_full";
    case PathDrop::kCount: break;
  }
  return "invalid";
}

struct PathCounters {
  uint64_t packets = 0;  // accepted for delivery
  uint64_t bytes = 0;
  std::array<uint64_t, kPathDropCount> drops{};
  uint64_t ecn_marks = 0;        // packets the model asked to mark
  uint64_t max_queue_bytes = 0;  // highest backlog seen by an arriving packet

  uint64_t dropped() const noexcept {
    uint64_t n = 0;
    for (auto d : drops) n += d;
    return n;
  }
};

struct PathVerdict {
  PathDrop drop = PathDrop::kNone;
  bool mark_ce = false;
  uint64_t deliver_at = 0;  // ns, same clock as `now`; valid when drop == kNone
};

class PathModel {
 public:
  explicit PathModel(const PathConfig& config = {}) noexcept { configure(config); }

  // Replaces the parameters; the backlog already queued stays.
  void configure(const PathConfig& config) noexcept;
  const PathConfig& config() const noexcept { return config_; }

  void set_up(bool up) noexcept { config_.up = up; }
  void set_loss(double p) noexcept;
  bool up() const noexcept { return config_.up; }

  // Decides the fate of one packet of `len` bytes arriving at `now`.
  // Delivery times never go backwards: a path is FIFO, as a real one is,
  // so jitter delays packets but does not reorder them within the path.
  PathVerdict admit(uint32_t len, uint64_t now, Rng& rng) noexcept;

  // Counts a drop decided outside the model (e.g. no room to hold the mbuf).
  void count_drop(PathDrop why) noexcept { ++counters_.drops[static_cast<std::size_t>(why)]; }
  void count_drops(PathDrop why, uint64_t n) noexcept {
    counters_.drops[static_cast<std::size_t>(why)] += n;
  }

  // Bytes still waiting for the serialiser at `now`.
  uint64_t backlog_bytes(uint64_t now) const noexcept;

  const PathCounters& counters() const noexcept { return counters_; }

 private:
  PathConfig config_;
  uint64_t loss_threshold_ = 0;
  uint64_t busy_until_ = 0;    // when the serialiser finishes what it has
  uint64_t last_deliver_ = 0;  // keeps the path FIFO under jitter
  PathCounters counters_;
};

}  // namespace tandem::common
