#include "common/fabric/path_model.h"

#include <algorithm>

namespace tandem::common {

void PathModel::configure(const PathConfig& config) noexcept {
  config_ = config;
  loss_threshold_ = probability_threshold(config.loss);
}

void PathModel::set_loss(double p) noexcept {
  config_.loss = p;
  loss_threshold_ = probability_threshold(p);
}

uint64_t PathModel::backlog_bytes(uint64_t now) const noexcept {
  if (config_.rate_bps == 0 || busy_until_ <= now) return 0;
  const unsigned __int128 bits = static_cast<unsigned __int128>(busy_until_ - now) * config_.rate_bps;
  return static_cast<uint64_t>(bits / 8'000'000'000u);
}

PathVerdict PathModel::admit(uint32_t len, uint64_t now, Rng& rng) noexcept {
  PathVerdict v;
  if (!config_.up) {
    v.drop = PathDrop::kDown;
  } else if (loss_threshold_ != 0 && rng.chance(loss_threshold_)) {
    v.drop = PathDrop::kLoss;
  }
  if (v.drop != PathDrop::kNone) {
    count_drop(v.drop);
    return v;
  }

  uint64_t depart = now;
  if (config_.rate_bps != 0) {
    const uint64_t backlog = backlog_bytes(now);
    counters_.max_queue_bytes = std::max(counters_.max_queue_bytes, backlog);
    if (config_.queue_limit_bytes != 0 && backlog + len > config_.queue_limit_bytes) {
      v.drop = PathDrop::kQueueFull;
      count_drop(v.drop);
      return v;
    }
    v.mark_ce = config_.ecn_threshold_bytes != 0 && backlog >= config_.ecn_threshold_bytes;
    const uint64_t tx_ns = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(len) * 8'000'000'000u + config_.rate_bps - 1) /
        config_.rate_bps);
    depart = std::max(now, busy_until_) + tx_ns;
    busy_until_ = depart;
  }
  uint64_t at = depart + config_.delay_ns;
  if (config_.jitter_ns != 0) at += rng.below(config_.jitter_ns + 1);
  at = std::max(at, last_deliver_);
  last_deliver_ = at;
  v.deliver_at = at;

  ++counters_.packets;
  counters_.bytes += len;
  if (v.mark_ce) ++counters_.ecn_marks;
  return v;
}

}  // namespace tandem::common
