// Congestion-control policy interface: how much a QP may have in flight and
// when it may send, told about ACKs, RTT samples, ECN echoes, CNPs, losses
// and timeouts. One file per policy (cc_fixed_window.h, ...); see
// policy_factory.cc for the names.
#pragma once

#include <cstdint>
#include <string_view>

#include "rnic/core/int_telemetry.h"

namespace tandem::rnic {

struct CcParams {
  uint32_t mtu = 1024;
  uint64_t window_bytes = 1ull << 20;  // PolicyConfig::cc_window_bytes
  double line_rate_gbps = 100;         // PolicyConfig::line_rate_gbps
  uint64_t unsched_bytes = 64 << 10;   // PolicyConfig::credit_unsched_bytes
};

// What a policy did, for telemetry (zeros where it does not apply).
struct CcStats {
  uint64_t rate_cuts = 0;         // DCQCN: CNPs that cut the rate
  double rate_gbps = 0;           // DCQCN: current rate
  double min_rate_gbps = 0;       // DCQCN: lowest rate reached
  uint64_t credits_received = 0;  // credit: packets' worth of credit the receiver granted us
  uint64_t credits_used = 0;      // credit: new packets sent against credit (beyond the unscheduled ones)
  uint64_t credit_stalls = 0;     // credit: times a new packet had to wait for credit
};

class CcPolicy {
 public:
  virtual ~CcPolicy() = default;

  virtual void reset(const CcParams& p) noexcept = 0;
  // A tuning key from the policy name ("dcqcn:alpha_us=1,clamp=0", parsed by
  // make_cc_policy at QP creation, before reset). False: unknown key or value.
  virtual bool configure(std::string_view key, double value) noexcept { (void)key; (void)value; return false; }
  // May a packet of `bytes` go now, with `inflight_bytes` sent and not yet
  // acknowledged? Retransmissions are asked too.
  virtual bool can_send(uint64_t inflight_bytes, uint32_t bytes, uint64_t now) noexcept = 0;
  // When can_send said no for pacing (not for the window): the time to ask
  // again; 0 if only an ACK can open it.
  virtual uint64_t next_send_time(uint64_t now) const noexcept { (void)now; return 0; }

  virtual void on_sent(uint32_t bytes, uint64_t now) noexcept { (void)bytes; (void)now; }
  // Cumulative or selective progress: `acked_bytes` newly acknowledged,
  // `rtt_ns` a sample (0: none, e.g. only retransmitted packets acked).
  virtual void on_ack(uint64_t acked_bytes, uint64_t rtt_ns, uint64_t now) noexcept {
    (void)acked_bytes; (void)rtt_ns; (void)now;
  }
  virtual void on_ecn_echo(uint64_t now) noexcept { (void)now; }  // ECN-Echo / BECN
  virtual void on_cnp(uint64_t now) noexcept { (void)now; }
  // The INT records the peer echoed on the ACK about to be handled (the I/O
  // layer calls this right before on_packet with that ACK; int_telemetry.h).
  virtual void on_int(const IntEcho& echo, uint64_t now) noexcept { (void)echo; (void)now; }
  virtual void on_loss(uint32_t lost_pkts, uint64_t now) noexcept { (void)lost_pkts; (void)now; }
  virtual void on_timeout(uint64_t now) noexcept { (void)now; }
  // Credits the receiver granted (AETH credit field or a later credit header).
  // `credits`: packets of credit newly granted (the limit moved this far).
  virtual void on_credit(uint32_t credits, uint64_t now) noexcept { (void)credits; (void)now; }

  // Receiver-driven policies: the requester sends a new PSN only below the
  // limit the peer granted (unscheduled_pkts() past the initial PSN to start
  // with), and the responder grants credit from the port's CreditGrantor.
  virtual bool uses_credits() const noexcept { return false; }
  virtual uint32_t unscheduled_pkts() const noexcept { return 0; }
  // The requester found no credit for its next new packet / sent one
  // against credit (past the unscheduled ones).
  virtual void on_credit_stall(uint64_t now) noexcept { (void)now; }
  virtual void on_credit_used(uint64_t now) noexcept { (void)now; }

  virtual CcStats stats() const noexcept { return {}; }
};

}  // namespace tandem::rnic
