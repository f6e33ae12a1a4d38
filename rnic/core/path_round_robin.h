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
  uint16_t choose(uint32_t psn, bool retransmit, uint64_t now) noexcept override { return choose_fast(psn, retransmit, now); }
  // choose() as Qp::path_choose calls it, once per packet sent: inline, with
  // the once-per-clock-reading tick out of line (a call per packet, and the
  // tick's loop inlined with it, cost more than the pick).
  [[gnu::always_inline]] uint16_t choose_fast(uint32_t psn, bool retransmit, uint64_t now) noexcept {
    if (now > now_) now_ = now;
    PathHealth& h = set_.health();
    const uint32_t n = h.size();
    uint32_t pick = n;
    // A probe is sent (and moves the path's next_probe) in the tick that found
    // it due, so ticking again at the same `now` finds nothing new.
    if (now != ticked_at_ || (!retransmit && !ticked_probe_)) [[unlikely]]
      pick = tick(now, retransmit);
    if (pick == n) {
      pick = next_ < n ? next_ : 0;
      // Skip paths that are out; if all are out, keep plain round robin.
      if (!h.up(pick)) [[unlikely]] pick = skip_down(pick);
      next_ = pick + 1;
    }
    h.on_sent(pick, now, psn);
    last_pick_ = pick;
    return set_.port(pick);
  }
  uint16_t choose_retransmit(uint32_t psn, uint16_t lost_sport, uint32_t attempt, uint64_t now) noexcept override;
  uint16_t choose_response(uint32_t psn, bool retry, uint64_t now) noexcept override {
    return retry ? choose_retry_response(psn, now) : choose_fast(psn, false, now);
  }
  uint32_t last_pick() const noexcept override { return last_pick_; }
  void on_ack(uint16_t sport, uint64_t rtt_ns, uint64_t now) noexcept override;
  void on_loss(uint16_t sport, uint64_t sent_at, uint64_t now) noexcept override;
  void on_timeout(uint16_t sport, uint64_t sent_at, uint64_t now) noexcept override;
  void on_echo(uint32_t i, bool color, uint64_t now) noexcept override;
  bool path_color(uint32_t i) const noexcept override { return set_.health().color(i); }
  void on_ecn(uint16_t sport, uint64_t now) noexcept override;
  void on_duplicate(uint32_t psn, uint64_t now) noexcept override;
  void on_local_gap(uint64_t from, uint64_t to) noexcept override { set_.health().on_local_gap(from, to); }
  void on_late(uint32_t psn, uint64_t now) noexcept override { set_.health().on_late(psn, now); }
  uint32_t path_count() const noexcept override { return set_.size(); }
  PathStats path_stats(uint32_t i) const noexcept override { return set_.health().snapshot(i); }
  uint16_t path_port(uint32_t i) const noexcept override { return set_.port(i); }

  const PathHealth& health() const noexcept { return set_.health(); }
  // last_pick(): the requester keeps it with the PSN's record and on_ack is
  // told it: no search of the set per ACKed packet.
  // A response to a duplicate: an answering path (out of line: rare).
  [[gnu::noinline]] uint16_t choose_retry_response(uint32_t psn, uint64_t now) noexcept;
  [[gnu::always_inline]] void on_ack(uint16_t sport, uint32_t hint, uint64_t rtt_ns, uint64_t now) noexcept {
    if (now > now_) now_ = now;
    const uint32_t i = set_.index_of(sport, hint);
    if (i < kMaxPaths) set_.health().on_ack(i, rtt_ns, now_);
  }

 private:
  // A path that is out and due for a probe, or path_count() (PathHealth::tick).
  [[gnu::noinline]] uint32_t tick(uint64_t now, bool retransmit) noexcept;
  // From `pick`, which is out, the next live path (pick itself if none is).
  [[gnu::noinline]] uint32_t skip_down(uint32_t pick) const noexcept;

  // Where a resend (or a response to a duplicate) goes: tick(), then
  // PathHealth::pick_retry from retry_next_ on.
  uint16_t send_retry(uint32_t psn, uint32_t avoid, bool answering_only, uint64_t now) noexcept;

  PathSet set_;
  uint32_t next_ = 0;
  uint32_t retry_next_ = 0;  // the walk of resends over the set
  uint32_t last_pick_ = 0;
  uint64_t now_ = 0;  // latest time seen (on_loss may be told 0)
  // PathHealth::tick walks every path: once per clock reading (the I/O loop
  // reads it once per round, for a burst of packets), not per packet.
  uint64_t ticked_at_ = 0;
  bool ticked_probe_ = false;  // that tick could pick a probe (new data)
};

}  // namespace tandem::rnic
