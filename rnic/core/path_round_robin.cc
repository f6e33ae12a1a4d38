#include "rnic/core/path_round_robin.h"

namespace tandem::rnic {

void PathRoundRobin::reset(const PathPolicyParams& p) noexcept {
  set_.reset(p);
  next_ = 0;
  last_pick_ = 0;
  now_ = 0;
  ticked_at_ = 0;
  ticked_probe_ = false;
}

uint32_t PathRoundRobin::tick(uint64_t now, bool retransmit) noexcept {
  ticked_at_ = now;
  ticked_probe_ = !retransmit;
  return set_.health().tick(now, !retransmit);
}

uint32_t PathRoundRobin::skip_down(uint32_t pick) const noexcept {
  const PathHealth& h = set_.health();
  if (h.up_count() == 0) return pick;
  const uint32_t n = h.size();
  while (!h.up(pick)) pick = pick + 1 < n ? pick + 1 : 0;
  return pick;
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
