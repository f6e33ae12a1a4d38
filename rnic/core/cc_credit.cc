#include "rnic/core/cc_credit.h"

#include <algorithm>
#include <cmath>

namespace tandem::rnic {

void CcCredit::reset(const CcParams& p) noexcept {
  window_ = p.window_bytes;
  unsched_pkts_ = static_cast<uint32_t>(std::max<uint64_t>(1, (p.unsched_bytes + p.mtu - 1) / p.mtu));
  stalled_ = false;
  s_ = CcStats{};
}

void CcCredit::on_credit(uint32_t credits, uint64_t) noexcept {
  s_.credits_received += credits;
  stalled_ = false;
}

void CcCredit::on_credit_stall(uint64_t) noexcept {
  if (!stalled_) ++s_.credit_stalls;
  stalled_ = true;
}

void CreditGrantor::configure(const CreditConfig& c, uint32_t mtu) noexcept {
  cfg_ = c;
  mtu_ = mtu;
  bytes_per_ns_ = c.rate_gbps / 8.0;
  // A burst of at most one batch (or two packets): tokens do not pile up
  // while nobody needs credit.
  cap_ = static_cast<double>(std::max<uint32_t>(2, batch_pkts())) * mtu;
  tokens_ = cap_;
  last_ = 0;
}

uint32_t CreditGrantor::refill(uint64_t now) noexcept {
  if (now > last_) {
    tokens_ = std::min(cap_, tokens_ + static_cast<double>(now - last_) * bytes_per_ns_);
    last_ = now;
  }
  return tokens_ >= mtu_ ? static_cast<uint32_t>(tokens_ / mtu_) : 0;
}

uint64_t CreditGrantor::next_token_time() const noexcept {
  if (tokens_ >= mtu_) return last_;
  return last_ + static_cast<uint64_t>(std::ceil((mtu_ - tokens_) / bytes_per_ns_));
}

}  // namespace tandem::rnic
