#include "rnic/core/path_set.h"

#include "common/wire/entropy.h"

namespace tandem::rnic {

uint16_t path_set_port(uint32_t local_qpn, uint16_t seed, uint32_t i) noexcept {
  uint32_t h = (local_qpn * 0x9E3779B1u) ^ seed ^ (i * 0x85EBCA6Bu);
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  return common::entropy_port(h);
}

void PathSet::reset(const PathPolicyParams& p) noexcept {
  health_.reset(p.num_paths);
  for (uint32_t i = 0; i < health_.size(); ++i) ports_[i] = path_set_port(p.local_qpn, p.path_seed, i);
  for (uint32_t i = 0; i < health_.size(); ++i) first_[i] = static_cast<uint8_t>(index_of(ports_[i]));
}

}  // namespace tandem::rnic
