// A QP's path set: num_paths UDP source ports (the ECMP entropy, derived
// from the QPN and path seed) and their health. The spraying policies own
// one and add only how they pick among the live paths.
#pragma once

#include <array>
#include <cstdint>

#include "rnic/core/path_health.h"
#include "rnic/core/path_policy.h"

namespace tandem::rnic {

// The i-th source port of a QP's path set.
uint16_t path_set_port(uint32_t local_qpn, uint16_t seed, uint32_t i) noexcept;

class PathSet {
 public:
  void reset(const PathPolicyParams& p) noexcept;
  uint32_t size() const noexcept { return health_.size(); }
  uint16_t port(uint32_t i) const noexcept { return ports_[i]; }
  // Index of the path that uses `sport`, kMaxPaths if none.
  uint32_t index_of(uint16_t sport) const noexcept {
    for (uint32_t i = 0; i < health_.size(); ++i)
      if (ports_[i] == sport) return i;
    return kMaxPaths;
  }
  // The same, told the index the packet was sent on (`hint`): no search
  // when it still holds `sport` (ports may repeat: the first one's index).
  uint32_t index_of(uint16_t sport, uint32_t hint) const noexcept {
    return hint < health_.size() && ports_[hint] == sport ? first_[hint] : index_of(sport);
  }
  PathHealth& health() noexcept { return health_; }
  const PathHealth& health() const noexcept { return health_; }

 private:
  std::array<uint16_t, kMaxPaths> ports_{};
  std::array<uint8_t, kMaxPaths> first_{};  // index_of(ports_[i])
  PathHealth health_;
};

}  // namespace tandem::rnic
