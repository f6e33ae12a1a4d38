#include "rnic/core/path_single.h"

#include "common/wire/entropy.h"

namespace tandem::rnic {

void PathSingle::reset(const PathPolicyParams& p) noexcept {
  // Mix the QPN so that QPs with the same seed still spread over the fabric.
  uint32_t h = p.local_qpn * 0x9E3779B1u ^ p.path_seed;
  h ^= h >> 15;
  port_ = common::entropy_port(h);
  s_ = PathStats{};
}

}  // namespace tandem::rnic
