// Spraying policy interface: which path (UDP source port, the ECMP entropy)
// each packet of a QP takes, and what the policy is told about the paths.
// One file per policy implements it (path_single.h, ...); policy_factory.cc
// maps a name to one.
#pragma once

#include <cstdint>

#include "rnic/core/path_health.h"

namespace tandem::rnic {

struct PathPolicyParams {
  uint32_t local_qpn = 0;
  uint16_t path_seed = 0;  // QpAttr::path_seed
  uint32_t num_paths = 1;  // PolicyConfig::num_paths
};

class PathPolicy {
 public:
  virtual ~PathPolicy() = default;

  // Called when the QP gets its address vector (RTR): the path set is
  // derived from it.
  virtual void reset(const PathPolicyParams& p) noexcept = 0;
  // Source port for the next packet of this QP (any kind: data, ACK, READ
  // response). `psn` is the packet's PSN.
  virtual uint16_t choose(uint32_t psn, bool retransmit, uint64_t now) noexcept = 0;
  // Source port for a resent request `psn` whose previous copy went on
  // `lost_sport` and was lost; `attempt`: how many times in a row this PSN
  // has now been resent (1: the first). Never a probe, never the lost
  // copy's path while another is live; a policy with path health prefers
  // paths that answer lately, then tries every live path in turn.
  virtual uint16_t choose_retransmit(uint32_t psn, uint16_t lost_sport, uint32_t attempt, uint64_t now) noexcept {
    (void)lost_sport; (void)attempt;
    return choose(psn, true, now);
  }
  // Source port for a response (ACK, SACK, NAK, READ response). `retry`: it
  // answers a duplicate request (the earlier response may have died): never
  // a probe, a path that answers lately.
  virtual uint16_t choose_response(uint32_t psn, bool retry, uint64_t now) noexcept {
    return choose(psn, retry, now);
  }
  // The index in the path set of the path the last choose*() picked (0
  // without a set): a response carries it for the requester to echo.
  virtual uint32_t last_pick() const noexcept { return 0; }

  // Feedback, by the source port the acknowledged or lost packet used.
  virtual void on_ack(uint16_t sport, uint64_t rtt_ns, uint64_t now) noexcept {
    (void)sport; (void)rtt_ns; (void)now;
  }
  // The packet sent on `sport` at `sent_at` (0: not known) was declared lost.
  virtual void on_loss(uint16_t sport, uint64_t sent_at, uint64_t now) noexcept {
    (void)sport; (void)sent_at; (void)now;
  }
  // The same, declared lost by the retransmission timer: evidence against
  // the path (path_health.h).
  virtual void on_timeout(uint16_t sport, uint64_t sent_at, uint64_t now) noexcept { on_loss(sport, sent_at, now); }
  // Responder: the requester echoed that a response sent on path index `i`
  // with `color` reached it (irn_wire.h): that ACK path answers.
  virtual void on_echo(uint32_t i, bool color, uint64_t now) noexcept { (void)i; (void)color; (void)now; }
  // The color a response sent on path index `i` carries (irn_wire.h).
  virtual bool path_color(uint32_t i) const noexcept { (void)i; return false; }
  virtual void on_ecn(uint16_t sport, uint64_t now) noexcept { (void)sport; (void)now; }
  // Responder: the requester resent request `psn`, which had arrived and
  // been acknowledged (evidence about the paths the ACKs took).
  virtual void on_duplicate(uint32_t psn, uint64_t now) noexcept { (void)psn; (void)now; }
  // A resent `psn` was acknowledged: its earlier copy may have arrived
  // (path_health.h judges by the earlier copy's path's RTT).
  virtual void on_late(uint32_t psn, uint64_t now) noexcept { (void)psn; (void)now; }
  // The owner's loop did not run from `from` to `to` (the Transport saw no
  // call in between): no path is to blame for that time (path_health.h).
  virtual void on_local_gap(uint64_t from, uint64_t to) noexcept { (void)from; (void)to; }

  // Counters for telemetry: how many paths the set has and, per path,
  // packets, acks, losses, removals and returns (path_health.h).
  virtual uint32_t path_count() const noexcept { return 1; }
  virtual PathStats path_stats(uint32_t i) const noexcept { (void)i; return {}; }
  // The source port of path i (0: the policy has no path set).
  virtual uint16_t path_port(uint32_t i) const noexcept { (void)i; return 0; }
};

}  // namespace tandem::rnic
