#include "rnic/core/path_round_robin.h"

#include "common/wire/entropy.h"

namespace tandem::rnic {

uint16_t path_set_port(uint32_t local_qpn, uint16_t seed, uint32_t i) noexcept {
  uint32_t h = (local_qpn * 0x9E3779B1u) ^ seed ^ (i * 0x85EBCA6Bu);
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  return common::entropy_port(h);
}

void PathRoundRobin::reset(const PathPolicyParams& p) noexcept {
  health_.reset(p.num_paths);
  for (uint32_t i = 0; i < health_.size(); ++i) ports_[i] = path_set_port(p.local_qpn, p.path_seed, i);
  next_ = 0;
  now_ = 0;
}

uint32_t PathRoundRobin::index_of(uint16_t sport) const noexcept {
  for (uint32_t i = 0; i < health_.size(); ++i)
    if (ports_[i] == sport) return i;
  return kMaxPaths;
}

uint16_t PathRoundRobin::choose(uint32_t, bool, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t n = health_.size();
  uint32_t pick = health_.tick(now);  // a path that is out and due for a probe
  if (pick == n) {
    pick = next_ % n;
    // Skip paths that are out; if all are out, keep plain round robin.
    if (health_.up_count() > 0)
      while (!health_.up(pick)) pick = (pick + 1) % n;
    next_ = pick + 1;
  }
  health_.on_sent(pick, now);
  return ports_[pick];
}

void PathRoundRobin::on_ack(uint16_t sport, uint64_t rtt_ns, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t i = index_of(sport);
  if (i < kMaxPaths) health_.on_ack(i, rtt_ns, now_);
}

void PathRoundRobin::on_loss(uint16_t sport, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t i = index_of(sport);
  if (i < kMaxPaths) health_.on_loss(i, now_);
}

void PathRoundRobin::on_ecn(uint16_t sport, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t i = index_of(sport);
  if (i < kMaxPaths) health_.on_ecn(i);
}

}  // namespace tandem::rnic
