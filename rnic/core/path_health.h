// Path health (after Harp): per path of a QP's path set, whether it is usable.
// A path that loses kLossesToRemove packets in a row while most other paths
// are not losing (losses everywhere mean congestion at the destination or
// reordering, not a broken path), or that has packets outstanding and no
// acknowledgement for `silence` (a few smoothed RTTs, at least
// kMinSilenceNs), is taken out; while out, one packet is sent on it every
// probe interval, and the first acknowledgement brings it back.
// Shared by the spraying policies; plain arrays, nothing allocated.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace tandem::rnic {

inline constexpr uint32_t kMaxPaths = 64;

struct PathStats {
  uint64_t pkts = 0;      // packets sent on the path
  uint64_t acks = 0;      // acknowledged packets that had used it
  uint64_t losses = 0;
  uint64_t ecn = 0;
  uint64_t removals = 0;  // times the path was taken out
  uint64_t returns = 0;   // times a probe brought it back
  uint64_t first_removed_ns = 0;  // when it was first taken out (0: never)
  uint64_t last_returned_ns = 0;
};

class PathHealth {
 public:
  static constexpr uint32_t kLossesToRemove = 3;
  static constexpr uint64_t kMinSilenceNs = 100'000;
  static constexpr uint32_t kSilenceRtts = 4;

  void reset(uint32_t n) noexcept {
    n_ = std::clamp<uint32_t>(n, 1, kMaxPaths);
    for (auto& p : p_) p = PerPath{};
    srtt_ = 0;
  }
  uint32_t size() const noexcept { return n_; }
  bool up(uint32_t i) const noexcept { return !p_[i].down; }
  uint32_t up_count() const noexcept {
    uint32_t k = 0;
    for (uint32_t i = 0; i < n_; ++i) k += !p_[i].down;
    return k;
  }
  const PathStats& stats(uint32_t i) const noexcept { return p_[i].s; }
  uint64_t srtt_ns() const noexcept { return srtt_; }
  uint64_t silence_ns() const noexcept {
    return std::max<uint64_t>(kMinSilenceNs, kSilenceRtts * srtt_);
  }
  uint64_t probe_interval_ns() const noexcept { return silence_ns(); }

  // Checks silences; returns a path that is out and due for a probe
  // (n_ if none). The caller sends the next packet there and calls on_sent.
  // Only new data probes (`may_probe`): a retransmission sent as a probe
  // onto a dead path is lost again, and if it was the RTO's it costs a
  // doubled timeout.
  uint32_t tick(uint64_t now, bool may_probe = true) noexcept {
    uint32_t probe = n_;
    for (uint32_t i = 0; i < n_; ++i) {
      PerPath& p = p_[i];
      if (!p.down) {
        // Only a path that has answered before can go silent (a QP that
        // never gets feedback, e.g. a responder's ACK path, keeps all).
        if (p.s.acks > 0 && p.outstanding_since != 0 && now > p.outstanding_since + silence_ns())
          take_out(p, now);
      } else if (may_probe && probe == n_ && now >= p.next_probe) {
        probe = i;
      }
    }
    return probe;
  }
  void on_sent(uint32_t i, uint64_t now) noexcept {
    PerPath& p = p_[i];
    ++p.s.pkts;
    if (p.outstanding_since == 0) p.outstanding_since = now ? now : 1;
    if (p.down) p.next_probe = now + probe_interval_ns();
  }
  void on_ack(uint32_t i, uint64_t rtt_ns, uint64_t now) noexcept {
    PerPath& p = p_[i];
    ++p.s.acks;
    p.consecutive_losses = 0;
    // Something on the path answered: restart its silence clock.
    p.outstanding_since = 0;
    if (rtt_ns) srtt_ = srtt_ ? (7 * srtt_ + rtt_ns) / 8 : rtt_ns;
    if (p.down) {
      p.down = false;
      ++p.s.returns;
      p.s.last_returned_ns = now;
    }
  }
  void on_loss(uint32_t i, uint64_t now) noexcept {
    PerPath& p = p_[i];
    ++p.s.losses;
    if (!p.down && ++p.consecutive_losses >= kLossesToRemove && alone_losing(i)) take_out(p, now);
  }
  void on_ecn(uint32_t i) noexcept { ++p_[i].s.ecn; }

 private:
  struct PerPath {
    PathStats s;
    uint64_t outstanding_since = 0;  // 0: nothing sent since the last ack
    uint64_t next_probe = 0;
    uint32_t consecutive_losses = 0;
    bool down = false;
  };
  // Fewer than half of the other live paths are losing right now.
  bool alone_losing(uint32_t i) const noexcept {
    uint32_t others = 0, losing = 0;
    for (uint32_t k = 0; k < n_; ++k) {
      if (k == i || p_[k].down) continue;
      ++others;
      losing += p_[k].consecutive_losses > 0;
    }
    return 2 * losing < others || others == 0;
  }
  void take_out(PerPath& p, uint64_t now) noexcept {
    p.down = true;
    ++p.s.removals;
    if (p.s.first_removed_ns == 0) p.s.first_removed_ns = now ? now : 1;
    p.consecutive_losses = 0;
    p.outstanding_since = 0;
    p.next_probe = now + probe_interval_ns();
  }

  std::array<PerPath, kMaxPaths> p_{};
  uint32_t n_ = 1;
  uint64_t srtt_ = 0;
};

}  // namespace tandem::rnic
