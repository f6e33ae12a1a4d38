#include "rnic/core/path_round_robin.h"

namespace tandem::rnic {

void PathRoundRobin::reset(const PathPolicyParams& p) noexcept {
  set_.reset(p);
  next_ = 0;
  now_ = 0;
}

uint16_t PathRoundRobin::choose(uint32_t psn, bool retransmit, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  PathHealth& h = set_.health();
  const uint32_t n = h.size();
  uint32_t pick = h.tick(now, !retransmit);  // a path that is out and due for a probe
  if (pick == n) {
    pick = next_ % n;
    // Skip paths that are out; if all are out, keep plain round robin.
    if (h.up_count() > 0)
      while (!h.up(pick)) pick = (pick + 1) % n;
    next_ = pick + 1;
  }
  h.on_sent(pick, now, psn);
  return set_.port(pick);
}

void PathRoundRobin::on_ack(uint16_t sport, uint64_t rtt_ns, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t i = set_.index_of(sport);
  if (i < kMaxPaths) set_.health().on_ack(i, rtt_ns, now_);
}

void PathRoundRobin::on_loss(uint16_t sport, uint64_t sent_at, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t i = set_.index_of(sport);
  if (i < kMaxPaths) set_.health().on_loss(i, sent_at, now_);
}

void PathRoundRobin::on_duplicate(uint32_t psn, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  set_.health().on_duplicate(psn, now_);
}

void PathRoundRobin::on_ecn(uint16_t sport, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t i = set_.index_of(sport);
  if (i < kMaxPaths) set_.health().on_ecn(i);
}

}  // namespace tandem::rnic
