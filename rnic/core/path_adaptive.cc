#include "rnic/core/path_adaptive.h"

#include <algorithm>

namespace tandem::rnic {

void PathAdaptive::reset(const PathPolicyParams& p) noexcept {
  set_.reset(p);
  srtt_.fill(0);
  bad_.fill(0);
  current_.fill(0);
  now_ = 0;
  retry_next_ = 0;
  last_pick_ = 0;
}

double PathAdaptive::weight(uint32_t i) const noexcept {
  double best = 0;
  for (uint32_t k = 0; k < set_.size(); ++k)
    if (srtt_[k] > 0 && set_.health().up(k) && (best == 0 || srtt_[k] < best)) best = srtt_[k];
  double w = 1.0;
  if (best > 0 && srtt_[i] > 0) {
    const double r = best / srtt_[i];
    w = r * r;
  }
  w /= 1.0 + bad_[i];
  return std::max(w, 1.0 / 64);  // every live path keeps a trickle: its RTT stays known
}

uint16_t PathAdaptive::choose(uint32_t psn, bool retransmit, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t n = set_.size();
  uint32_t pick = set_.health().tick(now, !retransmit);
  if (pick == n) {
    const bool any_up = set_.health().up_count() > 0;
    double total = 0, best = -1e300;
    for (uint32_t i = 0; i < n; ++i) {
      if (any_up && !set_.health().up(i)) continue;
      const double w = weight(i);
      current_[i] += w;
      total += w;
      if (current_[i] > best) { best = current_[i]; pick = i; }
    }
    current_[pick] -= total;
  }
  set_.health().on_sent(pick, now, psn);
  last_pick_ = pick;
  return set_.port(pick);
}

uint16_t PathAdaptive::send_retry(uint32_t psn, uint32_t avoid, bool answering_only, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  PathHealth& h = set_.health();
  h.tick(now, false);  // silences; a resend probes nothing
  const uint32_t pick = h.pick_retry(retry_next_, avoid, answering_only, now);
  retry_next_ = pick + 1;
  h.on_sent(pick, now, psn);
  last_pick_ = pick;
  return set_.port(pick);
}

uint16_t PathAdaptive::choose_retransmit(uint32_t psn, uint16_t lost_sport, uint32_t attempt, uint64_t now) noexcept {
  return send_retry(psn, set_.index_of(lost_sport), attempt <= PathHealth::kAnsweringTries, now);
}

uint16_t PathAdaptive::choose_response(uint32_t psn, bool retry, uint64_t now) noexcept {
  return retry ? send_retry(psn, kMaxPaths, true, now) : choose(psn, false, now);
}

void PathAdaptive::on_ack(uint16_t sport, uint64_t rtt_ns, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t i = set_.index_of(sport);
  if (i >= kMaxPaths) return;
  if (rtt_ns) srtt_[i] = srtt_[i] > 0 ? (7 * srtt_[i] + static_cast<double>(rtt_ns)) / 8 : static_cast<double>(rtt_ns);
  bad_[i] *= 0.98;
  set_.health().on_ack(i, rtt_ns, now_);
}

void PathAdaptive::on_loss(uint16_t sport, uint64_t sent_at, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t i = set_.index_of(sport);
  if (i >= kMaxPaths) return;
  bad_[i] += 1.0;  // late or lost, the path is worse than the others: weigh it less
  set_.health().on_loss(i, sent_at, now_);
}

void PathAdaptive::on_timeout(uint16_t sport, uint64_t sent_at, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t i = set_.index_of(sport);
  if (i >= kMaxPaths) return;
  bad_[i] += 1.0;
  set_.health().on_loss(i, sent_at, now_, true);
}

void PathAdaptive::on_echo(uint32_t i, bool color, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  set_.health().on_echo(i, color, now_);
}

void PathAdaptive::on_duplicate(uint32_t psn, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  set_.health().on_duplicate(psn, now_);
}

void PathAdaptive::on_ecn(uint16_t sport, uint64_t now) noexcept {
  if (now > now_) now_ = now;
  const uint32_t i = set_.index_of(sport);
  if (i >= kMaxPaths) return;
  bad_[i] += 0.25;
  set_.health().on_ecn(i);
}

}  // namespace tandem::rnic
