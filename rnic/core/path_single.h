// Spraying policy "single": every packet of a QP takes one path, the UDP
// source port derived from its QPN and path seed (standard RoCE behaviour).
#pragma once

#include "rnic/core/path_policy.h"

namespace tandem::rnic {

class PathSingle final : public PathPolicy {
 public:
  void reset(const PathPolicyParams& p) noexcept override;
  uint16_t choose(uint32_t, bool, uint64_t) noexcept override {  // inline: QPs call it directly per packet
    ++s_.pkts;
    return port_;
  }
  void on_ack(uint16_t, uint64_t, uint64_t) noexcept override { ++s_.acks; }
  void on_loss(uint16_t, uint64_t, uint64_t) noexcept override { ++s_.losses; }
  void on_ecn(uint16_t, uint64_t) noexcept override { ++s_.ecn; }
  PathStats path_stats(uint32_t) const noexcept override { return s_; }

 private:
  uint16_t port_ = 0xC000;
  PathStats s_;
};

}  // namespace tandem::rnic
