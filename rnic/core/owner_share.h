#pragma once

#include <algorithm>
#include <cstdint>

namespace tandem::rnic {

// The owners of one Transport together: how many have packets in flight, and
// the equal parts of the budget that gives, worked out when that count
// changes (a few times per burst of traffic), not per packet.
struct OwnerShares {
  uint32_t budget = 0;  // TransportConfig::owner_inflight_pkts (0: no limit)
  uint32_t busy = 0;    // owners with inflight != 0
  uint32_t part = 0;    // what each of them may have in flight
  uint32_t next = 0;    // ... and one more, when it starts
  static constexpr uint32_t kMinShare = 16;  // so a thousand owners each still move
  void set(uint32_t b) noexcept {
    busy = b;
    part = budget ? std::max(budget / std::max(b, 1u), kMinShare) : UINT32_MAX;
    next = budget ? std::max(budget / (b + 1), kMinShare) : UINT32_MAX;
  }
};

// What the QPs of one owner (QpInitAttr::owner: an application) share in a
// Transport: poll()'s TX quantum this round (turn: the round `left` belongs
// to; a stale one starts with a whole quantum) and the data packets they
// have in flight (their equal part of TransportConfig::owner_inflight_pkts).
struct OwnerShare {
  uint64_t turn = 0;
  uint32_t left = 0;
  uint32_t inflight = 0;
  OwnerShares* all = nullptr;

  // May one more packet go? Within its equal part of the budget.
  bool may_send() const noexcept { return inflight < (inflight != 0 ? all->part : all->next); }
  void add(uint32_t n) noexcept {
    if (inflight == 0 && n != 0) all->set(all->busy + 1);
    inflight += n;
  }
  void sub(uint32_t n) noexcept {
    inflight -= n;
    if (inflight == 0 && n != 0) all->set(all->busy - 1);
  }
};

}  // namespace tandem::rnic
