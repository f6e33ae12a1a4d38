// Congestion-control policy "dcqcn" (Zhu et al., SIGCOMM 2015), the reaction
// point: a per-QP rate limiter the requester honours through can_send and
// next_send_time. A CNP (the responder sends them for CE-marked requests when
// QpAttr::cnp_interval_ns is set) cuts the rate by alpha/2 and remembers the
// old rate as the target; alpha decays while no CNP comes. Rate increase
// events (a timer, or a byte counter) move the rate back: five fast-recovery
// steps halfway to the target, then additive increase of the target, then
// hyper increase once both the timer and the byte counter have passed five
// stages. Timers are evaluated lazily from `now` (sans-I/O).
//
// Tunable in the policy name (policy_factory.h), e.g. HPCC's simulations'
// "DCQCN+w": dcqcn:alpha_us=1,increase_us=300,byte_counter=0,fast_recovery=1,
// ai_mbps=20,hai_mbps=200,min_mbps=1000,clamp=0,var_window=1. With the byte
// counter off (0) the stages follow the timer alone, as Mellanox's reaction
// point does: fast recovery, then one additive step, then hyper steps of
// hai each; clamp=0 keeps the target across back-to-back cuts (only a cut
// after an increase event moves it); var_window=1 scales the window with
// rate / line rate.
#pragma once

#include <cstdint>

#include "rnic/core/cc_policy.h"

namespace tandem::rnic {

struct DcqcnParams {
  double g = 1.0 / 256;             // alpha gain
  uint64_t alpha_timer_ns = 55'000; // alpha decays once per this without CNPs
  uint64_t increase_timer_ns = 55'000;
  uint64_t byte_counter = 10ull << 20;
  uint32_t fast_recovery_stages = 5;
  double ai_fraction = 1.0 / 200;   // additive step, of the line rate
  double hai_fraction = 1.0 / 20;   // hyper step, of the line rate
  double min_rate_fraction = 1.0 / 1000;
  double ai_gbps = 0;        // absolute steps and floor; 0: the fractions above
  double hai_gbps = 0;
  double min_rate_gbps = 0;
  bool clamp_target = true;  // every cut sets the target to the rate it cut from
  bool var_window = false;   // the window is window_bytes * rate / line rate
};

class CcDcqcn final : public CcPolicy {
 public:
  explicit CcDcqcn(const DcqcnParams& p = {}) : p_(p) {}
  void reset(const CcParams& p) noexcept override;
  bool configure(std::string_view key, double value) noexcept override;
  bool can_send(uint64_t inflight_bytes, uint32_t bytes, uint64_t now) noexcept override;
  // The pacing time, only while pacing is what holds the QP back (a full
  // window waits for an ACK, not a timer).
  uint64_t next_send_time(uint64_t) const noexcept override { return paced_ ? next_send_ : 0; }
  void on_sent(uint32_t bytes, uint64_t now) noexcept override;
  void on_cnp(uint64_t now) noexcept override;
  CcStats stats() const noexcept override;

  double rate_gbps() const noexcept { return rc_; }
  double target_gbps() const noexcept { return rt_; }
  double alpha() const noexcept { return alpha_; }

 private:
  void advance(uint64_t now) noexcept;  // run due alpha and increase timers
  void increase() noexcept;

  DcqcnParams p_;
  uint64_t window_ = 1ull << 20;
  double line_ = 100, rc_ = 100, rt_ = 100, min_rate_ = 100;
  double ai_ = 0.5, hai_ = 5, floor_ = 0.1;  // Gb/s, from the params at reset
  double alpha_ = 1.0;
  uint64_t next_send_ = 0;
  bool paced_ = false;  // the last can_send said no for pacing
  uint64_t next_alpha_ = 0, next_increase_ = 0;
  uint64_t bytes_ = 0;          // since the last byte-counter event
  uint32_t timer_stage_ = 0, byte_stage_ = 0;
  bool cut_once_ = false;       // timers run only after a first cut
  uint64_t cuts_ = 0;
};

}  // namespace tandem::rnic
