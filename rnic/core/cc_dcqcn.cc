#include "rnic/core/cc_dcqcn.h"

#include <algorithm>
#include <cmath>

namespace tandem::rnic {

void CcDcqcn::reset(const CcParams& p) noexcept {
  window_ = p.window_bytes;
  line_ = rc_ = rt_ = min_rate_ = p.line_rate_gbps > 0 ? p.line_rate_gbps : 100;
  alpha_ = 1.0;
  next_send_ = next_alpha_ = next_increase_ = 0;
  bytes_ = 0;
  timer_stage_ = byte_stage_ = 0;
  cut_once_ = false;
  cuts_ = 0;
}

void CcDcqcn::increase() noexcept {
  const uint32_t f = p_.fast_recovery_stages;
  if (std::max(timer_stage_, byte_stage_) < f) {
    // fast recovery: halfway back to the target
  } else if (std::min(timer_stage_, byte_stage_) >= f) {
    rt_ = std::min(line_, rt_ + p_.hai_fraction * line_ * (std::min(timer_stage_, byte_stage_) - f + 1));
  } else {
    rt_ = std::min(line_, rt_ + p_.ai_fraction * line_);
  }
  rc_ = std::min(line_, (rt_ + rc_) / 2);
}

void CcDcqcn::advance(uint64_t now) noexcept {
  if (!cut_once_) return;
  if (now >= next_alpha_) {
    const uint64_t n = (now - next_alpha_) / p_.alpha_timer_ns + 1;
    alpha_ *= std::pow(1 - p_.g, static_cast<double>(n));
    next_alpha_ += n * p_.alpha_timer_ns;
  }
  // Each timer period is one increase event; at line rate nothing is left to do.
  while (now >= next_increase_ && rc_ < line_) {
    increase();  // the stage counts events before this one
    ++timer_stage_;
    next_increase_ += p_.increase_timer_ns;
  }
  if (now >= next_increase_) next_increase_ = now + p_.increase_timer_ns;
}

bool CcDcqcn::can_send(uint64_t inflight_bytes, uint32_t bytes, uint64_t now) noexcept {
  advance(now);
  if (now < next_send_) return false;
  return inflight_bytes == 0 || inflight_bytes + bytes <= window_;
}

void CcDcqcn::on_sent(uint32_t bytes, uint64_t now) noexcept {
  // Gb/s = bits per ns: the next packet may go bytes * 8 / rate later.
  next_send_ = std::max(next_send_, now) + static_cast<uint64_t>(std::ceil(bytes * 8.0 / rc_));
  if (!cut_once_) return;
  bytes_ += bytes;
  if (bytes_ >= p_.byte_counter) {
    bytes_ = 0;
    increase();
    ++byte_stage_;
  }
}

void CcDcqcn::on_cnp(uint64_t now) noexcept {
  advance(now);
  rt_ = rc_;
  rc_ = std::max(line_ * p_.min_rate_fraction, rc_ * (1 - alpha_ / 2));
  alpha_ = (1 - p_.g) * alpha_ + p_.g;
  min_rate_ = std::min(min_rate_, rc_);
  timer_stage_ = byte_stage_ = 0;
  bytes_ = 0;
  next_alpha_ = now + p_.alpha_timer_ns;
  next_increase_ = now + p_.increase_timer_ns;
  cut_once_ = true;
  ++cuts_;
}

CcStats CcDcqcn::stats() const noexcept {
  CcStats s;
  s.rate_cuts = cuts_;
  s.rate_gbps = rc_;
  s.min_rate_gbps = min_rate_;
  return s;
}

}  // namespace tandem::rnic
