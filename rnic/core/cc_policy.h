// Congestion-control policy interface: how much a QP may have in flight and
// when it may send, told about ACKs, RTT samples, ECN echoes, CNPs, losses
// and timeouts. One file per policy (cc_fixed_window.h, ...); see
// policy_factory.cc for the names.
#pragma once

#include <cstdint>

namespace tandem::rnic {

struct CcParams {
  uint32_t mtu = 1024;
  uint64_t window_bytes = 1ull << 20;  // PolicyConfig::cc_window_bytes
};

class CcPolicy {
 public:
  virtual ~CcPolicy() = default;

  virtual void reset(const CcParams& p) noexcept = 0;
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
  virtual void on_loss(uint32_t lost_pkts, uint64_t now) noexcept { (void)lost_pkts; (void)now; }
  virtual void on_timeout(uint64_t now) noexcept { (void)now; }
  // Credits the receiver granted (AETH credit field or a later credit header).
  virtual void on_credit(uint32_t credits, uint64_t now) noexcept { (void)credits; (void)now; }
};

}  // namespace tandem::rnic
