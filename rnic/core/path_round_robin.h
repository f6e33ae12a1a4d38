// Spraying policy "round_robin": each packet of a QP takes the next path of
// its path set (num_paths entropy values derived from the QPN and path seed),
// skipping paths PathHealth has taken out and probing those back in.
#pragma once

#include "rnic/core/path_policy.h"
#include "rnic/core/path_set.h"

namespace tandem::rnic {

class PathRoundRobin final : public PathPolicy {
 public:
  void reset(const PathPolicyParams& p) noexcept override;
  uint16_t choose(uint32_t psn, bool retransmit, uint64_t now) noexcept override;
  void on_ack(uint16_t sport, uint64_t rtt_ns, uint64_t now) noexcept override;
  void on_loss(uint16_t sport, uint64_t sent_at, uint64_t now) noexcept override;
  void on_ecn(uint16_t sport, uint64_t now) noexcept override;
  void on_duplicate(uint32_t psn, uint64_t now) noexcept override;
  void on_local_gap(uint64_t from, uint64_t to) noexcept override { set_.health().on_local_gap(from, to); }
  void on_late(uint32_t psn, uint64_t now) noexcept override { set_.health().on_late(psn, now); }
  uint32_t path_count() const noexcept override { return set_.size(); }
  PathStats path_stats(uint32_t i) const noexcept override { return set_.health().snapshot(i); }
  uint16_t path_port(uint32_t i) const noexcept override { return set_.port(i); }

  const PathHealth& health() const noexcept { return set_.health(); }
  // The path index choose() picked last, and on_ack told it (the requester
  // keeps it with the PSN's record): no search of the set per ACKed packet.
  uint32_t last_pick() const noexcept { return last_pick_; }
  void on_ack(uint16_t sport, uint32_t hint, uint64_t rtt_ns, uint64_t now) noexcept {
    if (now > now_) now_ = now;
    const uint32_t i = set_.index_of(sport, hint);
    if (i < kMaxPaths) set_.health().on_ack(i, rtt_ns, now_);
  }

 private:
  PathSet set_;
  uint32_t next_ = 0;
  uint32_t last_pick_ = 0;
  uint64_t now_ = 0;  // latest time seen (on_loss may be told 0)
  // PathHealth::tick walks every path: once per clock reading (the I/O loop
  // reads it once per round, for a burst of packets), not per packet.
  uint64_t ticked_at_ = 0;
  bool ticked_probe_ = false;  // that tick could pick a probe (new data)
};

}  // namespace tandem::rnic
