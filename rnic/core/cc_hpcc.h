// Congestion-control policy "hpcc" (Li et al., SIGCOMM 2019): a window and
// a pacing rate set from in-band telemetry. Every ACK echoes the INT records
// the switches stamped on the data packet it acknowledges (on_int, then
// on_ack); from two successive records of a hop the sender gets that link's
// utilisation U = txRate / B + qlen / (B * T), keeps the largest over the
// path in an EWMA over one base RTT T, and sets
//     R = Rc / (U / eta) + AI          (W = R * T)
// (multiplicative while U >= eta, or once maxStage additive steps are used up;
// otherwise Rc + AI). The reference Rc moves once per RTT (an ACK for data
// sent after the last update); the ACKs between only react ("fast react").
// T comes from the window the QP is given (cc_window_bytes = the base BDP at
// the line rate, T = window * 8 / line rate).
//
// Tunable in the policy name (policy_factory.h): eta (0.95), max_stage (0),
// ai_mbps (AI step; 40, HPCC's 10 Mb/s per 25 Gb/s of line rate at 100 Gb/s),
// min_mbps (1000), fast_react (1).
#pragma once

#include <cstdint>

#include "rnic/core/cc_policy.h"

namespace tandem::rnic {

struct HpccParams {
  double eta = 0.95;
  uint32_t max_stage = 0;
  double ai_gbps = 0.04;
  double min_rate_gbps = 1.0;
  bool fast_react = true;
};

class CcHpcc final : public CcPolicy {
 public:
  explicit CcHpcc(const HpccParams& p = {}) : p_(p) {}
  void reset(const CcParams& p) noexcept override;
  bool configure(std::string_view key, double value) noexcept override;
  bool can_send(uint64_t inflight_bytes, uint32_t bytes, uint64_t now) noexcept override;
  // The pacing time, only while pacing is what holds the QP back (a full
  // window waits for an ACK, not a timer).
  uint64_t next_send_time(uint64_t) const noexcept override { return paced_ ? next_send_ : 0; }
  void on_sent(uint32_t bytes, uint64_t now) noexcept override;
  void on_ack(uint64_t acked_bytes, uint64_t rtt_ns, uint64_t now) noexcept override;
  void on_int(const IntEcho& echo, uint64_t now) noexcept override;
  CcStats stats() const noexcept override;

  double rate_gbps() const noexcept { return rate_; }
  double reference_gbps() const noexcept { return rc_; }
  double utilisation() const noexcept { return u_; }
  uint64_t window_bytes() const noexcept;
  uint64_t updates() const noexcept { return updates_; }

 private:
  void update(const IntEcho& e, bool fast) noexcept;

  HpccParams p_;
  double line_ = 100, rate_ = 100, rc_ = 100, min_seen_ = 100, floor_ = 1;
  uint64_t win_ = 0;      // bytes at the line rate (the base BDP)
  double t_ns_ = 1;       // base RTT, from win_ and the line rate
  double u_ = 1;          // EWMA of the path's utilisation
  uint32_t stage_ = 0;
  uint64_t sent_ = 0, acked_ = 0;   // bytes: the sequence HPCC compares
  uint64_t last_update_ = 0;        // sent_ at the last reference update; 0: no INT yet
  uint64_t next_send_ = 0;
  bool paced_ = false;  // the last can_send said no for pacing
  IntEcho prev_{};                  // the hops as last seen
  IntEcho pending_{};               // echoed on the ACK being handled
  bool has_pending_ = false;
  uint64_t updates_ = 0, cuts_ = 0;
};

}  // namespace tandem::rnic
