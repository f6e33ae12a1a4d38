#pragma once

#include <cstdint>

namespace tandem::rnic {

// What the QPs of one owner (QpInitAttr::owner: an application) share in a
// Transport: poll()'s TX quantum this round (turn: the round `left` belongs
// to; a stale one starts with a whole quantum) and the data packets they
// have in flight (their part of TransportConfig::owner_inflight_pkts).
struct OwnerShare {
  uint64_t turn = 0;
  uint32_t left = 0;
  uint32_t inflight = 0;
  uint32_t* busy = nullptr;  // the Transport's count of owners with inflight != 0
  uint32_t budget = 0;       // TransportConfig::owner_inflight_pkts (0: none)

  static constexpr uint32_t kMinShare = 16;
  // May one more packet go? Within its equal part of the budget (never
  // less than kMinShare packets, so a thousand owners each still move).
  bool may_send() const noexcept {
    if (budget == 0) return true;
    const uint32_t owners = *busy + (inflight == 0);
    const uint32_t share = budget / (owners != 0 ? owners : 1);
    return inflight < (share > kMinShare ? share : kMinShare);
  }
  void add(uint32_t n) noexcept {
    if (inflight == 0 && n != 0) ++*busy;
    inflight += n;
  }
  void sub(uint32_t n) noexcept {
    inflight -= n;
    if (inflight == 0 && n != 0) --*busy;
  }
};

}  // namespace tandem::rnic
