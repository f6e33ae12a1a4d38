#include "rnic/core/path_round_robin.h"

namespace tandem::rnic {

void PathRoundRobin::reset(const PathPolicyParams& p) noexcept {
  set_.reset(p);
  next_ = 0;
  retry_next_ = 0;
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

uint16_t PathRoundRobin::send_retry(uint32_t psn, uint32_t avoid, bool answering_only, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  PathHealth& h = set_.health();
  if (now != ticked_at_) tick(now, true);  // silences; a resend probes nothing
  const uint32_t pick = h.pick_retry(retry_next_, avoid, answering_only, now);
  retry_next_ = pick + 1;
  h.on_sent(pick, now, psn);
  last_pick_ = pick;
  return set_.port(pick);
}

uint16_t PathRoundRobin::choose_retransmit(uint32_t psn, uint16_t lost_sport, uint32_t attempt, uint64_t now) noexcept {
  return send_retry(psn, set_.index_of(lost_sport), attempt <= PathHealth::kAnsweringTries, now);
}

uint16_t PathRoundRobin::choose_retry_response(uint32_t psn, uint64_t now) noexcept {
  return send_retry(psn, kMaxPaths, true, now);
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

void PathRoundRobin::on_timeout(uint16_t sport, uint64_t sent_at, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t i = set_.index_of(sport);
  if (i < kMaxPaths) set_.health().on_loss(i, sent_at, now_, true);
}

void PathRoundRobin::on_echo(uint32_t i, bool color, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  set_.health().on_echo(i, color, now_);
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
