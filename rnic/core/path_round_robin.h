// Spraying policy "round_robin": each packet of a QP takes the next path of
// its path set (num_paths entropy values derived from the QPN and path seed),
// skipping paths PathHealth has taken out and probing those back in.
#pragma once

#include <array>

#include "rnic/core/path_health.h"
#include "rnic/core/path_policy.h"

namespace tandem::rnic {

// The i-th source port of a QP's path set (shared by the spraying policies).
uint16_t path_set_port(uint32_t local_qpn, uint16_t seed, uint32_t i) noexcept;

class PathRoundRobin final : public PathPolicy {
 public:
  void reset(const PathPolicyParams& p) noexcept override;
  uint16_t choose(uint32_t psn, bool retransmit, uint64_t now) noexcept override;
  void on_ack(uint16_t sport, uint64_t rtt_ns, uint64_t now) noexcept override;
  void on_loss(uint16_t sport, uint64_t now) noexcept override;
  void on_ecn(uint16_t sport, uint64_t now) noexcept override;
  uint32_t path_count() const noexcept override { return health_.size(); }
  PathStats path_stats(uint32_t i) const noexcept override { return health_.stats(i); }

  const PathHealth& health() const noexcept { return health_; }

 private:
  uint32_t index_of(uint16_t sport) const noexcept;

  std::array<uint16_t, kMaxPaths> ports_{};
  PathHealth health_;
  uint32_t next_ = 0;
  uint64_t now_ = 0;  // latest time seen (on_loss may be told 0)
};

}  // namespace tandem::rnic
