// Spraying policy "adaptive": like round_robin over a path set with path
// health (path_health.h), but each path's share follows its condition.
// A path's weight is (best smoothed RTT / its smoothed RTT)^2, halved for
// each ECN mark fraction of a half and cut by recent losses; a smooth
// weighted round robin (deterministic, no randomness) turns weights into
// choices. A path with no RTT sample yet weighs as much as the best.
#pragma once

#include <array>

#include "rnic/core/path_policy.h"
#include "rnic/core/path_set.h"

namespace tandem::rnic {

class PathAdaptive final : public PathPolicy {
 public:
  void reset(const PathPolicyParams& p) noexcept override;
  uint16_t choose(uint32_t psn, bool retransmit, uint64_t now) noexcept override;
  uint16_t choose_retransmit(uint32_t psn, uint16_t lost_sport, uint32_t attempt, uint64_t now) noexcept override;
  uint16_t choose_response(uint32_t psn, bool retry, uint64_t now) noexcept override;
  uint32_t last_pick() const noexcept override { return last_pick_; }
  void on_ack(uint16_t sport, uint64_t rtt_ns, uint64_t now) noexcept override;
  void on_loss(uint16_t sport, uint64_t sent_at, uint64_t now) noexcept override;
  void on_timeout(uint16_t sport, uint64_t sent_at, uint64_t now) noexcept override;
  void on_echo(uint32_t i, bool color, uint64_t now) noexcept override;
  bool path_color(uint32_t i) const noexcept override { return set_.health().color(i); }
  void on_ecn(uint16_t sport, uint64_t now) noexcept override;
  void on_duplicate(uint32_t psn, uint64_t now) noexcept override;
  void on_local_gap(uint64_t from, uint64_t to) noexcept override { set_.health().on_local_gap(from, to); }
  void on_late(uint32_t psn, uint64_t now) noexcept override { set_.health().on_late(psn, now); }
  uint32_t path_count() const noexcept override { return set_.size(); }
  PathStats path_stats(uint32_t i) const noexcept override { return set_.health().snapshot(i); }
  uint16_t path_port(uint32_t i) const noexcept override { return set_.port(i); }

  const PathHealth& health() const noexcept { return set_.health(); }
  double weight(uint32_t i) const noexcept;

 private:
  // A resend or a response to a duplicate: PathHealth::pick_retry, weights aside.
  uint16_t send_retry(uint32_t psn, uint32_t avoid, bool answering_only, uint64_t now) noexcept;

  PathSet set_;
  uint32_t retry_next_ = 0;
  uint32_t last_pick_ = 0;
  std::array<double, kMaxPaths> srtt_{};    // ns, EWMA 1/8
  std::array<double, kMaxPaths> bad_{};     // loss/ECN penalty, decays per ack
  std::array<double, kMaxPaths> current_{}; // smooth weighted round robin state
  uint64_t now_ = 0;
};

}  // namespace tandem::rnic
