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

uint16_t PathRoundRobin::choose(uint32_t psn, bool retransmit, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  PathHealth& h = set_.health();
  const uint32_t n = h.size();
  uint32_t pick = n;
  // A probe is sent (and moves the path's next_probe) in the tick that found
  // it due, so ticking again at the same `now` finds nothing new.
  if (now != ticked_at_ || (!retransmit && !ticked_probe_)) {
    ticked_at_ = now;
    ticked_probe_ = !retransmit;
    pick = h.tick(now, !retransmit);  // a path that is out and due for a probe
  }
  if (pick == n) {
    pick = next_ < n ? next_ : 0;
    // Skip paths that are out; if all are out, keep plain round robin.
    if (!h.up(pick) && h.up_count() > 0)
      while (!h.up(pick)) pick = pick + 1 < n ? pick + 1 : 0;
    next_ = pick + 1;
  }
  h.on_sent(pick, now, psn);
  last_pick_ = pick;
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
