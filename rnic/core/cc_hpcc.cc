#include "rnic/core/cc_hpcc.h"

#include <algorithm>
#include <cmath>

namespace tandem::rnic {

void CcHpcc::reset(const CcParams& p) noexcept {
  line_ = rate_ = rc_ = min_seen_ = p.line_rate_gbps > 0 ? p.line_rate_gbps : 100;
  floor_ = std::min(line_, p_.min_rate_gbps);
  win_ = std::max<uint64_t>(p.window_bytes, p.mtu);
  t_ns_ = static_cast<double>(win_) * 8 / line_;  // Gb/s = bits per ns
  u_ = 1;
  stage_ = 0;
  sent_ = acked_ = last_update_ = next_send_ = 0;
  paced_ = false;
  prev_ = pending_ = IntEcho{};
  has_pending_ = false;
  updates_ = cuts_ = 0;
}

bool CcHpcc::configure(std::string_view key, double v) noexcept {
  if (v < 0) return false;
  if (key == "eta" && v > 0) p_.eta = v;
  else if (key == "max_stage") p_.max_stage = static_cast<uint32_t>(v);
  else if (key == "ai_mbps") p_.ai_gbps = v / 1000;
  else if (key == "min_mbps" && v > 0) p_.min_rate_gbps = v / 1000;
  else if (key == "fast_react") p_.fast_react = v != 0;
  else return false;
  return true;
}

uint64_t CcHpcc::window_bytes() const noexcept {
  return std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(win_) * rate_ / line_));
}

bool CcHpcc::can_send(uint64_t inflight_bytes, uint32_t bytes, uint64_t now) noexcept {
  paced_ = now < next_send_;
  if (paced_) return false;
  return inflight_bytes == 0 || inflight_bytes + bytes <= window_bytes();
}

void CcHpcc::on_sent(uint32_t bytes, uint64_t now) noexcept {
  sent_ += bytes;
  // At the line rate the NIC's own serialisation is the pacing.
  if (rate_ < line_) next_send_ = std::max(next_send_, now) + static_cast<uint64_t>(std::ceil(bytes * 8.0 / rate_));
}

void CcHpcc::on_int(const IntEcho& echo, uint64_t) noexcept {
  pending_ = echo;
  has_pending_ = echo.hops > 0 && echo.hops <= kMaxIntHops;
}

void CcHpcc::on_ack(uint64_t acked_bytes, uint64_t, uint64_t) noexcept {
  acked_ += acked_bytes;
  if (!has_pending_) return;
  has_pending_ = false;
  // A full update once the ACK covers data sent after the last one (one per
  // RTT), a fast reaction on the others.
  if (acked_ > last_update_) {
    update(pending_, false);
  } else if (p_.fast_react) {
    update(pending_, true);
  }
}

void CcHpcc::update(const IntEcho& e, bool fast) noexcept {
  if (last_update_ == 0) {  // the first echo: only a reference point
    last_update_ = sent_;
    prev_ = e;
    return;
  }
  double big_u = 0;
  uint64_t dt = 0;
  bool any = false;
  for (uint32_t i = 0; i < e.hops; ++i) {
    const IntHop& h = e.hop[i];
    const IntHop& o = prev_.hop[i];
    if (i < prev_.hops && h.ts_ns > o.ts_ns && h.tx_bytes >= o.tx_bytes && h.rate_gbps > 0) {
      const uint64_t tau = h.ts_ns - o.ts_ns;
      const double tx_gbps = static_cast<double>(h.tx_bytes - o.tx_bytes) * 8 / static_cast<double>(tau);
      const double q = static_cast<double>(std::min(h.qlen_bytes, o.qlen_bytes));
      const double u = tx_gbps / h.rate_gbps + q * 8 / (h.rate_gbps * t_ns_);
      if (u > big_u) {
        big_u = u;
        dt = tau;
      }
      any = true;
    }
    prev_.hop[i] = h;
  }
  prev_.hops = e.hops;
  if (any) {
    const double w = std::min(static_cast<double>(dt), t_ns_);
    u_ = (u_ * (t_ns_ - w) + big_u * w) / t_ns_;
    const double c = u_ / p_.eta;
    double r;
    uint32_t stage;
    if (c >= 1 || stage_ >= p_.max_stage) {
      r = rc_ / c + p_.ai_gbps;
      stage = 0;
    } else {
      r = rc_ + p_.ai_gbps;
      stage = stage_ + 1;
    }
    r = std::clamp(r, floor_, line_);
    if (r < rate_) ++cuts_;
    rate_ = r;
    min_seen_ = std::min(min_seen_, r);
    ++updates_;
    if (!fast) {
      rc_ = r;
      stage_ = stage;
    }
  }
  if (!fast && sent_ > last_update_) last_update_ = sent_;
}

CcStats CcHpcc::stats() const noexcept {
  CcStats s;
  s.rate_cuts = cuts_;
  s.rate_gbps = rate_;
  s.min_rate_gbps = min_seen_;
  return s;
}

}  // namespace tandem::rnic
