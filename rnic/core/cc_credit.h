// Congestion-control policy "credit": receiver-driven credits (after Pegasus
// and ExpressPass/Homa). A sender sends up to ~1 BDP unscheduled
// (PolicyConfig::credit_unsched_bytes), then new packets only below the
// limit the receiver granted on its ACKs (credit_wire.h). Retransmissions
// do not need credit (the receiver already paid for those PSNs).
//
// The receiving port grants with one CreditGrantor shared by all its QPs:
// a token bucket filled at the port's capacity (CreditConfig::rate_gbps)
// hands out one packet of credit at a time, round robin over QPs whose
// sender is within `ahead` packets of its limit, so the sum of what all
// senders are allowed never arrives faster than the receiver can take it.
//
// Credit jitter: when the credit loop has processing delay (a late credit
// that means nothing about congestion), a grant window of exactly one BDP
// stalls the sender for the whole delay. With `jitter_mitigation` the
// grantor keeps headroom (grants `headroom_pkts` further ahead) and batches
// grants (an ACK per `batch_pkts` of credit, so fewer, larger credits make
// the loop less sensitive to one late ACK); the token rate still bounds
// the arrival rate, so the headroom cannot build a standing queue.
#pragma once

#include <cstdint>

#include "rnic/core/cc_policy.h"

namespace tandem::rnic {

class CcCredit final : public CcPolicy {
 public:
  void reset(const CcParams& p) noexcept override;
  bool can_send(uint64_t inflight_bytes, uint32_t bytes, uint64_t) noexcept override {
    return inflight_bytes == 0 || inflight_bytes + bytes <= window_;
  }
  void on_credit(uint32_t credits, uint64_t now) noexcept override;
  void on_credit_stall(uint64_t now) noexcept override;
  void on_credit_used(uint64_t) noexcept override { ++s_.credits_used; }
  bool uses_credits() const noexcept override { return true; }
  uint32_t unscheduled_pkts() const noexcept override { return unsched_pkts_; }
  CcStats stats() const noexcept override { return s_; }

 private:
  uint64_t window_ = 1ull << 20;  // a cap on bytes in flight as a safety net
  uint32_t unsched_pkts_ = 16;
  bool stalled_ = false;
  CcStats s_;
};

// The receiving port's side: how fast and how far ahead it grants.
struct CreditConfig {
  double rate_gbps = 100;        // the port's capacity shared by its senders
  uint32_t window_pkts = 32;     // credit outstanding over all senders (~1 BDP)
  bool jitter_mitigation = false;
  uint32_t headroom_pkts = 8;    // with mitigation: extra packets granted ahead
  uint32_t batch_pkts = 4;       // with mitigation: credit per ACK
};

class CreditGrantor {
 public:
  void configure(const CreditConfig& c, uint32_t mtu) noexcept;
  // Tokens up to `now`; returns packets' worth of credit that may be granted.
  uint32_t refill(uint64_t now) noexcept;
  void spend(uint32_t pkts) noexcept { tokens_ -= static_cast<double>(pkts) * mtu_; }
  // When the next packet of credit will be available.
  uint64_t next_token_time() const noexcept;
  // Credit outstanding (granted, not yet arrived) the port allows over all
  // its senders, and so for any one of them.
  uint32_t window_pkts() const noexcept {
    return cfg_.window_pkts + (cfg_.jitter_mitigation ? cfg_.headroom_pkts : 0);
  }
  uint32_t batch_pkts() const noexcept { return cfg_.jitter_mitigation ? cfg_.batch_pkts : 1; }
  uint64_t granted_pkts() const noexcept { return granted_; }
  void note_granted(uint32_t pkts) noexcept { granted_ += pkts; }

 private:
  CreditConfig cfg_;
  double bytes_per_ns_ = 12.5;
  double tokens_ = 0;
  double cap_ = 0;
  uint32_t mtu_ = 4096;
  uint64_t last_ = 0;
  uint64_t granted_ = 0;
};

}  // namespace tandem::rnic
