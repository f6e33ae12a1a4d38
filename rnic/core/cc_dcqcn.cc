#include "rnic/core/cc_dcqcn.h"

#include <algorithm>
#include <cmath>

namespace tandem::rnic {

void CcDcqcn::reset(const CcParams& p) noexcept {
  window_ = p.window_bytes;
  line_ = rc_ = rt_ = min_rate_ = p.line_rate_gbps > 0 ? p.line_rate_gbps : 100;
  ai_ = p_.ai_gbps > 0 ? p_.ai_gbps : p_.ai_fraction * line_;
  hai_ = p_.hai_gbps > 0 ? p_.hai_gbps : p_.hai_fraction * line_;
  floor_ = std::min(line_, p_.min_rate_gbps > 0 ? p_.min_rate_gbps : p_.min_rate_fraction * line_);
  alpha_ = 1.0;
  next_send_ = next_alpha_ = next_increase_ = 0;
  paced_ = false;
  bytes_ = 0;
  timer_stage_ = byte_stage_ = 0;
  cut_once_ = false;
  cuts_ = 0;
}

bool CcDcqcn::configure(std::string_view key, double v) noexcept {
  if (v < 0) return false;
  if (key == "g" && v > 0 && v < 1) p_.g = v;
  else if (key == "alpha_us" && v > 0) p_.alpha_timer_ns = static_cast<uint64_t>(v * 1000);
  else if (key == "increase_us" && v > 0) p_.increase_timer_ns = static_cast<uint64_t>(v * 1000);
  else if (key == "byte_counter") p_.byte_counter = static_cast<uint64_t>(v);
  else if (key == "fast_recovery") p_.fast_recovery_stages = static_cast<uint32_t>(v);
  else if (key == "ai_mbps") p_.ai_gbps = v / 1000;
  else if (key == "hai_mbps") p_.hai_gbps = v / 1000;
  else if (key == "min_mbps" && v > 0) p_.min_rate_gbps = v / 1000;
  else if (key == "clamp") p_.clamp_target = v != 0;
  else if (key == "var_window") p_.var_window = v != 0;
  else return false;
  return true;
}

void CcDcqcn::increase() noexcept {
  const uint32_t f = p_.fast_recovery_stages;
  if (p_.byte_counter == 0) {
    // Timer only (Mellanox's reaction point): the stage is the timer's.
    if (timer_stage_ == f) {
      rt_ = std::min(line_, rt_ + ai_);
    } else if (timer_stage_ > f) {
      rt_ = std::min(line_, rt_ + hai_);
    }
  } else if (std::max(timer_stage_, byte_stage_) < f) {
    // fast recovery: halfway back to the target
  } else if (std::min(timer_stage_, byte_stage_) >= f) {
    rt_ = std::min(line_, rt_ + hai_ * (std::min(timer_stage_, byte_stage_) - f + 1));
  } else {
    rt_ = std::min(line_, rt_ + ai_);
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
  paced_ = now < next_send_;
  if (paced_) return false;
  const uint64_t window =
      p_.var_window ? static_cast<uint64_t>(static_cast<double>(window_) * rc_ / line_) : window_;
  return inflight_bytes == 0 || inflight_bytes + bytes <= window;
}

void CcDcqcn::on_sent(uint32_t bytes, uint64_t now) noexcept {
  // Gb/s = bits per ns: the next packet may go bytes * 8 / rate later.
  next_send_ = std::max(next_send_, now) + static_cast<uint64_t>(std::ceil(bytes * 8.0 / rc_));
  if (!cut_once_ || p_.byte_counter == 0) return;
  bytes_ += bytes;
  if (bytes_ >= p_.byte_counter) {
    bytes_ = 0;
    increase();
    ++byte_stage_;
  }
}

void CcDcqcn::on_cnp(uint64_t now) noexcept {
  advance(now);
  // Without clamping, back-to-back cuts (no increase event between them)
  // keep the target the first one set.
  if (p_.clamp_target || !cut_once_ || timer_stage_ != 0 || byte_stage_ != 0) rt_ = rc_;
  rc_ = std::max(floor_, rc_ * (1 - alpha_ / 2));
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
