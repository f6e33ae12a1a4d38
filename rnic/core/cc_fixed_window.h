// Congestion-control policy "fixed_window": at most a fixed number of bytes
// unacknowledged, no reaction to congestion signals (the baseline).
#pragma once

#include "rnic/core/cc_policy.h"

namespace tandem::rnic {

class CcFixedWindow final : public CcPolicy {
 public:
  void reset(const CcParams& p) noexcept override { window_ = p.window_bytes; }
  bool can_send(uint64_t inflight_bytes, uint32_t bytes, uint64_t) noexcept override {
    // Always allow one packet, so a window below the MTU cannot stall a QP.
    return inflight_bytes == 0 || inflight_bytes + bytes <= window_;
  }

 private:
  uint64_t window_ = 1ull << 20;
};

}  // namespace tandem::rnic
